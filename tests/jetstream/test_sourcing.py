"""Mirrors and sources (jetstream/sourcing.py) against nats-server: the same scenario on both servers, the
copies' messages, headers and STREAM.INFO state compared; the bad combinations' errors; origins missing,
created later, deleted and recreated; restarts (SIGTERM and kill -9) while sourcing.

Normalised: times and the origin identity in Nats-Stream-Source (a hash of the origin's creation time),
`active` (ns since the link last heard of its origin: only whether it is -1), and the order of the
sources in INFO (nats-server lists them in map order). The copying order across two sources is free on
both servers, so an aggregate is compared per source."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import time
from typing import Any

import nats
import pytest

from tests.differential import normalise
from tests.jetstream.conftest import replay
from tests.servers import JSBROKER, NATS_SERVER, ServerHandle

WAIT = 40.0  # s: nats-server retries a source's consumer with a back-off (5 s, 10 s, ...)


async def api(nc: Any, subject: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else (body or b"")
    msg = await nc.request(subject, data, timeout=5, headers=headers)
    return json.loads(msg.data)


async def info(nc: Any, stream: str) -> dict[str, Any]:
    return await api(nc, f"$JS.API.STREAM.INFO.{stream}")


def link_state(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "active": "never" if entry["active"] == -1 else "seen"}


def source_state(body: dict[str, Any]) -> Any:
    """The mirror / sources part of a StreamInfo, comparable."""
    if "mirror" in body:
        return {"mirror": link_state(body["mirror"])}
    return {"sources": sorted((link_state(s) for s in body.get("sources", [])), key=json.dumps)}


def header_value(value: str) -> str:
    parts = value.split(" ")
    return " ".join(parts[:5] + ["<ident>"] * (len(parts) > 5))


async def messages(nc: Any, stream: str, times: bool = False) -> list[tuple[Any, ...]]:
    """(seq, subject, headers, data, time or "<time>") of every stored message, the source header's
    identity blanked."""
    state = (await info(nc, stream))["state"]
    out = []
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        got = await api(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" not in got:
            continue
        m = got["message"]
        hdr = base64.b64decode(m.get("hdrs", "")).decode()
        lines = [line if not line.startswith("Nats-Stream-Source: ") else
                 "Nats-Stream-Source: " + header_value(line.split(": ", 1)[1]) for line in hdr.split("\r\n")]
        out.append((m["seq"], m["subject"], "\r\n".join(lines), base64.b64decode(m.get("data", "")),
                    m["time"] if times else "<time>"))
    return out


async def wait_for(nc: Any, stream: str, count: int, timeout: float = WAIT, active: bool = True) -> dict[str, Any]:
    """Until the stream holds `count` messages, its links have no lag and (`active`) have all reached
    their origins."""
    deadline = time.monotonic() + timeout
    while True:
        body = await info(nc, stream)
        links = [body["mirror"]] if "mirror" in body else body.get("sources", [])
        if body["state"]["messages"] >= count and all(s.get("lag", 0) == 0 and (s["active"] != -1 or not active)
                                                      for s in links):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"{stream} did not reach {count} messages: {body['state']} {source_state(body)}")
        await asyncio.sleep(0.1)


async def wait_active(nc: Any, stream: str) -> None:
    deadline = time.monotonic() + WAIT
    while "never" in json.dumps(source_state(await info(nc, stream))):
        assert time.monotonic() < deadline, f"{stream} never reached its origins"
        await asyncio.sleep(0.1)


# -- mirrors ------------------------------------------------------------------------------------------


async def mirror_scenario(nc: Any, n: str) -> list[Any]:
    out: list[Any] = []
    await api(nc, f"$JS.API.STREAM.CREATE.{n}O", {"name": f"{n}O", "subjects": [f"{n}.o.>"], "allow_msg_ttl": True})
    for i in range(6):
        hdrs = {"Nats-Msg-Id": f"id{i}", "Nats-Expected-Last-Sequence": str(i)} if i % 2 else None
        await api(nc, f"{n}.o.{'ab'[i % 2]}", f"m{i}".encode(), hdrs)
    await api(nc, f"$JS.API.STREAM.MSG.DELETE.{n}O", {"seq": 3})  # a gap the mirror keeps
    created = await api(nc, f"$JS.API.STREAM.CREATE.{n}M", {"name": f"{n}M", "mirror": {"name": f"{n}O"}})
    out.append(("create", normalise(created["config"]), source_state(created)))
    await api(nc, f"$JS.API.STREAM.CREATE.{n}F",
              {"name": f"{n}F", "storage": "memory", "mirror": {"name": f"{n}O", "filter_subject": f"{n}.o.b"}})
    await api(nc, f"$JS.API.STREAM.CREATE.{n}S", {"name": f"{n}S", "mirror": {"name": f"{n}O", "opt_start_seq": 5}})
    await api(nc, f"$JS.API.STREAM.CREATE.{n}E", {"name": f"{n}E", "mirror": {"name": f"{n}O", "opt_start_seq": 50}})
    await asyncio.sleep(0.05)
    since = datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    await asyncio.sleep(0.05)
    await api(nc, f"$JS.API.STREAM.CREATE.{n}T", {"name": f"{n}T", "mirror": {"name": f"{n}O", "opt_start_time": since}})
    await api(nc, f"$JS.API.STREAM.CREATE.{n}U", {"name": f"{n}U", "sources": [{"name": f"{n}O", "opt_start_time": since}]})
    await api(nc, f"{n}.o.a", b"late", {"Nats-TTL": "1h"})
    for stream, count in ((f"{n}M", 6), (f"{n}F", 3), (f"{n}S", 3), (f"{n}T", 1), (f"{n}U", 1)):
        body = await wait_for(nc, stream, count)
        out.append((stream, normalise(body["state"]), source_state(body), await messages(nc, stream)))
    origin = {m[0]: m[4] for m in await messages(nc, f"{n}O", times=True)}
    out.append(("times kept", all(origin[m[0]] == m[4] for m in await messages(nc, f"{n}M", times=True))))
    await wait_for(nc, f"{n}E", 0)
    out.append(("beyond the origin", normalise((await info(nc, f"{n}E"))["state"])))
    # a mirror takes no publishes of its own and its mirror config cannot change
    out.append(await api(nc, f"$JS.API.STREAM.UPDATE.{n}M",
                         {"name": f"{n}M", "mirror": {"name": f"{n}O"}, "subjects": ["x"]}))
    out.append(await api(nc, f"$JS.API.STREAM.UPDATE.{n}M", {"name": f"{n}M", "mirror": {"name": f"{n}F"}}))
    return out


async def test_mirror_matches_nats_server(on_both):
    ours, theirs = await on_both(mirror_scenario, "MI")
    assert ours == theirs
    assert ours[-4] == ("times kept", True)


# -- sources ------------------------------------------------------------------------------------------


async def sources_scenario(nc: Any, n: str) -> list[Any]:
    out: list[Any] = []
    for origin in ("A", "B"):
        await api(nc, f"$JS.API.STREAM.CREATE.{n}{origin}", {"name": f"{n}{origin}", "subjects": [f"{n}.{origin}.>"]})
    await api(nc, f"{n}.A.x", b"a1", {"Nats-Msg-Id": "same", "Nats-Expected-Stream": f"{n}A"})
    await api(nc, f"{n}.A.y", b"a2")
    await api(nc, f"{n}.B.x", b"b1", {"Nats-Msg-Id": "same"})
    await api(nc, f"{n}.B.y", b"b2", {"Nats-Msg-Id": "other"})
    await api(nc, f"{n}.B.x", b"b3")
    both_sources = [{"name": f"{n}A"}, {"name": f"{n}B", "filter_subject": f"{n}.B.x", "opt_start_seq": 2}]
    created = await api(nc, f"$JS.API.STREAM.CREATE.{n}G", {"name": f"{n}G", "sources": both_sources})
    out.append(("create", normalise(created["config"]), source_state(created)))
    dedupe = {"name": f"{n}D", "subjects": [f"{n}.own"], "duplicate_window": 60_000_000_000, "sources": [{"name": f"{n}A"}]}
    await api(nc, f"$JS.API.STREAM.CREATE.{n}D", dedupe)
    await api(nc, f"{n}.own", b"own")
    await wait_for(nc, f"{n}D", 3)  # then a second source, whose "same" the window drops
    await api(nc, f"$JS.API.STREAM.UPDATE.{n}D", {**dedupe, "sources": [{"name": f"{n}A"}, {"name": f"{n}B"}]})
    for stream, count in ((f"{n}G", 3), (f"{n}D", 5)):
        body = await wait_for(nc, stream, count)
        by_source: dict[str, list[Any]] = {}
        for _, subject, hdr, data, _ in await messages(nc, stream):
            by_source.setdefault(subject.split(".")[1], []).append((subject, hdr, data))
        out.append((stream, normalise(body["state"]), source_state(body), sorted(by_source.items())))
    # a client may not pretend a message was sourced
    out.append(await api(nc, f"{n}.own", b"x", {"Nats-Stream-Source": f"{n}A 1 > > {n}.A.x"}))
    return out


async def test_sources_match_nats_server(on_both):
    ours, theirs = await on_both(sources_scenario, "SO")
    assert ours == theirs
    aggregate, deduplicated = ours[1][3], ours[2][3]
    assert [[m[2] for m in msgs] for _, msgs in aggregate] == [[b"a1", b"a2"], [b"b3"]]
    assert [[m[2] for m in msgs] for _, msgs in deduplicated] == [[b"a1", b"a2"], [b"b2", b"b3"], [b"own"]]
    assert all("Nats-Expected-" not in m[1] for _, msgs in aggregate for m in msgs)
    assert ours[-1]["error"]["err_code"] == 10227


# -- origins missing, created later, deleted and recreated --------------------------------------------


async def origins_scenario(nc: Any, n: str) -> list[Any]:
    out: list[Any] = []
    await api(nc, f"$JS.API.STREAM.CREATE.{n}S", {"name": f"{n}S", "sources": [{"name": f"{n}L"}, {"name": f"{n}R"}]})
    await api(nc, f"$JS.API.STREAM.CREATE.{n}M", {"name": f"{n}M", "mirror": {"name": f"{n}L"}})
    await api(nc, f"$JS.API.STREAM.CREATE.{n}R", {"name": f"{n}R", "subjects": [f"{n}.r"]})
    await api(nc, f"{n}.r", b"r1")
    await api(nc, f"$JS.API.STREAM.CREATE.{n}X", {"name": f"{n}X", "sources": [{"name": f"{n}NONE"}]})
    deadline = time.monotonic() + WAIT
    while "error" not in (await info(nc, f"{n}X"))["sources"][0] and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    out.append(("missing", source_state(await info(nc, f"{n}X"))))
    await wait_for(nc, f"{n}S", 1, active=False)
    await api(nc, f"$JS.API.STREAM.CREATE.{n}L", {"name": f"{n}L", "subjects": [f"{n}.l"]})
    await api(nc, f"{n}.l", b"l1")
    await wait_for(nc, f"{n}S", 2)
    await wait_for(nc, f"{n}M", 1)
    await api(nc, f"$JS.API.STREAM.DELETE.{n}R")
    await api(nc, f"$JS.API.STREAM.DELETE.{n}L")
    for origin in "RL":
        await api(nc, f"$JS.API.STREAM.CREATE.{n}{origin}", {"name": f"{n}{origin}", "subjects": [f"{n}.{origin.lower()}"]})
    await api(nc, f"{n}.r", b"r-new")
    await api(nc, f"{n}.l", b"l-new1")
    await api(nc, f"{n}.l", b"l-new2")
    await wait_for(nc, f"{n}S", 5)
    await wait_for(nc, f"{n}M", 2)
    for stream in (f"{n}S", f"{n}M"):
        body = await info(nc, stream)
        out.append((stream, normalise(body["state"]), source_state(body),
                    sorted((m[1], m[2], m[3]) for m in await messages(nc, stream))))
    return out


async def test_origins_created_later_deleted_and_recreated(on_both):
    ours, theirs = await on_both(origins_scenario, "OR")
    assert ours == theirs
    assert ours[0][1]["sources"][0]["error"]["err_code"] == 10059
    # the recreated origins: the source read them from their start, the mirror from its own next sequence
    assert sorted(m[2] for m in ours[1][3]) == [b"l-new1", b"l-new2", b"l1", b"r-new", b"r1"]
    assert sorted(m[2] for m in ours[2][3]) == [b"l-new2", b"l1"]


# -- bad input ----------------------------------------------------------------------------------------

BAD = [
    ("$JS.API.STREAM.CREATE.{S}O", {"name": "{S}O", "subjects": ["{S}.o"], "max_msg_size": 100}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "mirror": {"name": "{S}O"}, "subjects": ["{S}.x"]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "mirror": {"name": "{S}O"}, "first_seq": 5}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "mirror": {"name": "{S}O"}, "sources": [{"name": "{S}O"}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "mirror": {"name": "a.b"}}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "mirror": {"name": "{S}O"}, "max_msg_size": 10}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": "{S}O"}, {"name": "{S}O"}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": ""}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": "{S}O"}], "max_msg_size": 10}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": "nope"}),
    # cycles: through sources, and hiding behind a mirror
    ("$JS.API.STREAM.CREATE.{S}C1", {"name": "{S}C1", "subjects": ["{S}.c1"], "sources": [{"name": "{S}C2"}]}),
    ("$JS.API.STREAM.CREATE.{S}C2", {"name": "{S}C2", "subjects": ["{S}.c2"], "sources": [{"name": "{S}C1"}]}),
    ("$JS.API.STREAM.CREATE.{S}C3", {"name": "{S}C3", "subjects": ["{S}.c3"],
                                     "sources": [{"name": "{S}C1", "filter_subject": "{S}.elsewhere"}]}),
    ("$JS.API.STREAM.CREATE.{S}M1", {"name": "{S}M1", "mirror": {"name": "{S}C3"}}),
    ("$JS.API.STREAM.UPDATE.{S}C3", {"name": "{S}C3", "subjects": ["{S}.c3"],
                                     "sources": [{"name": "{S}C1", "filter_subject": "{S}.elsewhere"}, {"name": "{S}M1"}]}),
    # the mirror of a stream that does not exist yet is fine; changing what it mirrors is not
    ("$JS.API.STREAM.CREATE.{S}M2", {"name": "{S}M2", "mirror": {"name": "{S}LATER"}}),
    ("$JS.API.STREAM.UPDATE.{S}M2", {"name": "{S}M2", "mirror": {"name": "{S}O"}}),
    ("$JS.API.STREAM.UPDATE.{S}O", {"name": "{S}O", "subjects": ["{S}.o"], "max_msg_size": 100, "mirror": {"name": "{S}M2"}}),
    ("$JS.API.STREAM.UPDATE.{S}M2", {"name": "{S}M2"}),  # promoting the mirror to a plain stream is allowed
    ("$JS.API.STREAM.INFO.{S}M2", ""),
]


def strip_volatile(answer: Any) -> Any:
    if isinstance(answer, dict) and "config" in answer:
        return {"config": answer["config"], **source_state(answer)}
    return answer


async def test_bad_combinations_match_nats_server(differential):
    ours, theirs = await differential(BAD)
    assert [strip_volatile(a) for a in ours] == [strip_volatile(a) for a in theirs]
    codes = [a.get("error", {}).get("err_code") for a in ours]
    assert codes[1:10] == [10034, 10143, 10031, 10142, 10030, 10140, 10141, 10046, 10025]
    assert codes[11] == 10052 and ours[11]["error"]["description"] == "detected cycle"
    assert codes[12:15] == [None, None, 10052]  # a filter away from the reader's subjects is no cycle; a mirror hides one


# -- external origins: nats-server's link through an api prefix never copies on one server -------------


def external_bad(s: str) -> list[Any]:
    return [(f"$JS.API.STREAM.CREATE.{s}X", {"name": f"{s}X", where: spec if where == "mirror" else [spec]})
            for where in ("mirror", "sources") for spec in (
                {"name": "O", "external": {"api": "$JS.API"}},
                {"name": "O", "external": {"api": "$JS.*.API"}},
                {"name": "O", "external": {"api": "$JS.hub.API", "deliver": "d.>"}},
                {"name": "O", "external": {"api": "$JS.API", "deliver": "d.>"}},
            )]


async def external_scenario(nc: Any, n: str) -> list[Any]:
    """Sources and a mirror through api / deliver prefixes: accepted, shown with their `external`, never
    active, next to a local source of the same stream that copies."""
    out: list[Any] = []
    await api(nc, f"$JS.API.STREAM.CREATE.{n}O", {"name": f"{n}O", "subjects": [f"{n}.o.>"]})
    await api(nc, f"{n}.o.a", b"one")
    created = await api(nc, f"$JS.API.STREAM.CREATE.{n}G", {"name": f"{n}G", "sources": [
        {"name": f"{n}O"}, {"name": f"{n}O", "external": {"api": "$JS.hub.API", "deliver": "dlv.hub"}},
        {"name": f"{n}O", "external": {"deliver": "dlv.only"}}]})
    out.append(("create", normalise(created["config"]), source_state(created)))
    for i, ext in enumerate(({"api": "$JS.hub.API"}, {"api": "$JS.hub.API", "deliver": "dlv"})):
        body = {"name": f"{n}M{i}", "mirror": {"name": f"{n}O" if i else "not.a.name", "external": ext},
                "mirror_direct": bool(i)}
        out.append(normalise((await api(nc, f"$JS.API.STREAM.CREATE.{n}M{i}", body))["config"]))
    for bad in external_bad(n):
        out.append((await api(nc, bad[0], bad[1])).get("error"))
    await wait_for(nc, f"{n}G", 1, active=False)
    await asyncio.sleep(3)  # past nats-server's first consumer requests through the prefixes
    for stream in (f"{n}G", f"{n}M0", f"{n}M1"):
        body = await info(nc, stream)
        out.append((stream, normalise(body["state"]), source_state(body)))
    out.append(("origin consumers", (await api(nc, f"$JS.API.CONSUMER.NAMES.{n}O"))["consumers"]))
    out.append(("mirror does not answer for its origin", await direct_get(nc, f"{n}O", {"seq": 1})))
    return out


async def test_external_origins_match_nats_server(on_both):
    ours, theirs = await on_both(external_scenario, "EX")
    assert ours == theirs
    assert [e["err_code"] for e in ours[3:11]] == [10021, 10052, 10024, 10024] * 2
    aggregate = ours[11][2]["sources"]
    assert sorted(s["external"]["deliver"] for s in aggregate if s["active"] == "never") == ["dlv.hub", "dlv.only"]
    assert ours[11][1]["messages"] == 1 and ours[12][2]["mirror"]["active"] == "never"


async def external_domain_transcript(handle: ServerHandle) -> list[Any]:
    nc = await nats.connect(handle.url)
    try:
        out: list[Any] = []
        await api(nc, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
        await api(nc, "o.a", b"one")
        for i, ext in enumerate(({"api": "$JS.hub.API"}, {"api": "$JS.hub.API", "deliver": "dlv"})):
            await api(nc, f"$JS.API.STREAM.CREATE.S{i}", {"name": f"S{i}", "sources": [{"name": "O", "external": ext}]})
            await api(nc, f"$JS.API.STREAM.CREATE.M{i}", {"name": f"M{i}", "mirror": {"name": "O", "external": ext}})
        out.append(await api(nc, "$JS.API.STREAM.CREATE.X", {"name": "X", "sources": [
            {"name": "O", "external": {"api": "$JS.API"}}]}))
        await asyncio.sleep(4)  # past nats-server's first consumer requests through the prefixes
        for stream in ("S0", "M0", "S1", "M1"):
            body = await info(nc, stream)
            out.append((stream, normalise(body["state"]), source_state(body)))
        out.append((await api(nc, "$JS.API.CONSUMER.NAMES.O"))["consumers"])
        # a deliver prefix under which a local origin's wildcard subjects would be delivered
        await api(nc, "$JS.API.STREAM.DELETE.O")
        await api(nc, "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["*.>"], "no_ack": True})
        for deliver in ("dlv", "dlv.x"):
            out.append(await api(nc, "$JS.API.STREAM.CREATE.X", {"name": "X", "sources": [
                {"name": "W"}, {"name": "O", "external": {"api": "$JS.hub.API", "deliver": deliver}}]}))
        return out
    finally:
        await nc.close()


@pytest.mark.slow
async def test_external_origins_on_a_domain_server_match_nats_server(server_factory, tmp_path):
    """`external: {api: "$JS.<domain>.API"}` on a server of that domain: nats-server's link stays inactive
    too (its own domain prefix does not reach its API from inside), so jsbroker's does."""
    ours_cfg = tmp_path / "jsbroker.toml"
    ours_cfg.write_text('[jetstream]\ndomain = "hub"\n')
    theirs_cfg = tmp_path / "nats-server.conf"
    theirs_cfg.write_text("jetstream { domain: hub }\n")
    ours, theirs = await asyncio.gather(
        external_domain_transcript(server_factory(JSBROKER, extra_args=["-c", str(ours_cfg)])),
        external_domain_transcript(server_factory(NATS_SERVER, extra_args=["-c", str(theirs_cfg)])))
    assert ours == theirs
    assert [e["error"]["err_code"] for e in ours[:1] + ours[-2:]] == [10021, 10022, 10022]
    assert all(s[1]["messages"] == 0 and "never" in json.dumps(s[2]) for s in ours[1:5])


# -- durable sourcing (2.14's `consumer`): fed by a consumer the user created on the origin -------------


def fc_consumer(stream: str, name: str, deliver_subject: str, **extra: Any) -> dict[str, Any]:
    """The consumer durable sourcing needs: push, ack_policy flow_control (flow control, 1 s heartbeat)."""
    return {"stream_name": stream, "config": {"durable_name": name, "deliver_subject": deliver_subject,
                                              "ack_policy": "flow_control", "flow_control": True,
                                              "idle_heartbeat": 1_000_000_000, **extra}}


def consumer_state(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("name", "num_ack_pending", "num_pending", "num_redelivered")} | {
        "delivered": {k: v for k, v in body["delivered"].items() if k != "last_active"},
        "ack_floor": {k: v for k, v in body["ack_floor"].items() if k != "last_active"},
        "push_bound": body.get("push_bound", False)}


async def settled_consumer(nc: Any, stream: str, name: str) -> dict[str, Any]:
    """The consumer once the flow control responses acked everything it delivered (on a heartbeat)."""
    deadline = time.monotonic() + WAIT
    while True:
        body = await api(nc, f"$JS.API.CONSUMER.INFO.{stream}.{name}")
        if body["ack_floor"]["stream_seq"] == body["delivered"]["stream_seq"] or time.monotonic() > deadline:
            return consumer_state(body)
        await asyncio.sleep(0.1)


async def wait_error(nc: Any, stream: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while "error" not in json.dumps(source_state(body := await info(nc, stream))) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    return source_state(body)


async def durable_scenario(nc: Any, n: str) -> list[Any]:
    out: list[Any] = []
    await api(nc, f"$JS.API.STREAM.CREATE.{n}O", {"name": f"{n}O", "subjects": [f"{n}.o.>"]})
    for i in range(4):
        await api(nc, f"{n}.o.{'ab'[i % 2]}", f"m{i}".encode(), {"Nats-Msg-Id": f"id{i}"})
    created = await api(nc, f"$JS.API.STREAM.CREATE.{n}G", {"name": f"{n}G", "sources": [
        {"name": f"{n}O", "consumer": {"name": "C", "deliver_subject": f"{n}.dlv.g"}}]})
    out.append(("create", normalise(created["config"]), source_state(created)))
    await api(nc, f"$JS.API.STREAM.CREATE.{n}M", {"name": f"{n}M", "mirror": {
        "name": f"{n}O", "consumer": {"name": "CM", "deliver_subject": f"{n}.dlv.m"}}})
    # the consumers are the user's: one without ack_policy flow_control is an error on the link
    await api(nc, f"$JS.API.CONSUMER.CREATE.{n}O.C", {"stream_name": f"{n}O", "config": {
        "durable_name": "C", "deliver_subject": f"{n}.dlv.g", "ack_policy": "explicit"}})
    await api(nc, f"$JS.API.CONSUMER.CREATE.{n}O.CM", {"stream_name": f"{n}O", "config": {
        "durable_name": "CM", "deliver_subject": f"{n}.dlv.m", "ack_policy": "all"}})
    out.append(("not flow control", await wait_error(nc, f"{n}G"), await wait_error(nc, f"{n}M")))
    await api(nc, f"$JS.API.CONSUMER.DELETE.{n}O.C")
    await api(nc, f"$JS.API.CONSUMER.DELETE.{n}O.CM")
    await api(nc, f"$JS.API.CONSUMER.CREATE.{n}O.C", fc_consumer(f"{n}O", "C", f"{n}.dlv.g"))
    # the mirror's consumer starts at the origin's third message: the mirror starts there too
    await api(nc, f"$JS.API.CONSUMER.CREATE.{n}O.CM", fc_consumer(f"{n}O", "CM", f"{n}.dlv.m",
                                                                  deliver_policy="by_start_sequence", opt_start_seq=3))
    await api(nc, f"{n}.o.a", b"late")
    for stream, count in ((f"{n}G", 5), (f"{n}M", 3)):
        body = await wait_for(nc, stream, count, timeout=60)
        out.append((stream, normalise(body["state"]), source_state(body), await messages(nc, stream)))
    for name in ("C", "CM"):
        out.append((name, await settled_consumer(nc, f"{n}O", name)))
    out.append(("consumers", sorted(c["name"] for c in (await api(nc, f"$JS.API.CONSUMER.LIST.{n}O"))["consumers"])))
    return out


async def test_durable_sourcing_matches_nats_server(on_both):
    ours, theirs = await on_both(durable_scenario, "DU")
    assert ours == theirs
    assert ours[1][1]["sources"][0]["error"]["err_code"] == 10217
    assert ours[1][2]["mirror"]["error"]["err_code"] == 10214
    assert [m[3] for m in ours[2][3]] == [b"m0", b"m1", b"m2", b"m3", b"late"]
    assert [m[0] for m in ours[3][3]] == [3, 4, 5]  # the mirror starts where its consumer does
    assert ours[4][1]["ack_floor"]["stream_seq"] == 5 and ours[4][1]["push_bound"]


async def durable_interest_scenario(nc: Any, n: str) -> list[Any]:
    """A workqueue origin: what its durable sourcing consumer delivered and had acked by the flow control
    response is removed from it; the rest of the origin's messages stay."""
    out: list[Any] = []
    await api(nc, f"$JS.API.STREAM.CREATE.{n}W", {"name": f"{n}W", "subjects": [f"{n}.w.>"], "retention": "workqueue"})
    await api(nc, f"$JS.API.CONSUMER.CREATE.{n}W.C", fc_consumer(f"{n}W", "C", f"{n}.dlv", filter_subject=f"{n}.w.a"))
    for subject in ("a", "b", "a", "a"):
        await api(nc, f"{n}.w.{subject}", subject.encode())
    await api(nc, f"$JS.API.STREAM.CREATE.{n}G", {"name": f"{n}G", "sources": [
        {"name": f"{n}W", "consumer": {"name": "C", "deliver_subject": f"{n}.dlv"}}]})
    body = await wait_for(nc, f"{n}G", 3, timeout=60)
    out.append((normalise(body["state"]), source_state(body)))
    out.append(await settled_consumer(nc, f"{n}W", "C"))
    deadline = time.monotonic() + WAIT
    while (await info(nc, f"{n}W"))["state"]["messages"] > 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    out.append(normalise((await info(nc, f"{n}W"))["state"]))
    return out


async def test_durable_sourcing_of_a_workqueue_matches_nats_server(on_both):
    ours, theirs = await on_both(durable_interest_scenario, "DW")
    assert ours == theirs
    assert ours[2]["messages"] == 1


async def durable_consumer_recreated_scenario(nc: Any, n: str) -> list[Any]:
    """The consumer deleted under a linked source and mirror, messages published meanwhile, then the
    consumer created again from the origin's start: the links take it up again and copy only what they
    lack."""
    out: list[Any] = []
    await api(nc, f"$JS.API.STREAM.CREATE.{n}O", {"name": f"{n}O", "subjects": [f"{n}.o"]})
    for name, deliver in (("C", f"{n}.dlv.g"), ("CM", f"{n}.dlv.m")):
        await api(nc, f"$JS.API.CONSUMER.CREATE.{n}O.{name}", fc_consumer(f"{n}O", name, deliver))
    for i in range(3):
        await api(nc, f"{n}.o", f"m{i}".encode())
    await api(nc, f"$JS.API.STREAM.CREATE.{n}G", {"name": f"{n}G", "sources": [
        {"name": f"{n}O", "consumer": {"name": "C", "deliver_subject": f"{n}.dlv.g"}}]})
    await api(nc, f"$JS.API.STREAM.CREATE.{n}M", {"name": f"{n}M", "mirror": {
        "name": f"{n}O", "consumer": {"name": "CM", "deliver_subject": f"{n}.dlv.m"}}})
    await wait_for(nc, f"{n}G", 3, timeout=60)
    await wait_for(nc, f"{n}M", 3, timeout=60)
    for name in ("C", "CM"):
        await api(nc, f"$JS.API.CONSUMER.DELETE.{n}O.{name}")
    for i in range(3, 5):
        await api(nc, f"{n}.o", f"m{i}".encode())
    for name, deliver in (("C", f"{n}.dlv.g"), ("CM", f"{n}.dlv.m")):
        await api(nc, f"$JS.API.CONSUMER.CREATE.{n}O.{name}", fc_consumer(f"{n}O", name, deliver))
    for stream in (f"{n}G", f"{n}M"):
        body = await wait_for(nc, stream, 5, timeout=90)
        out.append((stream, normalise(body["state"]), source_state(body), [m[:4] for m in await messages(nc, stream)]))
    for name in ("C", "CM"):
        out.append((name, await settled_consumer(nc, f"{n}O", name)))
    return out


async def test_durable_consumer_recreated_matches_nats_server(on_both):
    ours, theirs = await on_both(durable_consumer_recreated_scenario, "DR")
    assert ours == theirs
    assert [m[3] for m in ours[0][3]] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [m[0] for m in ours[1][3]] == [1, 2, 3, 4, 5]


DURABLE_BAD = [
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": "O", "consumer": {"name": "C", "deliver_subject": "d"},
                                                                "opt_start_seq": 2}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": "O", "consumer": {"name": "C", "deliver_subject": "d"},
                                                                "opt_start_time": "2024-01-01T00:00:00Z"}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": "O", "consumer": {"name": "C", "deliver_subject": "d"},
                                                                "filter_subject": "o.a"}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": "O", "consumer": {"name": "a.b", "deliver_subject": "d"}}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": "O", "consumer": {"name": "C", "deliver_subject": "d.*"}}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": "O", "consumer": {"name": "C"}}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": "O", "consumer": {}}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [{"name": "O", "consumer": "C"}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [
        {"name": "O", "consumer": {"name": "C", "deliver_subject": "d"}},
        {"name": "O", "consumer": {"name": "C", "deliver_subject": "e"}, "subject_transforms": [{"src": "o.a", "dest": "x"}]}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "sources": [
        {"name": "O", "consumer": {"name": "C", "deliver_subject": "d"}}, {"name": "O", "consumer": {"name": "C", "deliver_subject": "d"}}]}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "mirror": {"name": "O", "consumer": {"name": "C", "deliver_subject": "d"},
                                                              "opt_start_seq": 2}}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "mirror": {"name": "O", "consumer": {"name": "C", "deliver_subject": "d"},
                                                              "filter_subject": "o.a"}}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "mirror": {"name": "O", "consumer": {"name": "", "deliver_subject": "d"}}}),
    ("$JS.API.STREAM.CREATE.{S}1", {"name": "{S}1", "mirror": {"name": "O", "consumer": {"name": "C", "deliver_subject": ">"}}}),
    # accepted: a source and a mirror each naming their consumer (the two sources through two consumers)
    ("$JS.API.STREAM.CREATE.{S}2", {"name": "{S}2", "sources": [
        {"name": "O", "consumer": {"name": "C", "deliver_subject": "d"}}, {"name": "O", "consumer": {"name": "D", "deliver_subject": "e"},
                                                                          "subject_transforms": [{"src": "o.a", "dest": "x"}]}]}),
    ("$JS.API.STREAM.CREATE.{S}3", {"name": "{S}3", "mirror": {"name": "O", "consumer": {"name": "C", "deliver_subject": "d"}}}),
    ("$JS.API.STREAM.UPDATE.{S}3", {"name": "{S}3", "mirror": {"name": "O", "consumer": {"name": "C2", "deliver_subject": "d"}}}),
]


async def test_durable_sourcing_bad_configs_match_nats_server(differential):
    ours, theirs = await differential(DURABLE_BAD)
    assert [strip_volatile(a) for a in ours] == [strip_volatile(a) for a in theirs]
    codes = [a.get("error", {}).get("err_code") for a in ours]
    assert codes == [10215] * 7 + [10025, 10216, 10140] + [10213] * 4 + [None, None, 10055]


@pytest.mark.parametrize("how", ["sigterm", "kill"])
async def test_restart_mid_durable_sourcing_loses_and_repeats_nothing(server_factory, server_kind, how):
    """The consumer's ack floor is the durable position: after a restart the link resets it, skips what it
    copied already, and the aggregate and the mirror hold every acked message once."""
    handle = server_factory(server_kind)
    nc = await nats.connect(handle.url)
    await api(nc, "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a.>"], "retention": "interest"})
    await api(nc, "$JS.API.CONSUMER.CREATE.A.CG", fc_consumer("A", "CG", "dlv.g"))
    await api(nc, "$JS.API.CONSUMER.CREATE.A.CM", fc_consumer("A", "CM", "dlv.m"))
    await api(nc, "$JS.API.STREAM.CREATE.AGG", {"name": "AGG", "sources": [
        {"name": "A", "consumer": {"name": "CG", "deliver_subject": "dlv.g"}}]})
    await api(nc, "$JS.API.STREAM.CREATE.MIR", {"name": "MIR", "mirror": {
        "name": "A", "consumer": {"name": "CM", "deliver_subject": "dlv.m"}}})
    await wait_active(nc, "AGG")
    await wait_active(nc, "MIR")
    await nc.close()
    task = asyncio.ensure_future(publish_many(handle.url, "a.x", 3000, 0))
    await asyncio.sleep(0.5)
    (handle.stop() if how == "sigterm" else handle.kill())
    acked = await task
    handle.start()
    nc = await nats.connect(handle.url)
    await api(nc, "a.x", b"after")
    last = (await info(nc, "A"))["state"]["last_seq"]
    assert last >= acked + 1
    body = await wait_for(nc, "AGG", last, timeout=60)
    await wait_for(nc, "MIR", last, timeout=60)
    seqs = [int(m[2].split("Nats-Stream-Source: ")[1].split(" ")[1]) for m in await messages(nc, "AGG")]
    assert seqs == list(range(1, last + 1)) and body["state"]["messages"] == last
    assert [m[0] for m in await messages(nc, "MIR")] == list(range(1, last + 1))
    for name in ("CG", "CM"):  # everything acked, and the interest origin then drops it
        state = await settled_consumer(nc, "A", name)
        assert state["ack_floor"]["stream_seq"] == last and state["num_pending"] == 0
    deadline = time.monotonic() + WAIT
    while (await info(nc, "A"))["state"]["messages"] and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert (await info(nc, "A"))["state"]["messages"] == 0
    await nc.close()


# -- restarts while sourcing --------------------------------------------------------------------------


async def publish_many(url: str, subject: str, count: int, start: int) -> int:
    """Publish with acks until `count` or the server goes away; returns how many were acked."""
    acked = 0
    nc = await nats.connect(url, allow_reconnect=False)  # no buffered publish may arrive after the restart
    try:
        js = nc.jetstream()
        for i in range(start, start + count):
            await js.publish(subject, str(i).encode(), timeout=2)
            acked += 1
    except Exception:  # the server was killed under us: what was acked is what counts
        pass
    finally:
        await nc.close()
    return acked


@pytest.mark.parametrize("how", ["sigterm", "kill"])
async def test_restart_mid_sourcing_loses_and_repeats_nothing(server_factory, server_kind, how):
    handle = server_factory(server_kind)
    nc = await nats.connect(handle.url)
    for origin in ("A", "B"):
        await api(nc, f"$JS.API.STREAM.CREATE.{origin}", {"name": origin, "subjects": [f"{origin.lower()}.>"]})
    await api(nc, "$JS.API.STREAM.CREATE.AGG", {"name": "AGG", "sources": [{"name": "A"}, {"name": "B"}]})
    await api(nc, "$JS.API.STREAM.CREATE.MIR", {"name": "MIR", "mirror": {"name": "A"}})
    await nc.close()
    task_a = asyncio.ensure_future(publish_many(handle.url, "a.x", 3000, 0))
    task_b = asyncio.ensure_future(publish_many(handle.url, "b.x", 3000, 0))
    await asyncio.sleep(0.5)
    (handle.stop() if how == "sigterm" else handle.kill())
    await asyncio.gather(task_a, task_b)
    handle.start()
    nc = await nats.connect(handle.url)
    a_state = (await info(nc, "A"))["state"]
    b_state = (await info(nc, "B"))["state"]
    await api(nc, "a.x", b"after")  # sourcing goes on after the restart too
    total = a_state["messages"] + b_state["messages"] + 1
    body = await wait_for(nc, "AGG", total)
    await wait_for(nc, "MIR", a_state["messages"] + 1)
    seen: dict[tuple[str, int], int] = {}
    for _, _, hdr, _, _ in await messages(nc, "AGG"):
        stream, seq = hdr.split("Nats-Stream-Source: ")[1].split(" ")[:2]
        seen[(stream, int(seq))] = seen.get((stream, int(seq)), 0) + 1
    assert body["state"]["messages"] == total
    assert sorted(seen) == sorted([("A", s) for s in range(1, a_state["last_seq"] + 2)]
                                  + [("B", s) for s in range(1, b_state["last_seq"] + 1)])
    assert set(seen.values()) == {1}
    assert (await api(nc, "$JS.API.INFO"))["consumers"] == 3  # nats-server counts its sourcing consumers
    mirror = [(m[0], m[3]) for m in await messages(nc, "MIR")]
    origin = [(m[0], m[3]) for m in await messages(nc, "A")]
    assert mirror == origin
    await nc.close()


# -- mirror_direct ------------------------------------------------------------------------------------


async def direct_get(nc: Any, stream: str, body: dict[str, Any]) -> Any:
    try:
        msg = await nc.request(f"$JS.API.DIRECT.GET.{stream}", json.dumps(body).encode(), timeout=2)
    except Exception as exc:  # no responders: the exception is the behaviour under test
        return type(exc).__name__
    hdrs = dict(msg.headers or {})
    hdrs.pop("Nats-Time-Stamp", None)
    return hdrs, msg.data


async def mirror_direct_scenario(nc: Any, n: str) -> list[Any]:
    out: list[Any] = []
    await api(nc, f"$JS.API.STREAM.CREATE.{n}O", {"name": f"{n}O", "subjects": [f"{n}.o"], "allow_direct": True})
    await api(nc, f"{n}.o", b"one")
    created = await api(nc, f"$JS.API.STREAM.CREATE.{n}M", {"name": f"{n}M", "mirror": {"name": f"{n}O"}})
    out.append(("inherited", created["config"]["mirror_direct"], created["config"]["allow_direct"]))
    plain = await api(nc, f"$JS.API.STREAM.CREATE.{n}P", {"name": f"{n}P", "mirror": {"name": f"{n}O"},
                                                         "mirror_direct": False})
    out.append(("forced", plain["config"]["mirror_direct"]))
    await wait_for(nc, f"{n}M", 1)
    answers = {str(await direct_get(nc, f"{n}O", {"seq": 1})) for _ in range(20)}
    out.append(("origin or mirror", sorted(a.replace(f"{n}M", "<stream>").replace(f"{n}O", "<stream>") for a in answers)))
    out.append(("mirror itself", await direct_get(nc, f"{n}M", {"seq": 1})))
    return out


async def test_mirror_direct_matches_nats_server(on_both):
    ours, theirs = await on_both(mirror_direct_scenario, "MD")
    assert ours == theirs
    assert ours[0] == ("inherited", True, False)


# -- origins with interest or workqueue retention: the link is an ack-none consumer of the origin -----


async def retention_scenario(nc: Any, n: str) -> list[Any]:
    out: list[Any] = []
    for retention in ("interest", "workqueue"):
        origin, copy = f"{n}{retention[0].upper()}", f"{n}{retention[0].upper()}C"
        await api(nc, f"$JS.API.STREAM.CREATE.{origin}", {"name": origin, "subjects": [f"{origin}.>"],
                                                          "retention": retention})
        out.append(await api(nc, f"{origin}.before", b"0"))  # nobody interested yet
        await api(nc, f"$JS.API.STREAM.CREATE.{copy}", {"name": copy, "sources": [{"name": origin,
                                                                                 "filter_subject": f"{origin}.a"}]})
        await wait_active(nc, copy)  # nats-server's sourcing consumer exists from here on
        for subject in ("a", "b", "a"):
            out.append(await api(nc, f"{origin}.{subject}", subject.encode()))
        body = await wait_for(nc, copy, 2)
        deadline = time.monotonic() + WAIT
        while (await info(nc, origin))["state"]["messages"] > 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        out.append((retention, normalise((await info(nc, origin))["state"]), normalise(body["state"])))
    return out


async def test_sourcing_interest_and_workqueue_origins_matches_nats_server(on_both):
    ours, theirs = await on_both(retention_scenario, "RT")
    assert ours == theirs


# -- the Go nats CLI ----------------------------------------------------------------------------------


def test_nats_cli_stream_add_mirror_and_source(server_factory, tmp_path):
    """`nats stream add --mirror / --source` (natscli) gives the same streams and copies on both servers."""
    import subprocess

    from tests.chart import go_tools
    from tests.polling import poll

    cli = str(go_tools.NATS_CLI.for_test())

    def transcript(kind: str) -> list[Any]:
        handle = server_factory(kind)

        def run(*args: str) -> tuple[int, str]:
            done = subprocess.run([cli, "--server", handle.url, "--timeout", "5s", *args], capture_output=True,
                                  text=True, timeout=60, env={"HOME": str(tmp_path)})
            return done.returncode, done.stdout

        out: list[Any] = [run("stream", "add", "O", "--subjects", "o.>", "--defaults")[0],
                          run("pub", "o.a", "hello", "--count", "3")[0]]
        for name, flag in (("M", "--mirror"), ("AGG", "--source")):
            code, text = run("stream", "add", name, flag, "O", "--defaults")
            out.append((code, [line.strip() for line in text.splitlines() if "Stream Name" in line or "Lag" in line]))

        def caught_up() -> list[Any]:
            infos = [json.loads(run("stream", "info", name, "--json")[1]) for name in ("M", "AGG")]
            return infos if all(i["state"]["messages"] == 3 for i in infos) else []

        for body in poll(caught_up, timeout=WAIT, what=f"{kind}: M and AGG hold the 3 messages"):
            out.append((normalise(body["state"]), source_state(body)))
        return out

    assert transcript(JSBROKER) == transcript(NATS_SERVER)


# -- random operation sequences with restarts, against nats-server -----------------------------------


def random_ops(seed: int, count: int = 14) -> list[tuple[Any, ...]]:
    import random

    rng = random.Random(seed)
    ops: list[tuple[Any, ...]] = []
    for i in range(count):
        kind = rng.choice(["publish", "publish", "publish", "burst", "delete", "purge", "sigterm", "kill"])
        origin = rng.choice("AB")
        if kind == "publish":
            ops.append((kind, origin, rng.choice(["x", "y"]), f"id{rng.randrange(4)}" if rng.random() < 0.4 else ""))
        elif kind == "burst":
            ops.append((kind, origin, rng.randrange(20, 200)))
        elif kind == "delete":
            ops.append((kind, origin, rng.randrange(1, 8)))
        elif kind == "purge":
            ops.append((kind, origin))
        else:
            ops.append((kind,))
    return ops


async def apply_op(handle: ServerHandle, op: tuple[Any, ...]) -> None:
    if op[0] in ("sigterm", "kill"):
        (handle.stop() if op[0] == "sigterm" else handle.kill())
        handle.start()
        await links_up(handle)
        return
    nc = await nats.connect(handle.url)
    try:
        if op[0] == "publish":
            await api(nc, f"{op[1].lower()}.{op[2]}", b"p", {"Nats-Msg-Id": op[3]} if op[3] else None)
        elif op[0] == "burst":
            js = nc.jetstream()
            acks = [await js.publish_async(f"{op[1].lower()}.x", str(i).encode()) for i in range(op[2])]
            await asyncio.gather(*acks)
        elif op[0] == "delete":
            await api(nc, f"$JS.API.STREAM.MSG.DELETE.{op[1]}", {"seq": op[2]})
        else:
            await api(nc, f"$JS.API.STREAM.PURGE.{op[1]}", {})
    finally:
        await nc.close()


async def links_up(handle: ServerHandle) -> None:
    """nats-server sets its sourcing consumers up about a second after a create or a start: the steps
    wait for that on both servers, so they compare what is copied, not how soon."""
    nc = await nats.connect(handle.url)
    try:
        for stream in ("AGG", "MIR"):
            await wait_active(nc, stream)
    finally:
        await nc.close()


async def random_transcript(handle: ServerHandle, ops: list[tuple[Any, ...]]) -> list[Any]:
    nc = await nats.connect(handle.url)
    for origin in "AB":
        await api(nc, f"$JS.API.STREAM.CREATE.{origin}", {"name": origin, "subjects": [f"{origin.lower()}.>"]})
    await api(nc, "$JS.API.STREAM.CREATE.AGG", {"name": "AGG", "duplicate_window": 60_000_000_000,
                                                "sources": [{"name": "A"}, {"name": "B", "filter_subject": "b.x"}]})
    await api(nc, "$JS.API.STREAM.CREATE.MIR", {"name": "MIR", "mirror": {"name": "A"}})
    await nc.close()
    await links_up(handle)
    for op in ops:
        await apply_op(handle, op)
    nc = await nats.connect(handle.url)
    try:
        deadline, last = time.monotonic() + WAIT, None
        while True:  # caught up: every link reached its origin, no lag, nothing changed for a second
            agg, mirror = await info(nc, "AGG"), await info(nc, "MIR")
            links = [*agg["sources"], mirror["mirror"]]
            now = (agg["state"]["last_seq"], mirror["state"]["last_seq"])
            if all(s["lag"] == 0 and s["active"] != -1 for s in links) and now == last:
                break
            assert time.monotonic() < deadline, (agg, mirror)
            last = now
            await asyncio.sleep(1.0)
        by_source: dict[str, list[tuple[Any, ...]]] = {}
        for _, subject, hdr, data, _ in await messages(nc, "AGG"):
            by_source.setdefault(subject[0], []).append((subject, hdr, data))
        return [normalise((await info(nc, "AGG"))["state"]), sorted(by_source.items()),
                normalise((await info(nc, "MIR"))["state"]), [m[:4] for m in await messages(nc, "MIR")]]
    finally:
        await nc.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_operations_with_restarts_match_nats_server(server_factory, seed):
    ops = random_ops(seed)
    ours = await random_transcript(server_factory(JSBROKER), ops)
    theirs = await random_transcript(server_factory(NATS_SERVER), ops)
    assert ours == theirs, ops


async def test_purged_aggregate_resumes_where_its_sources_stopped(server_factory, server_kind):
    """None of a source's copies left (a purge), then a restart: the source reads on after what it copied
    (nats-server keeps per-source state in its store; jsbroker the positions saved at stop)."""
    handle = server_factory(server_kind)
    nc = await nats.connect(handle.url)
    await api(nc, "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a"]})
    for i in range(3):
        await api(nc, "a", str(i).encode())
    await api(nc, "$JS.API.STREAM.CREATE.AGG", {"name": "AGG", "sources": [{"name": "A"}]})
    await wait_for(nc, "AGG", 3)
    await api(nc, "$JS.API.STREAM.PURGE.AGG", {})
    await nc.close()
    handle.restart()
    nc = await nats.connect(handle.url)
    await wait_active(nc, "AGG")
    before = [link_state(s) for s in (await info(nc, "AGG"))["sources"]]
    await api(nc, "a", b"new")
    body = await wait_for(nc, "AGG", 1)
    assert before == [{"name": "A", "lag": 0, "seq": 3, "active": "seen"}]
    assert [m[3] for m in await messages(nc, "AGG")] == [b"new"] and body["state"]["first_seq"] == 4
    await nc.close()


# -- a stream that refuses what its source copies: the source stalls and retries -----------------------


async def stalled_scenario(nc: Any, n: str) -> list[Any]:
    await api(nc, f"$JS.API.STREAM.CREATE.{n}A", {"name": f"{n}A", "subjects": [f"{n}.a"]})
    for i in range(5):
        await api(nc, f"{n}.a", str(i).encode())
    await api(nc, f"$JS.API.STREAM.CREATE.{n}G", {"name": f"{n}G", "max_msgs": 2, "discard": "new",
                                                 "sources": [{"name": f"{n}A"}]})
    out: list[Any] = []
    deadline = time.monotonic() + WAIT
    while (body := await info(nc, f"{n}G"))["sources"][0].get("lag") != 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    out.append(("stalled", normalise(body["state"]), source_state(body)))
    await api(nc, f"$JS.API.STREAM.PURGE.{n}G", {})  # room again: the refused message and the next one come
    while (body := await info(nc, f"{n}G"))["sources"][0].get("seq") != 4 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    out.append(("retried", normalise(body["state"]), source_state(body), [m[3] for m in await messages(nc, f"{n}G")]))
    return out


async def test_stalled_source_matches_nats_server(on_both):
    ours, theirs = await on_both(stalled_scenario, "ST")
    assert ours == theirs
    assert ours[0][2]["sources"][0]["lag"] == 1 and ours[1][3] == [b"2", b"3"]


# -- subject transforms in sources and mirrors --------------------------------------------------------


async def transforms_scenario(nc: Any, n: str) -> list[Any]:
    out: list[Any] = []
    await api(nc, f"$JS.API.STREAM.CREATE.{n}O", {"name": f"{n}O", "subjects": [f"{n}.>"]})
    for subject in ("a.1", "b.2", "c.3"):
        await api(nc, f"{n}.{subject}", subject.encode())
    transforms = [{"src": f"{n}.a.*", "dest": f"{n}s.{{{{wildcard(1)}}}}"}, {"src": f"{n}.b.>", "dest": f"{n}sb.>"}]
    created = await api(nc, f"$JS.API.STREAM.CREATE.{n}S", {"name": f"{n}S", "sources": [{"name": f"{n}O",
                                                                                         "subject_transforms": transforms}]})
    out.append(("source", normalise(created["config"])))
    mirror = {"name": f"{n}O", "subject_transforms": [{"src": f"{n}.c.*", "dest": f"{n}m.{{{{wildcard(1)}}}}"}]}
    out.append(("mirror", normalise((await api(nc, f"$JS.API.STREAM.CREATE.{n}M", {"name": f"{n}M", "mirror": mirror}))["config"])))
    bad = [
        {"sources": [{"name": f"{n}O", "filter_subject": f"{n}.a", "subject_transforms": [{"src": f"{n}.a", "dest": "x"}]}]},
        {"sources": [{"name": f"{n}O", "subject_transforms": [{"src": f"{n}..a", "dest": "x"}]}]},
        {"sources": [{"name": f"{n}O", "subject_transforms": [{"src": f"{n}.*", "dest": "x.{{wildcard(2)}}"}]}]},
        {"sources": [{"name": f"{n}O", "subject_transforms": [{"src": f"{n}.>", "dest": "x.>"}, {"src": f"{n}.a", "dest": "y"}]}]},
        {"mirror": {"name": f"{n}O", "filter_subject": f"{n}.a", "subject_transforms": [{"src": f"{n}.a", "dest": "x"}]}},
        {"mirror": {"name": f"{n}O", "subject_transforms": [{"src": f"{n}.*", "dest": "x.{{wildcard(2)}}"}]}},
        {"mirror": {"name": f"{n}O", "subject_transforms": [{"src": f"{n}.*", "dest": "x.*"}, {"src": f"{n}.a", "dest": "y"}]}},
    ]
    for i, body in enumerate(bad):
        out.append((await api(nc, f"$JS.API.STREAM.CREATE.{n}B{i}", {"name": f"{n}B{i}", **body})).get("error"))
    for stream, count in ((f"{n}S", 2), (f"{n}M", 1)):
        body = await wait_for(nc, stream, count)
        out.append((stream, normalise(body["state"]), source_state(body), [m[:4] for m in await messages(nc, stream)]))
    return out


async def test_subject_transforms_in_sources_and_mirrors_match_nats_server(on_both):
    ours, theirs = await on_both(transforms_scenario, "TR")
    assert ours == theirs
    assert [e["err_code"] for e in ours[2:9]] == [10144, 10145, 10146, 10147, 10150, 10154, 10154]
    assert [m[1][-3:] for m in ours[9][3]] == ["s.1", "b.2"] and ours[10][3][0][1].endswith("m.3")
