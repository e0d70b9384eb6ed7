"""Bursts of large messages: a subscriber that keeps reading is never cut off, and the server's memory
stays bounded. The same nats-py bodies against jsbroker and nats-server, except JetStream backlogs past
max_pending, where jsbroker promises more than nats-server gives (see `start`). A stalled subscriber
beside a reading one: tests/broker/test_slow_consumers.py.

Each test starts its own servers: peak memory (VmHWM) and the slow-consumer count must be this burst's.
Bursts go well past nats-server's default `max_pending` (64 MB) in total. A reading subscriber's publisher
waits at each flush until the reader is at most one flush behind: both servers hold a publisher only
briefly (nats-server's stall), so a nats-py reader that falls max_pending behind on a loaded machine is cut
off by either (bench/core.py's pub -> sub rows are the unpaced bursts).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from dataclasses import dataclass, field

import nats
import pytest

from tests.servers import NATS_SERVER, ServerHandle

pytestmark = pytest.mark.xdist_group("bursts")

MB = 1024 * 1024
DEFAULT_MAX_PENDING = 64 * MB
PEAK_GROWTH = 32 * MB  # beyond what one client may hold (max_pending): the server's own working memory


def vm_kb(pid: int, field_name: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"{field_name} missing from /proc/{pid}/status")


def varz(handle: ServerHandle) -> dict:
    with urllib.request.urlopen(f"{handle.http_url}/varz", timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture
def start(server_factory, server_kind):
    """Servers with their defaults, as a user starts them.

    `promise=True`: a load where jsbroker promises more than nats-server gives. nats-server's consumers
    may fill a slower reader's buffer past max_pending and it cuts the reader off; jsbroker's push and
    pull deliveries wait for the reader to drain. Those tests assert our promise and run against
    jsbroker only. (Core publishers are no such case: both servers hold one only briefly, 2 ms a message
    and 10 ms a read at most, so a reader that falls max_pending behind is cut off on both.)"""
    def start_server(jetstream: bool = False, promise: bool = False) -> ServerHandle:
        if promise and server_kind == NATS_SERVER:
            pytest.skip("jsbroker's promise: nats-server may cut a slower reader off here")
        return server_factory(server_kind, jetstream=jetstream, http=True)
    return start_server


@dataclass
class Counting:
    """A nats-py subscriber that counts what its callback sees and notices its own disconnect."""

    expected: int
    got: int = 0
    errors: list[str] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    nc: nats.NATS | None = None

    async def connect(self, url: str, subject: str, queue: str = "") -> "Counting":
        async def on_error(e: Exception) -> None:
            self.errors.append(type(e).__name__)

        self.nc = await nats.connect(url, error_cb=on_error, allow_reconnect=False)
        await self.nc.subscribe(subject, queue=queue, cb=self._count, pending_bytes_limit=1024 * MB)
        await self.nc.flush()
        return self

    async def _count(self, msg: object) -> None:
        self.got += 1
        if self.got >= self.expected:
            self.done.set()

    async def close(self) -> bool:
        """Close; True when the connection was still up."""
        assert self.nc is not None
        up = self.nc.is_connected
        await self.nc.close()
        return up


async def publish_burst(url: str, subject: str, n: int, size: int, reader: Counting | None = None) -> None:
    """Publish as a user's loop does, with a flush() every 5,000 messages or 8 MB; with a `reader`, wait
    after each flush until it is at most one flush behind (a slower reader falls max_pending behind
    otherwise, and both servers cut it off)."""
    pub = await nats.connect(url, allow_reconnect=False)
    payload = b"x" * size
    every = min(5000, 8 * MB // size)
    for i in range(n):
        await pub.publish(subject, payload)
        if i % every == every - 1:
            await pub.flush(timeout=60)
            while reader is not None and reader.got < i + 1 - every:  # polls the reader's counter
                await asyncio.sleep(0.005)
    await pub.flush(timeout=60)
    await pub.close()


@pytest.mark.parametrize("size,n", [(128, 100_000), (1024, 100_000), (16 * 1024, 5_000), (64 * 1024, 1_200),
                                    (1024 * 1024, 80)], ids=["128B", "1KB", "16KB", "64KB", "max-payload"])
async def test_a_reading_subscriber_gets_every_message_of_a_burst(start, size, n):
    handle = start()
    sub = await Counting(n).connect(handle.url, "burst")
    before = vm_kb(handle.proc.pid, "VmRSS")
    await publish_burst(handle.url, "burst", n, size, reader=sub)
    await asyncio.wait_for(sub.done.wait(), 60)
    assert (sub.got, sub.errors) == (n, [])
    assert await sub.close()
    assert varz(handle)["slow_consumers"] == 0
    assert vm_kb(handle.proc.pid, "VmHWM") - before < DEFAULT_MAX_PENDING + PEAK_GROWTH


async def test_a_queue_group_shares_a_burst_and_stays_connected(start):
    handle = start()
    n = 100_000
    members = [await Counting(n).connect(handle.url, "burst.q", queue="workers") for _ in range(2)]
    await publish_burst(handle.url, "burst.q", n, 1024)
    async with asyncio.timeout(60):
        while sum(m.got for m in members) < n:
            await asyncio.sleep(0.05)  # polling the callbacks' counters, not synchronisation
    assert sum(m.got for m in members) == n and all(m.got > 0 for m in members)
    assert [await m.close() for m in members] == [True, True]
    assert varz(handle)["slow_consumers"] == 0


async def stored_stream(url: str, name: str, n: int, size: int) -> nats.NATS:
    nc = await nats.connect(url, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    payload = b"y" * size
    acks = [js.publish(f"{name}.m", payload) for _ in range(n)]
    for i in range(0, n, 200):
        await asyncio.gather(*acks[i:i + 200])
    return nc


@pytest.mark.parametrize("n", [1_500, 3_000], ids=["48MB", "96MB"])
@pytest.mark.parametrize("flow_control", [True, False], ids=["flow-control", "no-flow-control"])
async def test_a_push_consumer_delivers_a_large_backlog(start, flow_control, n):
    # 96 MB is past max_pending: delivery must wait for the reader (jsbroker's promise)
    handle = start(jetstream=True, promise=n * 32 * 1024 > DEFAULT_MAX_PENDING)
    size = 32 * 1024
    nc = await stored_stream(handle.url, "BURSTPUSH", n, size)
    js = nc.jetstream()
    got = 0
    done = asyncio.Event()

    async def count(msg: object) -> None:
        nonlocal got
        got += 1
        if got == n:
            done.set()

    extra = {"flow_control": True, "idle_heartbeat": 1.0} if flow_control else {}
    await js.subscribe("BURSTPUSH.>", cb=count, manual_ack=True, pending_bytes_limit=1024 * MB,
                       config=nats.js.api.ConsumerConfig(ack_policy="none", **extra))
    await asyncio.wait_for(done.wait(), 60)
    assert got == n and nc.is_connected
    await nc.close()
    assert varz(handle)["slow_consumers"] == 0


@pytest.mark.parametrize("batch", [200, 600], ids=["25MB-fetches", "one-75MB-fetch"])
async def test_a_pull_consumer_fetches_large_batches_of_large_messages(start, batch):
    handle = start(jetstream=True, promise=batch * 128 * 1024 > DEFAULT_MAX_PENDING)
    n, size = 600, 128 * 1024  # 75 MB: in fetches of 25 MB, or in one past max_pending
    nc = await stored_stream(handle.url, "BURSTPULL", n, size)
    psub = await nc.jetstream().pull_subscribe("BURSTPULL.>", durable="big", pending_bytes_limit=1024 * MB)
    seqs: list[int] = []
    while len(seqs) < n:
        for msg in await psub.fetch(batch, timeout=30):
            seqs.append(msg.metadata.sequence.stream)
            await msg.ack()
    assert seqs == list(range(1, n + 1))
    assert nc.is_connected
    await nc.close()
    assert varz(handle)["slow_consumers"] == 0
