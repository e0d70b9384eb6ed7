"""Message counters (ADR-49, pure): the `Nats-Incr` checks and the arithmetic of a counter stream.

A stream with `allow_msg_counter` takes only publishes with an empty body and a `Nats-Incr: <integer>`
header; the stored message is the subject's new total as `{"val":"<total>"}` (the increment header kept),
and the pub ack carries that total as `"val"`. Values are arbitrary-precision integers as nats-server's
big.Int (Decimal, so no digit limit applies to parsing and printing them). A copy sourced from another
counter stream is not an increment: its body is that origin subject's total, and the stored increment is
the difference to the last total taken from it, kept per origin stream and subject in the
`Nats-Counter-Sources` header (nats-server's order of checks and its error codes throughout).
"""

from __future__ import annotations

import decimal
import json
import re
from decimal import Decimal
from typing import Any

from jsbroker.jetstream import errors, headers

_INTEGER = re.compile(rb"[+-]?[0-9]+")  # Go's big.Int SetString in base 10
_EXACT = decimal.Context(prec=decimal.MAX_PREC)  # integer sums never round
# Headers an increment cannot carry: a counter has no expected state to check and cannot be rolled up.
_INCOMPATIBLE = (headers.ROLLUP, headers.EXPECTED_STREAM, headers.EXPECTED_LAST_MSG_ID,
                 headers.EXPECTED_LAST_SUBJ_SEQ_SUBJ, headers.EXPECTED_LAST_SEQ, headers.EXPECTED_LAST_SUBJ_SEQ)


def increment(hdr: bytes, payload: bytes, counter_stream: bool, sourced: bool) -> Decimal | None:
    """The `Nats-Incr` of a publish (None: none), checked as nats-server does before any other header:
    10171 for a value that is no integer, then (unless sourced) 10168 outside a counter stream, 10170 with
    a body, 10171 beside a rollup or an expected-state header."""
    text = _raw_value(hdr, headers.INCR)
    if not text:
        return None
    if _INTEGER.fullmatch(text) is None:
        raise errors.MESSAGE_INCR_INVALID()
    if not sourced:
        if not counter_stream:
            raise errors.MESSAGE_INCR_DISABLED()
        if payload:
            raise errors.MESSAGE_INCR_PAYLOAD()
        if any(headers.get(hdr, key) for key in _INCOMPATIBLE):
            raise errors.MESSAGE_INCR_INVALID()
    return _integer(text.decode())


def apply(incr: Decimal, last: tuple[bytes, bytes] | None, hdr: bytes, payload: bytes,
          max_payload: int) -> tuple[bytes, bytes, str]:
    """(headers, body, total) to store for an increment on a subject whose last message is `last`
    ((headers, body), None: none). A sourced copy (with its Nats-Stream-Source header) brings its origin's
    total in `payload`; its stored Nats-Incr becomes the change since the last total from that origin."""
    total = Decimal(0)
    sources: dict[str, dict[str, str]] = {}
    if last is not None:
        total = _value(last[1])
        text = headers.get(last[0], headers.COUNTER_SOURCES) if last[0] else None
        sources = _sources(text) if text else {}
    source = headers.get(hdr, headers.STREAM_SOURCE)
    if source:
        fields = source.split(" ")
        origin_subject = fields[4] if len(fields) >= 5 else ""
        taken = sources.setdefault(fields[0], {})
        origin_total = _value(payload)
        previous = taken.get(origin_subject, "")
        incr = _EXACT.subtract(origin_total, _integer(previous) if _INTEGER.fullmatch(previous.encode()) else 0)
        taken[origin_subject] = str(origin_total)
        hdr = headers.put(hdr, headers.INCR, str(incr))
    total = _EXACT.add(total, incr)
    value = str(total)
    body = b'{"val":"%s"}' % value.encode()
    if sources:
        hdr = headers.put(hdr, headers.COUNTER_SOURCES, _go_json(sources))
    if len(hdr) > max_payload or len(body) > max_payload - len(hdr):
        raise errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM()
    return hdr, body, value


def _raw_value(hdr: bytes, key: str) -> bytes:
    """A header's first value as nats-server slices it: blanks before it skipped, none after it."""
    needle = b"\r\n" + key.encode() + b":"
    start = hdr.find(needle)
    if start < 0:
        return b""
    start += len(needle)
    end = hdr.find(b"\r\n", start)
    return hdr[start:end if end >= 0 else len(hdr)].lstrip(b" ")


def _value(body: bytes) -> Decimal:
    """The total a counter message holds (10172 when it holds none)."""
    try:
        data = json.loads(body)
    except ValueError:
        raise errors.MESSAGE_COUNTER_BROKEN() from None
    if data is None:
        return Decimal(0)
    text = data.get("val") if isinstance(data, dict) else 0
    if text is None or text == "":
        return Decimal(0)
    if not isinstance(text, str) or _INTEGER.fullmatch(text.encode()) is None:
        raise errors.MESSAGE_COUNTER_BROKEN()
    return _integer(text)


def _integer(text: str) -> Decimal:
    return _EXACT.plus(Decimal(text))  # "-0" and "007" read as Go reads them: 0 and 7


def _sources(text: str) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(text)
    except ValueError:
        raise errors.MESSAGE_COUNTER_BROKEN() from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(
            isinstance(v, dict) and all(isinstance(t, str) for t in v.values()) for v in data.values()):
        raise errors.MESSAGE_COUNTER_BROKEN()
    return data


def _go_json(value: Any) -> str:
    """Go's json.Marshal of a map: sorted keys, no blanks, HTML characters escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
