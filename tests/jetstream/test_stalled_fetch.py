"""A pull request from a client that does not read costs the broker little memory (issue #35 part 3;
broker/README.md, "Memory").

Raw connections ask a durable for every message of a file stream of 120 x 1 MB and never read. jsbroker
stops the delivery pass once the receiver's transport is past its high-water mark and reads ahead at most
1 MiB, so its RSS grows by a few MB; it used to queue the whole batch (about 220 MB per request: the
messages read ahead, then their frames in the connection's output). nats-server 2.15.1 buffers every
requested message (about 115 MB per request, `bench/memory.py`).
"""

from __future__ import annotations

import time

import nats
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from tests.servers import JSBROKER, fill_stream, launch, stalled_fetch

MESSAGES, SIZE = 120, 1000 * 1000
REQUESTS = 2
GROWTH_MB = 40  # RSS growth allowed for all of them (measured: 2-9 MB)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))


async def test_stalled_pull_requests_for_large_messages_keep_rss_small():
    broker = launch(JSBROKER)
    try:
        nc = await nats.connect(broker.url)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="MEM", subjects=["MEM.>"]))
        for c in range(REQUESTS):
            await js.add_consumer("MEM", ConsumerConfig(durable_name=f"C{c}", ack_policy=AckPolicy.EXPLICIT,
                                                        max_ack_pending=-1))
        fill_stream(broker.port, "MEM.big", MESSAGES, size=SIZE, window=8)
        before = rss_mb(broker.pid)
        socks = [stalled_fetch(broker.port, "MEM", f"C{c}") for c in range(REQUESTS)]
        try:
            peak = before
            deadline = time.monotonic() + 3  # the unbounded broker reached its peak within 1 s
            while time.monotonic() < deadline:
                peak = max(peak, rss_mb(broker.pid))
                time.sleep(0.05)  # sampling period
            assert peak - before < GROWTH_MB, (before, peak)
            # the server is still serving, and the stalled requests hold what they were sent as delivered
            info = await js.consumer_info("MEM", "C0")
            assert 1 <= info.num_ack_pending <= MESSAGES
        finally:
            for sock in socks:
                sock.close()
        await nc.close()
    finally:
        broker.close()
