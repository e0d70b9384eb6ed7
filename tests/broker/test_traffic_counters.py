"""Message and byte counters of /varz and /connz against nats-server's: client messages in and out,
their header + payload bytes (not protocol bytes), server totals that keep closed connections' counts."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import nats

from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, launch

COUNTERS = ("in_msgs", "in_bytes", "out_msgs", "out_bytes")


def _get(server: ServerHandle, path: str) -> Any:
    with urllib.request.urlopen(f"{server.http_url}{path}", timeout=5) as reply:
        return json.loads(reply.read())


def _varz(server: ServerHandle) -> dict[str, int]:
    varz = _get(server, "/varz")
    return {k: varz[k] for k in (*COUNTERS, "connections", "total_connections")}


def _connz(server: ServerHandle) -> list[dict[str, Any]]:
    return [{k: c[k] for k in ("name", *COUNTERS)} for c in _get(server, "/connz")["connections"]]


async def _settle(*clients: Any) -> None:
    """Make the server's counts of what the clients sent final. nats-server adds a read's messages to its
    totals after parsing the read, and may already have written the PONG (or a stream's answer) by then:
    a second PING round trip is parsed in a later read, so its PONG comes after that update."""
    for client in clients:
        await client.flush()
        await client.flush()


async def _core(server: ServerHandle) -> list[Any]:
    out: list[Any] = []
    pub = await nats.connect(server.url, name="pub")
    sub = await nats.connect(server.url, name="sub")
    # subscribed first: nats-server sometimes delivered nothing to a subscription made right after the
    # burst below (2 runs in 40), a race of its own
    messages = await sub.subscribe("x")
    await sub.flush()
    for _ in range(100):  # nobody subscribes: still counted in
        await pub.publish("nobody", b"abcd")
    await _settle(pub)
    out.append(_varz(server))
    for _ in range(10):
        await pub.publish("x", b"12345678", headers={"K": "v"})  # header bytes count too
    await pub.publish("x", b"")
    await pub.flush()
    for _ in range(11):
        await messages.next_msg(5)
    await _settle(pub, sub)
    out += [_varz(server), _connz(server)]
    await pub.close()
    await _settle(sub)
    out.append(_varz(server))  # the closed publisher's counts stay in the totals
    await sub.close()
    return out


async def _jetstream(server: ServerHandle) -> list[Any]:
    """Messages only: JetStream answers carry timestamps whose length varies."""
    nc = await nats.connect(server.url, name="js")
    js = nc.jetstream()
    out: list[Any] = []
    await nc.request("$JS.API.INFO", b"", timeout=5)
    await js.add_stream(name="T", subjects=["t"])
    await nc.publish("t", b"abcd")
    await js.publish("t", b"abcd")
    pushed = await js.subscribe("t", durable="P", manual_ack=True)
    for _ in range(2):
        await pushed.next_msg(5)
    await _settle(nc)
    varz = _varz(server)
    out.append({k: varz[k] for k in ("in_msgs", "out_msgs")})
    await nc.close()
    return out


def test_counters_match_nats_server() -> None:
    out = {}
    for kind in KINDS:
        with launch(kind, http=True) as server:
            out[kind] = asyncio.run(_core(server)) + asyncio.run(_jetstream(server))
    assert out[JSBROKER] == out[NATS_SERVER]
    totals = {"in_msgs": 111, "in_bytes": 660, "out_msgs": 11, "out_bytes": 260, "total_connections": 3}
    assert out[JSBROKER][0] == {"in_msgs": 100, "in_bytes": 400, "out_msgs": 0, "out_bytes": 0, "connections": 2,
                                "total_connections": 3}  # the start's readiness probe is a connection too
    assert out[JSBROKER][1] == {**totals, "connections": 2}
    assert out[JSBROKER][3] == {**totals, "connections": 1}
