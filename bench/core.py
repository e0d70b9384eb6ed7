"""Core NATS benchmark: jsbroker vs nats-server, alternating, on loopback; 128-byte messages, and 1 KB and
16 KB payloads for the pub -> sub workloads (a size-dependent regression shows as a ratio there).

Client-bound workloads use nats-py in separate processes (nats-py is the bottleneck there):
publish-only, 1 pub -> 1 sub, request/reply with 1 and 50 requests in flight. Server-bound workloads
use raw sockets that cost almost nothing (pre-built PUB frames written in ~64 KiB blocks, then PING/PONG;
raw subscribers that only count bytes): ingest (no subscribers) and pub -> sub fan-out to 1, 5 and 20
subscribers (n counts delivered messages: the publisher sends n / subscribers).
For each run: msgs/s and the server's CPU seconds per message (from /proc/<pid>/stat); the table shows
medians and the ratios jsbroker/nats-server.

    python3 bench/core.py            # full run (a few minutes)
    python3 bench/core.py --quick    # short run, one repetition
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import socket
import time
from typing import Callable

from common import ByteCounter, Workload, main, run_async, start_servers, timed

SIZE = 128
PAYLOAD = b"x" * SIZE
KB = 1024
BLOCK = 64 * 1024
CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'


# -- nats-py workers (run in child processes) -------------------------------------------------------


def _publisher(url: str, subject: str, n: int, out: "mp.Queue[float]", size: int = SIZE) -> None:
    async def main() -> None:
        import nats

        nc = await nats.connect(url)
        payload = b"x" * size
        out.put(time.time())
        for i in range(n):
            await nc.publish(subject, payload)
            if i % 5000 == 4999:
                await nc.flush(timeout=60)  # as a user's burst does; bounds the client's own buffer
        await nc.flush(timeout=60)
        out.put(time.time())
        await nc.close()

    run_async(main())


def _subscriber(url: str, subject: str, n: int, ready: "mp.Event", out: "mp.Queue[float]") -> None:
    async def main() -> None:
        import nats

        nc = await nats.connect(url)
        done = asyncio.Event()
        count = 0

        async def cb(msg) -> None:
            nonlocal count
            count += 1
            if count == n:
                done.set()

        await nc.subscribe(subject, cb=cb, pending_msgs_limit=10_000_000, pending_bytes_limit=1 << 31)
        await nc.flush()
        ready.set()
        await asyncio.wait_for(done.wait(), 300)
        out.put(time.time())
        await nc.close()

    run_async(main())


def _responder(url: str, subject: str, ready: "mp.Event", stop: "mp.Event") -> None:
    async def main() -> None:
        import nats

        nc = await nats.connect(url)

        async def cb(msg) -> None:
            await nc.publish(msg.reply, PAYLOAD)

        await nc.subscribe(subject, cb=cb)
        await nc.flush()
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)  # polling a cross-process flag; not on the measured path
        await nc.close()

    run_async(main())


def _requester(url: str, subject: str, n: int, inflight: int, out: "mp.Queue[float]") -> None:
    async def main() -> None:
        import nats

        nc = await nats.connect(url)
        await nc.request(subject, PAYLOAD, timeout=5)  # warm the response inbox
        per_task = n // inflight

        async def worker() -> None:
            for _ in range(per_task):
                await nc.request(subject, PAYLOAD, timeout=10)

        out.put(time.time())
        await asyncio.gather(*(worker() for _ in range(inflight)))
        out.put(time.time())
        await nc.close()

    run_async(main())


# -- client-bound workloads (return messages, seconds) ----------------------------------------------

_ctx = mp.get_context("spawn")


def _wait_ready(ready, proc) -> None:
    if not ready.wait(60):
        proc.kill()
        raise RuntimeError(f"client process did not get ready (exit code {proc.exitcode})")


def pub_only(url: str, n: int) -> tuple[int, float]:
    q = _ctx.Queue()
    p = _ctx.Process(target=_publisher, args=(url, "bench.pub", n, q))
    p.start()
    start, end = q.get(timeout=600), q.get(timeout=600)
    p.join()
    return n, end - start


def pub_sub(size: int) -> Callable[[str, int], tuple[int, float]]:
    def run(url: str, n: int) -> tuple[int, float]:
        q_pub, q_sub, ready = _ctx.Queue(), _ctx.Queue(), _ctx.Event()
        sub = _ctx.Process(target=_subscriber, args=(url, "bench.ps", n, ready, q_sub))
        sub.start()
        _wait_ready(ready, sub)
        pub = _ctx.Process(target=_publisher, args=(url, "bench.ps", n, q_pub, size))
        pub.start()
        start = q_pub.get(timeout=600)
        end = q_sub.get(timeout=600)
        pub.join()
        sub.join()
        return n, end - start

    return run


def request_reply(inflight: int) -> Callable[[str, int], tuple[int, float]]:
    def run(url: str, n: int) -> tuple[int, float]:
        ready, stop, q = _ctx.Event(), _ctx.Event(), _ctx.Queue()
        resp = _ctx.Process(target=_responder, args=(url, "bench.rr", ready, stop))
        resp.start()
        _wait_ready(ready, resp)
        n = n // inflight * inflight
        req = _ctx.Process(target=_requester, args=(url, "bench.rr", n, inflight, q))
        req.start()
        start, end = q.get(timeout=600), q.get(timeout=600)
        req.join()
        stop.set()
        resp.join()
        return n, end - start

    return run


# -- server-bound raw-socket workloads ---------------------------------------------------------------


def _raw_connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while b"\r\n" not in buf:
        buf += s.recv(4096)
    s.sendall(CONNECT)
    return s


def _await_pong(s: socket.socket) -> None:
    buf = b""
    while not buf.endswith(b"PONG\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf = (buf + chunk)[-16:]


def _blocks(subject: bytes, n: int, size: int = SIZE) -> list[bytes]:
    frame = b"PUB %s %d\r\n%s\r\n" % (subject, size, b"x" * size)
    per_block = max(1, BLOCK // len(frame))
    block = frame * per_block
    full, rest = divmod(n, per_block)
    return [block] * full + ([frame * rest] if rest else [])


def _raw_publish(port: int, subject: bytes, n: int, size: int = SIZE) -> None:
    blocks = _blocks(subject, n, size)
    s = _raw_connect(port)
    try:
        for b in blocks:
            s.sendall(b)
        s.sendall(b"PING\r\n")
        _await_pong(s)
    finally:
        s.close()


def ingest(url: str, n: int) -> tuple[int, float]:
    port = int(url.rsplit(":", 1)[1])
    start = time.perf_counter()
    _raw_publish(port, b"bench.ingest", n)
    return n, time.perf_counter() - start


def fan_out(size: int, subscribers: int = 1) -> Callable[[str, int], tuple[int, float]]:
    """One raw publisher, `subscribers` raw subscribers on their own connections; counts delivered msgs."""

    def run(url: str, n: int) -> tuple[int, float]:
        port = int(url.rsplit(":", 1)[1])
        n = max(n // subscribers, 1)
        socks = [_raw_connect(port) for _ in range(subscribers)]
        for sub in socks:
            sub.sendall(b"SUB bench.fan 1\r\nPING\r\n")
            _await_pong(sub)
        expected = n * (len(b"MSG bench.fan 1 %d\r\n\r\n" % size) + size)
        readers = [ByteCounter(sub, expected) for sub in socks]
        start = time.perf_counter()
        for reader in readers:
            reader.start()
        _raw_publish(port, b"bench.fan", n, size)
        for reader in readers:
            reader.done.wait(600)
        elapsed = time.perf_counter() - start
        for sub in socks:
            sub.close()
        for reader in readers:
            if reader.got < reader.expected:
                raise RuntimeError(f"fan-out lost data: {reader.got} of {reader.expected} bytes")
        return n * subscribers, elapsed

    return run


# -- driver -------------------------------------------------------------------------------------------

WORKLOADS: list[Workload] = [
    ("nats-py publish only", timed(pub_only), 300_000),
    ("nats-py 1 pub -> 1 sub", timed(pub_sub(SIZE)), 200_000),
    ("nats-py 1 pub -> 1 sub, 1 KB", timed(pub_sub(KB)), 200_000),
    ("nats-py 1 pub -> 1 sub, 16 KB", timed(pub_sub(16 * KB)), 50_000),
    ("nats-py request/reply, 1 in flight", timed(request_reply(1)), 4_000),
    ("nats-py request/reply, 50 in flight", timed(request_reply(50)), 40_000),
    ("raw ingest (no subscribers)", timed(ingest), 3_000_000),
    ("raw pub -> sub fan-out", timed(fan_out(SIZE)), 1_000_000),
    ("raw pub -> sub fan-out, 1 KB", timed(fan_out(KB)), 500_000),
    ("raw pub -> sub fan-out, 16 KB", timed(fan_out(16 * KB)), 50_000),
    ("raw pub -> 5 subs fan-out", timed(fan_out(SIZE, 5)), 1_000_000),
    ("raw pub -> 20 subs fan-out", timed(fan_out(SIZE, 20)), 1_000_000),
    ("raw pub -> 5 subs fan-out, 1 KB", timed(fan_out(KB, 5)), 500_000),
]


if __name__ == "__main__":
    main(__doc__, WORKLOADS, start_servers)
