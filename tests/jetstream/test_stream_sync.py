"""The interval sync policy fsyncs consumer stores too, not only the stream stores (jsbroker only: an
fsync is not visible on the wire, so this looks at the stores' own "written, not yet synced" flags)."""

import asyncio

import pytest

pytestmark = pytest.mark.xdist_group("stream-sync")


@pytest.mark.jsbroker(sync_interval=0.05)  # jsbroker's pytest plugin (broker/README.md, "In a test suite")
async def test_interval_sync_covers_consumer_stores(jsbroker, nats_client):
    js = nats_client.jetstream()
    await js.add_stream(name="SYNC", subjects=["sync.>"], storage="file")
    sub = await js.pull_subscribe("sync.>", durable="D", stream="SYNC")
    await js.publish("sync.a", b"1")
    msg = (await sub.fetch(1, timeout=2))[0]
    await msg.ack_sync()
    stream = jsbroker.running.jetstream.accounts["$G"].streams["SYNC"]
    consumer_store = stream.consumers["D"].store
    deadline = asyncio.get_running_loop().time() + 5
    while (consumer_store._dirty or stream.store._dirty) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)  # poll interval while the service's sync timer runs
    assert (consumer_store._dirty, stream.store._dirty) == (False, False)
