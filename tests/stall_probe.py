"""What other clients see while some wait on the disk: a probe for slow-disk tests and bench/slow_disk.py.

`observe(url, seconds)` runs, side by side for `seconds`:
- waiting clients (the ones whose answers depend on an fsync): a publisher to the file stream `SLOW`
  (`sync: always` makes each ack wait for its fsync) and a client creating a file stream with a consumer
  and deleting it again (layout fsyncs);
- other clients (what must not stall): PINGs (`flush()`), a core pub/sub pair, and a JetStream publish +
  fetch + ack on the memory stream `PROBE`.
It returns the latencies of each (seconds) and the sequences of `SLOW` that were acknowledged.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import nats
from nats.aio.msg import Msg
from nats.js.api import StorageType, StreamConfig

SLOW = "SLOW"
_TICK = 0.01  # how often the other clients act
_LOST = 10.0  # a core message not delivered within this counts as this long a stall


@dataclass
class Observed:
    ping: list[float] = field(default_factory=list)
    core: list[float] = field(default_factory=list)  # publish -> delivery to the subscriber
    fetch: list[float] = field(default_factory=list)  # publish + fetch + ack on a memory stream
    publish: list[float] = field(default_factory=list)  # the waiting publisher's acks (SLOW)
    create: list[float] = field(default_factory=list)  # stream create (file, waits for its layout)
    consumer: list[float] = field(default_factory=list)  # consumer create on that stream
    acked: list[int] = field(default_factory=list)  # SLOW's acknowledged seqs


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def observe(url: str, seconds: float, layout: bool = True) -> Observed:
    out = Observed()
    clients = [await nats.connect(url, allow_reconnect=False) for _ in range(5)]
    pinger, pub, sub, js_client, waiter = clients
    js = js_client.jetstream()
    wjs = waiter.jetstream(timeout=30)
    await wjs.add_stream(StreamConfig(name=SLOW, subjects=["slow.>"], storage=StorageType.FILE))
    await js.add_stream(StreamConfig(name="PROBE", subjects=["probe.js"], storage=StorageType.MEMORY))
    pull = await js.pull_subscribe("probe.js", durable="probe")
    arrivals: dict[bytes, asyncio.Future[float]] = {}

    async def on_core(msg: Msg) -> None:
        arrival = arrivals.get(msg.data)
        if arrival is not None and not arrival.done():
            arrival.set_result(time.perf_counter())

    await sub.subscribe("probe.core", cb=on_core)
    await sub.flush()
    stop = time.perf_counter() + seconds

    async def pings() -> None:
        while time.perf_counter() < stop:
            t = time.perf_counter()
            await pinger.flush(timeout=10)
            out.ping.append(time.perf_counter() - t)
            await asyncio.sleep(_TICK)

    async def core() -> None:
        n = 0
        while time.perf_counter() < stop:
            n += 1
            key = b"%d" % n
            arrival = arrivals[key] = asyncio.get_running_loop().create_future()
            t = time.perf_counter()
            await pub.publish("probe.core", key)
            try:
                out.core.append(await asyncio.wait_for(arrival, _LOST) - t)
            except asyncio.TimeoutError:  # lost (a cut-off client?): counted as a stall of _LOST
                out.core.append(_LOST)
            del arrivals[key]
            await asyncio.sleep(_TICK)

    async def fetch() -> None:
        while time.perf_counter() < stop:
            t = time.perf_counter()
            await js.publish("probe.js", b"x")
            msgs = await pull.fetch(1, timeout=10)
            await msgs[0].ack_sync(timeout=10)
            out.fetch.append(time.perf_counter() - t)
            await asyncio.sleep(_TICK)

    async def publish() -> None:
        n = 0
        while time.perf_counter() < stop:
            n += 1
            t = time.perf_counter()
            ack = await wjs.publish("slow.x", b"%d" % n)
            out.publish.append(time.perf_counter() - t)
            out.acked.append(ack.seq)

    async def create_delete() -> None:
        n = 0
        while time.perf_counter() < stop:
            n += 1
            t = time.perf_counter()
            await wjs.add_stream(StreamConfig(name=f"L{n}", subjects=[f"l{n}.>"], storage=StorageType.FILE))
            out.create.append(time.perf_counter() - t)
            t = time.perf_counter()
            await wjs.add_consumer(f"L{n}", durable_name="c")
            out.consumer.append(time.perf_counter() - t)
            await wjs.delete_stream(f"L{n}")

    try:
        await asyncio.gather(pings(), core(), fetch(), publish(), *([create_delete()] if layout else []))
    finally:
        for client in clients:
            await client.close()
    return out
