"""The sans-IO parser alone: any split of the byte stream yields the same operations."""

from __future__ import annotations

import random

import pytest

from jsbroker.protocol import MAX_CONTROL_LINE, MAX_PAYLOAD, UNKNOWN_OP, Parser, ProtocolError


class Recorder:
    def __init__(self) -> None:
        self.ops: list[tuple] = []

    def on_msg(self, subject, reply, hdr_len, data):
        self.ops.append(("msg", subject, reply, hdr_len, data))

    def on_sub(self, subject, queue, sid):
        self.ops.append(("sub", subject, queue, sid))

    def on_unsub(self, sid, max_msgs):
        self.ops.append(("unsub", sid, max_msgs))

    def on_ping(self):
        self.ops.append(("ping",))

    def on_pong(self):
        self.ops.append(("pong",))

    def on_connect(self, options):
        self.ops.append(("connect", options))


STREAM = (
    b'CONNECT {"verbose":false}\r\nSUB a.* q 1\r\nSUB b 2\r\nPUB a.x 3\r\nabc\r\nPUB a.x 3\r\ndef\r\n'
    b"PUB a.x 30\r\n" + b"0" * 30 + b"\r\nPUB a.x 3\nghi\r\nPUB a.y r.1 0\r\n\r\n"
    b"HPUB b r.2 12 14\r\nNATS/1.0\r\n\r\nhi\r\nping\r\nPONG\r\nUNSUB 1 5\r\nUNSUB 2\r\n"
    + b"PUB big %d\r\n" % 70000 + b"z" * 70000 + b"\r\nPING\r\n"
)
EXPECTED = [
    ("connect", b'{"verbose":false}'),
    ("sub", b"a.*", b"q", b"1"),
    ("sub", b"b", None, b"2"),
    ("msg", b"a.x", None, -1, b"abc\r\n"),
    ("msg", b"a.x", None, -1, b"def\r\n"),
    ("msg", b"a.x", None, -1, b"0" * 30 + b"\r\n"),
    ("msg", b"a.x", None, -1, b"ghi\r\n"),
    ("msg", b"a.y", b"r.1", -1, b"\r\n"),
    ("msg", b"b", b"r.2", 12, b"NATS/1.0\r\n\r\nhi\r\n"),
    ("ping",),
    ("pong",),
    ("unsub", b"1", 5),
    ("unsub", b"2", 0),
    ("msg", b"big", None, -1, b"z" * 70000 + b"\r\n"),
    ("ping",),
]


def feed_in_pieces(data: bytes, cuts: list[int]) -> list[tuple]:
    rec = Recorder()
    parser = Parser(rec)
    last = 0
    for cut in sorted(cuts) + [len(data)]:
        parser.feed(data[last:cut])
        last = cut
    return rec.ops


def test_whole_stream():
    assert feed_in_pieces(STREAM, []) == EXPECTED


@pytest.mark.parametrize("seed", range(20))
def test_random_splits(seed):
    rng = random.Random(seed)
    cuts = rng.sample(range(1, len(STREAM)), rng.randint(1, 60))
    assert feed_in_pieces(STREAM, cuts) == EXPECTED


def test_every_single_split_point_of_the_small_ops():
    head = STREAM[: STREAM.index(b"PUB big")]
    for cut in range(1, len(head)):
        assert feed_in_pieces(head, [cut]) == EXPECTED[:-2], cut


@pytest.mark.parametrize(
    ("data", "err"),
    [
        (b"PUB a 2\r\nabX\r\n", UNKNOWN_OP),
        (b"PUB a 2000000\r\n", MAX_PAYLOAD),
        (b"PUB " + b"a" * 5000 + b" 1\r\n", MAX_CONTROL_LINE),
        (b"SUB " + b"a" * 5000, MAX_CONTROL_LINE),
        (b"XYZ", UNKNOWN_OP),
        (b"PUB a\r\n", None),
        (b"HPUB a 5 3\r\n", None),
        (b"-ERR 'x'\r\n", None),
    ],
)
def test_errors(data, err):
    with pytest.raises(ProtocolError) as info:
        Parser(Recorder()).feed(data)
    assert info.value.err == err


def test_connect_in_the_same_read_redirects_later_pubs():
    rec = Recorder()
    parser = Parser(rec)
    fast: list[bytes] = []

    def on_connect(options):
        parser.on_pub = lambda subject, reply, hdr_len, data: fast.append(data)

    rec.on_connect = on_connect
    parser.feed(b"PUB a 1\r\nx\r\nCONNECT {}\r\nPUB a 1\r\ny\r\nPUB a 1\r\nz\r\n")
    assert [op[4] for op in rec.ops] == [b"x\r\n"]
    assert fast == [b"y\r\n", b"z\r\n"]


def test_gate_rejects_everything_but_connect():
    parser = Parser(Recorder())
    parser.gate = True
    with pytest.raises(ProtocolError, match="Authorization Violation"):
        parser.feed(b"PUB a 1\r\nx\r\n")
