"""Atomic batch publishing (ADR-50, `allow_atomic`) against nats-server 2.15.1: staging (an empty reply per
message), the commit's pub ack (`batch`, `count`), every refusal on arrival and at the commit (the whole
batch goes, nothing stored), the limits (1000 messages, 50 open batches per stream, 10 s), and restarts."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from typing import Any

import nats
import pytest

from jsbroker.jetstream import atomic_batch, errors, headers
from jsbroker.jetstream.stream_config import StreamConfig
from tests.differential import normalise
from tests.polling import poll_async
from tests.jetstream.test_stream_api import C, D, G, I, U, cfg, on_storage, pub
from tests.servers import JSBROKER, launch


def b(batch: str, seq: int | str, commit: str | None = None, subject: str = "{S}.a", body: str = "x",
      **extra: str) -> tuple[str, str, dict[str, str]]:
    """One message of a batch (commit "1" or "eob" on the last)."""
    more = {"Nats_Batch_Commit": commit} if commit is not None else {}
    return pub(subject, body, Nats_Batch_Id=batch, Nats_Batch_Sequence=str(seq), **more, **extra)  # type: ignore[no-any-return]


def atomic(**kw: Any) -> dict[str, Any]:
    return cfg(allow_atomic=True, **kw)


def get(seq: int) -> tuple[str, dict[str, int]]:
    return (G, {"seq": seq})


CASES: dict[str, list[Any]] = {
    "commit_and_eob": [(C, atomic()), (I, ""), b("b1", 1), b("b1", 2, subject="{S}.b"), b("b1", 3, "1"),
                       b("b2", 1), b("b2", 2, "eob"), b("b3", 1, "1", body=""), get(3), get(4), get(5), (I, ""),
                       (D, "")],
    "refused_on_arrival": [(C, atomic()), b("b" * 65, 1, "1"), pub("{S}.a", Nats_Batch_Id="b1"),
                           b("b1", "x"), b("b1", "-1"), b("b1", "\u0661"), b("b1", 2), b("b1", 0), b("b1", 1001), b("b1", 1001, "eob"),
                           b("b1", 1, "2"), b("b1", 1, ""), b("b1", 1, "EOB"), b("b1", 1, "eob"),
                           b("b2", 1), b("b2", 3), b("b2", 2, "1"), b("b3", 1), b("b3", 1),
                           b("b4", 1, "1", Nats_Required_Api_Level="99"), b("b5", 1, "1", Nats_Required_Api_Level="2"),
                           b("b6", 1, "1", Nats_Required_Api_Level=""), get(1), get(2), (I, ""), (D, "")],
    "size_and_seal": [(C, atomic(max_msg_size=60)), b("b1", 1), b("b1", 2, "1", body="x" * 61),
                      b("b1", 2, "1"), (U, atomic(max_msg_size=60, sealed=True)), b("b2", 1), (I, ""), (D, "")],
    "interleaved_batches_and_plain_publishes": [(C, atomic()), b("b1", 1), b("b2", 1, subject="{S}.b"),
                                                pub("{S}.c"), b("b2", 2, "1"), b("b1", 2, "eob"), (I, ""), (D, "")],
    "expected_sequences": [(C, atomic()), pub("{S}.a"),
                           b("b1", 1, Nats_Expected_Last_Sequence="1"), b("b1", 2, "1", Nats_Expected_Last_Sequence="2"),
                           b("b2", 1, Nats_Expected_Last_Sequence="5"), b("b2", 2, "1"),
                           b("b3", 1, "1", Nats_Expected_Last_Sequence="x"),
                           b("b4", 1, Nats_Expected_Last_Sequence="1"), b("b4", 2, "1"),
                           b("b5", 1, subject="{S}.b", Nats_Expected_Last_Subject_Sequence="0"),
                           b("b5", 2, "1", subject="{S}.b", Nats_Expected_Last_Subject_Sequence="0"),
                           b("b6", 1, subject="{S}.c", Nats_Expected_Last_Subject_Sequence="3",
                             Nats_Expected_Last_Subject_Sequence_Subject="{S}.a"),
                           b("b6", 2, subject="{S}.d", Nats_Expected_Last_Subject_Sequence="3",
                             Nats_Expected_Last_Subject_Sequence_Subject="{S}.a"),
                           b("b6", 3, "1", subject="{S}.e", Nats_Expected_Last_Subject_Sequence="2",
                             Nats_Expected_Last_Subject_Sequence_Subject="{S}.a"),
                           b("b7", 1, "1", Nats_Expected_Last_Subject_Sequence_Subject="{S}.a"),
                           b("b8", 1, "1", subject="{S}.z", Nats_Expected_Last_Subject_Sequence="0"),
                           b("b9", 1, "1", Nats_Expected_Stream="other"), (I, ""), (D, "")],
    "msg_ids": [(C, atomic()), pub("{S}.a", Nats_Msg_Id="m1"),
                b("b1", 1, Nats_Msg_Id="m2"), b("b1", 2, "1", Nats_Msg_Id="m2"),
                b("b2", 1, Nats_Msg_Id="m3"), b("b2", 2, "1", Nats_Msg_Id="m1"),
                b("b3", 1, Nats_Msg_Id="m4"), b("b3", 2, "eob"), pub("{S}.a", Nats_Msg_Id="m4"),
                b("b4", 1, "1", Nats_Expected_Last_Msg_Id="m4"), (I, ""), (D, "")],
    "msg_ids_without_window": [(C, atomic(duplicate_window=0, max_age=1_000_000_000 * 3600)),
                               pub("{S}.a", Nats_Msg_Id="m1"), b("b1", 1, "1", Nats_Msg_Id="m1"), (I, ""), (D, "")],
    "rollups": [(C, atomic(allow_rollup_hdrs=True)), pub("{S}.a"), pub("{S}.b"),
                b("b1", 1, subject="{S}.b"), b("b1", 2, "1", subject="{S}.a", Nats_Rollup="sub"),
                b("b2", 1), b("b2", 2, "1", Nats_Rollup="sub"),
                b("b3", 1), b("b3", 2, "1", subject="{S}.c", Nats_Rollup="all"),
                b("b4", 1, "1", Nats_Rollup="bad"), b("b5", 1, subject="{S}.c", Nats_Rollup="all"), b("b5", 2, "1"),
                (I, ""), (D, "")],
    "rollups_in_any_case": [(C, atomic(allow_rollup_hdrs=True)), pub("{S}.a"), pub("{S}.a"), pub("{S}.b"),
                            b("b1", 1, subject="{S}.b"), b("b1", 2, "1", Nats_Rollup="SUB"),
                            (I, {"subjects_filter": "{S}.>"}), b("b2", 1), b("b2", 2, "1", Nats_Rollup="All"),
                            b("b3", 1, "1", Nats_Rollup="BAD"), (I, {"subjects_filter": "{S}.>"}), (D, "")],
    "rollup_not_permitted": [(C, atomic()), b("b1", 1), b("b1", 2, "1", Nats_Rollup="sub"), (I, ""), (D, "")],
    "discard_new": [(C, atomic(max_msgs=3, discard="new")), pub("{S}.a"),
                    b("b1", 1), b("b1", 2), b("b1", 3, "1"), b("b2", 1), b("b2", 2, "1"), b("b3", 1, "1"),
                    (I, ""), (D, "")],
    "discard_new_bytes": [(C, atomic(max_bytes=200, discard="new")), b("b1", 1), b("b1", 2), b("b1", 3),
                          b("b1", 4, "1"), b("b2", 1), b("b2", 2, "1"), (I, ""), (D, "")],
    "discard_new_per_subject": [(C, atomic(max_msgs_per_subject=2, discard="new", discard_new_per_subject=True,
                                           allow_rollup_hdrs=True)),
                                b("b1", 1), b("b1", 2), b("b1", 3, "1", subject="{S}.b"),
                                b("b2", 1), b("b2", 2), b("b2", 3, "1"),
                                b("b3", 1, subject="{S}.b"), b("b3", 2, subject="{S}.b"),
                                b("b3", 3, "1", subject="{S}.b", Nats_Rollup="sub"), (I, ""), (D, "")],
    "discard_old_limits": [(C, atomic(max_msgs=2)), b("b1", 1), b("b1", 2), b("b1", 3, "1"), get(1), get(3),
                           (I, ""), (D, "")],
    "counters": [(C, atomic(allow_msg_counter=True)), pub("{S}.a", "", Nats_Incr="5"),
                 b("b1", 1, body="", Nats_Incr="1"), b("b1", 2, body="", subject="{S}.b", Nats_Incr="2"),
                 b("b1", 3, "1", body="", Nats_Incr="-10"), get(4), get(3),
                 b("b2", 1, body="", Nats_Incr="1"), b("b2", 2, "1", body=""),
                 b("b3", 1, body="x", Nats_Incr="1"), b("b4", 1, "1", body="", Nats_Incr="x"),
                 pub("{S}.a", "", Nats_Incr="0"), (I, ""), (D, "")],
    "counter_incr_outside_counter_stream": [(C, atomic()), b("b1", 1, "1", body="", Nats_Incr="1"), (D, "")],
    "ttls": [(C, atomic(allow_msg_ttl=True)), b("b1", 1, Nats_TTL="1h"), b("b1", 2, "1", Nats_TTL="never"),
             b("b2", 1), b("b2", 2, "1", Nats_TTL="bad"), get(1), (I, ""), (D, "")],
    "ttl_disabled": [(C, atomic()), b("b1", 1), b("b1", 2, "1", Nats_TTL="1h"), (I, ""), (D, "")],
    "marker_ttl": [(C, atomic(subject_delete_marker_ttl=60_000_000_000)), b("b1", 1, "1", Nats_TTL="2"), get(1),
                   (D, "")],
    "schedules": [(C, atomic(allow_msg_schedules=True, allow_msg_ttl=True)),
                  b("b1", 1, subject="{S}.sched", Nats_Schedule="@every 1h", Nats_Schedule_Target="{S}.t"),
                  b("b1", 2, "1", subject="{S}.x", Nats_Schedule_Next="purge", Nats_Scheduler="{S}.sched"),
                  get(1), get(2),
                  b("b2", 1, subject="{S}.plain"),
                  b("b2", 2, "1", subject="{S}.x", Nats_Schedule_Next="purge", Nats_Scheduler="{S}.plain"),
                  b("b3", 1, "1", subject="{S}.s2", Nats_Schedule="@every 1h", Nats_Schedule_Target="{S}.s2"),
                  (I, ""), (D, "")],
    "schedules_disabled": [(C, atomic()), b("b1", 1, "1", Nats_Schedule="@every 1h", Nats_Schedule_Target="{S}.t"),
                           (D, "")],
    "stream_source_header": [(C, atomic()), b("b1", 1, "1", Nats_Stream_Source="X 1 > > {S}.a"), (I, ""), (D, "")],
    "interest_without_consumers": [(C, atomic(retention="interest")), b("b1", 1), b("b1", 2, "1"), (I, ""), (D, "")],
    "subject_transform": [(C, atomic(subject_transform={"src": "{S}.in.>", "dest": "{S}.out.>"})),
                          b("b1", 1, subject="{S}.in.a"), b("b1", 2, "1", subject="{S}.in.b",
                                                               Nats_Expected_Last_Subject_Sequence="0"),
                          get(2), (D, "")],
    "republish": [(C, atomic(republish={"src": "{S}.>", "dest": "rp.{S}.>"})), b("b1", 1), b("b1", 2, "1"),
                  (I, ""), (D, "")],
    "no_ack": [(C, atomic(no_ack=True)), b("b1", 1), b("b1", 2, "1"), b("b2", 2), (I, ""), (D, "")],
    "update_turns_it_off": [(C, atomic()), b("b1", 1), (U, cfg()), b("b1", 2, "1"), (U, atomic()),
                            b("b1", 2, "1"), (I, ""), (D, "")],
    "config": [(C, atomic(storage="file", persist_mode="async")),
               (C, {"name": "{S}", "mirror": {"name": "X"}, "allow_atomic": True}), (C, atomic()), (I, ""),
               (U, cfg()), (U, atomic()), (D, "")],
}


@pytest.mark.parametrize("storage", ["memory", "file"])
@pytest.mark.parametrize("name", sorted(CASES))
async def test_atomic_batches_are_answered_like_nats_server(differential, name, storage):
    ours, theirs = await differential(on_storage(CASES[name], storage))
    assert ours == theirs


async def test_a_commit_is_acknowledged_with_the_batch_and_its_count(differential):
    ours, _ = await differential(CASES["commit_and_eob"])
    acks = [o for o in ours if isinstance(o, dict) and "batch" in o]
    assert [(a["seq"], a["batch"], a["count"]) for a in acks] == [(3, "b1", 3), (4, "b2", 1), (5, "b3", 1)]
    empty = ("raw", b"", {})  # each staged message: an empty reply
    assert ours[2:4] == [empty, empty] and ours[5] == empty


async def test_a_failing_check_anywhere_stores_nothing_of_the_batch(differential):
    ours, _ = await differential(CASES["discard_new"])
    codes = [o["error"]["err_code"] if isinstance(o, dict) and "error" in o else o for o in ours[1:-2]]
    assert codes[-3:] == [("raw", b"", {}), {"stream": ours[-3]["stream"], "seq": 3, "batch": "b2", "count": 2}, 10077]
    assert ours[-2]["state"]["messages"] == 3


async def _open_batches(nc: Any, name: str) -> list[Any]:
    """51 batches open on one stream (the 51st is too many), then 1000 messages in one batch and 1001."""
    await nc.jetstream().add_stream(name=name, subjects=[f"{name}.>"], allow_atomic=True)

    async def send(batch: str, seq: int, commit: str | None = None) -> Any:
        hdrs = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(seq), **({"Nats-Batch-Commit": commit} if commit else {})}
        msg = await nc.request(f"{name}.a", b"x", headers=hdrs, timeout=5)
        return json.loads(msg.data) if msg.data else ""

    out = [await send(f"o{i}", 1) for i in range(51)]
    out.append(await send("o0", 2, "1"))
    out.append(await send("o50", 1))  # room again
    for i in range(1, 50):
        await send(f"o{i}", 2, "eob")
    out += [await send("big", i) for i in range(1, 1000)]
    out.append(await send("big", 1000, "1"))
    out += [await send("big2", i) for i in range(1, 1001)][-1:]
    out.append(await send("big2", 1001, "1"))
    out.append(await send("big2", 1, "1"))
    info = await nc.jetstream().stream_info(name)
    out.append((info.state.messages, info.state.last_seq))
    await nc.jetstream().delete_stream(name)
    return out


async def test_the_open_batch_and_size_limits_are_nats_servers(on_both):
    ours, theirs = await on_both(_open_batches, "AL")
    assert normalise(ours) == normalise(theirs)
    assert ours[50]["error"]["err_code"] == 10210 and ours[-3]["error"]["err_code"] == 10199
    assert ours[-4] == "" and ours[-2]["count"] == 1 and ours[-1] == (1052, 1052)


async def _timeout(nc: Any, name: str) -> list[Any]:
    """An open batch goes 10 s after its last message (an advisory says so); one kept busy does not."""
    await nc.jetstream().add_stream(name=name, subjects=[f"{name}.>"], allow_atomic=True)
    adv = await nc.subscribe(f"$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.{name}")

    async def send(batch: str, seq: int, commit: str | None = None) -> Any:
        hdrs = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(seq), **({"Nats-Batch-Commit": commit} if commit else {})}
        msg = await nc.request(f"{name}.a", b"x", headers=hdrs, timeout=5)
        return json.loads(msg.data) if msg.data else ""

    out = [await send("slow", 1), await send("busy", 1)]
    for seq in range(2, 8):
        await asyncio.sleep(1.5)
        out.append(await send("busy", seq))
    out.append(await send("busy", 8, "1"))
    await asyncio.sleep(2.5)  # "slow" is 11.5 s old now
    out.append(await send("slow", 2, "1"))
    out.append(json.loads((await adv.next_msg(5)).data))
    out.append(await send("gap", 1))
    out.append(await send("gap", 3))
    out.append(json.loads((await adv.next_msg(5)).data))
    await nc.jetstream().delete_stream(name)
    return out


@pytest.mark.slow
async def test_an_open_batch_goes_after_ten_seconds_like_nats_server(on_both):
    ours, theirs = await on_both(_timeout, "AT")
    assert normalise(ours) == normalise(theirs)
    assert ours[8]["count"] == 8 and ours[9]["error"]["err_code"] == 10176
    assert (ours[10]["reason"], ours[10]["batch"], ours[13]["reason"]) == ("timeout", "slow", "incomplete")


async def _without_reply(nc: Any, name: str) -> list[Any]:
    """A batch published without reply subjects is stored at its commit all the same."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], allow_atomic=True)
    for seq in (1, 2, 3):
        hdrs = {"Nats-Batch-Id": "q", "Nats-Batch-Sequence": str(seq), **({"Nats-Batch-Commit": "1"} if seq == 3 else {})}
        await nc.publish(f"{name}.a", b"x", headers=hdrs)
    await nc.flush()
    await asyncio.sleep(0.2)  # no reply to wait for: give both servers a moment after the flush
    info = await js.stream_info(name)
    await js.delete_stream(name)
    return [info.state.messages, info.state.last_seq]


async def test_a_batch_without_replies_is_stored(on_both):
    ours, theirs = await on_both(_without_reply, "AR")
    assert ours == theirs == [3, 3]


async def test_other_clients_and_streams_are_unaffected_by_a_refused_batch(jsbroker_server, unique):
    name, other = unique("A"), unique("O")
    nc = await nats.connect(jsbroker_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[f"{name}.>"], allow_atomic=True, max_msgs=1, discard="new")
        await js.add_stream(name=other, subjects=[f"{other}.>"])
        hdrs = {"Nats-Batch-Id": "x", "Nats-Batch-Sequence": "1"}
        assert (await nc.request(f"{name}.a", b"1", headers=hdrs)).data == b""
        assert (await js.publish(f"{other}.a", b"plain")).seq == 1
        commit = await nc.request(f"{name}.a", b"2", headers={**hdrs, "Nats-Batch-Sequence": "2",
                                                               "Nats-Batch-Commit": "1"})
        assert json.loads(commit.data)["error"]["err_code"] == 10077
        assert (await js.stream_info(name)).state.messages == 0
        assert (await js.publish(f"{name}.a", b"alone")).seq == 1  # the stream takes plain publishes still
        assert (await js.stream_info(other)).state.messages == 1
    finally:
        await nc.close()


async def _copied(nc: Any, name: str) -> list[Any]:
    """A mirror and a source of a stream that took a batch copy its messages without the Nats-Batch-* headers."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], allow_atomic=True)
    for seq in (1, 2):
        hdrs = {"Nats-Batch-Id": "c", "Nats-Batch-Sequence": str(seq), "Nats-Msg-Id": f"m{seq}",
                **({"Nats-Batch-Commit": "1"} if seq == 2 else {})}
        await nc.request(f"{name}.a", b"x", headers=hdrs)
    mirror, source = f"{name}M", f"{name}S"
    await nc.request(f"$JS.API.STREAM.CREATE.{mirror}", json.dumps({"name": mirror, "mirror": {"name": name}}).encode())
    await nc.request(f"$JS.API.STREAM.CREATE.{source}", json.dumps(
        {"name": source, "subjects": [f"{source}.>"], "sources": [{"name": name}], "allow_atomic": True}).encode())
    out = []
    for copy in (mirror, source):
        await poll_async(lambda c=copy: _count(js, c), timeout=10, what=f"{copy} to copy 2 messages")
        msgs = [(await js.get_msg(copy, seq)).headers or {} for seq in (1, 2)]
        # the origin's identity (the last field of Nats-Stream-Source) hashes its creation time
        out.append([{k: v.rsplit(" ", 1)[0] if k == "Nats-Stream-Source" else v for k, v in h.items()} for h in msgs])
    for stream in (mirror, source, name):
        await js.delete_stream(stream)
    return out


async def _count(js: Any, stream: str) -> bool:
    return (await js.stream_info(stream)).state.messages == 2  # type: ignore[no-any-return]


async def test_mirrors_and_sources_copy_a_batch_without_its_batch_headers(on_both):
    ours, theirs = await on_both(_copied, "AC")
    assert ours == theirs
    assert not any(key.startswith("Nats-Batch-") for copies in ours for hdrs in copies for key in hdrs)


# -- restarts ---------------------------------------------------------------------------------------------


async def _before_restart(nc: Any, name: str) -> None:
    await nc.jetstream().add_stream(name=name, subjects=[f"{name}.>"], allow_atomic=True, storage="file")
    for seq in (1, 2, 3):
        hdrs = {"Nats-Batch-Id": "done", "Nats-Batch-Sequence": str(seq), **({"Nats-Batch-Commit": "1"} if seq == 3 else {})}
        await nc.request(f"{name}.a", b"c%d" % seq, headers=hdrs)
    await nc.request(f"{name}.a", b"o1", headers={"Nats-Batch-Id": "open", "Nats-Batch-Sequence": "1"})


async def _after_restart(nc: Any, name: str) -> list[Any]:
    js = nc.jetstream()
    info = await js.stream_info(name)
    msgs = [(m.seq, m.data, m.headers) for m in [await js.get_msg(name, s) for s in (1, 2, 3)]]
    late = await nc.request(f"{name}.a", b"o2", headers={"Nats-Batch-Id": "open", "Nats-Batch-Sequence": "2",
                                                         "Nats-Batch-Commit": "1"})
    return [info.state.messages, info.state.last_seq, msgs, json.loads(late.data)]


@pytest.mark.slow
@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
async def test_a_restart_keeps_committed_batches_and_drops_open_ones_like_nats_server(server_factory, kill):
    out = {}
    for kind in ("nats-server", "jsbroker"):
        server = server_factory(kind)
        nc = await nats.connect(server.url)
        await _before_restart(nc, "R")
        await nc.close()
        if kill:
            server.kill()
            server.start()
        else:
            server.restart()
        nc = await nats.connect(server.url)
        try:
            out[kind] = await _after_restart(nc, "R")
        finally:
            await nc.close()
    assert out["jsbroker"] == out["nats-server"]
    assert out["jsbroker"][:2] == [3, 3] and out["jsbroker"][3]["error"]["err_code"] == 10176


async def test_a_partial_batch_left_by_a_crash_inside_a_commit_goes_at_the_start(tmp_path):
    """The store ends with the first messages of a batch whose commit never got written (a torn write):
    the next start drops them, and the messages before stay."""
    from jsbroker import store as storage

    broker = launch(JSBROKER, store_dir=tmp_path / "store")
    try:
        nc = await nats.connect(broker.url)
        js = nc.jetstream()
        await js.add_stream(name="P", subjects=["P.>"], allow_atomic=True, storage="file")
        await js.publish("P.a", b"before")
        await nc.close()
        broker.stop()
        directory = next(d for d in storage.list_stream_dirs(storage.account_dir(tmp_path / "store", "$G")))
        store = storage.open_stream_store("file", directory, StreamConfig(name="P").store_limits(),
                                          storage.SyncPolicy())
        for seq in (1, 2):
            store.store_msg("P.a", headers.build(((headers.BATCH_ID, "torn"), (headers.BATCH_SEQUENCE, str(seq)))), b"t")
        store.close()
        broker.start()
        nc = await nats.connect(broker.url)
        js = nc.jetstream()
        info = await js.stream_info("P")
        assert (info.state.messages, info.state.first_seq) == (1, 1)
        assert (await js.get_msg("P", 1)).data == b"before"
        await nc.close()
    finally:
        broker.close()


PUBLISHER = r"""
import asyncio, sys, nats
async def main(url, out, prefix):
    nc = await nats.connect(url, max_reconnect_attempts=0)
    n = 0
    while True:
        n += 1
        size = 1 + n % 300
        for seq in range(1, size + 1):
            hdrs = {"Nats-Batch-Id": f"{prefix}{n}", "Nats-Batch-Sequence": str(seq)}
            if seq == size:
                hdrs["Nats-Batch-Commit"] = "1"
            msg = await nc.request("K.a", b"y" * 2000, headers=hdrs, timeout=10)
        if b'"batch"' in msg.data:
            with open(out, "a") as f:
                f.write(f"{prefix}{n} {size}\n")
asyncio.run(main(*sys.argv[1:4]))
"""


@pytest.mark.slow
async def test_kill_9_during_commits_leaves_each_batch_whole_or_absent(tmp_path):
    """A publisher commits batches of 1..300 messages of 2 KB (a commit may span store blocks) while the
    broker is killed: after each restart every batch in the store is complete, and every acknowledged
    one is there."""
    broker = launch(JSBROKER, store_dir=tmp_path / "store", extra_args=[])
    acked = tmp_path / "acked.txt"
    acked.touch()
    rng = random.Random(os.getpid())
    try:
        nc = await nats.connect(broker.url)
        await nc.jetstream().add_stream(name="K", subjects=["K.>"], allow_atomic=True, storage="file",
                                        max_bytes=64 * 1024 * 1024)
        await nc.close()
        for round_ in range(3):
            child = subprocess.Popen([sys.executable, "-c", PUBLISHER, broker.url, str(acked), f"r{round_}."])
            try:
                await asyncio.sleep(rng.uniform(1.0, 3.0))
                broker.kill()
            finally:
                child.kill()
                child.wait(timeout=10)
            broker.start()
            counts = await _batch_counts(broker.url)
            done = dict(line.split() for line in acked.read_text().splitlines())
            for batch, size in done.items():
                assert counts.get(batch) == (int(size), int(size)), f"acknowledged batch {batch} not whole"
            torn = {k: v for k, v in counts.items() if v[0] != v[1]}
            assert not torn, f"partial batches after kill -9: {torn}"
    finally:
        broker.close()


async def _batch_counts(url: str) -> dict[str, tuple[int, int]]:
    """batch id -> (messages stored, the batch's size by its commit message)."""
    nc = await nats.connect(url)
    try:
        sub = await nc.jetstream().subscribe("K.>", ordered_consumer=True)
        info = await nc.jetstream().stream_info("K")
        counts: dict[str, list[int]] = {}
        for _ in range(info.state.messages):
            msg = await sub.next_msg(10)
            entry = counts.setdefault(msg.headers["Nats-Batch-Id"], [0, -1])
            entry[0] += 1
            if "Nats-Batch-Commit" in msg.headers:
                entry[1] = int(msg.headers["Nats-Batch-Sequence"])
        return {k: (v[0], v[1]) for k, v in counts.items()}
    finally:
        await nc.close()


# -- the pure state machine -----------------------------------------------------------------------------


def _msg(batch: str, seq: str, commit: str | None = None) -> atomic_batch.Msg:
    pairs = [(headers.BATCH_ID, batch), (headers.BATCH_SEQUENCE, seq)] + ([(headers.BATCH_COMMIT, commit)] if commit else [])
    return atomic_batch.Msg("s.a", headers.build(pairs), b"x")


def _refusal(batches: atomic_batch.Batches, batch: str, seq: str, commit: str | None = None,
             now: int = 0) -> tuple[int, str]:
    with pytest.raises(atomic_batch.Refused) as info:
        batches.stage(batch, _msg(batch, seq, commit), now)
    return info.value.error.err_code, info.value.abandoned


def test_staging_commits_eob_gaps_and_timeouts():
    inflight = atomic_batch.Inflight()
    batches = atomic_batch.Batches(inflight)
    assert batches.stage("a", _msg("a", "1"), 0) is None and inflight.count == 1
    done = batches.stage("a", _msg("a", "2", "1"), 5)
    assert [headers.get(m.hdr, headers.BATCH_SEQUENCE) for m in done or []] == ["1", "2"] and inflight.count == 0
    assert batches.stage("e", _msg("e", "1"), 0) is None
    (last,) = batches.stage("e", _msg("e", "2", "eob"), 0) or []
    assert headers.get(last.hdr, headers.BATCH_COMMIT) == "1"
    batches.stage("g", _msg("g", "1"), 0)
    assert _refusal(batches, "g", "3") == (10176, atomic_batch.INCOMPLETE) and len(batches) == 0
    assert _refusal(batches, "g", "2") == (10176, "")  # the batch is gone: no advisory again
    batches.stage("t", _msg("t", "1"), 0)
    assert batches.next_deadline() == atomic_batch.TIMEOUT_NS
    assert batches.expire(atomic_batch.TIMEOUT_NS - 1) == [] and batches.expire(atomic_batch.TIMEOUT_NS) == ["t"]
    assert inflight.count == 0


def test_limits_of_open_batches_are_per_stream_and_server_wide():
    inflight = atomic_batch.Inflight()
    one, two = atomic_batch.Batches(inflight), atomic_batch.Batches(inflight)
    for i in range(atomic_batch.MAX_INFLIGHT_PER_STREAM):
        one.stage(f"b{i}", _msg(f"b{i}", "1"), 0)
    assert _refusal(one, "x", "1") == (errors.ATOMIC_PUBLISH_TOO_MANY_INFLIGHT.err_code, "")
    inflight.count = atomic_batch.MAX_INFLIGHT_TOTAL
    assert _refusal(two, "x", "1")[0] == 10210
    one.clear()
    assert inflight.count == atomic_batch.MAX_INFLIGHT_TOTAL - atomic_batch.MAX_INFLIGHT_PER_STREAM
    assert _refusal(two, "y", str(atomic_batch.MAX_SIZE + 1)) == (10199, "")
    assert _refusal(two, "b" * 65, "1") == (10179, "") and _refusal(two, "z", "1", "yes") == (10200, "")


def test_a_message_with_only_batch_headers_skips_the_header_checks():
    plain = _msg("a", "1", "1").hdr
    assert atomic_batch.only_batch_headers(plain)
    assert not atomic_batch.only_batch_headers(headers.append(plain, ((headers.MSG_ID, "m"),)))
    assert not atomic_batch.only_batch_headers(headers.build(((headers.MSG_ID, "Nats-Batch-x"),)))
