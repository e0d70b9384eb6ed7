"""nats-py's JetStreamManager and DIRECT.GET batches against jsbroker and nats-server, plus bad input.

Transcripts of real nats-py calls are compared between the servers; the DIRECT.GET batch and multi_last
answers (several messages then a 204 EOB status) are collected from a raw subscription.
"""

import asyncio
import json
import random

import nats
from nats.js.api import StreamConfig

from tests.differential import normalise


async def jsm_transcript(url: str, name: str) -> list:
    nc = await nats.connect(url)
    out: list = []

    async def record(label, coro):
        try:
            value = await coro
        except Exception as exc:  # the exception class is part of the behaviour under test
            out.append((label, type(exc).__name__, getattr(exc, "err_code", None)))
            return None
        out.append((label, normalise(value.as_dict()) if hasattr(value, "as_dict") else value))
        return value

    try:
        js = nc.jetstream()
        jsm = js._jsm if hasattr(js, "_jsm") else nc.jetstream()
        await record("add", jsm.add_stream(name=name, subjects=[name + ".>"], storage="memory", allow_direct=True))
        for i in range(4):
            await js.publish(f"{name}.{i % 2}", f"m{i}".encode(), headers={"H": str(i)})
        await record("info", jsm.stream_info(name))
        await record("update", jsm.update_stream(StreamConfig(name=name, subjects=[name + ".>"], storage="memory",
                                                              allow_direct=True, max_msgs=10)))
        found = [s.config.name for s in await jsm.streams_info() if s.config.name == name]
        out.append(("streams_info", found))
        out.append(("find", await jsm.find_stream_name_by_subject(name + ".1")))
        for direct in (False, True):
            msg = await jsm.get_msg(name, seq=2, direct=direct)
            out.append(("get_msg", direct, msg.subject, msg.seq, msg.data, normalise(msg.headers)))
            last = await jsm.get_last_msg(name, name + ".0", direct=direct)
            out.append(("get_last", direct, last.seq, last.data))
        await record("get_missing", jsm.get_msg(name, seq=99))
        await record("delete_msg", jsm.delete_msg(name, 1))
        await record("delete_missing", jsm.delete_msg(name, 1))
        await record("purge", jsm.purge_stream(name, subject=name + ".1"))
        await record("info_after", jsm.stream_info(name))
        await record("delete", jsm.delete_stream(name))
        await record("info_deleted", jsm.stream_info(name))
        await record("account", jsm.account_info())
    finally:
        await nc.close()
    for i, item in enumerate(out):  # account totals depend on what else ran on the shared servers
        if item[0] == "account" and isinstance(item[1], dict):
            out[i] = ("account", sorted(item[1]))
    return out


async def test_jetstream_manager_matches_nats_server(nats_server, jsbroker_server, unique):
    name = unique("M")
    theirs = await jsm_transcript(nats_server.url, name)
    ours = await jsm_transcript(jsbroker_server.url, name)
    assert ours == theirs
    assert ("get_last", True, 3, b"m2") in ours


async def direct_batch_answers(url: str, name: str) -> list:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[name + ".>"], storage="memory", allow_direct=True)
        for subject in ("a", "b", "a", "c", "b"):
            await js.publish(f"{name}.{subject}", subject.encode(), headers={"X": subject})
        results = []
        for body in ({"seq": 1, "batch": 3}, {"next_by_subj": name + ".a", "batch": 5},
                     {"multi_last": [name + ".a", name + ".b"]}, {"multi_last": [name + ".>"], "up_to_seq": 3},
                     {"multi_last": [name + ".zz"]}, {"seq": 2, "batch": 2, "max_bytes": 1}):
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish(f"$JS.API.DIRECT.GET.{name}", json.dumps(body).encode(), reply=inbox)
            answer = []
            while True:
                msg = await sub.next_msg(timeout=2)
                hdrs = dict(msg.headers or {})
                answer.append((msg.data, normalise(hdrs)))
                if hdrs.get("Status"):
                    break
            await sub.unsubscribe()
            results.append(answer)
        await js.delete_stream(name)
        return results
    finally:
        await nc.close()


async def test_direct_get_batches_and_multi_last(nats_server, jsbroker_server, unique):
    name = unique("DB")
    theirs = await direct_batch_answers(nats_server.url, name)
    ours = await direct_batch_answers(jsbroker_server.url, name)
    assert ours == theirs
    assert ours[0][-1][1]["Status"] == "204" and len(ours[0]) == 4


async def test_garbage_requests_never_hurt_the_server(jsbroker_server, unique):
    """Malformed and random bodies on every stream endpoint: each gets a well-formed JSON answer or
    nothing, the server keeps serving, and an existing stream keeps its messages."""
    rng = random.Random(7)
    name = unique("G")
    nc = await nats.connect(jsbroker_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[name + ".>"])
        for i in range(5):
            await js.publish(f"{name}.x", str(i).encode())
        bodies = [b"", b"{", b"[]", b"null", b"1e999", b'{"seq": -1}', b'{"seq": 1.5}', b'{"name": 7}',
                  b'{"subjects": [1]}', b'{"max_msgs": 99999999999999999999999}', b"\xff\xfe",
                  b'{"filter": {"a": 1}}', b'{"keep": "x"}', b'{"last_by_subj": ""}', b'{"metadata": [1]}',
                  b'{"name": "' + b"x" * 300 + b'"}', bytes(rng.randrange(256) for _ in range(64))]
        verbs = ["STREAM.CREATE", "STREAM.UPDATE", "STREAM.INFO", "STREAM.PURGE.x", "STREAM.MSG.GET",
                 "STREAM.MSG.DELETE", "STREAM.NAMES", "STREAM.LIST", "DIRECT.GET"]
        for verb in verbs:
            for body in bodies:
                subject = f"$JS.API.{verb}" if verb in ("STREAM.NAMES", "STREAM.LIST") else f"$JS.API.{verb}.{name}x"
                try:
                    reply = await nc.request(subject, body, timeout=0.3)
                except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                    continue
                decoded = json.loads(reply.data)
                assert decoded["type"].startswith("io.nats.jetstream.api.v1."), (subject, body)
                if "error" in decoded:
                    assert sorted(decoded["error"]) == ["code", "description", "err_code"], (subject, body)
        info = await js.stream_info(name)
        assert (info.state.messages, info.state.last_seq) == (5, 5)
        assert (await js.publish(f"{name}.x", b"after")).seq == 6
        await js.delete_stream(name)
    finally:
        await nc.close()
    await asyncio.sleep(0)
