"""Operator mode with several accounts, side by side with nats-server 2.15.1: each account JWT of the resolver
is a real account (its own subjects), with its exports and imports (public, or granted by an activation
token) and its JetStream limits; a restart keeps every account's streams; claims updates change the limits of
a running account.

The JWTs come from tests/broker/jwt_material.py (nats-io/jwt's format; nats-server accepts them)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.broker import jwt_material as m
from tests.chart import go_tools
from tests.polling import poll_async
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, launch

OP, SYS, A, B, C, NOJS, BADTOKEN = (m.new_key(k) for k in (
    "operator", "account", "account", "account", "account", "account", "account"))
UNUSED = m.new_key("account")  # an account with JetStream no user or import of these tests registers
USERS = {name: m.new_key("user") for name in ("sys", "a", "b", "c", "nojs", "revoked", "badtoken")}
MIB = 1 << 20
A_JETSTREAM = {"mem_storage": MIB, "disk_storage": 4 * MIB, "streams": 2, "consumer": 1, "max_ack_pending": 10,
               "mem_max_stream_bytes": 0, "disk_max_stream_bytes": 2 * MIB, "max_bytes_required": False}
C_JETSTREAM = {"tiered_limits": {"R1": {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
                                        "max_bytes_required": True}}}


def _a_jwt(**js: Any) -> str:
    exports = [{"name": "svc", "subject": "svc.>", "type": "service"},
               {"name": "events", "subject": "events.>", "type": "stream"},
               {"name": "ticks", "subject": "ticks", "type": "stream"},
               {"name": "private", "subject": "private.>", "type": "service", "token_req": True}]
    return m.account_jwt(OP, A, "A", limits={**A_JETSTREAM, **js}, exports=exports)


def _b_jwt() -> str:
    imports = [
        {"name": "svc", "subject": "svc.>", "account": A.public, "local_subject": "asvc.>", "type": "service"},
        {"name": "events", "subject": "events.>", "account": A.public, "local_subject": "a.events.>", "type": "stream"},
        {"name": "granted", "subject": "private.b", "account": A.public, "local_subject": "granted", "type": "service",
         "token": m.activation_jwt(A, B, "private.b", "service")},
        {"name": "no token", "subject": "private.x", "account": A.public, "type": "service"},
        {"name": "expired token", "subject": "private.z", "account": A.public, "type": "service",
         "token": m.activation_jwt(A, B, "private.z", "service", exp=int(time.time()) - 60)},
        {"name": "not exported", "subject": "secret", "account": A.public, "type": "service"},
        {"name": "unknown account", "subject": "x", "account": m.new_key("account").public, "type": "stream"},
    ]
    return m.account_jwt(OP, B, "B", imports=imports)


def _jwts() -> dict[str, str]:
    return {"sys": m.account_jwt(OP, SYS, "SYS"), "a": _a_jwt(), "b": _b_jwt(),
            "c": m.account_jwt(OP, C, "C", limits=C_JETSTREAM),
            "nojs": m.account_jwt(OP, NOJS, "NOJS", revocations={USERS["revoked"].public: 2**40}),
            "unused": m.account_jwt(OP, UNUSED, "UNUSED", limits={"mem_storage": MIB, "disk_storage": MIB}),
            "badtoken": m.account_jwt(OP, BADTOKEN, "BADTOKEN", imports=[  # a token for another subject
                {"subject": "private.y", "account": A.public, "type": "service",
                 "token": m.activation_jwt(A, BADTOKEN, "private.b", "service")}])}


ACCOUNT_OF = {"sys": SYS, "a": A, "b": B, "c": C, "nojs": NOJS, "revoked": NOJS, "badtoken": BADTOKEN,
              "unused": UNUSED}


def _config(directory: Path, jwts: dict[str, str], resolver: str = "full") -> Path:
    """A full resolver whose directory holds the accounts' JWTs (as `nsc push` leaves them), or resolver MEMORY
    with every JWT preloaded."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "jwt").mkdir(exist_ok=True)
    preload = {SYS.public: jwts["sys"]}
    for name, token in jwts.items():
        if name == "sys":
            continue
        if resolver == "full":
            (directory / "jwt" / f"{ACCOUNT_OF[name].public}.jwt").write_text(token)
        else:
            preload[ACCOUNT_OF[name].public] = token
    (directory / "operator.jwt").write_text(m.operator_jwt(OP, system_account=SYS.public))
    resolver_block = f"resolver {{\n  type: full\n  dir: '{directory / 'jwt'}'\n}}" if resolver == "full" else \
        "resolver: MEMORY"
    config = directory / "server.conf"
    config.write_text(f"operator: {directory / 'operator.jwt'}\nsystem_account: {SYS.public}\n{resolver_block}\n"
                      "resolver_preload {\n" + "".join(f"  {k}: {v}\n" for k, v in preload.items()) + "}\n")
    return config


@pytest.fixture(scope="module")
def creds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("creds")
    return {name: str(m.write_creds(directory, name, m.user_jwt(ACCOUNT_OF[name], key, name), key))
            for name, key in USERS.items()}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerHandle]]:
    jwts = _jwts()
    root = tmp_path_factory.mktemp("accounts")
    handles = {kind: launch(kind, store_dir=root / kind / "store",
                            extra_args=["-c", str(_config(root / kind, jwts))]) for kind in KINDS}
    yield handles
    for handle in handles.values():
        handle.close()


async def _request(nc: nats.NATS, subject: str, payload: bytes = b"") -> Any:
    """A request's answer: its JSON without the server's own fields, or why there is none."""
    try:
        reply = await nc.request(subject, payload, timeout=2)
    except nats.errors.NoRespondersError:
        return "no responders"
    except nats.errors.TimeoutError:
        return "timeout"
    try:
        body = json.loads(reply.data)
    except ValueError:
        return reply.data.decode()
    return _normal(body)


def _normal(body: Any) -> Any:
    if isinstance(body, dict):
        for key in ("created", "ts", "server", "domain", "cluster"):
            body.pop(key, None)
        for value in body.values():
            _normal(value)
    return body


async def _imported(nc: nats.NATS, subject: str) -> None:
    """Until a request through a service import is answered: nats-server under load sometimes answers the first
    ones right after the importer connects with no responders (its import set up after the CONNECT's PONG)."""
    async def answered() -> bool:
        return await _request(nc, subject) not in ("no responders", "timeout")
    await poll_async(answered, timeout=10, what=f"an answer on {subject}")


async def _delivered(a: nats.NATS, subject: str, subs: list[Any]) -> None:
    """Until what A publishes on `subject` reaches each of B's `subs` through a stream import (nats-server under
    load sometimes drops the first messages to a subscription made right after its account was registered);
    what the warm-up left pending is drained."""
    async def reached() -> bool:
        await a.publish(subject, b"")
        await a.flush()
        try:
            for s in subs:
                await s.next_msg(timeout=0.5)
        except nats.errors.TimeoutError:
            return False
        return True
    await poll_async(reached, timeout=10, what=f"{subject} delivered")
    await a.flush()
    for s in subs:
        while s.pending_msgs:
            await s.next_msg(timeout=1)


def _on_both(tmp_path: Path, jwts: dict[str, str], scenario: Any) -> dict[str, Any]:
    """The scenario's outcome on each server, started with the full resolver holding `jwts`; they must be equal."""
    outcomes = {}
    for kind in KINDS:
        with launch(kind, store_dir=tmp_path / kind / "store",
                    extra_args=["-c", str(_config(tmp_path / kind, jwts))]) as handle:
            outcomes[kind] = run(scenario(handle.url))
    assert outcomes[JSBROKER] == outcomes[NATS_SERVER]
    return outcomes


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_accounts_are_isolated_and_share_only_what_they_export(servers: dict[str, ServerHandle],
                                                              creds: dict[str, str]) -> None:
    async def scenario(url: str) -> list[Any]:
        a = await nats.connect(url, user_credentials=creds["a"])
        b = await nats.connect(url, user_credentials=creds["b"])
        out: list[Any] = []
        try:
            same = await a.subscribe("same")
            await b.publish("same", b"from b")
            await b.flush()
            await a.publish("same", b"from a")
            out.append((await same.next_msg(timeout=2)).data)

            async def answer(msg: Any) -> None:  # the requester's account, as the service sees it
                info = json.loads((msg.headers or {}).get("Nats-Request-Info", "{}"))
                await msg.respond(f"{msg.subject} {info.get('acc')}".encode())
            await a.subscribe("svc.>", cb=answer)
            await a.subscribe("private.>", cb=answer)
            await a.subscribe("secret", cb=answer)
            await a.flush()
            await _imported(b, "asvc.ready")
            for subject in ("asvc.hello", "granted", "private.x", "secret", "svc.hello", "private.z"):
                out.append((subject, await _request(b, subject)))
            events = await b.subscribe("a.events.>")
            plain = await b.subscribe("events.>")
            await b.flush()
            await _delivered(a, "events.warm", [events])
            await a.publish("events.one", b"1")
            await a.flush()
            got = await events.next_msg(timeout=2)
            out.append((got.subject, got.data))
            await b.publish("events.own", b"2")
            out.append((await plain.next_msg(timeout=2)).subject)  # its own, not A's events.one
        finally:
            await a.close()
            await b.close()
        return out

    outcomes = {kind: run(scenario(h.url)) for kind, h in servers.items()}
    assert outcomes[JSBROKER] == outcomes[NATS_SERVER]
    assert outcomes[JSBROKER][0] == b"from a"
    assert outcomes[JSBROKER][1:3] == [("asvc.hello", f"svc.hello {B.public}"), ("granted", f"private.b {B.public}")]
    assert [o[1] for o in outcomes[JSBROKER][3:6] + outcomes[JSBROKER][6:7]] == ["no responders"] * 4
    log = servers[JSBROKER].log_tail(300)
    for subject, why in (("private.x", "the export requires an activation token and the import has none"),
                         ("secret", "no export covers it"), ("x", "account missing"),
                         ("private.z", "activation token expired")):
        assert f"import of {subject!r} from " in log and f"left out: {why}" in log, (subject, why)


def test_jetstream_per_account_with_the_jwt_limits(servers: dict[str, ServerHandle], creds: dict[str, str]) -> None:
    async def scenario(url: str) -> list[Any]:
        out: list[Any] = []
        for name in ("a", "b", "c"):
            nc = await nats.connect(url, user_credentials=creds[name])
            try:
                out.append((name, await _request(nc, "$JS.API.INFO")))
                for stream, config in (("M", {"storage": "memory", "max_bytes": 2 * MIB}),
                                       ("F", {"storage": "file", "max_bytes": 3 * MIB}),
                                       ("F", {"storage": "file", "max_bytes": MIB}),
                                       ("G", {"storage": "file", "subjects": ["g"]}),
                                       ("H", {"storage": "memory", "max_bytes": 1024})):
                    body = {"name": stream, "subjects": [stream.lower()], **config}
                    out.append((name, stream, await _request(nc, f"$JS.API.STREAM.CREATE.{stream}",
                                                              json.dumps(body).encode())))
                for durable, max_ack_pending in (("d", 20), ("d", 5), ("e", 5)):  # A: 10 pending, 1 consumer
                    config = {"durable_name": durable, "ack_policy": "explicit", "max_ack_pending": max_ack_pending}
                    request = json.dumps({"stream_name": "F", "config": config}).encode()
                    out.append((name, durable, await _request(nc, f"$JS.API.CONSUMER.DURABLE.CREATE.F.{durable}",
                                                               request)))
            finally:
                await nc.close()
        return out

    outcomes = {kind: run(scenario(h.url)) for kind, h in servers.items()}
    assert outcomes[JSBROKER] == outcomes[NATS_SERVER]
    info = {o[0]: o[1] for o in outcomes[JSBROKER] if len(o) == 2}
    assert info["a"]["limits"]["max_streams"] == 2 and info["c"]["tiers"]["R1"]["limits"]["max_bytes_required"]
    assert info["b"]["error"]["err_code"] == 10039  # JetStream not enabled for account
    errors = [o[2].get("error", {}).get("err_code") for o in outcomes[JSBROKER] if len(o) == 3 and o[0] == "a"]
    assert errors == [10028, 10122, None, None, 10027, 10121, None, 10026]


def test_an_accounts_connz_registers_it_as_nats_server_does(servers: dict[str, ServerHandle],
                                                            creds: dict[str, str]) -> None:
    """`$SYS.REQ.ACCOUNT.<key>.CONNZ` of an account the resolver holds and nothing registered yet: nats-server
    looks it up (registers it, its JetStream counted in JSZ's `accounts` from then on) and answers its server id
    and no connections; a name that is no account gets no server id and no list."""
    async def scenario(url: str) -> dict[str, Any]:
        nc = await nats.connect(url, user_credentials=creds["sys"], allow_reconnect=False)
        try:
            async def jetstream_accounts() -> int:
                return int((await _request(nc, "$SYS.REQ.SERVER.PING.JSZ"))["data"]["accounts"])
            before = await jetstream_accounts()
            out = {f"connz {name}": (await _request(nc, f"$SYS.REQ.ACCOUNT.{subject}.CONNZ"))["data"]
                   for name, subject in (("unused", UNUSED.public), ("nope", "NOPE"))}
            out["registered"] = await jetstream_accounts() - before
            server_id = nc._server_info["server_id"]
            for connz in (out["connz unused"], out["connz nope"]):
                connz.pop("now")
                connz["server_id"] = "<this server>" if connz["server_id"] == server_id else connz["server_id"]
            return out
        finally:
            await nc.close()
    got = {kind: run(scenario(h.url)) for kind, h in servers.items()}
    assert got[JSBROKER] == got[NATS_SERVER]
    assert got[JSBROKER]["registered"] == 1
    assert got[JSBROKER]["connz unused"] == {"server_id": "<this server>", "num_connections": 0, "total": 0,
                                             "offset": 0, "limit": 1024, "connections": []}
    assert got[JSBROKER]["connz nope"]["server_id"] == "" and got[JSBROKER]["connz nope"]["connections"] is None


def test_bad_users_are_refused(servers: dict[str, ServerHandle], creds: dict[str, str], tmp_path: Path) -> None:
    """A revoked user, a user of an account the resolver does not have, a user of an account whose JWT has an
    activation token for another subject (not a valid JWT); the others carry on."""
    stranger_key = m.new_key("user")
    stranger = m.write_creds(tmp_path, "stranger", m.user_jwt(m.new_key("account"), stranger_key, "x"), stranger_key)

    async def outcome(url: str, path: str) -> str:
        try:
            nc = await nats.connect(url, user_credentials=path, allow_reconnect=False, max_reconnect_attempts=0)
        except Exception as e:
            return type(e).__name__ + ": " + str(e)
        await nc.close()
        return "admitted"

    outcomes = {kind: [run(outcome(h.url, p)) for p in (creds["revoked"], str(stranger), creds["badtoken"],
                                                         creds["nojs"])]
                for kind, h in servers.items()}
    assert outcomes[JSBROKER] == outcomes[NATS_SERVER]
    assert outcomes[JSBROKER][2:] == ["Error: nats: 'Authorization Violation'", "admitted"]


@pytest.mark.parametrize("resolver", ["full", "MEMORY"])
def test_restart_keeps_each_accounts_streams(tmp_path: Path, creds: dict[str, str], resolver: str) -> None:
    jwts = _jwts()

    async def make(url: str) -> None:
        for name, stream in (("a", "KEEP"), ("c", "ALSO")):
            nc = await nats.connect(url, user_credentials=creds[name])
            js = nc.jetstream()
            await js.add_stream(name=stream, subjects=[stream.lower()], max_bytes=MIB)
            await js.publish(stream.lower(), b"kept")
            await nc.close()

    async def read(url: str) -> list[Any]:
        out = []
        for name in ("a", "c"):
            nc = await nats.connect(url, user_credentials=creds[name])
            out.append(await _request(nc, "$JS.API.STREAM.NAMES"))
            await nc.close()
        return out

    outcomes, layouts = {}, {}
    for kind in KINDS:
        store = tmp_path / kind / "store"
        with launch(kind, store_dir=store, extra_args=["-c", str(_config(tmp_path / kind, jwts, resolver))]) as handle:
            run(make(handle.url))
            handle.restart()
            outcomes[kind] = run(read(handle.url))
        layouts[kind] = sorted(str(p.relative_to(store)) for p in store.glob("jetstream/*/streams/*"))
    assert outcomes[JSBROKER] == outcomes[NATS_SERVER]
    assert [o["streams"] for o in outcomes[JSBROKER]] == [["KEEP"], ["ALSO"]]
    assert layouts[JSBROKER] == layouts[NATS_SERVER] == sorted([f"jetstream/{A.public}/streams/KEEP",
                                                                f"jetstream/{C.public}/streams/ALSO"])


def test_a_claims_update_changes_a_running_accounts_limits(tmp_path: Path, creds: dict[str, str]) -> None:
    """nsc push of A with room for three streams, and of NOJS with JetStream: both apply at once."""
    jwts = _jwts()
    wider = m.account_jwt(OP, A, "A", limits={**A_JETSTREAM, "streams": 3}).encode()
    enabled = m.account_jwt(OP, NOJS, "NOJS", limits={"mem_storage": -1, "disk_storage": -1, "streams": -1,
                                                        "consumer": -1}).encode()

    async def scenario(url: str) -> list[Any]:
        sys = await nats.connect(url, user_credentials=creds["sys"])
        a = await nats.connect(url, user_credentials=creds["a"])
        nojs = await nats.connect(url, user_credentials=creds["nojs"])
        out = []
        try:
            for stream in ("S1", "S2", "S3"):
                out.append(await _request(a, f"$JS.API.STREAM.CREATE.{stream}", json.dumps(
                    {"name": stream, "subjects": [stream], "storage": "memory", "max_bytes": 1024}).encode()))
            out.append(await _request(nojs, "$JS.API.INFO"))
            out.append(await _request(sys, "$SYS.REQ.CLAIMS.UPDATE", wider))
            out.append(await _request(sys, "$SYS.REQ.CLAIMS.UPDATE", jwts["badtoken"].encode()))  # not a valid JWT
            out.append(await _request(sys, "$SYS.REQ.CLAIMS.UPDATE", enabled))
            out.append(await _request(a, "$JS.API.STREAM.CREATE.S3", json.dumps(
                {"name": "S3", "subjects": ["S3"], "storage": "memory", "max_bytes": 1024}).encode()))
            out.append(await _request(nojs, "$JS.API.INFO"))
        finally:
            for nc in (sys, a, nojs):
                await nc.close()
        return out

    outcomes = _on_both(tmp_path, jwts, scenario)
    assert outcomes[JSBROKER][2]["error"]["err_code"] == 10027  # maximum number of streams reached
    assert outcomes[JSBROKER][5]["error"]["description"].startswith("jwt validation failed - validation errors: [")
    assert outcomes[JSBROKER][7]["config"]["name"] == "S3"


def test_a_claims_update_rewires_exports_and_imports(tmp_path: Path, creds: dict[str, str]) -> None:
    """Pushed JWTs change what accounts share at once: B's imports replaced (its stream import gone, a new
    service import), then A's service export withdrawn, then B's stream import back; B's subscription made
    before all this follows each change, and so does its stream on the imported subjects."""
    js = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    ticks = {"subject": "ticks", "account": A.public, "type": "stream"}  # in every version: A's clock for B
    jwts = {**_jwts(), "b": m.account_jwt(OP, B, "B", limits=js, imports=[
        {"subject": "events.>", "account": A.public, "local_subject": "a.events.>", "type": "stream"},
        {"subject": "svc.>", "account": A.public, "local_subject": "asvc.>", "type": "service"}, ticks])}
    svc_only = m.account_jwt(OP, B, "B", limits=js, imports=[
        {"subject": "svc.>", "account": A.public, "local_subject": "newsvc.>", "type": "service"}, ticks]).encode()
    no_service = m.account_jwt(OP, A, "A", limits=A_JETSTREAM, exports=[
        {"subject": "events.>", "type": "stream"}, {"subject": "ticks", "type": "stream"}]).encode()
    events_back = m.account_jwt(OP, B, "B", limits=js, imports=[
        {"subject": "events.>", "account": A.public, "local_subject": "a.events.>", "type": "stream"},
        {"subject": "svc.>", "account": A.public, "local_subject": "newsvc.>", "type": "service"}, ticks]).encode()

    async def scenario(url: str) -> list[Any]:
        sys = await nats.connect(url, user_credentials=creds["sys"])
        a = await nats.connect(url, user_credentials=creds["a"])
        b = await nats.connect(url, user_credentials=creds["b"])
        out: list[Any] = []

        async def answer(msg: Any) -> None:
            await msg.respond(msg.subject.encode())

        async def event(n: int) -> list[str]:
            """What B's subscription has once A's tick after A's event n reached B (on the same path, after it)."""
            await a.publish(f"events.{n}", b"")
            await a.publish("ticks", b"")
            await tick.next_msg(timeout=2)
            got = []
            while events.pending_msgs:
                got.append((await events.next_msg(timeout=2)).subject)
            return got
        try:
            await a.subscribe("svc.>", cb=answer)
            await b.jetstream().add_stream(name="EV", subjects=["a.events.>"])
            events, tick = await b.subscribe("a.events.>"), await b.subscribe("ticks")
            await a.flush()
            await b.flush()
            await _imported(b, "asvc.ready")

            async def stored_events() -> bool:
                await a.publish("events.0", b"")
                return (await b.jetstream().stream_info("EV")).state.messages > 0
            await poll_async(stored_events, timeout=10, what="EV stores A's events")
            await _delivered(a, "events.0", [events])  # and drains what the polling left
            await _delivered(a, "ticks", [tick])
            out += [await event(1), await _request(b, "asvc.x")]
            out.append(await _request(sys, "$SYS.REQ.CLAIMS.UPDATE", svc_only))
            out += [await event(2), await _request(b, "asvc.x"), await _request(b, "newsvc.x")]
            out.append(await _request(sys, "$SYS.REQ.CLAIMS.UPDATE", no_service))
            out += [await _request(b, "newsvc.x")]
            out.append(await _request(sys, "$SYS.REQ.CLAIMS.UPDATE", events_back))
            out += [await event(3), await _request(b, "newsvc.x")]
            stored = await b.jetstream().stream_info("EV")
            subjects = [(await b.jetstream().get_msg("EV", seq)).subject for seq in range(1, stored.state.messages + 1)]
            out.append(sorted(s for s in subjects if s != "a.events.0"))  # but the warm-up's
        finally:
            for nc in (sys, a, b):
                await nc.close()
        return out

    outcomes = _on_both(tmp_path, jwts, scenario)
    assert outcomes[JSBROKER][:2] == [["a.events.1"], "svc.x"]
    assert outcomes[JSBROKER][-1] == ["a.events.1", "a.events.3"]  # event 2 came while B did not import A's events


def test_a_claims_update_turns_jetstream_off_and_on(tmp_path: Path, creds: dict[str, str]) -> None:
    """A's JetStream turned off by a pushed JWT (10039 from then on), then on again: its streams are back."""
    jwts = _jwts()
    off = m.account_jwt(OP, A, "A", limits={}).encode()
    on = jwts["a"].encode()

    async def scenario(url: str) -> list[Any]:
        sys = await nats.connect(url, user_credentials=creds["sys"])
        a = await nats.connect(url, user_credentials=creds["a"])
        out: list[Any] = []
        try:
            await a.jetstream().add_stream(name="KEEP", subjects=["keep"], max_bytes=MIB)
            await a.jetstream().publish("keep", b"kept")
            out.append(await _request(sys, "$SYS.REQ.CLAIMS.UPDATE", off))
            out += [await _request(a, "$JS.API.INFO"), await _request(a, "$JS.API.STREAM.NAMES")]
            out.append(await _request(sys, "$SYS.REQ.CLAIMS.UPDATE", on))
            state = (await _request(a, "$JS.API.STREAM.INFO.KEEP"))["state"]
            out += [await _request(a, "$JS.API.STREAM.NAMES"),
                    [state[k] for k in ("messages", "first_seq", "last_seq")]]
        finally:
            for nc in (sys, a):
                await nc.close()
        return out

    outcomes = _on_both(tmp_path, jwts, scenario)
    assert [o.get("error", {}).get("err_code") for o in outcomes[JSBROKER][1:3]] == [10039, 10039]
    assert outcomes[JSBROKER][5] == [1, 1, 1]


def test_nats_account_info_of_each_account(servers: dict[str, ServerHandle], creds: dict[str, str],
                                           tmp_path: Path) -> None:
    """natscli's `nats account info` (what a user reads of their account and its JetStream limits) prints the
    same for users of A (limits), B (no JetStream) and C (tiered limits), but for the connection's own lines."""
    cli = go_tools.NATS_CLI.for_test()
    own = re.compile(r"^\s*(Client ID|Client IP|RTT|Connected Server ID|Connected URL|Connected Address):.*$",
                     re.MULTILINE)

    def info(handle: ServerHandle, name: str) -> str:
        done = subprocess.run([str(cli), "--server", handle.url, "--timeout", "3s", "--creds", creds[name],
                               "account", "info"], capture_output=True, text=True, timeout=60,
                              env={"HOME": str(tmp_path)})
        return own.sub("", done.stdout + done.stderr)

    out = {kind: [info(h, name) for name in ("a", "b", "c")] for kind, h in servers.items()}
    assert out[JSBROKER] == out[NATS_SERVER]
    assert "Storage Per Stream: 2.0 MiB" in out[JSBROKER][0] and f"Account: A ({A.public})" in out[JSBROKER][0]
