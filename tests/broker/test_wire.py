"""Bad and unusual input on the wire: exact bytes and close/keep-open behaviour, as nats-server does.

Each case was observed on nats-server 2.15.1 with a raw socket; the `server` fixture checks that both
the reference and jsbroker still produce exactly these bytes. `exchange` appends PING, so an open
connection ends in PONG and a closed one does not.
"""

from __future__ import annotations

import pytest

from tests.broker.raw import CONNECT, Raw, exchange

pytestmark = pytest.mark.xdist_group("broker-wire")

ERR_UNKNOWN = b"-ERR 'Unknown Protocol Operation'\r\n"
PONG = b"PONG\r\n"

# (id, bytes after CONNECT, expected output, closed)
CASES = [
    ("unknown-verb", b"FOO\r\n", ERR_UNKNOWN, True),
    ("pub-missing-size", b"PUB foo\r\n", b"", True),
    ("pub-bad-size", b"PUB foo x\r\nhi\r\n", b"", True),
    ("pub-negative-size", b"PUB foo -1\r\n", b"", True),
    ("payload-longer-than-size", b"PUB foo 2\r\nhiX\r\n", ERR_UNKNOWN, True),
    ("sub-no-args", b"SUB\r\n", ERR_UNKNOWN, True),
    ("sub-missing-sid", b"SUB foo\r\n", b"", True),
    ("sub-too-many-args", b"SUB foo 1 2 3\r\n", b"", True),
    ("sub-invalid-subject", b"SUB a..b 1\r\n", b"-ERR 'Invalid Subject'\r\n" + PONG, False),
    ("sub-misplaced-fwc", b"SUB foo.>.x 1\r\n", b"-ERR 'Invalid Subject'\r\n" + PONG, False),
    ("sub-star-inside-token", b"SUB foo*bar 1\r\n", PONG, False),
    ("unsub-no-args", b"UNSUB\r\n", ERR_UNKNOWN, True),
    ("unsub-unknown-sid", b"UNSUB 99\r\n", PONG, False),
    ("unsub-non-numeric", b"UNSUB x\r\nUNSUB 1 x\r\n", PONG, False),
    ("control-line-too-long", b"PUB " + b"a" * 5000 + b" 1\r\nx\r\n", b"-ERR 'maximum control line exceeded'\r\n", True),
    ("control-line-too-long-unterminated", b"SUB " + b"a" * 5000, b"-ERR 'maximum control line exceeded'\r\n", True),
    ("garbage-unterminated", b"\x00\x01\x02", ERR_UNKNOWN, True),
    ("garbage-line", b"\x00\x01\x02\r\n", ERR_UNKNOWN, True),
    ("max-payload", b"PUB foo 2000000\r\n", b"-ERR 'Maximum Payload Violation'\r\n", True),
    ("max-payload-hpub", b"HPUB foo 12 2000000\r\n", b"-ERR 'Maximum Payload Violation'\r\n", True),
    ("hpub-header-larger-than-total", b"HPUB foo 10 5\r\n", b"", True),
    ("hpub-missing-size", b"HPUB foo 2\r\nhi\r\n", b"", True),
    ("lowercase-verbs", b"pub foo 2\r\nhi\r\nping\r\n", PONG * 2, False),
    ("pub-wildcard-not-pedantic", b"PUB foo.* 2\r\nhi\r\n", PONG, False),
    ("pubx-is-unknown", b"PUBX foo 2\r\nhi\r\n", ERR_UNKNOWN, True),
    ("empty-line", b"\r\n", ERR_UNKNOWN, True),
    ("leading-blank", b" PING\r\n", ERR_UNKNOWN, True),
    ("leading-tab", b"\tPING\r\n", ERR_UNKNOWN, True),
    ("leading-vertical-tab", b"\x0bPUB foo 0\r\n\r\n", ERR_UNKNOWN, True),
    ("subx-is-unknown", b"SUB\xc6 foo 1\r\n", ERR_UNKNOWN, True),
    ("ping-suffix-ignored", b"PINGX\r\nPING  \r\n", PONG * 3, False),
    ("client-pong-ignored", b"PONG\r\n+OK\r\nINFO {}\r\n", PONG, False),
    ("client-err-closes", b"-ERR 'x'\r\n", b"", True),
    ("client-msg-is-unknown", b"MSG foo 1 2\r\nhi\r\n", ERR_UNKNOWN, True),
    ("bad-connect-json", b"CONNECT {bad\r\n", b"", True),
    ("blanks-and-tabs", b"SUB foo  1\r\nPUB\tfoo\t2\r\nhi\r\n", b"MSG foo 1 2\r\nhi\r\n" + PONG, False),
    ("bare-lf-line-end", b"SUB foo 1\nPUB foo 2\nhi\r\n", b"MSG foo 1 2\r\nhi\r\n" + PONG, False),
    ("zero-payload", b"SUB foo 1\r\nPUB foo 0\r\n\r\n", b"MSG foo 1 0\r\n\r\n" + PONG, False),
    ("hpub-to-header-client", b"SUB foo 1\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
     b"HMSG foo 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n" + PONG, False),
    ("hpub-unvalidated-header", b"HPUB foo 5 7\r\nABCDEhi\r\n", PONG, False),
    ("queue-group-one-member", b"SUB foo q 1\r\nSUB foo q 2\r\nPUB foo 2\r\nhi\r\n", None, False),
    ("unsub-max", b"SUB foo 1\r\nUNSUB 1 2\r\nPUB foo 1\r\na\r\nPUB foo 1\r\nb\r\nPUB foo 1\r\nc\r\n",
     b"MSG foo 1 1\r\na\r\nMSG foo 1 1\r\nb\r\n" + PONG, False),
    ("unsub-max-already-reached", b"SUB foo 1\r\nPUB foo 1\r\na\r\nUNSUB 1 1\r\nPUB foo 1\r\nb\r\n",
     b"MSG foo 1 1\r\na\r\n" + PONG, False),
    ("same-sid-twice", b"SUB foo 1\r\nSUB foo 1\r\nPUB foo 1\r\na\r\n", b"MSG foo 1 1\r\na\r\n" + PONG, False),
    ("reply-subject", b"SUB foo 1\r\nPUB foo bar 1\r\na\r\n", b"MSG foo 1 bar 1\r\na\r\n" + PONG, False),
    ("no-responders", b"SUB _INBOX.* 1\r\nPUB nosuch _INBOX.x 2\r\nhi\r\n",
     b"HMSG _INBOX.x 1 38 38\r\nNATS/1.0 503\r\nNats-Subject: nosuch\r\n\r\n\r\n" + PONG, False),
]


@pytest.mark.parametrize(("data", "expected", "closed"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_wire_case(server, data, expected, closed):
    out, was_closed = exchange(server.port, data)
    if expected is None:  # queue group: exactly one of the two members got it
        assert out in (b"MSG foo 1 2\r\nhi\r\n" + PONG, b"MSG foo 2 2\r\nhi\r\n" + PONG)
    else:
        assert out == expected
    assert was_closed is closed


# (id, CONNECT line + ops, expected output, closed): CONNECT options and defaults.
CONNECT_CASES = [
    ("protocol-2", b'CONNECT {"protocol":2}\r\n', b"-ERR 'invalid client protocol'\r\n", True),
    ("protocol-negative", b'CONNECT {"protocol":-1}\r\n', b"-ERR 'invalid client protocol'\r\n", True),
    ("no-responders-needs-headers", b'CONNECT {"no_responders":true,"headers":false}\r\n',
     b"-ERR 'no responders requires headers support'\r\n", True),
    ("verbose", b'CONNECT {"verbose":true}\r\nSUB foo 1\r\nPUB foo 2\r\nhi\r\nUNSUB 1\r\n',
     b"+OK\r\n+OK\r\n+OK\r\nMSG foo 1 2\r\nhi\r\n+OK\r\n" + PONG, False),
    ("verbose-invalid-subject", b'CONNECT {"verbose":true}\r\nSUB a..b 1\r\n',
     b"+OK\r\n-ERR 'Invalid Subject'\r\n" + PONG, False),
    ("verbose-unknown-op", b'CONNECT {"verbose":true}\r\nFOO\r\n', b"+OK\r\n" + ERR_UNKNOWN, True),
    ("pedantic-default-on", b'CONNECT {"verbose":true}\r\nPUB foo.* 2\r\nhi\r\n',
     b"+OK\r\n-ERR 'Invalid Publish Subject'\r\n+OK\r\n" + PONG, False),
    ("pedantic-bad-subject", b'CONNECT {"verbose":false,"pedantic":true}\r\nPUB foo..x 2\r\nhi\r\n',
     b"-ERR 'Invalid Publish Subject'\r\n" + PONG, False),
    ("not-pedantic", b'CONNECT {"verbose":false,"pedantic":false}\r\nPUB foo..x 2\r\nhi\r\n', PONG, False),
    ("echo-false", b'CONNECT {"verbose":false,"echo":false}\r\nSUB foo 1\r\nPUB foo 2\r\nhi\r\n', PONG, False),
    ("hpub-without-headers-closes", b'CONNECT {"verbose":false,"headers":false}\r\nSUB foo 1\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n',
     b"", True),
    ("no-connect-is-verbose", b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n", b"+OK\r\n+OK\r\nMSG foo 1 2\r\nhi\r\n" + PONG, False),
    ("connect-lowercase-no-space", b"connect{}\r\n", b"+OK\r\n" + PONG, False),
]


@pytest.mark.parametrize(("data", "expected", "closed"), [c[1:] for c in CONNECT_CASES], ids=[c[0] for c in CONNECT_CASES])
def test_connect_case(server, data, expected, closed):
    out, was_closed = exchange(server.port, data, connect=None)
    assert out == expected
    assert was_closed is closed


def test_headers_are_stripped_for_clients_without_headers(server):
    with Raw(server.port) as sub, Raw(server.port) as pub:
        sub.send(b'CONNECT {"verbose":false,"pedantic":false,"headers":false}\r\nSUB hs.x 7\r\nPING\r\n')
        assert sub.read_until(PONG) == PONG
        pub.send(CONNECT + b"HPUB hs.x r 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n")
        assert pub.read_until(PONG) == PONG
        sub.send(b"PING\r\n")
        assert sub.read_until(PONG) == b"MSG hs.x 7 r 2\r\nhi\r\n" + PONG


def test_large_payload_split_across_reads(server):
    payload = bytes(range(256)) * 4000  # 1 MB minus a bit, arrives in many TCP segments
    with Raw(server.port) as r:
        r.send(CONNECT + b"SUB big 1\r\nPUB big %d\r\n" % len(payload))
        for i in range(0, len(payload), 7000):
            r.send(payload[i : i + 7000])
        r.send(b"\r\nPING\r\n")
        out = r.read_until(PONG, timeout=10)
    head = b"MSG big 1 %d\r\n" % len(payload)
    assert out == head + payload + b"\r\n" + PONG


def test_pipelined_ops_one_byte_at_a_time(server):
    data = CONNECT + b"SUB t.* 1\r\nHPUB t.a rr 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPUB t.b 3\r\nabc\r\nPING\r\n"
    with Raw(server.port) as r:
        for i in range(len(data)):
            r.send(data[i : i + 1])
        out = r.read_until(PONG)
    assert out == b"HMSG t.a 1 rr 12 14\r\nNATS/1.0\r\n\r\nhi\r\nMSG t.b 1 3\r\nabc\r\n" + PONG
