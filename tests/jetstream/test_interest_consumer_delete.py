"""Deleting a consumer of an interest stream removes what no remaining consumer needs, jsbroker against
nats-server (cleanupNoInterestMessages): from the deleted consumer's ack floor on when that floor is inside
the stream; when it is past the stream's end, nats-server's interest check instead (each remaining consumer's
check floor, then a compaction to the lowest, in a goroutine after the answer); everything when no consumer
is left.

Ten messages alternate between <s>.a and <s>.b; X takes a (acked 1 and 5, 3 pending), Y takes b (acked 4, 2
pending), D takes everything and is deleted. The stream's state counts as different only if it stays so for
3 s (nats-server's check runs after the deletion's answer).
"""

from __future__ import annotations

from typing import Any

import nats
import pytest

from tests.differential import normalise
from tests.jetstream.test_consumer_support import api, fetch, settled_pair

N = 10
CASES = ("floor_inside", "ack_all", "floor_past_the_end", "last_consumer", "reset_before", "reset_back_and_forth")


async def consumer(nc: Any, s: str, name: str, **cfg: Any) -> None:
    reply = await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.{name}",
                      {"stream_name": s, "config": {"durable_name": name, "ack_policy": "explicit",
                                                    "ack_wait": 3600 * 10**9, **cfg}})
    assert "error" not in reply, reply


async def consume(nc: Any, s: str, name: str, n: int, acks: tuple[int, ...]) -> list[int]:
    msgs = await fetch(nc, s, name, n)
    for i in acks:
        await msgs[i].ack_sync()
    return [m.metadata.sequence.stream for m in msgs]


async def scenario(nc: Any, s: str, case: str) -> list[Any]:
    reply = await api(nc, f"$JS.API.STREAM.CREATE.{s}",
                      {"name": s, "subjects": [f"{s}.*"], "retention": "interest", "storage": "file"})
    assert "error" not in reply, reply
    await consumer(nc, s, "X", **({} if case == "reset_back_and_forth" else {"filter_subject": f"{s}.a"}))
    await consumer(nc, s, "Y", filter_subject=f"{s}.b")
    past_end = case in ("floor_past_the_end", "reset_back_and_forth")
    await consumer(nc, s, "D", **({"deliver_policy": "by_start_sequence", "opt_start_seq": 50} if past_end else
                                  {"ack_policy": "all"} if case == "ack_all" else {}))
    for i in range(1, N + 1):
        await nc.jetstream().publish(f"{s}.{'a' if i % 2 else 'b'}", b"m")
    out: list[Any] = []
    if case == "reset_back_and_forth":  # X's check floor is computed at each RESET
        out.append(await api(nc, f"$JS.API.CONSUMER.RESET.{s}.X", {"seq": 9}))
        out.append(await api(nc, f"$JS.API.CONSUMER.RESET.{s}.X", {"seq": 1}))
        out.append(await consume(nc, s, "Y", 4, (0, 1, 2, 3)))
    else:
        out.append(await consume(nc, s, "X", 3, (0, 2)))
        out.append(await consume(nc, s, "Y", 2, (1,)))
    if case in ("floor_inside", "ack_all"):
        out.append(await consume(nc, s, "D", 6, (0, 1, 2, 3) if case == "floor_inside" else (3,)))
    if case == "last_consumer":
        for name in ("X", "Y"):
            out.append(await api(nc, f"$JS.API.CONSUMER.DELETE.{s}.{name}"))
    if case == "reset_before":
        out.append(await api(nc, f"$JS.API.CONSUMER.RESET.{s}.X", {"seq": 1}))
    out.append(await api(nc, f"$JS.API.CONSUMER.DELETE.{s}.D"))
    return out


async def stream_state(nc: Any, s: str) -> dict[str, Any]:
    st = (await api(nc, f"$JS.API.STREAM.INFO.{s}", {"deleted_details": True}))["state"]
    return {k: st.get(k) for k in ("messages", "first_seq", "last_seq", "deleted", "consumer_count")}


@pytest.mark.parametrize("case", CASES)
async def test_deleting_an_interest_consumer_removes_what_nats_server_removes(nats_server, jsbroker_server, unique,
                                                                              case) -> None:
    s = unique("ID")
    ours, theirs = await nats.connect(jsbroker_server.url), await nats.connect(nats_server.url)
    try:
        answers = [await scenario(nc, s, case) for nc in (ours, theirs)]
        assert normalise(answers[0]) == normalise(answers[1])
        mine, reference = await settled_pair(lambda nc: stream_state(nc, s), ours, theirs, timeout=3.0)
        assert mine == reference
        if case == "floor_inside":  # D's floor 4: seq 5 (acked by X, not Y's) goes, 3 (X's) and the b's stay
            assert reference["deleted"] == [4, 5] and reference["first_seq"] == 2
        if case == "last_consumer":
            assert reference["messages"] == 0 and reference["first_seq"] == N + 1
    finally:
        for nc in (ours, theirs):
            await nc.jetstream().delete_stream(s)
            await nc.close()
