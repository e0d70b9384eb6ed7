"""Restart benchmark: how long a broker with a full file stream takes to stop and to come back, jsbroker
vs nats-server in one run.

Each server gets one file stream with one durable consumer, filled with N 128-byte messages over 1,000
subjects (acked raw PUBs, not timed); its RSS before and after is the memory per stored message. Then, each
restart timed to the client port answering INFO and to STREAM.INFO reporting every message (the store
recovered):
- SIGKILL right after the fill: a crash before any checkpoint (jsbroker reads each closed block's index,
  written when it closed, and scans the active block);
- SIGTERM: time until the process has exited (the graceful stop: flush, close, index snapshot), restart;
- N/10 more messages, SIGKILL: a crash with what came after the last snapshot (jsbroker's usual case:
  it checkpoints every sync interval, 2 minutes by default, and replays only what was appended since).

    python3 bench/restart.py            # 1,000,000 messages
    python3 bench/restart.py --quick    # 200,000 messages
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import KINDS, rss_mb
from tests.servers import JSBROKER, NATS_SERVER, ServerHandle, fill_stream, launch, read_info

STREAM = "RESTART"


def _stream_ready(url: str, n: int, timeout: float = 600) -> None:
    """Until STREAM.INFO answers with all n messages (JetStream has recovered the store)."""
    import nats

    async def poll() -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2)
                try:
                    if (await nc.jetstream(timeout=5).stream_info(STREAM)).state.messages == n:
                        return
                finally:
                    await nc.close()
            except Exception:  # not up yet, or JetStream still recovering
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.01)  # poll interval

    asyncio.run(poll())


def _create(url: str) -> None:
    import nats

    async def create() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name=STREAM, subjects=[f"{STREAM}.>"])
        await js.add_consumer(STREAM, durable_name="D", ack_policy="explicit")
        await nc.close()

    asyncio.run(create())


def _restart(handle: ServerHandle, n: int) -> tuple[float, float]:
    """Start the server again; seconds until INFO, and until the stream answers with n messages."""
    start = time.monotonic()
    with open(handle.log_path, "ab") as log:
        handle.proc = subprocess.Popen(handle.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    while True:
        try:
            read_info(handle.port, timeout=1.0)
            break
        except OSError:
            time.sleep(0.005)  # poll interval
    listening = time.monotonic() - start
    _stream_ready(handle.url, n)
    return listening, time.monotonic() - start


def measure(kind: str, n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"restart-{kind}-") as store:
        handle = launch(kind, store_dir=Path(store))
        try:
            _create(handle.url)
            empty = rss_mb(handle.pid)
            fill_stream(handle.port, f"{STREAM}.s", n, subjects=1000)
            full = rss_mb(handle.pid)
            out: dict[str, float] = {
                "RSS with the stream empty MB": empty,
                "RSS with the messages stored MB": full,
                "RSS per million stored messages MB": (full - empty) * 1e6 / n,
            }
            handle.kill()
            out["kill -9, no checkpoint: listening"], out["kill -9, no checkpoint: stream ready"] = _restart(handle, n)
            assert handle.proc is not None
            start = time.monotonic()
            handle.proc.send_signal(signal.SIGTERM)
            handle.proc.wait(timeout=120)
            out["stop after SIGTERM"] = time.monotonic() - start
            out["restart: listening"], out["restart: stream ready"] = _restart(handle, n)
            out["RSS after restart MB"] = rss_mb(handle.pid)
            more = n // 10
            fill_stream(handle.port, f"{STREAM}.s", more, subjects=1000)
            handle.kill()
            out["kill -9, N/10 since: listening"], out["kill -9, N/10 since: stream ready"] = _restart(handle, n + more)
            out["RSS after kill -9 restart MB"] = rss_mb(handle.pid)
            return out
        finally:
            handle.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200,000 messages instead of 1,000,000")
    parser.add_argument("-n", type=int, help="messages in the stream")
    args = parser.parse_args()
    n = args.n or (200_000 if args.quick else 1_000_000)
    results = {kind: measure(kind, n) for kind in KINDS}
    jsb, ref = results[JSBROKER], results[NATS_SERVER]
    print(f"\n{n:,} x 128 B over 1,000 subjects in one file stream with one durable (seconds, MB)\n")
    print(f"| | {JSBROKER} | {NATS_SERVER} | ratio |")
    print("|---|---:|---:|---:|")
    for key in jsb:
        print(f"| {key} | {jsb[key]:.2f} | {ref[key]:.2f} | {jsb[key] / max(ref[key], 1e-3):.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
