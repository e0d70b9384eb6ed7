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


# Plain acks: runs of PUBs without reply or payload, as nats-py (two blanks) and other clients send them,
# mixed with forms the run regex must leave to the ordinary path.
ACKS = (
    b"PUB $JS.ACK.S.C.1.1.1.0.0  0\r\n\r\nPUB $JS.ACK.S.C.1.2.2.0.0  0\r\n\r\nPUB $JS.ACK.S.C.1.3.3.0.0 0\r\n\r\n"
    b"PUB a 1\r\nx\r\nPUB b 0\r\n\r\nPUB c\t0\r\n\r\npub d 0\r\n\r\nPUB e   0\r\n\r\nPUB f r 0\r\n\r\n"
    b"PUB g 0\n\r\nPUB h 0\r\n\r\nPUB i 0\r\n\r\nPING\r\nPUB j 0\r\n\r\n"
)
ACK_SUBJECTS = [b"$JS.ACK.S.C.1.%d.%d.0.0" % (i, i) for i in (1, 2, 3)]


class RunRecorder(Recorder):
    """Records runs as the router gets them, flattened into the ops the default path would give."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[list[bytes]] = []

    def on_runs(self, subjects: list[bytes]) -> None:
        self.runs.append(list(subjects))
        self.ops.extend(("msg", s, None, -1, b"\r\n") for s in subjects)


def feed_runs(data: bytes, cuts: list[int], max_control_line: int = 4096) -> RunRecorder:
    rec = RunRecorder()
    parser = Parser(rec, max_control_line=max_control_line)
    parser.on_empty_pubs = rec.on_runs
    last = 0
    for cut in sorted(cuts) + [len(data)]:
        parser.feed(data[last:cut])
        last = cut
    return rec


def test_runs_of_empty_pubs_come_as_one_list():
    rec = feed_runs(ACKS, [])
    assert rec.ops == feed_in_pieces(ACKS, [])  # the same operations as one by one
    assert rec.runs[0] == ACK_SUBJECTS
    assert [b"h", b"i"] in rec.runs  # a later run
    flat = [s for run in rec.runs for s in run]
    # non-canonical spellings take the ordinary path (tab, lower case, three blanks, a reply, a bare LF)
    assert not {b"c", b"d", b"e", b"f", b"g"} & set(flat)


@pytest.mark.parametrize("seed", range(20))
def test_runs_of_empty_pubs_survive_any_split(seed):
    rng = random.Random(seed)
    cuts = rng.sample(range(1, len(ACKS)), rng.randint(1, 30))
    assert feed_runs(ACKS, cuts).ops == feed_in_pieces(ACKS, [])


def test_a_run_stops_before_an_over_long_line():
    long = b"s" * 100
    data = b"PUB a 0\r\n\r\nPUB b 0\r\n\r\nPUB " + long + b" 0\r\n\r\n"
    rec = RunRecorder()
    parser = Parser(rec, max_control_line=64)
    parser.on_empty_pubs = rec.on_runs
    with pytest.raises(ProtocolError) as info:
        parser.feed(data)
    assert info.value.err == MAX_CONTROL_LINE
    assert rec.runs == [[b"a", b"b"]]
