"""Crash campaign: many SIGKILL/restart rounds of jsbroker under load, checking jsbroker's durability
promise after each one (tests/jetstream/test_crash_publish.py runs a few rounds in the suite; this runs
as many as you ask for, 50 by default).

Two child processes work against one file stream while the broker is killed at random moments:
- a publisher (js.publish with a unique Nats-Msg-Id, retried across the crash) logs each acknowledged
  (seq, payload);
- a consumer pulls from a durable and acknowledges each message with ack_sync, logging each confirmed seq.
After each restart: every acknowledged message is present and intact, and the durable's ack floor is at
least the highest contiguously confirmed ack (a confirmed ack is never lost). The table reports rounds,
messages checked, restart times and failures (which must be 0).

    python3 bench/crash_campaign.py                  # 50 rounds, sync every 2m (the default)
    python3 bench/crash_campaign.py --rounds 10 --sync always
    python3 bench/crash_campaign.py --server nats-server     # the same campaign against nats-server
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (puts the repository on sys.path)
import nats

from tests.jetstream.test_crash_publish import PUBLISHER, acked, check_all, wait_for_progress
from tests.servers import JSBROKER, KINDS, launch

STREAM = "CAMPAIGN"

CONSUMER = r"""
import asyncio, sys
import nats

async def main(url, stream, out_path):
    out = open(out_path, "a", buffering=1)
    async def quiet(exc):
        pass
    nc = await nats.connect(url, reconnect_time_wait=0.05, max_reconnect_attempts=-1, connect_timeout=1, error_cb=quiet)
    js = nc.jetstream()
    sub = None
    while True:
        try:
            if sub is None:
                sub = await js.pull_subscribe_bind("WORKER", stream)
            for msg in await sub.fetch(20, timeout=1):
                await msg.ack_sync(timeout=1)
                out.write(f"{msg.metadata.sequence.stream}\n")
        except Exception:
            await asyncio.sleep(0.02)

asyncio.run(main(*sys.argv[1:]))
"""


def confirmed_floor(path: Path) -> int:
    """The highest n such that stream sequences 1..n were all confirmed by ack_sync."""
    seqs = {int(line) for line in path.read_text().split()}
    n = 0
    while n + 1 in seqs:
        n += 1
    return n


async def _setup(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=[f"{STREAM}.>"], storage="file")
    await js.add_consumer(STREAM, durable_name="WORKER", ack_policy="explicit", ack_wait=2, max_ack_pending=200)
    await nc.close()


async def _ack_floor(url: str) -> int:
    nc = await nats.connect(url)
    try:
        return int((await nc.jetstream().consumer_info(STREAM, "WORKER")).ack_floor.stream_seq)
    finally:
        await nc.close()


def campaign(kind: str, rounds: int, sync: str, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    failures: list[str] = []
    restarts: list[float] = []
    with tempfile.TemporaryDirectory(prefix="crash-campaign-") as tmp:
        folder = Path(tmp)
        if kind == JSBROKER:
            config = folder / "broker.toml"
            config.write_text(f'[jetstream]\nsync = "{sync}"\n')
        else:  # nats-server's own config syntax
            config = folder / "server.conf"
            config.write_text(f'jetstream {{ sync_interval: "{sync}" }}\n')
        broker = launch(kind, store_dir=folder / "store", extra_args=["-c", str(config)])
        published, consumed = folder / "published.txt", folder / "consumed.txt"
        published.touch()
        consumed.touch()
        asyncio.run(_setup(broker.url))
        children = [subprocess.Popen([sys.executable, "-c", code, broker.url, STREAM, str(path)])
                    for code, path in ((PUBLISHER, published), (CONSUMER, consumed))]
        checked: set[int] = set()
        try:
            for n in range(rounds):
                wait_for_progress(published, len(acked(published)) + rng.randint(1, 400), timeout=120)
                broker.kill()
                floor_before = confirmed_floor(consumed)
                start = time.monotonic()
                broker.start()
                restarts.append(time.monotonic() - start)
                records = acked(published)
                fresh = {seq: payload for seq, payload in records.items() if seq not in checked}
                try:
                    asyncio.run(check_all(broker.url, STREAM, fresh))
                except AssertionError as exc:
                    failures.append(f"round {n + 1}: {exc}")
                checked.update(fresh)
                floor = asyncio.run(_ack_floor(broker.url))
                if floor < floor_before:
                    failures.append(f"round {n + 1}: ack floor {floor} < confirmed {floor_before}")
            final = acked(published)
            asyncio.run(check_all(broker.url, STREAM, final))
            confirmed = len(set(consumed.read_text().split()))
        finally:
            for child in children:
                child.kill()
                child.wait(timeout=10)
            broker.close()
    return {"server": kind, "rounds": rounds, "sync": sync, "messages acknowledged": len(final),
            "acks confirmed": confirmed,
            "restart median s": round(statistics.median(restarts), 2), "restart max s": round(max(restarts), 2),
            "failures": len(failures), "failure details": failures[:5]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--sync", default="2m", help='"always" or an interval such as "2m" (the default)')
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--server", choices=KINDS, default=JSBROKER, help="run it against nats-server to compare")
    args = parser.parse_args()
    result = campaign(args.server, args.rounds, args.sync, args.seed)
    print("\n| " + " | ".join(result) + " |")
    print("|" + "---|" * len(result))
    print("| " + " | ".join(str(v) for v in result.values()) + " |")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
