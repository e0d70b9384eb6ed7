"""Pull requests with an idle heartbeat, after the messages were drained, against nats-server.

nats-server's rule (consumer.go nextReqFromMsg): a heartbeat needs `expires` of at least twice the
heartbeat, so a heartbeat without `expires` is "400 Bad Request - heartbeat value too large", with or
without `no_wait`. nats-py's `fetch(..., heartbeat=...)` drains with a no-wait request that carries the
expiry, so it times out as usual on both servers.
"""

from __future__ import annotations

import json
from typing import Any

import nats

from tests.jetstream.conftest import stream_with

S = 1_000_000_000
BODIES = [
    {"batch": 5, "idle_heartbeat": S, "no_wait": True},
    {"batch": 5, "idle_heartbeat": S},
    {"batch": 5, "idle_heartbeat": S, "expires": S},
    {"batch": 5, "idle_heartbeat": S // 2, "expires": S},
    {"batch": 5, "idle_heartbeat": S // 4, "expires": S, "no_wait": True},
]


async def _scenario(nc: Any, name: str) -> list[Any]:
    js = await stream_with(nc, name, 7)
    sub = await js.pull_subscribe(f"{name}.a", durable="C", stream=name)
    out: list[Any] = []
    for _ in range(3):  # 5, 2, then nothing left
        try:
            msgs = await sub.fetch(5, timeout=1, heartbeat=0.2)
            for m in msgs:
                await m.ack()
            out.append([m.data for m in msgs])
        except nats.errors.TimeoutError:
            out.append("timeout")
    inbox = nc.new_inbox()
    replies = await nc.subscribe(inbox)
    for body in BODIES:  # the first answer to each request on the drained consumer
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{name}.C", json.dumps(body).encode(), reply=inbox)
        msg = await replies.next_msg(3)
        out.append((msg.headers or {}).get("Status"))
        out.append((msg.headers or {}).get("Description"))
    await js.delete_stream(name)
    return out


async def test_heartbeat_rules_match_nats_server(on_both: Any) -> None:
    ours, theirs = await on_both(_scenario, "H")
    too_large = ["400", "Bad Request - heartbeat value too large"]
    assert ours == theirs == [
        [b"m0", b"m1", b"m2", b"m3", b"m4"], [b"m5", b"m6"], "timeout",
        *too_large, *too_large, *too_large,
        "100", "Idle Heartbeat",  # a heartbeat of half the expiry: allowed, sent before the request expires
        "100", "Idle Heartbeat"]  # no_wait with expires waits, with heartbeats, as a one-shot request
