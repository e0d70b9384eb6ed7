"""Interest retention with filtered consumers: a message goes once every consumer whose filter takes
its subject has acked it; a consumer filtered elsewhere never holds it back (both servers)."""

import asyncio

import nats


async def _messages(js, name: str, want: int) -> int:
    deadline = asyncio.get_running_loop().time() + 5
    while (n := (await js.stream_info(name)).state.messages) != want and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)  # poll interval: nats-server removes acked messages asynchronously
    return n


async def test_ack_by_the_only_interested_consumer_removes(server, unique):
    nc = await nats.connect(server.url)
    name = unique("INTF")
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[name + ".>"], retention="interest", storage="file")
        await js.pull_subscribe(name + ".a", durable="A", stream=name)
        b = await js.pull_subscribe(name + ".>", durable="B", stream=name)
        await js.publish(name + ".b", b"1")
        await js.publish(name + ".a", b"2")
        for msg in await b.fetch(2, timeout=2):
            await msg.ack_sync()
        assert await _messages(js, name, 1) == 1  # .b went; .a waits for A
        assert (await js.get_msg(name, 2)).data == b"2"
        await js.publish(name + ".b", b"3")
        await js.delete_consumer(name, "B")  # nobody else wants .b: it goes with B
        assert await _messages(js, name, 1) == 1
        await js.delete_stream(name)
    finally:
        await nc.close()
