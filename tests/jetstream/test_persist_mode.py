"""`persist_mode: async` against nats-server: the config rules (file storage only, not replicated, not
changeable, a case-sensitive value, API level 2), a stream that keeps it across restarts, and what it
changes in jsbroker's durability contract: the stream is not fsynced write by write under `sync: always`,
while its acknowledged messages still survive kill -9 (each was written before its ack)."""

from __future__ import annotations

from typing import Any

import nats
import pytest

from tests.jetstream.test_stream_api import C, D, I, U, cfg


def file_cfg(**kw: Any) -> dict[str, Any]:
    return cfg(storage="file", **kw)


CASES = {
    "config_rules": [(C, cfg(persist_mode="async")), (C, file_cfg(persist_mode="bogus")),
                     (C, file_cfg(persist_mode="ASYNC")), (C, file_cfg(persist_mode=1)),
                     (C, file_cfg(persist_mode="async", num_replicas=3)),
                     (C, file_cfg(persist_mode="async", allow_msg_ttl=True)), (I, ""), ("{S}.a", "x"),
                     (U, file_cfg(persist_mode="default", allow_msg_ttl=True)),
                     (U, file_cfg(allow_msg_ttl=True)),
                     (U, file_cfg(persist_mode="async", allow_msg_ttl=True, max_msgs=3)), (D, ""),
                     (C, file_cfg(persist_mode="default")), (U, file_cfg(persist_mode="async")),
                     (U, file_cfg(persist_mode="")), (I, ""), (D, "")],
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_persist_mode_matches_nats_server(differential, name):
    ours, theirs = await differential(CASES[name])
    assert ours == theirs


async def _restart_transcript(handle: Any) -> list[Any]:
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    await nc.request("$JS.API.STREAM.CREATE.A", b'{"name":"A","subjects":["a.>"],"persist_mode":"async"}', timeout=5)
    out: list[Any] = [(await js.publish("a.x", str(i).encode())).seq for i in range(5)]
    await nc.close()
    handle.restart()  # SIGTERM
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    info = await js.stream_info("A")
    out += [info.config.persist_mode, info.config.metadata.get("_nats.req.level"), info.state.messages,
            (await js.get_msg("A", 5)).data, (await js.publish("a.x", b"after")).seq]
    await nc.close()
    return out


@pytest.mark.slow
async def test_an_async_stream_comes_back_after_a_restart_like_nats_server(server_factory):
    theirs = await _restart_transcript(server_factory("nats-server"))
    ours = await _restart_transcript(server_factory("jsbroker"))
    assert ours == theirs
    assert ours[5:] == ["async", "2", 5, b"4", 6]


async def _fsyncs_while_publishing(broker: Any, name: str, persist_mode: str, n: int) -> int:
    nc = await nats.connect(broker.client_url)
    try:
        js = nc.jetstream()
        await nc.request(f"$JS.API.STREAM.CREATE.{name}",
                         f'{{"name":"{name}","persist_mode":"{persist_mode}"}}'.encode(), timeout=5)
        before = broker.jetstream.store_stats()["fsyncs"]
        for i in range(n):
            await js.publish(name, b"x")
        return int(broker.jetstream.store_stats()["fsyncs"] - before)
    finally:
        await nc.close()


@pytest.mark.jsbroker(sync_always=True)  # jsbroker's pytest plugin
async def test_sync_always_leaves_async_streams_to_the_interval(jsbroker):
    """Under `sync: always` a default stream fsyncs every publish; an async one none (the interval timer
    and a clean stop do), as nats-server turns SyncAlways off for it."""
    assert await _fsyncs_while_publishing(jsbroker.running, "SYNCED", "default", 20) >= 20
    assert await _fsyncs_while_publishing(jsbroker.running, "ASYNC", "async", 20) == 0


async def test_acknowledged_messages_of_an_async_stream_survive_kill(server_factory):
    """jsbroker writes before it acks in every mode, so kill -9 loses nothing acknowledged (nats-server's
    async mode may: it flushes after the ack)."""
    handle = server_factory("jsbroker")
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    await nc.request("$JS.API.STREAM.CREATE.K", b'{"name":"K","subjects":["k.>"],"persist_mode":"async"}', timeout=5)
    acked = [(await js.publish("k.x", str(i).encode())).seq for i in range(200)]
    await nc.close()
    handle.kill()
    handle.start()
    nc = await nats.connect(handle.url)
    try:
        js = nc.jetstream()
        info = await js.stream_info("K")
        assert (info.state.messages, info.state.last_seq) == (200, acked[-1])
        assert (await js.get_msg("K", 200)).data == b"199"
    finally:
        await nc.close()
