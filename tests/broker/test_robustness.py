"""Nothing a client sends may crash or hang the server or other clients; backpressure loses nothing."""

from __future__ import annotations

import random
import threading

import pytest

from tests.broker.raw import CONNECT, Raw, exchange

pytestmark = pytest.mark.xdist_group("broker-robustness")

FRAGMENTS = [b"PUB ", b"HPUB ", b"SUB ", b"UNSUB ", b"PING", b"PONG", b"CONNECT ", b"{", b"}", b"\r\n", b"\n", b" ",
             b"\t", b"foo", b".", b"*", b">", b"12", b"-1", b"99999999999999999999", b"\x00", b"\xff", b"NATS/1.0",
             b'"headers":true', b"MSG", b"+OK", b"INFO", b"0"]


@pytest.mark.parametrize("seed", range(6))
def test_random_garbage_never_hurts_the_server(server, seed):
    rng = random.Random(seed)
    with Raw(server.port) as bystander:
        bystander.send(CONNECT + b"SUB fuzz.ok 1\r\nPING\r\n")
        assert bystander.read_until(b"PONG\r\n") == b"PONG\r\n"
        for _ in range(15):
            junk = b"".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 40)))
            with Raw(server.port) as r:
                r.send(CONNECT + junk)
                r.send(b"PING\r\n")
                r.read_until(b"PONG\r\n", timeout=0.3)  # it may answer, close, or await a payload
        assert exchange(server.port, b"PUB fuzz.ok 2\r\nok\r\n") == (b"PONG\r\n", False)
        bystander.send(b"PING\r\n")
        # nats-server PINGs a new client once shortly after connect; the bystander may see that PING.
        assert bystander.read_until(b"PONG\r\n").replace(b"PING\r\n", b"") == b"MSG fuzz.ok 1 2\r\nok\r\nPONG\r\n"


def test_backpressure_delivers_everything_to_a_late_reader(server):
    n = 100_000
    frame = b"PUB bp.x 150\r\n" + b"p" * 150 + b"\r\n"  # 16 MB in total, under max_pending
    expected = n * len(b"MSG bp.x 1 150\r\n" + b"p" * 150 + b"\r\n")
    with Raw(server.port) as sub, Raw(server.port, timeout=60) as pub:
        sub.send(CONNECT + b"SUB bp.x 1\r\nPING\r\n")
        assert sub.read_until(b"PONG\r\n") == b"PONG\r\n"
        pub.send(CONNECT)
        done = threading.Event()

        def publish() -> None:
            pub.send(frame * n + b"PING\r\n")
            pub.read_until(b"PONG\r\n", timeout=60)
            done.set()

        sender = threading.Thread(target=publish, daemon=True)
        sender.start()
        done.wait(0.5)  # let the subscriber's buffers fill up before it starts reading
        got = 0
        while got < expected and not sub.closed:
            sub._recv()
            got += len(sub.buf)
            sub.buf = b""
        sender.join(60)
        assert got == expected
        assert done.is_set()
        assert not sub.closed
