"""A restart restores every file stream (config, messages, deleted gaps, the duplicate window, durable
consumers) and drops memory streams, on jsbroker exactly as on nats-server."""

import json

import nats
import pytest


async def restart_transcript(handle) -> list:
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    await js.add_stream(name="MEM", subjects=["mem.>"], storage="memory")
    await js.add_stream(name="FIL", subjects=["fil.>"], storage="file", max_msgs_per_subject=2,
                        description="kept", allow_direct=True)
    await js.publish("mem.a", b"m")
    for i in range(5):
        await js.publish(f"fil.{i % 2}", f"f{i}".encode(), headers={"Nats-Msg-Id": f"id{i}"})
    await js.delete_msg("FIL", 4)
    await js.add_stream(name="INT", subjects=["int.>"], retention="interest")
    await js.pull_subscribe("int.>", durable="D", stream="INT")
    await js.publish("int.a", b"1")
    await nc.close()
    handle.restart()
    out: list = []
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    try:
        try:
            await js.stream_info("MEM")
            out.append(("MEM", "exists"))
        except Exception as exc:  # the exception class is part of the behaviour under test
            out.append(("MEM", type(exc).__name__))
        info = await js.stream_info("FIL")
        out.append(("FIL", info.config.description, info.config.max_msgs_per_subject, info.config.allow_direct,
                    info.state.messages, info.state.first_seq, info.state.last_seq, info.state.num_deleted))
        out.append(("msgs", [(m.seq, m.data) for m in [await js.get_msg("FIL", s) for s in (3, 5)]]))
        dup = await js.publish("fil.1", b"again", headers={"Nats-Msg-Id": "id3"})
        out.append(("dup", dup.seq, dup.duplicate))
        new = await js.publish("fil.1", b"new")
        out.append(("new", new.seq))
        ack = await js.publish("int.a", b"2")  # stored only because the durable consumer came back
        info = await js.stream_info("INT")
        out.append(("interest", ack.seq, info.state.messages, info.state.consumer_count))
        last = await js.get_last_msg("FIL", "fil.1", direct=True)
        out.append(("direct", last.seq, last.data))
    finally:
        await nc.close()
    return out


@pytest.mark.slow
async def test_restart_restores_file_streams_like_nats_server(server_factory):
    theirs = await restart_transcript(server_factory("nats-server"))
    ours = await restart_transcript(server_factory("jsbroker"))
    assert ours == theirs
    assert ours[-1] == ("direct", 7, b"new")  # id3 was deleted, so it is no longer a duplicate after restart


async def _duplicates(url: str, ids: list[str]) -> list[bool]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="D", subjects=["d.>"])
    acks = [await js.publish("d.x", b"x", headers={"Nats-Msg-Id": i}) for i in ids]
    await nc.close()
    return [ack.duplicate or False for ack in acks]


async def test_a_clean_stop_saves_the_msg_id_window_and_a_stale_one_is_not_used(jsbroker):
    """The window is saved at a clean stop and taken (then removed) at the next start, instead of re-reading
    every message; one that no longer matches the store (here: made stale by hand) falls back to re-reading.
    (jsbroker's pytest plugin: `down()` stops the broker for the block and starts it again on its store.)"""
    from jsbroker import store as storage

    saved = storage.stream_dir(storage.account_dir(jsbroker.store_dir, "$G"), "D") / storage.DEDUPE
    assert await _duplicates(jsbroker.client_url, ["a", "b", "c"]) == [False, False, False]
    async with jsbroker.down():
        assert saved.exists()
    assert not saved.exists()  # taken at the start
    assert await _duplicates(jsbroker.client_url, ["b", "d"]) == [True, False]
    async with jsbroker.down():
        stale = json.loads(saved.read_text())
        stale["last_seq"], stale["ids"] = 1, []
        saved.write_text(json.dumps(stale))
    assert await _duplicates(jsbroker.client_url, ["d", "a", "e"]) == [True, True, False]  # re-read from the messages


async def _after_a_crash(handle) -> list:
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    await js.add_stream(name="K", subjects=["k.>"])
    for i in range(20):  # ids on some messages only, plain ones between them, the newest with an id
        headers = {"Nats-Msg-Id": f"id{i}"} if i % 3 == 0 or i == 19 else None
        await js.publish("k.x", str(i).encode(), headers=headers)
    await nc.close()
    handle.kill()
    handle.start()
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    out = [((ack := await js.publish("k.x", b"again", headers={"Nats-Msg-Id": i})).seq, ack.duplicate)
           for i in ("id0", "id9", "id19", "id1", "id4")]
    try:  # Nats-Expected-Last-Msg-Id compares with the newest message's id, rebuilt too
        await js.publish("k.x", b"last", headers={"Nats-Expected-Last-Msg-Id": "id4"})
        out.append("expected last id accepted")
    except nats.js.errors.APIError as exc:
        out.append(exc.err_code)
    await nc.close()
    return out


@pytest.mark.slow
async def test_a_crash_rebuilds_the_msg_id_window_from_the_messages_with_headers(server_factory):
    theirs = await _after_a_crash(server_factory("nats-server"))
    ours = await _after_a_crash(server_factory("jsbroker"))
    assert ours == theirs == [(1, True), (10, True), (20, True), (21, None), (22, None), "expected last id accepted"]
