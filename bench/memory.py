"""Memory benchmark: a server's RSS against the data it stores and serves, jsbroker vs nats-server in one run.

Per server: one file stream filled in STEPS steps to N messages of SIZE bytes over 100 subjects (raw acked
PUBs), RSS after each step (the MB per million messages stored is the slope of the line through them);
then C durable pull consumers each fetch ROUNDS batches of BATCH messages, all at once, each from its own
place in the stream (nats-py, one connection each): the peak RSS meanwhile (sampled every 20 ms); then a
restart (SIGTERM) and the RSS once the stream is recovered. Then, on a fresh server, STALLED raw
connections that each ask a durable for all of a stream of 120 x 1 MB messages and never read: the peak RSS
(nats-server buffers every requested message; jsbroker stops a delivery pass while its receiver is backed
up). broker/README.md, "Memory", states the budget these numbers check.

    python3 bench/memory.py                           # 400,000 x 1 KB, 50 consumers x 4 fetches of 100
    python3 bench/memory.py --quick                   # 100,000 x 1 KB
    python3 bench/memory.py -n 4000 --size 65536      # large messages: 256 MB, fetches of 100 x 64 KB
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path

import nats
from common import KINDS, rss_mb
from tests.servers import ServerHandle, fill_stream, launch, stalled_fetch

STREAM = "MEM"
STEPS = 4
SUBJECTS = 100
STALLED = 4


def _create(url: str) -> None:
    async def create() -> None:
        nc = await nats.connect(url)
        await nc.jetstream().add_stream(name=STREAM, subjects=[f"{STREAM}.>"])
        await nc.close()

    asyncio.run(create())


class PeakRss:
    """The highest RSS of `pid` while the context lasts (sampled in a thread)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.02)  # sampling period

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _fetch_all(url: str, consumers: int, rounds: int, batch: int, n: int) -> int:
    """Each consumer starts at its own place (C * n / consumers) and fetches `rounds` batches, acking each."""

    async def one(c: int) -> int:
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=60)
        got = 0
        try:
            sub = await js.pull_subscribe_bind(f"C{c}", STREAM)
            for _ in range(rounds):
                msgs = await sub.fetch(batch, timeout=60)
                got += len(msgs)
                await msgs[-1].ack_sync(timeout=60)  # explicit ack of the last only: the rest stay pending, as a slow app's
        finally:
            await nc.close()
        return got

    async def run() -> int:
        nc = await nats.connect(url)
        js = nc.jetstream()
        for c in range(consumers):  # spread over the stream: their reads hit different blocks
            await js.add_consumer(STREAM, durable_name=f"C{c}", ack_policy="explicit", max_ack_pending=-1,
                                  deliver_policy="by_start_sequence", opt_start_seq=1 + c * n // consumers)
        await nc.close()
        return sum(await asyncio.gather(*(one(c) for c in range(consumers))))

    return asyncio.run(run())


def measure(kind: str, n: int, size: int, consumers: int, rounds: int, batch: int, store: Path) -> dict[str, float]:
    handle: ServerHandle = launch(kind, store_dir=store)
    try:
        _create(handle.url)
        out = {"empty MB": rss_mb(handle.pid)}
        per_step = n // STEPS
        for step in range(1, STEPS + 1):
            fill_stream(handle.port, f"{STREAM}.s", per_step, size=size, window=max(1, min(5000, (8 << 20) // size)),
                        subjects=SUBJECTS)
            out[f"{step * per_step:,} stored MB"] = rss_mb(handle.pid)
        with PeakRss(handle.pid) as peak:
            got = _fetch_all(handle.url, consumers, rounds, batch, n)
        out["fetch peak MB"] = peak.peak
        out["after fetch MB"] = rss_mb(handle.pid)
        out["delivered"] = got
        handle.stop()
        handle.restart()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # recovered when STREAM.INFO answers
            try:
                asyncio.run(_info(handle.url))
                break
            except Exception:  # still recovering
                time.sleep(0.1)  # poll interval
        out["restarted MB"] = rss_mb(handle.pid)
        return out
    finally:
        handle.close()


def measure_stalled(kind: str, store: Path) -> dict[str, float]:
    handle = launch(kind, store_dir=store)
    try:
        _create(handle.url)

        async def consumers() -> None:
            nc = await nats.connect(handle.url)
            for c in range(STALLED):
                await nc.jetstream().add_consumer(STREAM, durable_name=f"C{c}", ack_policy="explicit",
                                                  max_ack_pending=-1)
            await nc.close()

        asyncio.run(consumers())
        fill_stream(handle.port, f"{STREAM}.big", 120, size=1000 * 1000, window=8)
        out = {"stalled: 120 x 1 MB stored MB": rss_mb(handle.pid)}
        socks = []
        with PeakRss(handle.pid) as peak:
            for c in range(STALLED):
                socks.append(stalled_fetch(handle.port, STREAM, f"C{c}"))
                time.sleep(2)  # let the server deliver what it will
        out[f"stalled: {STALLED} fetches peak MB"] = peak.peak
        for sock in socks:
            sock.close()
        return out
    finally:
        handle.close()


async def _info(url: str) -> None:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.jetstream(timeout=5).stream_info(STREAM)
    finally:
        await nc.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, help="messages stored (default 400,000; quick 100,000)")
    ap.add_argument("--size", type=int, default=1024, help="message size in bytes (default 1024)")
    ap.add_argument("--consumers", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=4, help="fetches per consumer")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = args.n or (100_000 if args.quick else 400_000)
    rows: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        with tempfile.TemporaryDirectory(prefix=f"memory-{kind}-") as store:
            rows[kind] = measure(kind, n, args.size, args.consumers, args.rounds, args.batch, Path(store) / "a")
            rows[kind].update(measure_stalled(kind, Path(store) / "b"))
            print(kind, rows[kind], flush=True)
    ns, js = (rows[k] for k in KINDS)
    print(f"\n{n:,} messages of {args.size} B ({n * args.size / 1e6:,.0f} MB stored); {args.consumers} consumers x "
          f"{args.rounds} fetches of {args.batch}\n")
    print(f"| RSS | {KINDS[0]} | {KINDS[1]} | ratio |\n|---|---:|---:|---:|")
    for key in ns:
        print(f"| {key} | {ns[key]:,.1f} | {js[key]:,.1f} | {js[key] / ns[key] if ns[key] else 0:.2f}x |")
    for kind, row in rows.items():
        stored = [v for k, v in row.items() if k.endswith(" stored MB") and not k.startswith("stalled")]
        slope = (stored[-1] - stored[0]) / (n - n // STEPS) * 1e6
        print(f"{kind}: {slope:,.1f} MB RSS per million messages stored ({slope:.0f} bytes per message)")


if __name__ == "__main__":
    main()
