"""A subscriber that stops reading, next to nats-py publishers and a healthy subscriber (issue 35).

`run_stall` is the scenario of tests/broker/test_slow_consumers.py and bench/stalled_subscriber.py: a
nats-py publisher sends `n` messages to a subject read by a healthy nats-py subscriber and by a raw
socket that subscribed and never reads again (a small SO_RCVBUF, so the server's output to it backs up
at once). Optionally a second publisher/subscriber pair works on another subject meanwhile. The publisher
flushes (a PING round trip) every `flush_every` messages; every round trip is timed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request
from dataclasses import dataclass, field

import nats

from tests.servers import ServerHandle

MB = 1024 * 1024
RCVBUF = 4096  # the stalled socket's receive buffer: the server's output to it backs up at once


@dataclass
class Stream:
    """One publisher/subscriber pair's outcome."""

    published: int = 0
    received: int = 0
    rtts: list[float] = field(default_factory=list)  # seconds of each flush's PING round trip
    flush_error: str = ""  # the exception's name when a flush failed
    seconds: float = 0.0  # from the first publish to the last flush's answer

    @property
    def max_rtt(self) -> float:
        return max(self.rtts, default=0.0)


@dataclass
class StallOutcome:
    main: Stream
    other: Stream | None
    stalled_closed: bool  # the server closed the stalled socket
    stalled_tail: bytes  # the last bytes it sent there before closing
    cut_after: float  # seconds from the first publish until the server dropped the stalled socket (-1: never)
    slow_consumers: int  # /varz
    slow_consumer_clients: int  # /varz slow_consumer_stats


def varz(handle: ServerHandle) -> dict:
    with urllib.request.urlopen(f"{handle.http_url}/varz", timeout=10) as r:
        return json.loads(r.read())


def stalled_subscriber(port: int, subject: str) -> socket.socket:
    """A raw client that subscribes, sees its PONG, and never reads again."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # before connect: the window it advertises
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB %s 1\r\nPING\r\n' % subject.encode())
    buf = b""
    while b"PONG\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("the server closed the stalled subscriber before its PONG")
        buf += chunk
    return s


def connected_ports(handle: ServerHandle) -> set[int]:
    with urllib.request.urlopen(f"{handle.http_url}/connz?limit=10000", timeout=10) as r:
        return {c["port"] for c in json.loads(r.read())["connections"]}


async def wait_dropped(handle: ServerHandle, port: int, timeout: float) -> float | None:
    """Monotonic time at which the client on `port` left /connz (None: still there after `timeout`).
    Polled: the stalled socket itself cannot see a close behind the data it never reads."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port not in await asyncio.to_thread(connected_ports, handle):
            return time.monotonic()
        await asyncio.sleep(0.05)
    return None


def drain(s: socket.socket, timeout: float = 10.0) -> tuple[bool, bytes]:
    """Read what the server sent until it closed the socket: (closed, the last bytes)."""
    s.settimeout(timeout)
    tail = b""
    try:
        while chunk := s.recv(MB):
            tail = (tail + chunk)[-200:]
        return True, tail
    except ConnectionResetError:
        return True, tail
    except socket.timeout:
        return False, tail
    finally:
        s.close()


async def _subscriber(url: str, subject: str, stream: Stream) -> nats.NATS:
    async def count(msg: object) -> None:
        stream.received += 1

    nc = await nats.connect(url, allow_reconnect=False)
    await nc.subscribe(subject, cb=count, pending_bytes_limit=1024 * MB, pending_msgs_limit=10_000_000)
    await nc.flush()
    return nc


async def _publish(url: str, subject: str, n: int, size: int, flush_every: int, flush_timeout: float,
                   paced: bool, stream: Stream) -> None:
    nc = await nats.connect(url, allow_reconnect=False)
    payload = b"x" * size
    began = time.monotonic()
    try:
        for i in range(1, n + 1):
            await nc.publish(subject, payload)
            stream.published = i
            if i % flush_every == 0 or i == n:
                start = time.monotonic()
                await nc.flush(timeout=flush_timeout)  # type: ignore[arg-type]
                stream.rtts.append(time.monotonic() - start)
                while paced and stream.received < i - flush_every:  # polls the subscriber's counter
                    await asyncio.sleep(0.002)
        stream.seconds = time.monotonic() - began
    except Exception as e:  # the outcome records it; the test asserts there was none
        stream.flush_error = type(e).__name__
    finally:
        await nc.close()


async def run_stall(handle: ServerHandle, size: int, n: int, flush_every: int, other_n: int = 0,
                    flush_timeout: float = 2.0, paced: bool = False, settle: float = 30.0) -> StallOutcome:
    """The scenario (see the module docstring): `flush_timeout` is each flush's (a failed one is recorded
    in the outcome); `paced` publishers wait after each flush until their healthy subscriber is at most
    `flush_every` messages behind (application-level flow control: a nats-py reader on a loaded machine
    is slower than the stall rate both servers allow, and past max_pending either server cuts it off);
    `settle` bounds each wait for deliveries and for the cut."""
    main, other = Stream(), (Stream() if other_n else None)
    subs = [await _subscriber(handle.url, "stall.main", main)]
    if other is not None:
        subs.append(await _subscriber(handle.url, "stall.other", other))
    stalled = stalled_subscriber(handle.port, "stall.main")
    start = time.monotonic()
    cut = asyncio.ensure_future(wait_dropped(handle, stalled.getsockname()[1], settle + 30))
    jobs = [_publish(handle.url, "stall.main", n, size, flush_every, flush_timeout, paced, main)]
    if other is not None:
        every = max(1, flush_every // 4)
        jobs.append(_publish(handle.url, "stall.other", other_n, size, every, flush_timeout, paced, other))
    await asyncio.gather(*jobs)
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline and (main.received < main.published
                                           or (other is not None and other.received < other.published)):
        await asyncio.sleep(0.02)  # polls the subscribers' counters
    dropped_at = await cut
    closed, tail = await asyncio.to_thread(drain, stalled) if dropped_at is not None else (False, b"")
    for nc in subs:
        await nc.close()
    cut_after = dropped_at - start if dropped_at is not None else -1.0
    stats = varz(handle)
    return StallOutcome(main, other, closed, tail, cut_after, stats["slow_consumers"],
                        stats["slow_consumer_stats"]["clients"])
