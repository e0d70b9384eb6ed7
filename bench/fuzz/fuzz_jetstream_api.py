"""Fuzz the JetStream API of an in-process jsbroker with atheris: random requests (config-shaped JSON
built from the input, raw bytes, bad headers) to the $JS.API subjects a client can reach.

Property: every request is answered or dropped the way the API defines, and no handler fails inside
(jsbroker logs "jetstream api handler failed" for an exception that escapes a handler: that is a bug).

    pip install atheris
    python bench/fuzz/fuzz_jetstream_api.py -max_total_time=300
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "broker"))

with atheris.instrument_imports(include=["jsbroker"]):
    from jsbroker.server import Broker

SUBJECTS = [
    "STREAM.CREATE.S", "STREAM.UPDATE.S", "STREAM.INFO.S", "STREAM.PURGE.S", "STREAM.DELETE.S", "STREAM.NAMES",
    "STREAM.LIST", "STREAM.MSG.GET.S", "STREAM.MSG.DELETE.S", "DIRECT.GET.S", "CONSUMER.CREATE.S",
    "CONSUMER.CREATE.S.C", "CONSUMER.CREATE.S.C.s.>", "CONSUMER.DURABLE.CREATE.S.C", "CONSUMER.INFO.S.C",
    "CONSUMER.NAMES.S", "CONSUMER.LIST.S", "CONSUMER.DELETE.S.C", "CONSUMER.RESET.S.C", "CONSUMER.MSG.NEXT.S.C",
    "CONSUMER.PAUSE.S.C", "INFO", "ACCOUNT.PURGE", "STREAM.SNAPSHOT.S",
]
KEYS = [
    "name", "subjects", "retention", "max_msgs", "max_bytes", "max_age", "max_msg_size", "storage", "discard",
    "num_replicas", "duplicate_window", "max_msgs_per_subject", "allow_direct", "deny_delete", "sealed",
    "allow_rollup_hdrs", "mirror", "sources", "subject_transform", "republish", "config", "stream_name",
    "durable_name", "deliver_policy", "opt_start_seq", "opt_start_time", "ack_policy", "ack_wait", "max_deliver",
    "backoff", "filter_subject", "filter_subjects", "replay_policy", "deliver_subject", "max_ack_pending",
    "max_waiting", "headers_only", "inactive_threshold", "batch", "expires", "no_wait", "seq", "last_by_subj",
    "next_by_subj", "keep", "filter", "offset", "action", "pause_until", "metadata", "idle_heartbeat", "flow_control",
]
WORDS = ["S", "C", "s.>", "s.*", ">", "*", "", "limits", "interest", "workqueue", "file", "memory", "new", "old",
         "all", "last", "by_start_sequence", "by_start_time", "explicit", "none", "1970-01-01T00:00:00Z", "x" * 300]


def value(fdp: atheris.FuzzedDataProvider, depth: int = 0) -> object:
    kind = fdp.ConsumeIntInRange(0, 8 if depth < 3 else 5)
    if kind == 0:
        return fdp.ConsumeInt(8)
    if kind == 1:
        return fdp.PickValueInList([0, -1, 1, 2**63 - 1, 2**64, -(2**63), 10**30])
    if kind == 2:
        return fdp.PickValueInList(WORDS)
    if kind == 3:
        return fdp.ConsumeUnicodeNoSurrogates(12)
    if kind == 4:
        return fdp.ConsumeBool()
    if kind == 5:
        return None if fdp.ConsumeBool() else fdp.ConsumeRegularFloat()
    if kind in (6, 7):
        return {fdp.PickValueInList(KEYS): value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 6))}
    return [value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))]


class Failures(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


loop = asyncio.new_event_loop()
broker = Broker(port=0, store_dir=tempfile.mkdtemp(prefix="fuzz-js-"))
loop.run_until_complete(broker.start())
failures = Failures()
logging.getLogger().addHandler(failures)
replies: list[bytes] = []
broker.subscribe_internal("_FUZZ.>", lambda subject, reply, hdr, payload, origin: replies.append(payload))


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    for n in range(fdp.ConsumeIntInRange(1, 4)):
        subject = "$JS.API." + fdp.PickValueInList(SUBJECTS)
        shape = fdp.ConsumeIntInRange(0, 9)
        if shape == 0:
            payload = fdp.ConsumeBytes(64)
        elif shape == 1:
            payload = b""
        else:
            payload = json.dumps(value(fdp, 1) if shape == 2 else
                                 {fdp.PickValueInList(KEYS): value(fdp, 1) for _ in range(fdp.ConsumeIntInRange(0, 8))}
                                 ).encode()
        hdr = b"NATS/1.0\r\nNats-Required-Api-Level: " + fdp.ConsumeBytes(3) + b"\r\n\r\n" if fdp.ConsumeBool() else b""
        del replies[:]
        broker.publish(subject, f"_FUZZ.{n}", hdr, payload)
        loop.run_until_complete(asyncio.sleep(0))
        for reply in replies:
            json.loads(reply) if reply else None  # an answer is JSON (or an empty status message)
        if failures.records:
            record = failures.records[0]
            raise AssertionError(f"{subject} {payload[:500]!r}: {record.getMessage()}\n{record.exc_text or ''}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
