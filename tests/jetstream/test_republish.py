"""Stream `republish` (src, dest, headers_only) on jsbroker and nats-server side by side: the republished
messages with nats-server's headers (Nats-Stream, Nats-Subject, Nats-Sequence, Nats-Time-Stamp,
Nats-Last-Sequence, Nats-Msg-Size), a KV bucket that republishes, the config errors (cycles, invalid
transforms, pedantic mode) and a restart."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest
from nats.js.api import KeyValueConfig, RePublish

from tests.jetstream.test_consumer_support import scenario_pair
from tests.polling import poll_async


@pytest.fixture
def urls(nats_server, jsbroker_server) -> dict[str, str]:
    return {"jsbroker": jsbroker_server.url, "nats-server": nats_server.url}


def _msg(m: Any, prefix: str) -> tuple[str, list[tuple[str, str]], bytes]:
    """A received message as comparable values: the test's prefix and the time stamp normalised."""
    hdrs = sorted((k, "<time>" if k == "Nats-Time-Stamp" else v.replace(prefix, "{S}"))
                  for k, v in (m.headers or {}).items())
    return m.subject.replace(prefix, "{S}"), hdrs, m.data


async def _collect(nc: Any, subject: str) -> tuple[Any, list[Any]]:
    got: list[Any] = []

    async def cb(m: Any) -> None:
        got.append(m)

    sub = await nc.subscribe(subject, cb=cb)
    await nc.flush()
    return sub, got


async def _wait_for(got: list[Any], count: int) -> None:
    await poll_async(lambda: len(got) >= count, timeout=5, what=f"{count} republished messages")


@pytest.mark.parametrize("headers_only", [False, True])
async def test_republished_messages_carry_nats_server_headers(urls, unique, headers_only: bool) -> None:
    async def fn(nc: Any, s: str) -> Any:
        js = nc.jetstream()
        await js.add_stream(name=s, subjects=[f"{s}.in.>"], storage="memory",
                            republish=RePublish(src=f"{s}.in.*", dest=f"{s}.out.$1", headers_only=headers_only))
        sub, got = await _collect(nc, f"{s}.out.>")
        acks = [await js.publish(f"{s}.in.a", b"one"), await js.publish(f"{s}.in.b", b"two"),
                await js.publish(f"{s}.in.a", b"three", headers={"X-Mine": "kept", "Nats-Msg-Id": "m3"}),
                await js.publish(f"{s}.in.deep.x", b"not matched by src")]
        await _wait_for(got, 3)
        await nc.flush()
        await sub.unsubscribe()
        await js.delete_stream(s)
        return [a.seq for a in acks], [_msg(m, s) for m in got]

    out = await scenario_pair(urls, fn, unique("R"))
    assert out["jsbroker"] == out["nats-server"]
    seqs, msgs = out["jsbroker"]
    assert seqs == [1, 2, 3, 4] and len(msgs) == 3
    assert ("Nats-Last-Sequence", "1") in msgs[2][1]  # the subject's previous message
    assert all(m[2] == (b"" if headers_only else m[2]) for m in msgs)


async def test_a_kv_bucket_republishes_as_nats_server(urls, unique) -> None:
    async def fn(nc: Any, bucket: str) -> Any:
        js = nc.jetstream()
        kv = await js.create_key_value(KeyValueConfig(bucket=bucket, history=3, storage="memory",
                                                      republish=RePublish(src=">", dest=f"cache.{bucket}.>")))
        sub, got = await _collect(nc, f"cache.{bucket}.>")
        await kv.put("a", b"1")
        await kv.put("a", b"2")
        await kv.delete("a")
        await kv.put("b.c", b"3")
        await _wait_for(got, 4)
        await sub.unsubscribe()
        await js.delete_key_value(bucket)
        return [_msg(m, bucket) for m in got]

    out = await scenario_pair(urls, fn, unique("K"))
    assert out["jsbroker"] == out["nats-server"]
    assert [m[0] for m in out["jsbroker"]] == ["cache.{S}.$KV.{S}.a"] * 3 + ["cache.{S}.$KV.{S}.b.c"]


async def test_republish_configs_are_checked_as_nats_server(differential) -> None:
    def create(**fields: Any) -> tuple[str, dict]:
        return ("$JS.API.STREAM.CREATE.{S}", {"name": "{S}", "subjects": ["{S}.in.>"], "storage": "memory", **fields})

    delete = ("$JS.API.STREAM.DELETE.{S}", "")
    steps = [
        create(republish={"src": "{S}.in.>", "dest": "{S}.in.copy.>"}),  # a loop back into the stream
        create(republish={"src": ">", "dest": ">"}),
        create(republish={"src": "{S}.in.*", "dest": "{S}.out.$2"}),
        create(republish={"src": "{S}.in.*", "dest": "{S}.out.*"}),
        create(republish={"src": "{S}.in.*", "dest": "{S}.out.{{nope(1)}}"}),
        create(republish={"src": "{S}..in", "dest": "{S}.out"}),
        create(republish={"dest": "{S}.out.>"}, pedantic=True),
        create(republish={"dest": "{S}.out.>"}), delete,  # src defaults to '>'
        # '>' to '>' republishes what the transform made of the stream's one subject
        create(subject_transform={"src": "{S}.in.>", "dest": "{S}.t.>"}, republish={"src": ">", "dest": ">"}),
        delete,
        create(subject_transform={"src": "{S}.in.>", "dest": "{S}.t.>"}, republish={"src": ">", "dest": ">"},
               pedantic=True),
        create(republish={"src": "{S}.in.*", "dest": "{S}.out.{{split(1,-)}}"}), delete,
        ("$JS.API.STREAM.CREATE.{S}", {"name": "{S}", "subjects": ["{S}.in.>"], "storage": "memory"}),
        ("$JS.API.STREAM.UPDATE.{S}", {"name": "{S}", "subjects": ["{S}.in.>"], "storage": "memory",
                                       "republish": {"src": "{S}.in.>", "dest": "{S}.in.x.>"}}),
        ("$JS.API.STREAM.UPDATE.{S}", {"name": "{S}", "subjects": ["{S}.in.>"], "storage": "memory",
                                       "republish": {"src": "{S}.in.>", "dest": "{S}.out.>"}}),
        delete,
    ]
    ours, theirs = await differential(steps)
    assert ours == theirs
    assert [r["error"]["err_code"] for r in ours[:7]] == [10052] * 6 + [10157]
    assert ours[9]["config"]["republish"] == {"src": "{S}.t.>".replace("{S}", ours[9]["config"]["name"]),
                                              "dest": "{S}.t.>".replace("{S}", ours[9]["config"]["name"])}


async def test_the_republish_reaches_another_stream_and_skips_invalid_subjects(urls, unique) -> None:
    """A republish is an ordinary publish: another stream stores it; a mapped subject that is not a valid
    publish subject is dropped (nats-server only logs it)."""
    async def fn(nc: Any, s: str) -> Any:
        js = nc.jetstream()
        await js.add_stream(name=f"{s}_B", subjects=[f"{s}.out.>"], storage="memory")
        await js.add_stream(name=s, subjects=[f"{s}.in.>"], storage="memory",
                            republish=RePublish(src=f"{s}.in.*", dest=f"{s}.out.{{{{split(1,-)}}}}"))
        for subject in (f"{s}.in.a-b", f"{s}.in.--", f"{s}.in.c"):
            await js.publish(subject, b"x")
        await poll_async(lambda: _count(js, f"{s}_B", 2), timeout=5, what="2 messages in the second stream")
        got = [(m.subject.replace(s, "{S}"), m.headers["Nats-Sequence"])
               for m in [await js.get_msg(f"{s}_B", seq) for seq in (1, 2)]]
        info = await js.stream_info(f"{s}_B")
        await js.delete_stream(s)
        await js.delete_stream(f"{s}_B")
        return got, info.state.messages

    out = await scenario_pair(urls, fn, unique("R"))
    assert out["jsbroker"] == out["nats-server"]
    assert out["jsbroker"] == ([("{S}.out.a.b", "1"), ("{S}.out.c", "3")], 2)


async def _count(js: Any, stream: str, count: int) -> bool:
    return bool((await js.stream_info(stream)).state.messages >= count)


async def _restart_transcript(handle: Any) -> list[Any]:
    nc = await nats.connect(handle.url)
    cfg = {"name": "R", "subjects": ["in.>"], "republish": {"src": "in.>", "dest": "out.>", "headers_only": True}}
    await nc.request("$JS.API.STREAM.CREATE.R", json.dumps(cfg).encode())
    await nc.request("in.a", b"1")
    await nc.close()
    handle.restart()
    nc = await nats.connect(handle.url)
    try:
        sub, got = await _collect(nc, "out.>")
        await nc.jetstream().publish("in.a", b"22")
        await _wait_for(got, 1)
        return [_msg(m, "\0") for m in got]
    finally:
        await nc.close()


@pytest.mark.slow
async def test_republish_keeps_working_after_a_restart(server_factory) -> None:
    theirs = await _restart_transcript(server_factory("nats-server"))
    ours = await _restart_transcript(server_factory("jsbroker"))
    assert ours == theirs
    assert ("Nats-Last-Sequence", "1") in ours[0][1] and ("Nats-Msg-Size", "2") in ours[0][1]


async def test_streams_republishing_into_each_other_stop_at_the_header_limit_as_nats_server(urls, unique) -> None:
    """A loop the cycle check cannot see (two streams): each hop adds the republish headers until the
    header limit (10097) drops it, after as many hops as on nats-server; the broker stays up."""
    async def fn(nc: Any, s: str) -> Any:
        js = nc.jetstream()
        for me, other in (("a", "b"), ("b", "a")):
            await js.add_stream(name=f"{s}_{me}", subjects=[f"{s}.{me}.>"], storage="memory",
                                republish=RePublish(src=f"{s}.{me}.>", dest=f"{s}.{other}.>"))
        await js.publish(f"{s}.a.x", b"ping")

        async def settled() -> bool:
            counts = [(await js.stream_info(f"{s}_{me}")).state.messages for me in "ab"]
            await asyncio.sleep(0.2)
            return counts == [(await js.stream_info(f"{s}_{me}")).state.messages for me in "ab"]

        await poll_async(settled, timeout=10, what="the loop to stop")
        counts = [(await js.stream_info(f"{s}_{me}")).state.messages for me in "ab"]
        for me in "ab":
            await js.delete_stream(f"{s}_{me}")
        return counts

    out = await scenario_pair(urls, fn, unique("L"))
    # Nats-Time-Stamp drops trailing zeros, so the hop that crosses the limit varies by a few on both.
    ours, theirs = out["jsbroker"], out["nats-server"]
    assert abs(sum(ours) - sum(theirs)) <= 6 and abs(ours[0] - ours[1]) <= 1, out
    assert ours[0] > 100
