"""Benchmark plumbing shared by bench scripts: server processes, CPU accounting, result tables.

Servers are started with the test launchers (`tests/servers.py`), so a benchmark measures exactly the
processes the tests run. CPU time is read from /proc/<pid>/stat (utime + stime) before and after each
measurement; the server process is otherwise idle, so the delta is the cost of the workload.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Coroutine

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.servers import JSBROKER, NATS_SERVER, ServerHandle, launch  # noqa: E402
from tests.servers import fill_stream as acked_fill  # noqa: E402

KINDS = (NATS_SERVER, JSBROKER)
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds consumed so far by process `pid`."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` in MB (VmRSS; 0 for a process that has exited but not been reaped)."""
    with open(f"/proc/{pid}/status") as status:
        return next((int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:")), 0.0)


@dataclass
class Sample:
    msgs: int  # messages the workload counts (delivered, or ingested when nothing is delivered)
    seconds: float
    cpu: float  # server CPU seconds spent during the run
    client_cpu: float = 0.0  # the measured client's own CPU seconds, where a workload reports it

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_per_msg_us(self) -> float:
        return self.cpu / self.msgs * 1e6 if self.msgs else 0.0


class RepFailed(RuntimeError):
    """A repetition that could not be measured: reported, and the run goes on without its sample."""


@dataclass
class Result:
    workload: str
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {k: [] for k in KINDS})

    def median_rate(self, kind: str) -> float:
        return statistics.median(s.rate for s in self.samples[kind]) if self.samples[kind] else 0.0

    def median_cpu(self, kind: str) -> float:
        return statistics.median(s.cpu_per_msg_us for s in self.samples[kind]) if self.samples[kind] else 0.0


def start_servers() -> dict[str, ServerHandle]:
    """One nats-server and one jsbroker (core only: JetStream off), on free loopback ports."""
    return {kind: launch(kind, jetstream=False) for kind in KINDS}


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def table(results: list[Result]) -> str:
    """A Markdown table: msgs/s and server CPU µs/msg for both servers, ratios jsbroker/nats-server."""
    head = (
        "| workload | nats-server msgs/s | jsbroker msgs/s | ratio | nats-server CPU µs/msg | jsbroker CPU µs/msg | CPU ratio |\n"
        "|---|---:|---:|---:|---:|---:|---:|"
    )
    rows = []
    for r in results:
        ns, js = r.median_rate(NATS_SERVER), r.median_rate(JSBROKER)
        nc, jc = r.median_cpu(NATS_SERVER), r.median_cpu(JSBROKER)
        rows.append(f"| {r.workload} | {ns:,.0f} | {js:,.0f} | {_ratio(js, ns)} | {nc:.2f} | {jc:.2f} | {_ratio(jc, nc)} |")
    return "\n".join([head, *rows])


def run_async(coro: Coroutine[Any, Any, None]) -> None:
    """Run a benchmark client's coroutine, on uvloop when installed (it helps latency-bound clients)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


# A workload: (name, run(server, n) -> Sample, n messages at full size).
Workload = tuple[str, Callable[[ServerHandle, int], Sample], int]


def timed(fn: Callable[[str, int], tuple[int, float]]) -> Callable[[ServerHandle, int], Sample]:
    """Wrap a client-side run(url, n) -> (msgs, seconds) so the server's CPU time is measured around it."""

    def run(handle: ServerHandle, n: int) -> Sample:
        before = cpu_seconds(handle.pid)
        msgs, seconds = fn(handle.url, n)
        return Sample(msgs, seconds, cpu_seconds(handle.pid) - before)

    return run


def main(doc: str | None, workloads: list[Workload], start: Callable[[], dict[str, ServerHandle]],
         quick_n: Callable[[int], int] = lambda n: max(n // 5, 500)) -> None:
    """The command line every bench script shares: both servers in one run, alternating who goes first,
    medians per server, then the Markdown table with ratios."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer messages, one repetition")
    ap.add_argument("--reps", type=int, help="repetitions per server (default 3, quick 1)")
    ap.add_argument("--only", help="run only workloads whose name contains this text")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 3)
    servers = start()
    results: list[Result] = []
    try:
        for name, fn, n in workloads:
            if args.only and args.only not in name:
                continue
            n = quick_n(n) if args.quick else n
            result = Result(name)
            for rep in range(reps):
                for kind in KINDS if rep % 2 == 0 else KINDS[::-1]:
                    try:
                        s = fn(servers[kind], n)
                    except RepFailed as e:
                        print(f"{name:42s} {kind:12s} failed: {e}", flush=True)
                        continue
                    result.samples[kind].append(s)
                    client = f"  (client {s.client_cpu / s.msgs * 1e6:.1f} µs CPU/msg)" if s.client_cpu else ""
                    print(f"{name:42s} {kind:12s} {s.rate:10,.0f} msgs/s  {s.cpu_per_msg_us:7.2f} µs CPU/msg{client}",
                          flush=True)
            results.append(result)
    finally:
        for handle in servers.values():
            handle.close()
    print()
    print(table(results))


def fill_stream(url: str, name: str, n: int, size: int = 128) -> None:
    """Store n messages on `<name>.x` fast (tests.servers.fill_stream: acked windows of raw PUBs)."""
    acked_fill(int(url.rsplit(":", 1)[1]), f"{name}.x", n, size)


def raw_session(url: str, subscribe: str) -> socket.socket:
    """A raw NATS connection (headers on, no echo of +OK) subscribed to `subscribe` as sid 1, ready to publish:
    the server-bound publishers drive the protocol themselves so the client costs nothing."""
    s = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while b"\r\n" not in s.recv(4096):
        pass
    s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nSUB %s 1\r\nPING\r\n' % subscribe.encode())
    buf = b""
    while b"PONG\r\n" not in buf:
        buf += s.recv(4096)
    return s


class ByteCounter:
    """A raw subscriber's reader: counts what `sock` receives, in a thread, until `expected` bytes came or the
    server closed it (the fan-out benches compare the count with what was sent)."""

    def __init__(self, sock: socket.socket, expected: int) -> None:
        self.sock, self.expected, self.got = sock, expected, 0
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._count, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _count(self) -> None:
        buf = bytearray(1 << 20)  # recv_into one buffer: no allocation per read (20 readers share one GIL)
        while self.got < self.expected:
            got = self.sock.recv_into(buf)
            if not got:
                break
            self.got += got
        self.done.set()
