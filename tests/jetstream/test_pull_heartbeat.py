"""Pull requests with an idle heartbeat, after the messages were drained, against nats-server.

nats-server's rule (consumer.go nextReqFromMsg): a heartbeat needs `expires` of at least twice the
heartbeat, so a heartbeat without `expires` is "400 Bad Request - heartbeat value too large", with or
without `no_wait`. nats-py's `fetch(..., heartbeat=...)` drains with a no-wait request that carries the
expiry, so it times out as usual on both servers.

A no_wait request that stops at max_ack_pending with part of its batch ends with `404 No Messages` at the
consumer's next wake-up (its heartbeat or expiry: nats-server's timer sweeps as at the stream's end), so a
message that a later ack frees goes to the client's next request, not to the finished one. (If it went to
the old one, as jsbroker once did, nats-py's next `fetch` found it queued in its inbox and sent a no_wait
request with a heartbeat and no expiry: `400 heartbeat value too large`, nats.py's test_fetch_heartbeats.)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats

from tests.jetstream.conftest import stream_with
from tests.servers import ServerHandle

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


async def _frame(reader: asyncio.StreamReader) -> tuple[Any, ...]:
    """The next MSG/HMSG/PONG from a raw connection: ("msg", sid, subject, reply, data) or ("status", sid,
    "<code> <description>"); PINGs are answered."""
    while True:
        line = (await asyncio.wait_for(reader.readline(), 10)).rstrip(b"\r\n")
        op, *args = line.split(b" ")
        if op == b"PING":
            continue
        if op == b"PONG":
            return ("pong",)
        if op == b"MSG":
            data = (await reader.readexactly(int(args[-1]) + 2))[:-2]
            return ("msg", int(args[1]), args[0].decode(), args[2].decode() if len(args) == 4 else "", data)
        if op == b"HMSG":
            block = (await reader.readexactly(int(args[-1]) + 2))[:-2]
            return ("status", int(args[1]), block.split(b"\r\n", 1)[0].split(b" ", 1)[1].decode())
        assert op in (b"+OK", b"INFO"), line


async def _one_shot_at_max_ack_pending(server: ServerHandle, name: str) -> list[Any]:
    """A no_wait request for 5 with a heartbeat on a consumer of max_ack_pending 2 over 3 messages; then one
    ack and a new request on another inbox: every frame either inbox gets, in order, up to a PONG."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    await reader.readline()  # INFO
    nxt = f"$JS.API.CONSUMER.MSG.NEXT.{name}.C"

    def pub(subject: str, reply: str, body: dict[str, Any] | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        writer.write(b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply.encode(), len(data), data))

    writer.write(b'CONNECT {"headers":true,"verbose":false,"protocol":1}\r\nSUB _api.%s 1\r\nSUB _pull.%s 2\r\n'
                 b"SUB _next.%s 3\r\n" % (name.encode(), name.encode(), name.encode()))
    setup: list[tuple[str, dict[str, Any] | bytes]] = [
        (f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"], "storage": "memory"}),
        (f"$JS.API.CONSUMER.DURABLE.CREATE.{name}.C",
         {"stream_name": name, "config": {"durable_name": "C", "ack_policy": "explicit", "max_ack_pending": 2}}),
        *[(f"{name}.a", b"m%d" % i) for i in range(3)]]
    for subject, body in setup:  # one at a time: nats-server answers its API on another goroutine
        pub(subject, f"_api.{name}", body)
        frame = await _frame(reader)
        assert frame[:2] == ("msg", 1) and b'"error"' not in frame[4], frame
    pub(nxt, f"_pull.{name}", {"batch": 5, "expires": 2 * S, "idle_heartbeat": S // 10, "no_wait": True})
    frames = [await _frame(reader)]
    while not (frames[-1][0] == "status" and not frames[-1][2].startswith("100")):
        frames.append(await _frame(reader))
    pub(frames[0][3], "", b"")  # ack m0: room for m2
    pub(nxt, f"_next.{name}", {"batch": 1, "expires": 2 * S})
    while frames[-1][:2] != ("msg", 3):
        frames.append(await _frame(reader))
    writer.write(b"PING\r\n")
    while frames[-1] != ("pong",):
        frames.append(await _frame(reader))
    pub(f"$JS.API.STREAM.DELETE.{name}", f"_api.{name}", b"")
    await _frame(reader)
    writer.close()
    return [f[:3] + f[4:] if f[0] == "msg" else f for f in frames]  # ack subjects hold timestamps


async def test_one_shot_request_ends_at_max_ack_pending(nats_server: ServerHandle, jsbroker_server: ServerHandle,
                                                         unique: Any) -> None:
    name = unique("H")
    theirs, ours = await asyncio.gather(_one_shot_at_max_ack_pending(nats_server, name),
                                        _one_shot_at_max_ack_pending(jsbroker_server, name))
    assert ours == theirs == [
        ("msg", 2, f"{name}.a", b"m0"), ("msg", 2, f"{name}.a", b"m1"), ("status", 2, "404 No Messages"),
        ("msg", 3, f"{name}.a", b"m2"), ("pong",)]
