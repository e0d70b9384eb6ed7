"""Subject delete markers (`subject_delete_marker_ttl`, ADR-43) on jsbroker and nats-server side by side:
when max_age or a message's Nats-TTL removes the last message of a subject the server writes a marker
(Nats-Marker-Reason: MaxAge, Nats-TTL, a subject roll-up) that itself expires; nats-py's KV watchers see
it as a purge and `purge_deletes` removes it. Timings use the 1 s minimum, so these tests take seconds."""

from __future__ import annotations

import asyncio
import base64
import json
import random
from typing import Any

import nats
import pytest
from nats.js.api import KeyValueConfig

from tests.jetstream.test_consumer_support import scenario_pair
from tests.polling import poll_async

S = 1_000_000_000


@pytest.fixture
def urls(nats_server, jsbroker_server) -> dict[str, str]:
    return {"jsbroker": jsbroker_server.url, "nats-server": nats_server.url}


async def _messages(nc: Any, stream: str, prefix: str) -> tuple[Any, list[Any]]:
    """(messages, first_seq, last_seq) and every stored message as (seq, subject, header block)."""
    info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"")).data)["state"]
    out = []
    for seq in range(info["first_seq"], info["last_seq"] + 1):
        got = json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps({"seq": seq}).encode())).data)
        if "message" in got:
            m = got["message"]
            out.append((seq, m["subject"].replace(prefix, "{S}"), base64.b64decode(m.get("hdrs", "")).decode()))
    return (info["messages"], info["first_seq"], info["last_seq"]), out


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_max_age_leaves_a_marker_for_each_subject_as_nats_server(urls, unique, storage: str) -> None:
    async def fn(nc: Any, s: str) -> Any:
        cfg = {"name": s, "subjects": [f"{s}.>"], "storage": storage, "max_age": 2 * S,
               "subject_delete_marker_ttl": 2 * S}  # a marker lives 2 s: time enough to be seen on a busy machine
        created = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{s}", json.dumps(cfg).encode())).data)
        for subject in ("a", "a", "b"):
            await nc.request(f"{s}.{subject}", b"x")

        async def markers() -> Any:
            state, msgs = await _messages(nc, s, s)
            return (state, msgs) if state[0] == 2 and state[1] == 4 else None

        seen = await poll_async(markers, timeout=10, what="the two markers")
        gone = await poll_async(lambda: _state_is(nc, s, 0), timeout=10, what="the markers to expire")
        await nc.request(f"$JS.API.STREAM.DELETE.{s}", b"")
        c = created["config"]
        return (c["allow_msg_ttl"], c["allow_rollup_hdrs"], c["subject_delete_marker_ttl"]), seen, gone

    out = await scenario_pair(urls, fn, unique("M"))
    assert out["jsbroker"] == out["nats-server"]
    marker = "NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 2s\r\nNats-Rollup: sub\r\n\r\n"
    assert out["jsbroker"][1] == ((2, 4, 5), [(4, "{S}.a", marker), (5, "{S}.b", marker)])


async def _state_is(nc: Any, stream: str, count: int) -> Any:
    state = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"")).data)["state"]
    return (state["messages"], state["first_seq"], state["last_seq"]) if state["messages"] == count else None


async def test_per_message_ttls_leave_markers_and_are_raised_to_the_marker_ttl_as_nats_server(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        cfg = {"name": s, "subjects": [f"{s}.>"], "storage": "memory", "allow_msg_ttl": True,
               "subject_delete_marker_ttl": 2 * S}
        await nc.request(f"$JS.API.STREAM.CREATE.{s}", json.dumps(cfg).encode())
        await nc.request(f"{s}.a", b"1", headers={"Nats-TTL": "1", "X-Other": "kept"})  # raised to 2
        await nc.request(f"{s}.b", b"1", headers={"Nats-TTL": "1s"})  # raised, but b has a newer message
        await nc.request(f"{s}.b", b"2")
        await nc.request(f"{s}.c", b"1", headers={"Nats-TTL": "never"})
        await nc.request(f"{s}.d", b"1", headers={"Nats-TTL": "3"})
        stored = await _messages(nc, s, s)

        async def after(seq: int) -> Any:
            state, msgs = await _messages(nc, s, s)
            return (state, msgs) if state[2] >= seq else None

        first_marker = await poll_async(lambda: after(6), timeout=10, what="the marker of a")
        second_marker = await poll_async(lambda: after(7), timeout=10, what="the marker of d")
        await nc.request(f"$JS.API.STREAM.DELETE.{s}", b"")
        return stored, first_marker[1][-1], second_marker[1][-1]

    out = await scenario_pair(urls, fn, unique("T"))
    assert out["jsbroker"] == out["nats-server"]
    stored, a_marker, d_marker = out["jsbroker"]
    assert stored[1][0] == (1, "{S}.a", "NATS/1.0\r\nX-Other: kept\r\nNats-TTL: 2\r\n\r\n")
    assert a_marker[:2] == (6, "{S}.a") and d_marker[:2] == (7, "{S}.d")


async def test_a_kv_watcher_sees_the_expiry_marker_and_purge_deletes_removes_it(urls, unique) -> None:
    async def fn(nc: Any, bucket: str) -> Any:
        js = nc.jetstream()
        kv = await js.create_key_value(KeyValueConfig(bucket=bucket, history=2, ttl=1.5, limit_marker_ttl=60))
        watcher = await kv.watchall()
        assert await watcher.updates(timeout=2) is None  # the initial "nothing more" signal
        await kv.put("a", b"1")
        await kv.create("b", b"2", msg_ttl=1)
        updates = []
        while len(updates) < 4:
            e = await watcher.updates(timeout=10)
            updates.append((e.key, e.value, e.revision, e.operation))
        await watcher.stop()
        after_expiry = sorted(await kv.keys()) if await _has_keys(kv) else []
        await kv.purge_deletes(olderthan=-1)
        info = await js.stream_info(f"KV_{bucket}")
        await js.delete_key_value(bucket)
        return updates, after_expiry, info.state.messages

    out = await scenario_pair(urls, fn, unique("K"))
    assert out["jsbroker"] == out["nats-server"]
    updates, keys, left = out["jsbroker"]
    # b's 1 s TTL was raised to the 60 s marker TTL, so both keys go by max_age, each leaving a marker
    assert updates == [("a", b"1", 1, None), ("b", b"2", 2, None), ("a", b"", 3, "PURGE"), ("b", b"", 4, "PURGE")]
    assert keys == [] and left == 0


async def _has_keys(kv: Any) -> bool:
    try:
        return bool(await kv.keys())
    except Exception:  # nats-py raises NoKeysError for an empty bucket
        return False


async def test_marker_configs_are_checked_as_nats_server(differential) -> None:
    def create(**fields: Any) -> tuple[str, dict]:
        return ("$JS.API.STREAM.CREATE.{S}", {"name": "{S}", "subjects": ["{S}.>"], "storage": "memory", **fields})

    delete = ("$JS.API.STREAM.DELETE.{S}", "")
    ours, theirs = await differential([
        create(subject_delete_marker_ttl=S // 2), create(subject_delete_marker_ttl=-1),
        create(subject_delete_marker_ttl=S, pedantic=True),
        create(subject_delete_marker_ttl=S, allow_msg_ttl=True, pedantic=True),
        create(subject_delete_marker_ttl=S, allow_msg_ttl=True, allow_rollup_hdrs=True, pedantic=True), delete,
        create(subject_delete_marker_ttl=S, deny_purge=True), delete,
    ])
    assert ours == theirs
    assert [r.get("error", {}).get("err_code") for r in ours[:4]] == [10052] * 4


async def _restart_transcript(handle: Any, kill: bool) -> list[Any]:
    """Messages expire while the server is down: the marker is written after the start."""
    nc = await nats.connect(handle.url)
    cfg = {"name": "M", "subjects": ["m.>"], "max_age": 2 * S, "subject_delete_marker_ttl": 60 * S}
    await nc.request("$JS.API.STREAM.CREATE.M", json.dumps(cfg).encode())
    for subject in ("m.a", "m.a", "m.b"):
        await nc.request(subject, b"x")
    await nc.close()
    if kill:
        handle.kill()
    else:
        handle.stop()
    await asyncio.sleep(2.5)  # the messages' max_age passes while the server is down
    handle.start()
    nc = await nats.connect(handle.url)
    try:
        state, msgs = await poll_async(lambda: _markers_written(nc), timeout=10, what="the markers after the restart")
        return [state, msgs]
    finally:
        await nc.close()


async def _markers_written(nc: Any) -> Any:
    state, msgs = await _messages(nc, "M", "\0")
    return (state, msgs) if state[2] == 5 else None


@pytest.mark.slow
@pytest.mark.parametrize("kill", [False, True])
async def test_markers_are_written_for_what_expired_during_a_restart(server_factory, kill: bool) -> None:
    theirs = await _restart_transcript(server_factory("nats-server"), kill)
    ours = await _restart_transcript(server_factory("jsbroker"), kill)
    assert ours == theirs
    assert [m[:2] for m in ours[1]] == [(4, "m.a"), (5, "m.b")]


async def _random_transcript(handle: Any, seed: int) -> list[Any]:
    """Random publishes (with and without TTLs), deletes, subject purges and one restart (SIGTERM or
    kill -9) on a stream with delete markers; then wait until every TTL'd message and marker is gone
    and return what is left (the markers were seen on the way: last_seq counts them)."""
    rng = random.Random(seed)
    # TTLs are raised to the 3 s marker TTL: the 30 operations and the restart finish before any expires
    cfg = {"name": "R", "subjects": ["r.>"], "allow_msg_ttl": True, "subject_delete_marker_ttl": 3 * S}
    nc = await nats.connect(handle.url)
    await nc.request("$JS.API.STREAM.CREATE.R", json.dumps(cfg).encode())
    restart_at = rng.randrange(5, 25)
    acks = []
    for step in range(30):
        if step == restart_at:
            await nc.close()
            handle.kill() if rng.random() < 0.5 else handle.stop()
            handle.start()
            nc = await nats.connect(handle.url)
        op, subject = rng.random(), f"r.{rng.choice('abc')}"
        if op < 0.7:
            ttl = rng.choice([None, None, "1", "2s", "4", "never"])
            reply = await nc.request(subject, b"x", headers={"Nats-TTL": ttl} if ttl else None)
        elif op < 0.85:
            seq = rng.randrange(1, step + 2)
            reply = await nc.request("$JS.API.STREAM.MSG.DELETE.R", json.dumps({"seq": seq}).encode())
        else:
            reply = await nc.request("$JS.API.STREAM.PURGE.R", json.dumps({"filter": subject}).encode())
        acks.append(json.loads(reply.data).get("error", {}).get("err_code", "ok"))

    async def settled() -> Any:  # a consistent snapshot: the state did not move while the messages were read
        state, msgs = await _messages(nc, "R", "\0")
        again, _ = await _messages(nc, "R", "\0")
        done = all("Nats-TTL" not in h or "never" in h for _, _, h in msgs)
        return (state, msgs) if done and state == again and state[0] == len(msgs) else None

    try:
        state, msgs = await poll_async(settled, timeout=20, what="every TTL'd message and marker gone")
        return [acks, state, msgs]
    finally:
        await nc.close()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
async def test_random_operations_with_a_restart_leave_the_state_nats_server_leaves(server_factory, seed: int) -> None:
    theirs = await _random_transcript(server_factory("nats-server"), seed)
    ours = await _random_transcript(server_factory("jsbroker"), seed)
    assert ours == theirs
