"""Soak: jsbroker under a steady mixed load for a long time (30 minutes by default), watching for leaks
and lost messages. The same load runs against nats-server alongside for reference.

The load, per server: one nats-py process publishes with acks to a limits stream (max_msgs 200,000, so
old messages age out), with payloads cycling through 128 B / 1 KB / 16 KB; a pull consumer fetches and
acks everything; core request/reply runs alongside. Every 10 s the server's RSS and open file descriptors
are sampled. At the end: messages published / consumed (every published sequence consumed exactly once),
request/reply round trips, the RSS and inbound message rate over time (a table of ten rows: whether the RSS
follows the load or grows on its own), the RSS after warm-up (a third of the way in: the stream has been full of its
200,000 messages for a while by then, even on a slow machine), at the peak and at the end (and the end's
change against warm-up: flat means within 10 %), the range of open fds, and the server's slow-consumer count.

    python3 bench/soak.py                  # 30 minutes
    python3 bench/soak.py --minutes 2      # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
import urllib.request

from common import rss_mb  # (common also puts the repository on sys.path)
import nats

from tests.servers import JSBROKER, KINDS, ServerHandle, launch

STREAM = "SOAK"
SIZES = (128, 1024, 16 * 1024)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _load(url: str, seconds: float) -> dict[str, int]:
    nc = await nats.connect(url, max_reconnect_attempts=0)
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=[f"{STREAM}.>"], max_msgs=200_000)
    sub = await js.pull_subscribe(f"{STREAM}.>", durable="SOAKER", stream=STREAM)

    async def echo(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe("soak.echo", cb=echo)
    deadline = time.monotonic() + seconds
    published: list[int] = []
    consumed: list[int] = []
    requests = 0
    timeouts = {"publish": 0, "request": 0}

    async def publish() -> None:
        i = 0
        while time.monotonic() < deadline:
            payload = bytes(SIZES[i % len(SIZES)])
            while True:  # a timed-out publish is retried under the same msg id: stored once either way
                try:
                    ack = await js.publish(f"{STREAM}.m", payload, headers={"Nats-Msg-Id": f"m{i}"})
                    break
                except asyncio.TimeoutError:  # nats-py's TimeoutError is one too
                    timeouts["publish"] += 1
            published.append(ack.seq)
            i += 1

    async def consume() -> None:
        while time.monotonic() < deadline + 5 or len(consumed) < len(published):
            try:
                for msg in await sub.fetch(200, timeout=1):
                    consumed.append(msg.metadata.sequence.stream)
                    await msg.ack()
            except asyncio.TimeoutError:
                if time.monotonic() > deadline + 30:
                    break

    async def request() -> None:
        nonlocal requests
        while time.monotonic() < deadline:
            try:
                assert (await nc.request("soak.echo", b"ping", timeout=5)).data == b"ping"
                requests += 1
            except asyncio.TimeoutError:
                timeouts["request"] += 1

    await asyncio.gather(publish(), consume(), request())
    await nc.close()
    return {"published": len(published), "consumed": len(consumed),
            "consumed once, in order": int(consumed == sorted(set(consumed)) and set(consumed) == set(published)),
            "request/reply": requests, "timeouts (publish, request)": f"{timeouts['publish']}, {timeouts['request']}"}


def _run(url: str, seconds: float, out: mp.Queue) -> None:
    try:
        out.put(asyncio.run(_load(url, seconds)))
    except Exception as exc:  # reported in the table rather than lost with the child
        out.put({"error": repr(exc)})


def _varz(handle: ServerHandle) -> dict[str, object]:
    with urllib.request.urlopen(f"{handle.http_url}/varz", timeout=5) as response:
        varz: dict[str, object] = json.loads(response.read())
        return varz


def _series(samples: dict[str, list[tuple[float, float, int]]], rows: int = 10) -> list[str]:
    """RSS and inbound message rate over time, `rows` rows: is the RSS flat, or does it follow the load?"""
    head = "| minute | " + " | ".join(f"{kind} RSS MB | {kind} msgs in/s" for kind in KINDS) + " |"
    lines = [head, "|---:|" + "---:|---:|" * len(KINDS)]
    n = min(len(v) for v in samples.values())
    for k in sorted({min(n - 1, max(1, round(n * r / rows))) for r in range(1, rows + 1)}):
        cells = []
        for kind in KINDS:
            (t0, _, m0), (t1, mb, m1) = samples[kind][k - 1], samples[kind][k]
            cells.append(f"{mb:.0f} | {(m1 - m0) / max(t1 - t0, 1e-9):.0f}")
        lines.append(f"| {samples[KINDS[0]][k][0] / 60:.1f} | " + " | ".join(cells) + " |")
    return lines


def soak(minutes: float) -> tuple[dict[str, dict[str, object]], list[str]]:
    seconds = minutes * 60
    handles = {kind: launch(kind, http=True) for kind in KINDS}
    try:
        queues = {kind: mp.Queue() for kind in KINDS}
        procs = {kind: mp.Process(target=_run, args=(h.url, seconds, queues[kind])) for kind, h in handles.items()}
        for proc in procs.values():
            proc.start()
        fds: dict[str, list[int]] = {kind: [] for kind in KINDS}
        timeline: dict[str, list[tuple[float, float, int]]] = {kind: [] for kind in KINDS}  # (s, RSS MB, in_msgs)
        started = time.monotonic()
        while any(p.is_alive() for p in procs.values()):
            for kind, handle in handles.items():
                fds[kind].append(_fds(handle.pid))
                in_msgs = int(_varz(handle).get("in_msgs", 0))  # type: ignore[call-overload]
                timeline[kind].append((time.monotonic() - started, rss_mb(handle.pid), in_msgs))
            time.sleep(10)  # the sampling interval
        results = {}
        for kind, handle in handles.items():
            load = queues[kind].get(timeout=60)
            samples = [mb for _, mb, _ in timeline[kind]]
            warm = samples[len(samples) // 3]
            results[kind] = {**load, "RSS after warm-up MB": round(warm), "RSS peak MB": round(max(samples)),
                             "RSS end MB": round(samples[-1]),
                             "RSS end vs warm-up": f"{(samples[-1] - warm) / warm:+.0%}",
                             "open fds min-max": f"{min(fds[kind])}-{max(fds[kind])}",
                             "slow consumers": _varz(handle).get("slow_consumers", 0)}
        return results, _series(timeline)
    finally:
        for handle in handles.values():
            handle.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    args = parser.parse_args()
    results, series = soak(args.minutes)
    keys = list(dict.fromkeys(k for kind in KINDS for k in results[kind]))
    print(f"\nsoak, {args.minutes:g} min\n")
    print("| | " + " | ".join(KINDS) + " |")
    print("|---|" + "---:|" * len(KINDS))
    for key in keys:
        print(f"| {key} | " + " | ".join(str(results[kind].get(key, "-")) for kind in KINDS) + " |")
    print("\n" + "\n".join(series))
    ours = results[JSBROKER]
    return 0 if ours.get("consumed once, in order") and ours["slow consumers"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
