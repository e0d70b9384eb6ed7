"""What a consumer stores when its ack-wait timer finds a message at max_deliver, and what that message's
interest is afterwards: jsbroker against nats-server, before and after a restart.

nats-server's ack-wait timer (checkPending -> hasMaxDeliveries) records the exhausted message as delivered
once more (UpdateDelivered with a delivery count past MaxDeliver), which its consumer store takes as "no
longer pending": acks of the later messages then move the stored ack floor past it. The message itself keeps
its redelivery count, so an interest stream keeps it (needAck: a tracked redelivery is still wanted) even
once every other consumer acked it and after a restart; a work queue keeps it too.

Per retention: consumer C (max_deliver 1, short ack wait) gets seq 1 and lets it run out (the max-deliveries
advisory says when), then gets 2-4 and acks them out of order. On the interest stream consumer B gets and
acks all four. CONSUMER.INFO and STREAM.INFO are compared (a difference must last 2 s) then and after a restart (nats-server SIGTERM;
jsbroker SIGTERM and, in a second run, kill -9: everything was acked with ack_sync), then C's next fetch.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest

from tests.jetstream.test_consumer_support import api, differences, fetch, info_view, next_seqs, settled_pair
from tests.servers import JSBROKER, NATS_SERVER, ServerHandle, launch

RETENTIONS = ("limits", "interest", "workqueue")
ACK_WAIT_NS = 300_000_000


def stream_name(retention: str) -> str:
    return f"MD_{retention.upper()}"


async def build(nc: Any, retention: str) -> dict[str, Any]:
    s = stream_name(retention)
    out: dict[str, Any] = {}
    reply = await api(nc, f"$JS.API.STREAM.CREATE.{s}",
                      {"name": s, "subjects": [f"{s}.*"], "retention": retention, "storage": "file"})
    assert "error" not in reply, reply
    consumers = {"C": {"max_deliver": 1, "ack_wait": ACK_WAIT_NS}}
    if retention == "interest":
        consumers["B"] = {"ack_wait": 3600 * 10**9}
    for name, cfg in consumers.items():
        reply = await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.{name}",
                          {"stream_name": s, "config": {"durable_name": name, "ack_policy": "explicit", **cfg}})
        assert "error" not in reply, reply
    for _ in range(4):
        await nc.jetstream().publish(f"{s}.x", b"m")
    advisory = await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{s}.C")
    out["first"] = [m.metadata.sequence.stream for m in await fetch(nc, s, "C", 1)]
    out["advisory"] = json.loads((await advisory.next_msg(timeout=5)).data)["stream_seq"]
    await advisory.unsubscribe()
    msgs = await fetch(nc, s, "C", 3)
    out["then"] = [m.metadata.sequence.stream for m in msgs]
    for i in (0, 2, 1):
        await msgs[i].ack_sync()
    if "B" in consumers:
        for m in await fetch(nc, s, "B", 4):
            await m.ack_sync()
    return out


async def state(nc: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for retention in RETENTIONS:
        s = stream_name(retention)
        st = (await api(nc, f"$JS.API.STREAM.INFO.{s}")).get("state", {})
        out[s] = {k: st.get(k) for k in ("messages", "first_seq", "last_seq", "num_deleted")}
        names = ("C", "B") if retention == "interest" else ("C",)
        out.update({f"{s}/{c}": info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.{c}")) for c in names})
    return out


async def transcripts(ours: ServerHandle, theirs: ServerHandle, crash: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    out: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    ncs = [await nats.connect(ours.url), await nats.connect(theirs.url)]
    for side, nc in zip(out, ncs):
        built = await asyncio.gather(*(build(nc, r) for r in RETENTIONS))
        side.update({f"{r} {k}": v for r, b in zip(RETENTIONS, built) for k, v in b.items()})
    for side, st in zip(out, await settled_pair(state, *ncs)):
        side.update({f"before {k}": v for k, v in st.items()})
    for nc in ncs:
        await nc.close()
    if crash:
        ours.kill()
        ours.start()
    else:
        ours.restart()
    theirs.restart()
    ncs = [await nats.connect(ours.url), await nats.connect(theirs.url)]
    try:
        for side, st in zip(out, await settled_pair(state, *ncs)):
            side.update({f"after {k}": v for k, v in st.items()})
        for side, nc in zip(out, ncs):
            for r in RETENTIONS:
                side[f"next {r}"] = await next_seqs(nc, stream_name(r), "C", 4)
    finally:
        for nc in ncs:
            await nc.close()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill-9"])
def test_a_message_past_max_deliver_like_nats_server(crash: bool) -> None:
    with launch(JSBROKER) as ours, launch(NATS_SERVER) as theirs:
        mine, reference = asyncio.run(transcripts(ours, theirs, crash))
    assert differences(mine, reference) == []
    # the later acks moved C's floor past seq 1 (no longer pending), and the interest stream still holds seq 1
    assert reference["after MD_INTEREST/C"]["ack_floor"]["stream_seq"] == 4
    assert reference["before MD_INTEREST"]["messages"] == reference["after MD_INTEREST"]["messages"] == 1
