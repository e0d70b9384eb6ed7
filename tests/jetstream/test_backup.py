"""Stream backup and restore ($JS.API.STREAM.SNAPSHOT / RESTORE, jetstream/snapshot*.py) against nats-server.

The same scenario on both servers: a stream with headers, an interior deletion, a purged head, a removed
tail and consumers part way through; backed up and restored with nats-py over the raw API and with the
Go `nats` CLI. On each server the restored stream must equal the original exactly (messages with their
headers and times, sequences, deletions, consumer positions); across servers the normalised results
must be equal. Bad input (an existing stream, a truncated or corrupt archive, a missing stream, another
server's archive) gets the same error codes; a restored stream survives SIGTERM and kill -9; a stalled
receiver gets nats-server's 408 while other clients are served.

Both servers use nats-server 2.15's archive format (natscli only decompresses it to show progress and
stores it), so a backup from either restores into the other (tested both ways)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.differential import normalise
from tests.servers import JSBROKER, NATS_SERVER, launch


async def api(nc: Any, subject: str, body: Any = None, timeout: float = 5.0) -> dict[str, Any]:
    data = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
    return json.loads((await nc.request(subject, data, timeout=timeout)).data)


async def snapshot(nc: Any, name: str, **fields: Any) -> tuple[dict[str, Any], bytes, dict[str, str] | None]:
    """(the response, the archive, the closing message's headers) of a raw SNAPSHOT, every chunk acked."""
    inbox, archive = nc.new_inbox(), bytearray()
    done: asyncio.Future[dict[str, str] | None] = asyncio.get_running_loop().create_future()

    async def on_chunk(msg: Any) -> None:
        if not msg.data:
            if not done.done():
                done.set_result(msg.headers)
            return
        archive.extend(msg.data)
        if msg.reply:
            await nc.publish(msg.reply, b"")

    sub = await nc.subscribe(inbox, cb=on_chunk)
    try:
        resp = await api(nc, f"$JS.API.STREAM.SNAPSHOT.{name}", {"deliver_subject": inbox, **fields})
        if "error" in resp:
            return resp, b"", None
        closing = await asyncio.wait_for(done, 30)
        return resp, bytes(archive), closing
    finally:
        await sub.unsubscribe()


async def restore(nc: Any, name: str, meta: dict[str, Any], archive: bytes, chunk: int = 64 * 1024) -> dict[str, Any]:
    """The closing answer of a raw RESTORE (or the request's own error), chunks sent as natscli sends them."""
    resp = await api(nc, f"$JS.API.STREAM.RESTORE.{name}", {"config": meta["config"], "state": meta["state"]})
    if "error" in resp:
        return resp
    for start in range(0, len(archive), chunk):
        ack = await nc.request(resp["deliver_subject"], archive[start:start + chunk], timeout=5)
        assert ack.data == b"", ack.data  # each chunk is acknowledged with an empty message
    return json.loads((await nc.request(resp["deliver_subject"], b"", timeout=60)).data)


async def build(nc: Any, name: str, storage: str = "file", retention: str = "limits") -> None:
    """A stream whose state has every shape a restore must keep, with consumers part way through."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], storage=storage, retention=retention)
    await js.add_consumer(name, durable_name="PULL", ack_policy="explicit", filter_subject=f"{name}.1")
    await js.add_consumer(name, durable_name="ALL", ack_policy="all", deliver_policy="by_start_sequence",
                          opt_start_seq=20)
    for i in range(40):
        await js.publish(f"{name}.{i % 3}", f"body {i}".encode() * (i + 1), headers={"N": str(i)} if i % 2 else None)
    await js.purge_stream(name, seq=4)  # the first sequence is 4
    for seq in (10, 11, 40):  # interior gaps and a removed last message
        await js.delete_msg(name, seq)
    sub = await js.pull_subscribe_bind("PULL", name)
    msgs = await sub.fetch(6)
    for m in msgs[:2]:
        await m.ack()
    await msgs[4].ack()  # an ack above the floor
    await msgs[3].nak()
    await sub.unsubscribe()


async def contents(nc: Any, name: str) -> dict[str, Any]:
    """Everything a restore must keep: the stream's config and state, every message and every consumer."""
    info = await api(nc, f"$JS.API.STREAM.INFO.{name}")
    state = info["state"]
    messages = []
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        got = await api(nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
        messages.append(got.get("message") or got["error"]["err_code"])
    names = (await api(nc, f"$JS.API.CONSUMER.NAMES.{name}"))["consumers"] or []
    consumers = {c: await api(nc, f"$JS.API.CONSUMER.INFO.{name}.{c}") for c in sorted(names)}
    for c in consumers.values():  # a restored consumer has not been active yet, on both servers
        for key in ("ts", "created"):
            c.pop(key, None)
        for key in ("delivered", "ack_floor"):
            c[key].pop("last_active", None)
    return {"config": info["config"], "state": state, "messages": messages, "consumers": consumers}


def comparable(found: dict[str, Any]) -> dict[str, Any]:
    """Across servers: times and server-made values normalised (the stream's metadata names the version)."""
    out = normalise(found)
    out["config"].get("metadata", {}).pop("_nats.level", None)
    for c in out["consumers"].values():
        c["config"].get("metadata", {}).pop("_nats.level", None)
    return out


def same_stream(before: dict[str, Any], after: dict[str, Any]) -> None:
    """On one server: the restored stream equals the original (times included), bar creation times."""
    assert after["messages"] == before["messages"]
    assert {k: v for k, v in after["state"].items() if k != "last_ts"} == \
        {k: v for k, v in before["state"].items() if k != "last_ts"}
    # the removed last message's time is gone: last_ts is that of the last message left, on both servers
    last = [m for m in after["messages"] if isinstance(m, dict)][-1]
    assert after["state"]["last_ts"] == last["time"]
    assert after["config"] == before["config"]
    assert after["consumers"] == before["consumers"]


async def round_trip(url: str, name: str, storage: str = "file", retention: str = "limits"
                     ) -> tuple[dict[str, Any], dict[str, Any], Any]:
    nc = await nats.connect(url)
    try:
        await build(nc, name, storage, retention)
        before = await contents(nc, name)
        meta, archive, closing = await snapshot(nc, name, chunk_size=1024)
        assert (closing or {}).get("Status") == "204", closing  # full chunks went out: the closing 204
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
        done = await restore(nc, name, meta, archive, chunk=700)
        assert done["type"] == "io.nats.jetstream.api.v1.stream_create_response" and "error" not in done, done
        after = await contents(nc, name)
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
        return before, after, normalise([meta, done])  # the snapshot response and the restore's answer
    finally:
        await nc.close()


@pytest.mark.parametrize("storage,retention", [("file", "limits"), ("memory", "limits"), ("file", "interest")])
async def test_raw_round_trip_keeps_everything(nats_server, jsbroker_server, unique, storage, retention):
    """nats-py over the raw API: SNAPSHOT, DELETE, RESTORE gives the same stream back on each server, and
    the two servers' results agree (normalised)."""
    name = unique("BK")
    theirs = await round_trip(nats_server.url, name, storage, retention)
    ours = await round_trip(jsbroker_server.url, name, storage, retention)
    assert ours[2] == theirs[2]
    if retention == "limits":
        same_stream(*theirs[:2])
        same_stream(*ours[:2])
    else:  # both servers remove what is at or below the consumers' ack floors when the restore ends
        assert ours[1]["consumers"] == ours[0]["consumers"] and ours[1]["state"]["first_seq"] == 14
    assert comparable(ours[1]) == comparable(theirs[1])
    if retention == "limits":  # the shape was built
        assert ours[1]["state"]["first_seq"] == 4 and ours[1]["state"]["num_deleted"] == 3
    assert ours[1]["consumers"][f"PULL"]["num_ack_pending"] == 3


async def test_snapshot_without_consumers(server, unique):
    name = unique("NC")
    nc = await nats.connect(server.url)
    try:
        await build(nc, name)
        meta, archive, _ = await snapshot(nc, name, no_consumers=True)
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
        done = await restore(nc, name, meta, archive)
        assert done["state"]["consumer_count"] == 0 and done["state"]["messages"] == 34
        assert (await api(nc, f"$JS.API.CONSUMER.NAMES.{name}"))["consumers"] in (None, [])
    finally:
        await nc.close()


async def test_bad_requests_get_nats_servers_errors(nats_server, jsbroker_server, unique):
    """Snapshot of a missing stream, bad deliver subjects, empty bodies, restore onto an existing stream,
    a name mismatch: the same answers."""

    async def answers(url: str, name: str) -> list[Any]:
        nc = await nats.connect(url)
        try:
            await nc.jetstream().add_stream(name=name, subjects=[f"{name}.>"])
            meta = await api(nc, f"$JS.API.STREAM.INFO.{name}")
            return [
                await api(nc, f"$JS.API.STREAM.SNAPSHOT.{name}_MISSING", {"deliver_subject": "x"}),
                await api(nc, f"$JS.API.STREAM.SNAPSHOT.{name}", {"deliver_subject": "x.*"}),
                await api(nc, f"$JS.API.STREAM.SNAPSHOT.{name}", {"chunk_size": 5}),
                await api(nc, f"$JS.API.STREAM.SNAPSHOT.{name}", b"{}"),
                await api(nc, f"$JS.API.STREAM.SNAPSHOT.{name}", b"{bad"),
                await api(nc, f"$JS.API.STREAM.RESTORE.{name}", {"config": meta["config"]}),
                await api(nc, f"$JS.API.STREAM.RESTORE.{name}_OTHER", {"config": meta["config"]}),
                await api(nc, f"$JS.API.STREAM.RESTORE.{name}_X", b""),
                await api(nc, f"$JS.API.STREAM.RESTORE.{name}_X", {"config": {"subjects": ["a b"]}}),
            ]
        finally:
            await nc.close()

    name = unique("BAD")
    ours, theirs = await answers(jsbroker_server.url, name), await answers(nats_server.url, name)
    for answer in ours + theirs:  # the 10025 text is Go's decoder's
        if answer.get("error", {}).get("err_code") == 10025:
            answer["error"]["description"] = "<invalid JSON>"
    assert ours == theirs
    assert [a["error"]["err_code"] for a in ours] == [10059, 10015, 10015, 10003, 10025, 10130, 10056, 10003, 10052]


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "garbage"])
async def test_damaged_archive_is_refused_and_leaves_nothing(server, unique, damage):
    """A truncated or corrupt archive: 10062 "restore failed: ..." at the end, no stream left behind,
    and the good archive restores afterwards."""
    name = unique("DMG")
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[f"{name}.>"])
        for i in range(300):
            await js.publish(f"{name}.x", os.urandom(200))
        meta, archive, _ = await snapshot(nc, name)
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
        bad = {"truncated": archive[: len(archive) // 2],
               "corrupt": archive[:3000] + bytes([archive[3000] ^ 0xFF]) + archive[3001:],
               "garbage": b"this is not an archive at all" * 10}[damage]
        done = await restore(nc, name, meta, bad)
        assert done["error"]["code"] == 500 and done["error"]["err_code"] == 10062, done
        assert done["error"]["description"].startswith("restore failed: ")
        if server.kind == JSBROKER:
            assert done["error"]["description"].endswith("take the backup again"), done
        assert (await api(nc, f"$JS.API.STREAM.INFO.{name}"))["error"]["err_code"] == 10059
        done = await restore(nc, name, meta, archive)
        assert done["state"]["messages"] == 300
    finally:
        await nc.close()


@pytest.mark.parametrize("direction", ["nats-server -> jsbroker", "jsbroker -> nats-server"])
async def test_archives_move_between_servers(nats_server, jsbroker_server, unique, direction):
    """Both servers write and read nats-server 2.15's archive: a backup taken on one restores into the
    other with the same messages, sequences, deletions and consumer positions (normalised)."""
    source, target = (nats_server, jsbroker_server) if direction.startswith("nats") else (jsbroker_server, nats_server)
    name = unique("X")
    nc = await nats.connect(source.url)
    try:
        await build(nc, name)
        before = await contents(nc, name)
        meta, archive, _ = await snapshot(nc, name)
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
    finally:
        await nc.close()
    nc = await nats.connect(target.url)
    try:
        done = await restore(nc, name, meta, archive)
        assert "error" not in done, done
        after = await contents(nc, name)
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
    finally:
        await nc.close()
    assert after["messages"] == before["messages"]  # times too: they travel in the archive
    assert comparable(after) == comparable(before)


async def test_stalled_receiver_gets_408_and_others_are_served(server, unique):
    """A receiver that never acks: after the window is full, 5 s later the closing message says
    `408 No Flow Response`; meanwhile another client's publishes are answered at once."""
    name = unique("STALL")
    nc, other = await nats.connect(server.url), await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[f"{name}.>"])
        for i in range(100):
            await js.publish(f"{name}.x", os.urandom(1000))  # incompressible: many chunks
        inbox, seen = nc.new_inbox(), []
        closing: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        async def on_chunk(msg: Any) -> None:
            seen.append(msg.reply)
            if not msg.data and not closing.done():
                closing.set_result(msg.headers)

        await nc.subscribe(inbox, cb=on_chunk)
        resp = await api(nc, f"$JS.API.STREAM.SNAPSHOT.{name}",
                         {"deliver_subject": inbox, "chunk_size": 1024, "window_size": 4096})
        assert resp["state"]["messages"] == 100
        ack = await other.jetstream().publish(f"{name}.y", b"while a snapshot waits", timeout=1)
        assert ack.seq == 101
        headers = await asyncio.wait_for(closing, 15)
        assert headers == {"Status": "408", "Description": "No Flow Response"}
        assert len(seen) == 5  # four chunks filled the window, then the closing message
        assert all(r.startswith(f"$JS.SNAPSHOT.ACK.{name}.") and r.endswith(f".1024.{i}")
                   for i, r in enumerate(seen[:4], 1))
    finally:
        await nc.close()
        await other.close()


@pytest.mark.parametrize("how", ["sigterm", "kill"])
async def test_restored_stream_survives_a_restart(server_factory, server_kind, unique, how):
    """Restored data is durable: after SIGTERM or kill -9 right after the restore's answer, the restart
    has the same stream, messages and consumers. After kill -9 that is jsbroker's promise: nats-server may
    come back with its restored consumers' positions lost (seen: a pull consumer's pending 11 for 5, its
    ack pending 0 for 3), so there only the stream, its messages and the consumers' configs are compared."""
    handle = server_factory(server_kind)
    name = unique("DUR")
    nc = await nats.connect(handle.url)
    await build(nc, name)
    before = await contents(nc, name)
    meta, archive, _ = await snapshot(nc, name)
    await api(nc, f"$JS.API.STREAM.DELETE.{name}")
    assert "error" not in await restore(nc, name, meta, archive)
    await nc.close()
    handle.stop() if how == "sigterm" else handle.kill()
    handle.start()
    nc = await nats.connect(handle.url)
    try:
        after = await contents(nc, name)
    finally:
        await nc.close()
    if how == "kill" and server_kind == NATS_SERVER:
        before["consumers"] = {c: info["config"] for c, info in before["consumers"].items()}
        after["consumers"] = {c: info["config"] for c, info in after["consumers"].items()}
    same_stream(before, after)


# -- the Go nats CLI ----------------------------------------------------------------------------------


def test_nats_cli_backup_and_restore(server_factory, tmp_path):
    """`nats stream backup --consumers` and `nats stream restore` (natscli) give the same results on both
    servers: the restored stream and consumer as before, and a second restore refused."""
    from tests.chart import go_tools

    cli = str(go_tools.NATS_CLI.for_test())

    def transcript(kind: str) -> list[Any]:
        handle = server_factory(kind)
        home = tmp_path / kind

        def run(*args: str) -> tuple[int, str]:
            done = subprocess.run([cli, "--server", handle.url, "--timeout", "10s", *args], capture_output=True,
                                  text=True, timeout=120, env={"HOME": str(home)})
            return done.returncode, done.stdout + done.stderr

        def info() -> Any:
            stream = json.loads(run("stream", "info", "S", "--json")[1])
            consumer = json.loads(run("consumer", "info", "S", "D", "--json")[1])
            for key in ("delivered", "ack_floor"):  # a restored consumer has not been active yet (both)
                consumer[key].pop("last_active", None)
            return normalise([stream["state"], {k: consumer[k] for k in ("delivered", "ack_floor", "num_pending",
                                                                          "num_ack_pending")}])

        run("stream", "add", "S", "--subjects", "s.>", "--defaults")
        run("pub", "s.a", "hello {{Count}}", "--count", "50", "-H", "X:{{Count}}")
        run("stream", "rmm", "S", "7", "-f")
        run("consumer", "add", "S", "D", "--pull", "--defaults")
        run("consumer", "next", "S", "D", "--count", "5")
        before = info()
        out: list[Any] = [run("stream", "backup", "S", str(home / "bk"), "--consumers")[0],
                          sorted(p.name for p in (home / "bk").iterdir()),
                          run("stream", "rm", "S", "-f")[0], run("stream", "restore", str(home / "bk"))[0]]
        after = info()
        assert after == before, kind
        code, text = run("stream", "restore", str(home / "bk"))
        out += [after, code, "already exist" in text]
        return out

    ours, theirs = transcript(JSBROKER), transcript(NATS_SERVER)
    assert ours == theirs
    assert ours[1] == ["backup.json", "stream.arc.s2"] and ours[-2:] == [1, True]


async def test_an_archive_priority_group_consumer_restores(nats_server, jsbroker_server, unique):
    """A nats-server backup with a priority-group consumer restores into jsbroker with that consumer (its
    policy and groups kept), and without consumers when the backup has none."""
    name = unique("PG")
    nc = await nats.connect(nats_server.url)
    try:
        await nc.jetstream().add_stream(name=name, subjects=[f"{name}.>"])
        await nc.jetstream().publish(f"{name}.a", b"x")
        await api(nc, f"$JS.API.CONSUMER.CREATE.{name}.PIN", {"stream_name": name, "config": {
            "durable_name": "PIN", "ack_policy": "explicit", "priority_policy": "pinned_client",
            "priority_groups": ["g"]}})
        with_consumers = await snapshot(nc, name)
        without = await snapshot(nc, name, no_consumers=True)
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
    finally:
        await nc.close()
    nc = await nats.connect(jsbroker_server.url)
    try:
        done = await restore(nc, name, with_consumers[0], with_consumers[1])
        assert done["state"]["messages"] == 1 and done["state"]["consumer_count"] == 1, done
        pin = await api(nc, f"$JS.API.CONSUMER.INFO.{name}.PIN")
        assert (pin["config"]["priority_policy"], pin["config"]["priority_groups"], pin["num_pending"]) == (
            "pinned_client", ["g"], 1)
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
        done = await restore(nc, name, without[0], without[1])
        assert done["state"]["messages"] == 1 and done["state"]["consumer_count"] == 0
    finally:
        await nc.close()


async def test_health_checked_snapshot(server, unique):
    """`jsck` (natscli --check): every message is read back first; the snapshot is the same."""
    name = unique("CK")
    nc = await nats.connect(server.url)
    try:
        await build(nc, name)
        meta, archive, closing = await snapshot(nc, name, jsck=True, chunk_size=1024)
        assert meta["state"]["messages"] == 34 and closing == {"Status": "204"}
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
        assert (await restore(nc, name, meta, archive))["state"]["messages"] == 34
    finally:
        await nc.close()


async def test_a_crash_during_a_restore_leaves_nothing(server_factory, unique):
    """kill -9 while the chunks arrive: after the restart the stream does not exist, nothing of it is left
    in the store directory, and the restore can be done again."""
    handle = server_factory(JSBROKER)
    name = unique("CR")
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    for i in range(2000):
        await js.publish(f"{name}.x", os.urandom(100))
    meta, archive, _ = await snapshot(nc, name)
    await api(nc, f"$JS.API.STREAM.DELETE.{name}")
    resp = await api(nc, f"$JS.API.STREAM.RESTORE.{name}", {"config": meta["config"], "state": meta["state"]})
    await nc.request(resp["deliver_subject"], archive[: len(archive) // 2], timeout=5)
    await nc.close()
    assert handle.store_dir is not None
    handle.kill()
    handle.start()
    restores = handle.store_dir / "jetstream" / "$G" / "restores"
    assert not restores.exists() or not any(restores.iterdir())
    assert not (handle.store_dir / "jetstream" / "$G" / "streams" / name).exists()
    nc = await nats.connect(handle.url)
    try:
        assert (await api(nc, f"$JS.API.STREAM.INFO.{name}"))["error"]["err_code"] == 10059
        assert (await restore(nc, name, meta, archive))["state"]["messages"] == 2000
    finally:
        await nc.close()


async def test_a_staged_restore_left_by_a_crash_is_removed_at_start(server_factory, tmp_path):
    """A crash after a file stream was staged but before its rename leaves a whole stream directory under
    restores/: the next start removes it and no stream appears (the rename is the commit)."""
    store = tmp_path / "store"
    handle = server_factory(JSBROKER, store_dir=store)
    nc = await nats.connect(handle.url)
    await nc.jetstream().add_stream(name="S", subjects=["s.>"])
    await nc.jetstream().publish("s.a", b"x")
    await nc.close()
    handle.stop()
    staged = store / "jetstream" / "$G" / "restores" / "T.x1"
    (store / "jetstream" / "$G" / "restores").mkdir(parents=True)
    shutil.copytree(store / "jetstream" / "$G" / "streams" / "S", staged)  # a whole stream, as _stage leaves it
    handle.start()
    assert not staged.exists()
    nc = await nats.connect(handle.url)
    try:
        assert (await api(nc, "$JS.API.STREAM.NAMES"))["streams"] == ["S"]
    finally:
        await nc.close()


@pytest.mark.parametrize("how", ["idle", "no reply"])
async def test_an_abandoned_restore_stops_listening(server, unique, how):
    """5 s without a chunk, or a chunk without a reply subject: the restore is dropped (its subject has
    no responder any more) and no stream appears; a new restore works."""
    name = unique("AB")
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[f"{name}.>"])
        await js.publish(f"{name}.a", b"x")
        meta, archive, _ = await snapshot(nc, name)
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
        resp = await api(nc, f"$JS.API.STREAM.RESTORE.{name}", {"config": meta["config"], "state": meta["state"]})
        if how == "idle":
            await nc.request(resp["deliver_subject"], archive[:10], timeout=5)
            await asyncio.sleep(6)  # waiting out the server's 5 s idle limit is the behaviour under test
        else:
            await nc.publish(resp["deliver_subject"], archive[:10])

        with pytest.raises(nats.errors.NoRespondersError):  # (a closing request would end a live restore)
            await nc.request(resp["deliver_subject"], b"", timeout=2)
        assert (await api(nc, f"$JS.API.STREAM.INFO.{name}"))["error"]["err_code"] == 10059
        assert (await restore(nc, name, meta, archive))["state"]["messages"] == 1
    finally:
        await nc.close()


async def test_publishes_during_a_snapshot_are_served_and_not_in_it(server, unique):
    """Another client publishes while a snapshot is sent in small chunks: every publish is acked, and the
    archive holds exactly the state the snapshot response announced."""
    name = unique("LIVE")
    nc, other = await nats.connect(server.url), await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[f"{name}.>"])
        for i in range(3000):
            await js.publish(f"{name}.x", os.urandom(300))
        publishing = asyncio.ensure_future(asyncio.gather(
            *(other.jetstream().publish(f"{name}.y", b"during", timeout=10) for _ in range(500))))
        meta, archive, closing = await snapshot(nc, name, chunk_size=4096)
        acks = await publishing
        assert len(acks) == 500 and closing == {"Status": "204"}
        await api(nc, f"$JS.API.STREAM.DELETE.{name}")
        done = await restore(nc, name, meta, archive)
        assert {k: done["state"][k] for k in ("messages", "first_seq", "last_seq")} == \
            {k: meta["state"][k] for k in ("messages", "first_seq", "last_seq")}
    finally:
        await nc.close()
        await other.close()


def test_nats_cli_moves_a_stream_between_servers(server_factory, tmp_path):
    """`nats stream backup --consumers --check` on one server, `nats stream restore` on the other, both
    ways: the same stream state and consumer positions arrive."""
    from tests.chart import go_tools

    cli = str(go_tools.NATS_CLI.for_test())
    servers = {kind: server_factory(kind) for kind in (JSBROKER, NATS_SERVER)}

    def run(kind: str, *args: str) -> tuple[int, str]:
        done = subprocess.run([cli, "--server", servers[kind].url, "--timeout", "10s", *args], capture_output=True,
                              text=True, timeout=120, env={"HOME": str(tmp_path)})
        return done.returncode, done.stdout + done.stderr

    def info(kind: str, stream: str) -> Any:
        state = json.loads(run(kind, "stream", "info", stream, "--json")[1])["state"]
        consumer = json.loads(run(kind, "consumer", "info", stream, "D", "--json")[1])
        return normalise([state, {k: consumer[k]["stream_seq"] for k in ("delivered", "ack_floor")},
                          consumer["num_pending"], consumer["num_ack_pending"]])

    for source, target in ((JSBROKER, NATS_SERVER), (NATS_SERVER, JSBROKER)):
        stream = f"FROM_{source.replace('-', '_').upper()}"
        run(source, "stream", "add", stream, "--subjects", f"{stream}.>", "--defaults")
        run(source, "pub", f"{stream}.a", "hello {{Count}}", "--count", "30")
        run(source, "stream", "rmm", stream, "3", "-f")
        run(source, "consumer", "add", stream, "D", "--pull", "--defaults")
        run(source, "consumer", "next", stream, "D", "--count", "4")
        before = info(source, stream)
        code, text = run(source, "stream", "backup", stream, str(tmp_path / stream), "--consumers", "--check")
        assert code == 0, text
        code, text = run(target, "stream", "restore", str(tmp_path / stream))
        assert code == 0, text
        assert info(target, stream) == before, (source, target)


def test_nats_cli_account_backup_and_restore(server_factory, tmp_path):
    """`nats account backup` / `nats account restore` (every stream, a memory one too): the same on both."""
    from tests.chart import go_tools

    cli = str(go_tools.NATS_CLI.for_test())

    def transcript(kind: str) -> list[Any]:
        handle = server_factory(kind)

        def run(*args: str) -> tuple[int, str]:
            done = subprocess.run([cli, "--server", handle.url, "--timeout", "10s", *args], capture_output=True,
                                  text=True, timeout=120, env={"HOME": str(tmp_path)})
            return done.returncode, done.stdout + done.stderr

        def states() -> Any:
            return normalise([json.loads(run("stream", "info", s, "--json")[1])["state"] for s in ("A", "B")])

        run("stream", "add", "A", "--subjects", "a.>", "--defaults")
        run("stream", "add", "B", "--subjects", "b.>", "--defaults", "--storage", "memory")
        run("pub", "a.x", "hello {{Count}}", "--count", "20")
        run("pub", "b.x", "hello {{Count}}", "--count", "10")
        before = states()
        target = tmp_path / kind
        out: list[Any] = [run("account", "backup", str(target), "-f")[0],
                          sorted(str(p.relative_to(target)) for p in target.rglob("*"))]
        out += [run("stream", "rm", s, "-f")[0] for s in ("A", "B")]
        out += [run("account", "restore", str(target))[0], run("stream", "ls", "-n")[1].split()]
        assert states() == before, kind
        return out + [before]

    ours, theirs = transcript(JSBROKER), transcript(NATS_SERVER)
    assert ours == theirs
    assert ours[0] == 0 and ours[-2] == ["A", "B"]


async def test_empty_and_purged_streams(nats_server, jsbroker_server, unique):
    """A stream that never held a message and one whose messages were all purged: the restores agree
    (the never used one comes back with first_seq 1) and the next publish gets the same sequence."""

    async def run(url: str, empty: str, purged: str) -> list[Any]:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            await js.add_stream(name=empty, subjects=[f"{empty}.>"])
            await js.add_stream(name=purged, subjects=[f"{purged}.>"])
            for _ in range(5):
                await js.publish(f"{purged}.x", b"x")
            await js.purge_stream(purged)
            out: list[Any] = []
            for name in (empty, purged):
                meta, archive, closing = await snapshot(nc, name)
                await api(nc, f"$JS.API.STREAM.DELETE.{name}")
                done = await restore(nc, name, meta, archive)
                out += [normalise([meta["state"], closing, done["state"]]),
                        (await js.publish(f"{name}.x", b"after")).seq]
            return out
        finally:
            await nc.close()

    empty, purged = unique("EMPTY"), unique("PURGED")
    ours, theirs = await run(jsbroker_server.url, empty, purged), await run(nats_server.url, empty, purged)
    assert ours == theirs
    assert ours[1] == 1 and ours[3] == 6


def test_a_restore_past_the_account_limit_is_refused(tmp_path):
    """Account max_file 2 MB: a 1.5 MB archive restores into an empty account, and is refused (10047)
    while another stream holds 1 MB, as nats-server reserves the archive's bytes; nothing is left."""
    limits = {"max_streams": 5, "max_consumers": 5, "max_mem": 1 << 20, "max_file": 2 << 20}
    ours = tmp_path / "jsbroker.toml"
    ours.write_text("[authorization]\nuser = \"a\"\npassword = \"a\"\n\n[jetstream.account]\n"
                    + "".join(f"{k} = {v}\n" for k, v in limits.items()))
    theirs = tmp_path / "nats-server.json"
    theirs.write_text(json.dumps({"accounts": {"A": {"jetstream": limits, "users": [{"user": "a", "password": "a"}]}}}))

    async def scenario(url: str) -> list[Any]:
        nc = await nats.connect(url, user="a", password="a")
        try:
            js = nc.jetstream()
            await js.add_stream(name="S", subjects=["s.>"])
            for _ in range(15):
                await js.publish("s.x", os.urandom(100_000))
            meta, archive, _ = await snapshot(nc, "S")
            await api(nc, "$JS.API.STREAM.DELETE.S")
            await js.add_stream(name="F", subjects=["f.>"])
            for _ in range(10):
                await js.publish("f.x", os.urandom(100_000))
            refused = await restore(nc, "S", meta, archive)
            out: list[Any] = [refused.get("error"), (await api(nc, "$JS.API.STREAM.INFO.S")).get("error", {}).get("err_code")]
            await api(nc, "$JS.API.STREAM.DELETE.F")
            out.append((await restore(nc, "S", meta, archive))["state"]["messages"])
            return out
        finally:
            await nc.close()

    def run(kind: str, config: Path) -> list[Any]:
        with launch(kind, extra_args=["-c", str(config)]) as handle:
            return asyncio.run(scenario(handle.url))

    assert run(JSBROKER, ours) == run(NATS_SERVER, theirs) == [
        {"code": 500, "err_code": 10047, "description": "insufficient storage resources available"}, 10059, 15]


def test_a_damaged_record_ends_the_archive_with_an_error(tmp_path):
    """The archive is written from the store's records as they lie on disk: one whose kind, length or
    order is wrong stops the snapshot (the receiver gets a 500) instead of writing a wrong archive."""
    import io

    from jsbroker.jetstream import snapshot
    from jsbroker.store import SyncPolicy
    from jsbroker.store.base import StoreError, StoreLimits
    from jsbroker.store.file import FileStore

    store = FileStore(tmp_path / "s", StoreLimits(), SyncPolicy())
    for i in range(3):
        store.store_msg(f"a.{i}", b"NATS/1.0\r\nK: v\r\n\r\n" if i == 1 else b"", b"x" * (i * 100))
    run, _ = store.load_records(1, 3, 10)
    store.close()
    archive = b"".join(snapshot.write(snapshot.header_bytes(snapshot.Header({}), 1), [run]))
    got = [m for batch in snapshot.Reader(io.BytesIO(archive)).batches() for m in batch]
    assert [(m.seq, m.subject, m.hdr, m.data) for m in got] == [
        (1, "a.0", b"", b""), (2, "a.1", b"NATS/1.0\r\nK: v\r\n\r\n", b"x" * 100), (3, "a.2", b"", b"x" * 200)]
    bad_kind = bytearray(run)
    bad_kind[4] = ord("X")
    for damaged in (bytes(bad_kind), run[:-1], run + run):
        with pytest.raises(StoreError):
            b"".join(snapshot.write(b"", [damaged]))
