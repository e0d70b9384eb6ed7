"""Sourcing benchmark: messages/s from two origins into one aggregate (the server's own links, or 2.14's
durable sourcing through a flow-control consumer on each origin), and into a mirror, jsbroker vs
nats-server in one run (alternating), 128-byte messages, file storage.

Each run fills two fresh origin streams with N/2 messages each (acked raw PUBs, not timed), then creates
the aggregate (`sources` = both origins) or a mirror of one origin holding N messages, and is timed until
STREAM.INFO reports every message copied. The server's CPU is read around that catch-up only.

    python3 bench/sourcing.py            # 200,000 messages, 3 repetitions
    python3 bench/sourcing.py --quick    # 40,000 messages, one repetition
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time

from common import KINDS, Sample, Workload, cpu_seconds, fill_stream, main
from tests.servers import ServerHandle, launch

_names = itertools.count()


async def _request(nc: object, subject: str, body: dict[str, object] | None = None) -> dict[str, object]:
    msg = await nc.request(subject, json.dumps(body).encode() if body else b"", timeout=10)  # type: ignore[attr-defined]
    return json.loads(msg.data)  # type: ignore[no-any-return]


def _catch_up(handle: ServerHandle, n: int, mirror: bool, durable: bool = False) -> Sample:
    import nats

    run = next(_names)
    origins = [f"O{run}a"] if mirror else [f"O{run}a", f"O{run}b"]

    async def setup() -> None:
        nc = await nats.connect(handle.url)
        for origin in origins:
            await _request(nc, f"$JS.API.STREAM.CREATE.{origin}", {"name": origin, "subjects": [f"{origin}.>"]})
            if durable:  # the consumer durable sourcing reads through (created before the messages: not timed)
                await _request(nc, f"$JS.API.CONSUMER.CREATE.{origin}.C", {"stream_name": origin, "config": {
                    "durable_name": "C", "deliver_subject": f"dlv.{origin}", "ack_policy": "flow_control",
                    "flow_control": True, "idle_heartbeat": 1_000_000_000}})
        await nc.close()

    asyncio.run(setup())
    for origin in origins:
        fill_stream(handle.url, origin, n // len(origins))

    async def timed() -> tuple[float, float]:
        nc = await nats.connect(handle.url)
        name = f"AGG{run}"
        sources: list[dict[str, object]] = [
            {"name": o, "consumer": {"name": "C", "deliver_subject": f"dlv.{o}"}} if durable else {"name": o}
            for o in origins]
        cfg: dict[str, object] = ({"name": name, "mirror": {"name": origins[0]}} if mirror
                                  else {"name": name, "sources": sources})
        cpu, start = cpu_seconds(handle.pid), time.perf_counter()
        await _request(nc, f"$JS.API.STREAM.CREATE.{name}", cfg)
        while (await _request(nc, f"$JS.API.STREAM.INFO.{name}"))["state"]["messages"] < n:  # type: ignore[index]
            await asyncio.sleep(0.01)
        seconds, cpu = time.perf_counter() - start, cpu_seconds(handle.pid) - cpu
        for stream in [name, *origins]:
            await _request(nc, f"$JS.API.STREAM.DELETE.{stream}")
        await nc.close()
        return seconds, cpu

    seconds, cpu = asyncio.run(timed())
    return Sample(n, seconds, cpu)


WORKLOADS: list[Workload] = [
    ("two origins -> one aggregate (sources)", lambda h, n: _catch_up(h, n, mirror=False), 200_000),
    ("two origins -> one aggregate (durable consumers)", lambda h, n: _catch_up(h, n, False, durable=True), 200_000),
    ("one origin -> mirror", lambda h, n: _catch_up(h, n, mirror=True), 200_000),
]


if __name__ == "__main__":
    main(__doc__, WORKLOADS, lambda: {kind: launch(kind) for kind in KINDS})
