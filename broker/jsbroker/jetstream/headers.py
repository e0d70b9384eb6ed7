"""NATS header blocks (pure): read one header fast, parse a block, build blocks and status lines.

A block is `NATS/1.0[ <code> <description>]\r\nKey: Value\r\n...\r\n\r\n`. Keys keep their case and may
repeat; lookups match the key exactly, as nats-server does. `get` is the publish hot path: most JetStream
publishes carry no headers or only `Nats-Msg-Id`, so it searches the raw bytes without building anything.
"""

from __future__ import annotations

from typing import Iterable

PREFIX = b"NATS/1.0"
_END = b"\r\n\r\n"

# JetStream publish headers (stream.go)
MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJ_SEQ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"
TTL = "Nats-TTL"
# subject delete markers (ADR-43): the server's message replacing a subject's last expired one
MARKER_REASON = "Nats-Marker-Reason"
KV_OPERATION = "KV-Operation"  # a KV purge ("PURGE") also counts as a marker
REQUIRED_API_LEVEL = "Nats-Required-Api-Level"
# the status DIRECT.GET and MSG.NEXT answer when that level is above ours (the JSON API answers 10185)
API_LEVEL_TOO_HIGH = b"NATS/1.0 412 Required Api Level\r\n\r\n"
# DIRECT.GET answers
STREAM = "Nats-Stream"
SUBJECT = "Nats-Subject"
SEQUENCE = "Nats-Sequence"
TIME_STAMP = "Nats-Time-Stamp"
NUM_PENDING = "Nats-Num-Pending"
LAST_SEQUENCE = "Nats-Last-Sequence"
MSG_SIZE = "Nats-Msg-Size"  # a headers-only republish or consumer delivery: the size of the body left out
UP_TO_SEQUENCE = "Nats-UpTo-Sequence"
STREAM_IDENTITY = "Nats-Stream-Identity"
# A push consumer's idle heartbeat, and the flow control response that acks up to them (ack_policy flow_control).
LAST_CONSUMER = "Nats-Last-Consumer"
LAST_STREAM = "Nats-Last-Stream"
CONSUMER_STALLED = "Nats-Consumer-Stalled"
# sourcing: "<stream> <origin seq> <filter> <transform destination> <original subject> <origin identity>"
STREAM_SOURCE = "Nats-Stream-Source"
STREAM_SOURCE_NEEDLE = b"Nats-Stream-Source"  # a cheap `in` before the exact lookup
# message counters (ADR-49): the increment of a publish, the per-source totals a counter has taken in
INCR = "Nats-Incr"
INCR_NEEDLE = b"Nats-Incr"
COUNTER_SOURCES = "Nats-Counter-Sources"
# atomic batch publishing (ADR-50): a publish carrying a batch id is part of a batch
BATCH_ID = "Nats-Batch-Id"
BATCH_ID_NEEDLE = b"Nats-Batch-Id"
BATCH_SEQUENCE = "Nats-Batch-Sequence"  # its place in the batch, from 1
BATCH_COMMIT = "Nats-Batch-Commit"  # on the last: "1" (stored) or "eob" (an end marker, not stored)
# message schedules (ADR-51): a schedule message and the message it produces on its target
SCHEDULE = "Nats-Schedule"
SCHEDULE_NEEDLE = b"Nats-Schedule"  # also in Nats-Scheduler and every Nats-Schedule-* key
SCHEDULE_TARGET = "Nats-Schedule-Target"
SCHEDULE_SOURCE = "Nats-Schedule-Source"
SCHEDULE_TTL = "Nats-Schedule-TTL"
SCHEDULE_ROLLUP = "Nats-Schedule-Rollup"
SCHEDULE_TIME_ZONE = "Nats-Schedule-Time-Zone"
SCHEDULER = "Nats-Scheduler"  # on a produced message: the subject of the schedule that produced it
SCHEDULE_NEXT = "Nats-Schedule-Next"  # on a produced message: "purge" (one-shot) or the next fire time


def get(hdr: bytes, key: str) -> str | None:
    """The first value of `key` in a raw block, or None. As nats-server's getHeader, only the spaces before
    a value are dropped: `Nats-Msg-Id: a ` is the id "a " (another than "a"), `Nats-Expected-Last-Sequence:
    5 ` is no number."""
    if not hdr:
        return None
    needle = b"\r\n" + key.encode() + b":"
    start = hdr.find(needle)
    if start < 0:
        return None
    start += len(needle)
    end = hdr.find(b"\r\n", start)
    return hdr[start:end if end >= 0 else len(hdr)].lstrip(b" ").decode("utf-8", "replace")


def rollup(hdr: bytes) -> str:
    """The Nats-Rollup value as nats-server compares it: in lower case (`SUB` is `sub`); "" for none."""
    return (get(hdr, ROLLUP) or "").lower()


def parse(hdr: bytes) -> tuple[int, str, list[tuple[str, str]]]:
    """(status code or 0, status description, [(key, value), ...] in order) of a raw block."""
    if not hdr.startswith(PREFIX):
        return 0, "", []
    lines = hdr.decode("utf-8", "replace").split("\r\n")
    status_line = lines[0][len(PREFIX):].strip()
    code_text, _, description = status_line.partition(" ")
    code = int(code_text) if code_text.isdigit() else 0
    pairs = []
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep and key:
            pairs.append((key, value.strip()))
    return code, description.strip(), pairs


def build(pairs: Iterable[tuple[str, str]] = (), status: int = 0, description: str = "") -> bytes:
    """A block with an optional status line (`NATS/1.0 404 No Messages`) and the given headers."""
    first = "NATS/1.0"
    if status:
        first += f" {status}" + (f" {description}" if description else "")
    body = "".join(f"{key}: {value}\r\n" for key, value in pairs)
    return f"{first}\r\n{body}\r\n".encode()


def without(hdr: bytes, *keys: str, prefixes: tuple[str, ...] = ()) -> bytes:
    """`hdr` with every line of the `keys` (and of keys starting with one of `prefixes`) removed; the block
    stays a block, possibly with no header left."""
    if not hdr or not (any(get(hdr, key) is not None for key in keys) or any(p.encode() in hdr for p in prefixes)):
        return hdr
    starts = tuple(key.encode() + b":" for key in keys) + tuple(p.encode() for p in prefixes)
    return b"\r\n".join(line for line in hdr.split(b"\r\n") if not line.startswith(starts))


def append(hdr: bytes, pairs: Iterable[tuple[str, str]]) -> bytes:
    """`hdr` (possibly empty) with more headers added at the end, keeping the original ones first."""
    extra = "".join(f"{key}: {value}\r\n" for key, value in pairs).encode()
    if not hdr:
        return b"NATS/1.0\r\n" + extra + b"\r\n"
    body = hdr[: -2] if hdr.endswith(_END) else hdr.rstrip(b"\r\n") + b"\r\n"
    return body + extra + b"\r\n"


def put(hdr: bytes, key: str, value: str) -> bytes:
    """`hdr` with the first value of `key` replaced in place (nats-server's setHeader), or the header
    appended when it is not there."""
    start = hdr.find(b"\r\n" + key.encode() + b":") if hdr else -1
    if start < 0:
        return append(hdr, ((key, value),))
    start += len(key) + 3
    if hdr[start:start + 1] == b" ":
        start += 1
    end = hdr.find(b"\r", start)
    return hdr if end < 0 else hdr[:start] + value.encode() + hdr[end:]


def as_uint(text: str) -> int:
    """nats-server parses expected sequences as unsigned ints; garbage reads as "no value" (-1 never matches)."""
    return int(text) if text.isascii() and text.isdigit() else -1  # Go's digits: ASCII only
