"""Which ack floor a restart's clean-up of an interest or work-queue stream uses, jsbroker against nats-server.

At start nats-server checks an interest stream's messages against each consumer's ack floor as its consumer
store holds it (checkForOrphanMsgs -> checkStateForInterestStream); a work queue is not checked. A purge can
leave that stored floor ahead of the consumer's own: the purge acknowledges the pending messages it removed
through the store's ack rule (the floor moves to just below the next pending message) and its own state
write, with the lower floor, is refused as outdated (seed 7191 of the restart fuzzer).

Each case is a stream with consumers that acked some messages (in order and out of order, explicit and
ack-all) and left others pending, then one change: a purge (keep, seq, filter, filter with keep), a message
deleted below or above the floors, a RESET past messages a consumer wanted, or nothing. CONSUMER.INFO and
STREAM.INFO are compared after the change and again after a restart: nats-server by SIGTERM, jsbroker by
SIGTERM and, in a second run, by kill -9 (every ack here is an ack_sync and every change was answered, so
jsbroker's kill -9 must equal nats-server's clean stop; bench/fuzz/README.md, "kill -9 rule"). Then each
consumer fetches what it has next, compared too. nats-server removes acknowledged messages of these streams
after it answers, so a stream's state counts as different only if it stays so for 2 s.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import nats
import pytest

from tests.differential import normalise
from tests.jetstream.test_consumer_support import api, differences, fetch, next_seqs, settled_pair
from tests.servers import JSBROKER, NATS_SERVER, ServerHandle, launch

ACK_WAIT_NS = 3600 * 10**9  # nothing is redelivered: positions alone are compared
MSGS = 12  # seqs 1..12, odd ones on <stream>.a, even ones on <stream>.b
CHANGES: dict[str, tuple[str, dict[str, Any]]] = {  # an API request (subject after $JS.API.) and its body
    "none": ("", {}),
    "keep": ("STREAM.PURGE.{s}", {"keep": 9}),  # removes 1 from a work queue, 1-3 from an interest stream
    "seq": ("STREAM.PURGE.{s}", {"seq": 6}),  # removes 1-5
    "seq_past_floors": ("STREAM.PURGE.{s}", {"seq": 9}),  # removes 1-8: past every floor, some pending go
    "filter": ("STREAM.PURGE.{s}", {"filter": "{s}.a"}),
    "filter_keep": ("STREAM.PURGE.{s}", {"filter": "{s}.b", "keep": 4}),  # removes 2 and 4
    "delete_below": ("STREAM.MSG.DELETE.{s}", {"seq": 2}),  # below or at the floors
    "delete_above": ("STREAM.MSG.DELETE.{s}", {"seq": 7}),  # above them, pending for some consumers
    "reset_forward": ("CONSUMER.RESET.{s}.A", {"seq": 11}),  # A's floor 10, above messages it wanted
}


@dataclass(frozen=True)
class Consumer:
    name: str
    subject: str  # "" for every subject
    ack_policy: str
    fetch: int
    acks: tuple[int, ...]  # positions (1-based) in what it fetched that it acknowledges, in this order


# Work queues take filtered, explicit-ack consumers on disjoint subjects; interest streams anything.
CONSUMERS = {
    "workqueue": (
        Consumer("A", "a", "explicit", 5, (3,)),  # seq 5 acked above the floor, 1, 3, 7, 9 pending
        Consumer("B", "b", "explicit", 4, (2,)),  # seq 4 acked above the floor, 2, 6, 8 pending
    ),
    "interest": (
        Consumer("ALL", "", "explicit", 8, (1, 2, 4)),  # floor seq 2, seq 4 acked above it
        Consumer("ACKALL", "", "all", 6, (3,)),  # floor seq 3
        Consumer("A", "a", "explicit", 4, (1, 3)),  # floor 1, pending 3 and 7
        Consumer("B", "b", "explicit", 2, ()),  # nothing acked
        Consumer("LATE", "", "all", 4, ()),  # nothing acked, 1-4 pending: holds seq 1, which the others acked
    ),
}
CASES = [(retention, change) for retention in CONSUMERS for change in CHANGES]


def stream_name(retention: str, change: str) -> str:
    return f"{retention[:3].upper()}_{change.upper()}"


def consumer_state(info: dict[str, Any]) -> Any:
    if "error" in info:
        return {"error": info["error"]}
    return {k: info.get(k) for k in ("num_pending", "num_ack_pending", "num_redelivered")} | {
        "delivered": (info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"]),
        "ack_floor": (info["ack_floor"]["consumer_seq"], info["ack_floor"]["stream_seq"])}


async def state(nc: Any) -> dict[str, Any]:
    """STREAM.INFO (its state) and CONSUMER.INFO (positions) of every case."""
    out: dict[str, Any] = {}
    for retention, change in CASES:
        stream = stream_name(retention, change)
        info = await api(nc, f"$JS.API.STREAM.INFO.{stream}", {"deleted_details": True})
        st = info.get("state", info)
        out[stream] = {k: st.get(k) for k in ("messages", "first_seq", "last_seq", "num_deleted", "deleted",
                                              "consumer_count")}
        for c in CONSUMERS[retention]:
            out[f"{stream}/{c.name}"] = consumer_state(await api(nc, f"$JS.API.CONSUMER.INFO.{stream}.{c.name}"))
    return out


async def build(nc: Any) -> dict[str, Any]:
    """Every case's stream, consumers, deliveries, acks and change; returns the answers."""
    out: dict[str, Any] = {}
    for retention, change in CASES:
        stream = stream_name(retention, change)
        reply = await api(nc, f"$JS.API.STREAM.CREATE.{stream}",
                          {"name": stream, "subjects": [f"{stream}.*"], "retention": retention, "storage": "file"})
        assert "error" not in reply, reply
        for c in CONSUMERS[retention]:
            config = {"durable_name": c.name, "ack_policy": c.ack_policy, "ack_wait": ACK_WAIT_NS}
            if c.subject:
                config["filter_subject"] = f"{stream}.{c.subject}"
            reply = await api(nc, f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{c.name}",
                              {"stream_name": stream, "config": config})
            assert "error" not in reply, reply
        for i in range(1, MSGS + 1):
            await nc.jetstream().publish(f"{stream}.{'a' if i % 2 else 'b'}", b"m%d" % i)
        for c in CONSUMERS[retention]:
            msgs = await fetch(nc, stream, c.name, c.fetch)
            out[f"fetched {stream}/{c.name}"] = [m.metadata.sequence.stream for m in msgs]
            for position in c.acks:
                await msgs[position - 1].ack_sync()
        subject, body = CHANGES[change]
        if subject:
            body = {k: v.format(s=stream) if isinstance(v, str) else v for k, v in body.items()}
            out[f"change {stream}"] = normalise(await api(nc, "$JS.API." + subject.format(s=stream), body))
    return out


async def after_restart(nc: Any) -> dict[str, Any]:
    """What each consumer delivers next (one no-wait batch)."""
    return {f"next {stream_name(r, ch)}/{c.name}": await next_seqs(nc, stream_name(r, ch), c.name, MSGS)
            for r, ch in CASES for c in CONSUMERS[r]}


def restart(handle: ServerHandle, crash: bool) -> None:
    if crash:
        handle.kill()
        handle.start()
    else:
        handle.restart()


async def transcripts(ours: ServerHandle, theirs: ServerHandle, crash: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    out: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    ncs = [await nats.connect(ours.url), await nats.connect(theirs.url)]
    for side, nc in zip(out, ncs):
        side.update(await build(nc))
    for side, st in zip(out, await settled_pair(state, *ncs)):
        side.update({f"before {k}": v for k, v in st.items()})
    for nc in ncs:
        await nc.close()
    restart(ours, crash)
    restart(theirs, False)
    ncs = [await nats.connect(ours.url), await nats.connect(theirs.url)]
    try:
        for side, st in zip(out, await settled_pair(state, *ncs)):
            side.update({f"after {k}": v for k, v in st.items()})
        for side, nc in zip(out, ncs):
            side.update(await after_restart(nc))
    finally:
        for nc in ncs:
            await nc.close()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill-9"])
def test_restart_clean_up_uses_the_stored_ack_floor_like_nats_server(crash: bool) -> None:
    with launch(JSBROKER) as ours, launch(NATS_SERVER) as theirs:
        mine, reference = asyncio.run(transcripts(ours, theirs, crash))
    assert differences(mine, reference) == []
    # the purge rule shows (seed 7191's shape): a keep purge removing the work queue's pending seq 1 (A: 3, 7,
    # 9 stay pending) stores the floor below the next pending message (stream seq 2), not the purge's (1);
    # on the interest stream A's floor goes to just below its pending seq 7
    assert reference["before WOR_KEEP/A"]["ack_floor"] == (1, 2)
    assert reference["after INT_KEEP/A"]["ack_floor"] == (3, 6)
    # and the restart's clean-up uses the stored floor: the narrow purge of b (2 and 4, pending for LATE) left
    # LATE's ack-all store at floor 4 while LATE still holds seq 1 pending; the restart removes seq 1
    assert reference["before INT_FILTER_KEEP"]["first_seq"] == 1
    assert reference["after INT_FILTER_KEEP"]["first_seq"] == 3
    # a work queue is not checked at a restart: the messages below A's RESET floor stay
    assert reference["before WOR_RESET_FORWARD"] == reference["after WOR_RESET_FORWARD"]
    assert reference["after WOR_RESET_FORWARD"]["first_seq"] == 1
