"""Start-up and restart benchmark: jsbroker vs nats-server in one run, alternating, medians and ratios.

1. Start-up of an empty server, as the chart's pod runs it (JetStream on, an empty store dir), with the
   monitoring port off and on: exec -> the INFO line as a client reads it, exec -> /healthz answering 200,
   and the server's CPU time until then (it is killed at once and reaped: rusage, exact where wall-clock
   time on a shared machine is not).
2. Restart of a server holding one file stream of N 128-byte messages over 1,000 subjects with one durable,
   monitoring on, each timed from exec to INFO, to /healthz 200 and to "stream ready" (STREAM.INFO
   answers with every message: the store is recovered), with the server's CPU time by then (/proc, in
   10 ms ticks):
   each repetition:
   - kill -9 right after the fill: a crash before any checkpoint (jsbroker reads each closed block's
     index, written when it closed, and scans the active block), started on a copy of that store;
   - SIGTERM (time until the process has exited: flush, close, index snapshot), start;
   - N/100 more messages, kill -9 (a crash with writes after the last checkpoint), start.
   RSS with the stream empty, full, and after the restarts.

    python3 bench/restart.py                 # 300,000 messages, 7 start-ups and 5 restarts per server
    python3 bench/restart.py --quick         # 50,000 messages, 3 and 2
    python3 bench/restart.py -n 1000000 --reps 3 --only restart

nats-server is the one installed next to this interpreter (tests/servers.py), jsbroker this checkout's
`python -m jsbroker` with its bytecode cached, as the image has it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from common import KINDS, cpu_seconds, rss_mb
from tests.servers import JSBROKER, NATS_SERVER, ServerHandle, fill_stream, free_port, launch, read_info

STREAM = "RESTART"
TIMEOUT = 600.0  # seconds a start may take before the benchmark gives up


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):  # not listening yet, or 503 while starting
        return False


def _info(port: int) -> bool:
    try:
        read_info(port, timeout=1.0)
        return True
    except OSError:
        return False


def _stream_messages(url: str) -> int:
    """STREAM.INFO's message count; -1 while the server cannot answer it."""
    import nats

    async def ask() -> int:
        try:
            nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2)
        except Exception:
            return -1
        try:
            return int((await nc.jetstream(timeout=5).stream_info(STREAM)).state.messages)
        except Exception:  # JetStream still recovering
            return -1
        finally:
            await nc.close()

    return asyncio.run(ask())


def _timed_start(handle: ServerHandle, stream_messages: int | None = None) -> dict[str, float]:
    """Start the server; seconds from exec until INFO, /healthz 200 (with monitoring) and, given
    `stream_messages`, until STREAM.INFO reports that many."""
    start = time.monotonic()
    proc = handle.spawn()
    waiting = {"INFO": lambda: _info(handle.port)}
    if handle.http_url is not None:
        waiting["/healthz"] = lambda: _healthy(handle.http_url or "")
    if stream_messages is not None:
        waiting["stream ready"] = lambda: _stream_messages(handle.url) == stream_messages
    out: dict[str, float] = {}
    while waiting:
        for what, ready in list(waiting.items()):
            if (what == "stream ready" and "INFO" in waiting) or not ready():
                continue
            out[what] = time.monotonic() - start
            del waiting[what]
        if proc.poll() is not None:
            raise RuntimeError(f"{handle.kind} exited with {proc.returncode}:\n{handle.log_tail()}")
        if time.monotonic() - start > TIMEOUT:
            raise TimeoutError(f"{handle.kind}: {sorted(waiting)} not ready after {TIMEOUT:.0f} s")
        time.sleep(0.001)  # poll interval
    return out


def _start_once(handle: ServerHandle) -> dict[str, float]:
    """Start, time it, SIGKILL and reap at once: also the CPU seconds it used (rusage of this process's
    children, of which it is the only one then)."""
    try:
        out = _timed_start(handle)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        handle.kill()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out["CPU"] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        return out
    finally:
        handle.close()


def startup(kind: str, monitoring: bool) -> dict[str, float]:
    """One start of an empty server: exec -> INFO (and /healthz), and its CPU seconds until then."""
    with tempfile.TemporaryDirectory(prefix=f"startup-{kind}-") as store:
        return _start_once(ServerHandle(kind=kind, port=free_port(), store_dir=Path(store),
                                        http_port=free_port() if monitoring else None))


# The floor for any Python server: this interpreter, asyncio on uvloop, a listener that sends one line.
BARE_LISTENER = """
import asyncio, sys, uvloop
async def main():
    def hello(reader, writer):
        writer.write(b"INFO {} \\r\\n")
    await asyncio.start_server(hello, "127.0.0.1", int(sys.argv[1]))
    await asyncio.Event().wait()
uvloop.run(main())
"""


def bare_listener() -> dict[str, float]:
    """exec -> INFO and CPU seconds of BARE_LISTENER (the same as a server's start-up, without the server)."""
    handle = ServerHandle(kind=JSBROKER, port=free_port(), store_dir=None)
    handle.command = lambda: [sys.executable, "-c", BARE_LISTENER, str(handle.port)]  # type: ignore[method-assign]
    return _start_once(handle)


def _create(url: str) -> None:
    import nats

    async def create() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name=STREAM, subjects=[f"{STREAM}.>"])
        await js.add_consumer(STREAM, durable_name="D", ack_policy="explicit")
        await nc.close()

    asyncio.run(create())


class Restarts:
    """One server with the full stream, restarted again and again."""

    def __init__(self, kind: str, n: int, store: Path) -> None:
        self.handle = launch(kind, store_dir=store / "live", http=True)
        self.n = self.filled = n
        _create(self.handle.url)
        self.rss = {"RSS with the stream empty MB": rss_mb(self.handle.pid)}
        fill_stream(self.handle.port, f"{STREAM}.s", n, subjects=1000)
        self.rss["RSS with the messages stored MB"] = rss_mb(self.handle.pid)
        self.handle.kill()
        self.crashed = store / "crashed"  # the store as the kill -9 right after the fill left it
        shutil.copytree(store / "live", self.crashed)

    def crash_after_fill(self) -> dict[str, float]:
        """Start on a copy of the store as the kill -9 right after the fill left it."""
        self.handle.kill()
        assert self.handle.store_dir is not None
        shutil.rmtree(self.handle.store_dir)
        shutil.copytree(self.crashed, self.handle.store_dir)
        self.n = self.filled
        out = _timed_start(self.handle, self.n)
        out["CPU"] = cpu_seconds(self.handle.pid)
        return out

    def sigterm(self) -> dict[str, float]:
        proc = self.handle.proc
        assert proc is not None
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        stopped = time.monotonic() - start
        out = _timed_start(self.handle, self.n)
        out["CPU"] = cpu_seconds(self.handle.pid)
        out["stop"] = stopped
        self.rss["RSS after a SIGTERM restart MB"] = rss_mb(self.handle.pid)
        return out

    def crash(self) -> dict[str, float]:
        more = max(self.n // 100, 1)
        fill_stream(self.handle.port, f"{STREAM}.s", more, subjects=1000)
        self.n += more
        self.handle.kill()
        out = _timed_start(self.handle, self.n)
        out["CPU"] = cpu_seconds(self.handle.pid)
        self.rss["RSS after a kill -9 restart MB"] = rss_mb(self.handle.pid)
        return out


def _order(rep: int) -> tuple[str, ...]:
    return KINDS if rep % 2 == 0 else KINDS[::-1]


ORDER = ("INFO", "/healthz", "stream ready", "stop", "CPU")


def _collect(rows: dict[str, dict[str, list[float]]], label: str, kind: str, sample: dict[str, float]) -> None:
    for what, value in sorted(sample.items(), key=lambda item: ORDER.index(item[0])):
        rows.setdefault(f"{label}: {what}", {k: [] for k in KINDS})[kind].append(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50,000 messages, fewer repetitions")
    parser.add_argument("-n", type=int, help="messages in the stream (default 300,000)")
    parser.add_argument("--reps", type=int, help="restarts per server (default 5; start-ups: reps + 2)")
    parser.add_argument("--only", choices=("startup", "restart"), help="run one of the two parts")
    args = parser.parse_args()
    n = args.n or (50_000 if args.quick else 300_000)
    reps = args.reps or (2 if args.quick else 5)
    rows: dict[str, dict[str, list[float]]] = {}
    floor: list[dict[str, float]] = []
    if args.only != "restart":
        for rep in range(reps + 2):
            for kind in _order(rep):
                for monitoring in (False, True):
                    _collect(rows, f"empty start, monitoring {'on' if monitoring else 'off'}", kind,
                             startup(kind, monitoring))
            floor.append(bare_listener())
    if args.only != "startup":
        with tempfile.TemporaryDirectory(prefix="restart-") as root:
            servers = {kind: Restarts(kind, n, Path(root) / kind) for kind in KINDS}
            try:
                for rep in range(reps):
                    for kind in _order(rep):
                        _collect(rows, "kill -9 right after the fill", kind, servers[kind].crash_after_fill())
                        _collect(rows, "SIGTERM, restart", kind, servers[kind].sigterm())
                        _collect(rows, f"{n // 100:,} more, kill -9, restart", kind, servers[kind].crash())
                for kind in KINDS:
                    for what, value in servers[kind].rss.items():
                        rows.setdefault(what, {k: [] for k in KINDS})[kind].append(value)
            finally:
                for server in servers.values():
                    server.handle.close()
    load = os.getloadavg()
    print(f"\nmedians (seconds, MB); stream: {n:,} x 128 B over 1,000 subjects, one durable; "
          f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs\n")
    print(f"| | {JSBROKER} | {NATS_SERVER} | ratio | samples |")
    print("|---|---:|---:|---:|---:|")
    for what, samples in rows.items():
        jsb, ref = (statistics.median(samples[k]) for k in (JSBROKER, NATS_SERVER))
        print(f"| {what} | {jsb:.3f} | {ref:.3f} | {jsb / max(ref, 1e-3):.1f}x | {len(samples[JSBROKER])} |")
    if floor:
        print(f"\nThe floor, a bare asyncio listener on uvloop in this interpreter: INFO after "
              f"{statistics.median(f['INFO'] for f in floor):.3f} s, CPU {statistics.median(f['CPU'] for f in floor):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
