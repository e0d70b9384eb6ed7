"""CONSUMER.RESET (ADR-60), differential and with the expectations of nats-server's own tests
(TestJetStreamConsumerResetToSequence / ...ConstraintOnStartSeq / ...ConstraintOnStartTime, ported to
nats-py 2.16's `jsm.reset_consumer`)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import nats

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StreamConfig
from nats.js.errors import ConsumerInvalidResetError

from tests.differential import normalise
from tests.jetstream.test_consumer_support import api, pull, scenario_pair, until_waiting
from tests.polling import poll_async


@pytest.fixture
def urls(nats_server, jsbroker_server) -> dict[str, str]:
    return {"jsbroker": jsbroker_server.url, "nats-server": nats_server.url}


def seqs(info: Any) -> tuple[int, int, int, int, int, int]:
    """(num_pending, num_ack_pending, delivered.consumer, ack_floor.consumer, delivered.stream,
    ack_floor.stream) as the Go test's Expected struct orders them."""
    return (info.num_pending, info.num_ack_pending, info.delivered.consumer_seq, info.ack_floor.consumer_seq,
            info.delivered.stream_seq, info.ack_floor.stream_seq)


async def first_seq_becomes(js: Any, stream: str, want: int) -> int:
    for _ in range(40):
        state = (await js.stream_info(stream)).state
        if state.first_seq == want:
            return want
        await asyncio.sleep(0.05)  # poll the stream state; removal happens after the ack is processed
    return state.first_seq


@pytest.mark.parametrize("ack", [AckPolicy.EXPLICIT, AckPolicy.ALL])
async def test_reset_to_sequence(urls, unique, ack) -> None:
    async def fn(nc: Any, s: str) -> Any:
        js, jsm = nc.jetstream(), nc.jsm()
        await jsm.add_stream(StreamConfig(name=s, subjects=[f"{s}.foo"]))
        sub = await js.pull_subscribe(f"{s}.foo", durable="CONSUMER", stream=s,
                                      config=ConsumerConfig(ack_policy=ack, max_ack_pending=1, ack_wait=1))
        for i in range(4):
            await js.publish(f"{s}.foo", f"msg{i + 1}".encode())
        t: list[Any] = []
        msgs = await sub.fetch(1, timeout=1)
        t.append(msgs[0].data)
        await msgs[0].ack_sync()
        await jsm.update_stream(StreamConfig(name=s, subjects=[f"{s}.foo"], retention=RetentionPolicy.INTEREST))
        t.append(await first_seq_becomes(js, s, 2))
        t.append(seqs(await jsm.consumer_info(s, "CONSUMER")))
        msgs = await sub.fetch(1, timeout=1)
        t.append(msgs[0].data)  # not acked
        t.append(seqs(await jsm.consumer_info(s, "CONSUMER")))
        for seq in (None, 0):
            r = await jsm.reset_consumer(s, "CONSUMER", seq=seq)
            t.append((r.reset_seq, seqs(r.info), r.info.delivered.last_active, r.info.ack_floor.last_active))
        r = await jsm.reset_consumer(s, "CONSUMER", seq=4)
        t.append((r.reset_seq, seqs(r.info)))
        t.append(await first_seq_becomes(js, s, 4))
        msgs = await sub.fetch(1, timeout=2)
        t.append((msgs[0].data, msgs[0].metadata.sequence.consumer, msgs[0].metadata.sequence.stream))
        t.append(seqs(await jsm.consumer_info(s, "CONSUMER")))
        await msgs[0].ack_sync()
        t.append(seqs(await jsm.consumer_info(s, "CONSUMER")))
        state = (await js.stream_info(s)).state
        for _ in range(40):
            if state.messages == 0:
                break
            await asyncio.sleep(0.05)  # poll: interest removal follows the ack
            state = (await js.stream_info(s)).state
        t.append((state.messages, state.first_seq))
        await sub.unsubscribe()
        return t

    out = await scenario_pair(urls, fn, unique("R"))
    assert out["jsbroker"] == out["nats-server"]
    assert out["jsbroker"] == [
        b"msg1", 2, (3, 0, 1, 1, 1, 1), b"msg2", (2, 1, 2, 1, 2, 1),
        (2, (3, 0, 0, 0, 1, 1), None, None), (2, (3, 0, 0, 0, 1, 1), None, None),
        (4, (1, 0, 0, 0, 3, 3)), 4, (b"msg4", 1, 4), (0, 1, 1, 0, 4, 3), (0, 0, 1, 1, 4, 4), (0, 5),
    ]


async def test_reset_constraint_on_start_seq(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        js, jsm = nc.jetstream(), nc.jsm()
        await jsm.add_stream(StreamConfig(name=s, subjects=[f"{s}.foo"]))
        sub = await js.pull_subscribe(f"{s}.foo", durable="CONSUMER", stream=s, config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=3))
        for i in range(4):
            await js.publish(f"{s}.foo", f"msg{i + 1}".encode())
        msgs = await sub.fetch(1, timeout=1)
        t: list[Any] = [msgs[0].data]
        await msgs[0].ack_sync()
        with pytest.raises(ConsumerInvalidResetError) as e:
            await jsm.reset_consumer(s, "CONSUMER", seq=2)
        t.append((e.value.err_code, e.value.description))
        r = await jsm.reset_consumer(s, "CONSUMER", seq=3)
        t.append((r.reset_seq, r.info.delivered.stream_seq, r.info.ack_floor.stream_seq))
        msgs = await sub.fetch(1, timeout=1)
        t.append((msgs[0].data, msgs[0].metadata.sequence.consumer))
        await sub.unsubscribe()
        return t

    out = await scenario_pair(urls, fn, unique("R"))
    assert out["jsbroker"] == out["nats-server"] == [
        b"msg3", (10204, "invalid reset: below start seq"), (3, 2, 2), (b"msg3", 1)]


async def test_reset_constraint_on_start_time(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        js, jsm = nc.jetstream(), nc.jsm()
        await jsm.add_stream(StreamConfig(name=s, subjects=[f"{s}.foo"]))
        for i in range(2):
            await js.publish(f"{s}.foo", f"msg{i + 1}".encode())
        await asyncio.sleep(0.01)  # the start time must fall strictly between two publishes
        start = (await api(nc, f"$JS.API.STREAM.INFO.{s}"))["state"]["last_ts"]
        sub = await js.pull_subscribe(f"{s}.foo", durable="CONSUMER", stream=s, config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=_after(start)))
        for i in range(2):
            await js.publish(f"{s}.foo", f"msg{i + 3}".encode())
        msgs = await sub.fetch(1, timeout=1)
        t: list[Any] = [msgs[0].data]
        await msgs[0].ack_sync()
        with pytest.raises(ConsumerInvalidResetError) as e:
            await jsm.reset_consumer(s, "CONSUMER", seq=2)
        t.append((e.value.err_code, e.value.description))
        r = await jsm.reset_consumer(s, "CONSUMER", seq=3)
        t.append((r.reset_seq, r.info.delivered.stream_seq, r.info.ack_floor.stream_seq))
        msgs = await sub.fetch(1, timeout=1)
        t.append((msgs[0].data, msgs[0].metadata.sequence.consumer))
        await sub.unsubscribe()
        return t

    out = await scenario_pair(urls, fn, unique("R"))
    assert out["jsbroker"] == out["nats-server"] == [
        b"msg3", (10204, "invalid reset: below start time"), (3, 2, 2), (b"msg3", 1)]


def _after(ts: str) -> str:
    """An RFC 3339 time 1 ms after `ts` (which nats-py returns as the server's string)."""
    from jsbroker.jetstream.times import parse_rfc3339, rfc3339

    return rfc3339(parse_rfc3339(ts) + 1_000_000)


@pytest.mark.parametrize("policy", ["last", "new", "last_per_subject"])
async def test_reset_not_allowed_for_policy_but_seq0_is(urls, unique, policy) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        cfg = {"durable_name": "C", "deliver_policy": policy, "filter_subject": f"{s}.>"}
        await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.C", {"stream_name": s, "config": cfg})
        bad = await api(nc, f"$JS.API.CONSUMER.RESET.{s}.C", {"seq": 5})
        good = await api(nc, f"$JS.API.CONSUMER.RESET.{s}.C", b"")
        return [bad, {k: good.get(k) for k in ("reset_seq", "delivered", "ack_floor", "num_pending")}]

    out = await scenario_pair(urls, fn, unique("R"))
    assert out["jsbroker"] == out["nats-server"]
    assert out["jsbroker"][0]["error"]["description"] == "invalid reset: not allowed"


@pytest.mark.parametrize("ack", ["explicit", "all"])
async def test_reset_recounts_pending_only_when_it_moves(urls, unique, ack) -> None:
    """num_pending after a RESET: recounted (one per subject for last_per_subject) when the reset moves the
    start or drops pending deliveries; back to the ack floor an ack-all consumer adds its pending ones to
    the running count; a reset that changes nothing keeps the running count (fuzzer seed 20187)."""
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        cfg = {"durable_name": "C", "deliver_policy": "last_per_subject", "ack_policy": ack,
               "filter_subject": f"{s}.>"}
        await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.C", {"stream_name": s, "config": cfg})
        for subject in "aab":  # published after the creation: all three count
            await nc.request(f"{s}.{subject}", b"x", timeout=1)
        t = []
        for body in (b"", {"seq": 1}, "fetch", b"", {"seq": 2}, b""):
            if body == "fetch":
                t.append(len(await pull(nc, s, "C", {"batch": 2, "no_wait": True}, wait=1, count=2)))
                continue
            r = await api(nc, f"$JS.API.CONSUMER.RESET.{s}.C", body)
            t.append((r.get("reset_seq"), r.get("num_pending"), r.get("num_ack_pending")))
        return t

    out = await scenario_pair(urls, fn, unique("R"))
    assert out["jsbroker"] == out["nats-server"]
    refused = (0, None, None)  # {"seq": N} is not allowed for last_per_subject
    recounted = (1, 2, 0) if ack == "explicit" else (1, 3, 0)  # one per subject / running count + 2 pending
    assert out["jsbroker"] == [(1, 3, 0), refused, 2, recounted, refused, recounted]


@pytest.mark.parametrize(("retention", "ack"), [("workqueue", "explicit"), ("interest", "explicit"), ("interest", "all")])
async def test_ack_of_a_delivery_from_before_a_reset_releases_it(urls, unique, retention, ack) -> None:
    """A RESET forward drops the pending deliveries; acking one later (plain or ack_sync) still offers the
    message to the stream, which removes it when no consumer needs it (fuzzer seeds 20498, 1020686)."""
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"], "retention": retention})
        cfg = {"durable_name": "C", "ack_policy": ack, "filter_subject": f"{s}.a"}
        await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.C", {"stream_name": s, "config": cfg})
        for _ in range(3):
            await nc.request(f"{s}.a", b"x", timeout=1)
        replies: list[str] = []

        async def got(msg: Any) -> None:
            replies.append(msg.reply)

        sub = await nc.subscribe(nc.new_inbox(), cb=got)
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{s}.C", b'{"batch": 3, "no_wait": true}', reply=sub.subject)
        await poll_async(lambda: len(replies) == 3, timeout=2, what="three deliveries")
        t = [(await api(nc, f"$JS.API.CONSUMER.RESET.{s}.C", {"seq": 4}))["reset_seq"]]
        t.append((await api(nc, f"$JS.API.STREAM.INFO.{s}"))["state"]["messages"])
        await nc.publish(replies[1], b"+ACK")  # plain
        t.append((await nc.request(replies[0], b"+ACK", timeout=1)).data)  # ack_sync, after the plain one
        info = await api(nc, f"$JS.API.STREAM.INFO.{s}")
        t.append({k: info["state"].get(k) for k in ("messages", "first_seq")})
        return t

    out = await scenario_pair(urls, fn, unique("R"))
    assert out["jsbroker"] == out["nats-server"]


async def test_reset_keeps_waiting_pulls_and_works_for_push(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        for i in range(3):
            await nc.request(f"{s}.a", f"m{i}".encode(), timeout=1)
        await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.C",
                  {"stream_name": s, "config": {"durable_name": "C", "ack_policy": "explicit"}})
        t = [await pull(nc, s, "C", {"batch": 3, "expires": 300_000_000}, wait=1, count=3)]
        waiting = asyncio.create_task(pull(nc, s, "C", {"batch": 2, "expires": 1_000_000_000}, wait=2, count=2))
        await until_waiting(nc, s, "C", 1)
        r = await api(nc, f"$JS.API.CONSUMER.RESET.{s}.C", {"seq": 2})
        # nats-server may serve the waiting pull before it builds the reply, so only the
        # reset point is compared here; the consumer's state is compared once the pull is done.
        t.append({k: r.get(k) for k in ("reset_seq", "ack_floor")})
        t.append(await waiting)
        info = await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C", b"")
        t.append(normalise({k: info.get(k) for k in ("delivered", "ack_floor", "num_pending", "num_ack_pending",
                                                     "num_waiting")}))
        await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.P",
                  {"stream_name": s, "config": {"durable_name": "P", "deliver_subject": f"{s}-none"}})
        r = await api(nc, f"$JS.API.CONSUMER.RESET.{s}.P", {"seq": 3})
        t.append({k: r.get(k) for k in ("reset_seq", "delivered", "ack_floor", "num_pending")})
        r = await api(nc, f"$JS.API.CONSUMER.RESET.{s}.P", {"seq": 50})
        t.append({k: r.get(k) for k in ("reset_seq", "delivered", "ack_floor", "num_pending")})
        return t

    out = await scenario_pair(urls, fn, unique("R"))
    assert out["jsbroker"] == out["nats-server"]
    assert [e[2][1:3] for e in out["jsbroker"][2]] == [("2", "1"), ("3", "2")]


async def test_switch_to_interest_drops_acked(jsbroker_server, unique) -> None:
    import nats

    s = unique("R")
    nc = await nats.connect(jsbroker_server.url)
    js, jsm = nc.jetstream(), nc.jsm()
    await jsm.add_stream(StreamConfig(name=s, subjects=[f"{s}.foo"]))
    sub = await js.pull_subscribe(f"{s}.foo", durable="C", stream=s)
    await js.publish(f"{s}.foo", b"x")
    await js.publish(f"{s}.foo", b"y")
    await (await sub.fetch(1, timeout=1))[0].ack_sync()
    await jsm.update_stream(StreamConfig(name=s, subjects=[f"{s}.foo"], retention=RetentionPolicy.INTEREST))
    try:
        assert await first_seq_becomes(js, s, 2) == 2
    finally:
        await nc.close()


def stream_identity(created: str) -> str:
    """nats-server's identity of a stream: base-62 digits of SHA-256(created, RFC 3339 ns), 8 of them."""
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return "".join(digits[b % 62] for b in hashlib.sha256(created.encode()).digest()[:8])


async def test_reset_returns_stream_identity_when_asked(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        info = await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.C", {"stream_name": s, "config": {"durable_name": "C"}})
        out = []
        for hdrs in ({"Nats-Stream-Identity": "anything"}, {"Nats-Stream-Identity": ""}, None):
            msg = await nc.request(f"$JS.API.CONSUMER.RESET.{s}.C", b"", headers=hdrs, timeout=2)
            identity = (msg.headers or {}).get("Nats-Stream-Identity")
            out.append((identity == stream_identity(info["created"]) if identity else None,
                        json.loads(msg.data)["reset_seq"]))
        return out

    out = await scenario_pair(urls, fn, unique("RI"))
    assert out["jsbroker"] == out["nats-server"] == [(True, 1), (True, 1), (None, 1)]


async def test_reset_api_level_checked_only_for_an_existing_consumer(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.C", {"stream_name": s, "config": {"durable_name": "C"}})
        too_high = {"Nats-Required-Api-Level": "999"}
        msg = await nc.request(f"$JS.API.CONSUMER.RESET.{s}.C", b"", headers=too_high, timeout=2)
        try:
            await nc.request(f"$JS.API.CONSUMER.RESET.{s}.NOPE", b"", headers=too_high, timeout=0.5)
            missing = "answered"
        except nats.errors.TimeoutError:
            missing = "silent"
        return json.loads(msg.data), missing

    out = await scenario_pair(urls, fn, unique("RL"))
    assert out["jsbroker"] == out["nats-server"]
    body, missing = out["jsbroker"]
    assert (body["error"]["code"], body["reset_seq"], missing) == (412, 0, "silent")
