"""Ack reply subjects and ack bodies (pure)."""

from __future__ import annotations

import pytest

from jsbroker.jetstream import ack


def test_v1_reply_subject_round_trip() -> None:
    subj = ack.reply_subject(ack.reply_prefix("ORD", "PD"), 1, 2, 2, 1795311356795969422, 1)
    assert subj == "$JS.ACK.ORD.PD.1.2.2.1795311356795969422.1"
    assert ack.parse_subject(subj) == (1, 2, 2)


def test_v2_and_bad_subjects() -> None:
    assert ack.parse_subject("$JS.ACK._.HASH.S.C.3.10.12.99.0.tok") == (3, 10, 12)
    assert ack.parse_subject("$JS.ACK.S.C.x.1.1.1.1") is None
    assert ack.parse_subject("$JS.ACK.S.C.1.1") is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", ack.AckBody(ack.AckKind.ACK)),
        (b"+ACK", ack.AckBody(ack.AckKind.ACK)),
        (b"+OK", ack.AckBody(ack.AckKind.ACK)),
        (b"-NAK", ack.AckBody(ack.AckKind.NAK)),
        (b'-NAK {"delay": 2000000000}', ack.AckBody(ack.AckKind.NAK, delay_ns=2_000_000_000)),
        (b"-NAK 1.5s", ack.AckBody(ack.AckKind.NAK, delay_ns=1_500_000_000)),
        (b"-NAK garbage", ack.AckBody(ack.AckKind.NAK)),
        (b'-NAK {"delay": "x"}', ack.AckBody(ack.AckKind.NAK)),
        (b"+WPI", ack.AckBody(ack.AckKind.PROGRESS)),
        (b"+NXT 5", ack.AckBody(ack.AckKind.NEXT, next_request=b" 5")),
        (b"+TERM  poison ", ack.AckBody(ack.AckKind.TERM, reason="poison")),
        (b"\x00garbage", ack.AckBody(ack.AckKind.UNKNOWN)),
    ],
)
def test_bodies(body: bytes, expected: ack.AckBody) -> None:
    assert ack.parse_body(body) == expected
