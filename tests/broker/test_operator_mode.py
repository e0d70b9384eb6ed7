"""Operator mode (decentralized auth) side by side with nats-server 2.15.1: one config file with the operator
JWT, the system account, `resolver: MEMORY` and `resolver_preload`, the same user JWTs against both servers,
on the raw wire (INFO's nonce, CONNECT's jwt + sig) and with nats-py's `user_credentials=`.

The JWTs come from tests/broker/jwt_material.py (nsc cannot be built here; nats-server accepts them)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.broker import jwt_material as m
from tests.broker.raw import Raw
from tests.chart import go_tools
from tests.polling import poll
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, free_port, launch

OP, OP_SIGNER, SYS, APP, APP_SIGNER, STRANGER = (m.new_key(k) for k in (
    "operator", "operator", "account", "account", "account", "account"))
NOW = int(time.time())
USERS = {name: m.new_key("user") for name in (
    "alice", "by_signer", "unknown_signer", "stranger", "expired", "not_yet", "revoked", "bearer", "websocket_only",
    "other_network", "own_network", "responder", "no_perms", "other", "sys", "small")}
PERMS = {"pub": {"allow": ["foo.>", "_INBOX.>"]}, "sub": {"allow": ["foo.>", "_INBOX.>"], "deny": ["foo.secret"]}}


def _user(name: str, signer: m.Key = APP, nats: dict[str, Any] | None = None, **standard: Any) -> str:
    issuer_account = APP.public if signer is not APP and signer is not STRANGER else ""
    return m.user_jwt(signer, USERS[name], name, issuer_account=issuer_account, nats=nats, **standard)


JWTS = {
    "alice": _user("alice", nats=PERMS),
    "by_signer": _user("by_signer", APP_SIGNER, nats=PERMS),
    "unknown_signer": _user("unknown_signer", m.new_key("account"), nats=PERMS),
    "stranger": _user("stranger", STRANGER),  # an account the resolver does not have
    "expired": _user("expired", exp=NOW - 60),
    "not_yet": _user("not_yet", nbf=NOW + 3600),
    "revoked": _user("revoked", iat=NOW - 100),
    "bearer": _user("bearer", nats={"bearer_token": True}),
    "websocket_only": _user("websocket_only", nats={"allowed_connection_types": ["WEBSOCKET"]}),
    "other_network": _user("other_network", nats={"src": ["10.0.0.0/8"]}),
    "own_network": _user("own_network", nats={"src": ["192.168.0.0/16", "127.0.0.0/8"]}),
    "responder": _user("responder", nats={"sub": {"allow": ["svc"]}, "resp": {"max": 1, "ttl": 0}}),
    "no_perms": _user("no_perms"),
    "small": _user("small", nats={"payload": 8}),
}


def _config(directory: Path, app_limits: dict[str, Any] | None = None, **app: Any) -> Path:
    operator = directory / "operator.jwt"
    operator.write_text(m.operator_jwt(OP, signing_keys=(OP_SIGNER,), system_account=SYS.public))
    app_jwt = m.account_jwt(OP_SIGNER, APP, "APP", signing_keys=[APP_SIGNER.public], limits=app_limits,
                            revocations={USERS["revoked"].public: NOW - 50}, **app)
    config = directory / "operator.conf"
    config.write_text(f"operator: {operator}\nsystem_account: {SYS.public}\nresolver: MEMORY\n"
                      f"resolver_preload {{\n  {SYS.public}: {m.account_jwt(OP, SYS, 'SYS')}\n"
                      f"  {APP.public}: {app_jwt}\n}}\n")
    return config


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerHandle]]:
    config = _config(tmp_path_factory.mktemp("operator"))
    handles = {kind: launch(kind, jetstream=False, extra_args=["-c", str(config)]) for kind in KINDS}
    yield handles
    for handle in handles.values():
        handle.close()


def _signature(name: str, info: bytes) -> str:
    nonce = json.loads(info.split(b" ", 1)[1])["nonce"]
    return base64.urlsafe_b64encode(USERS[name].sign(nonce.encode())).decode().rstrip("=")


def _connect(port: int, name: str | None, sign: str | None = None, jwt: str | None = None) -> tuple[Raw, bytes]:
    """CONNECT as a user (the nonce signed by `sign`'s key; None: no signature); the reply up to PONG or -ERR."""
    raw = Raw(port)
    opts: dict[str, Any] = {"verbose": False, "pedantic": False, "protocol": 1}
    if name is not None:
        opts["jwt"] = jwt or JWTS[name]
    if sign is not None:
        opts["sig"] = _signature(sign, raw.info) if sign in USERS else sign
    raw.send(f"CONNECT {json.dumps(opts)}\r\nPING\r\n".encode())
    reply = raw.read_until(b"\r\n")
    return raw, reply


def _outcome(port: int, name: str | None, sign: str | None = "self", jwt: str | None = None) -> str:
    raw, reply = _connect(port, name, name if sign == "self" else sign, jwt)
    with raw:
        if reply == b"PONG\r\n":
            return "admitted"
        return reply.decode().strip() + (" (closed)" if raw.read_to_close() == b"" else "")


CASES = [  # (user, who signs the nonce), and what nats-server answers
    ("alice", "self"), ("by_signer", "self"), ("unknown_signer", "self"), ("stranger", "self"), ("expired", "self"),
    ("not_yet", "self"), ("revoked", "self"), ("bearer", None), ("websocket_only", "self"), ("other_network", "self"),
    ("own_network", "self"), ("no_perms", "self"), ("alice", None), ("alice", "bearer"), (None, None),
    ("alice", "!not base64!"),
]


def test_info_carries_a_nonce(servers: dict[str, ServerHandle]) -> None:
    infos = {kind: json.loads(Raw(h.port).info.split(b" ", 1)[1]) for kind, h in servers.items()}
    assert {kind: (i["auth_required"], len(i["nonce"])) for kind, i in infos.items()} == {
        kind: (True, 15) for kind in KINDS}


@pytest.mark.parametrize("user,signer", CASES, ids=[f"{u}-{s}" for u, s in CASES])
def test_connect_outcome_matches(servers: dict[str, ServerHandle], user: str | None, signer: str | None) -> None:
    outcomes = {kind: _outcome(h.port, user, signer) for kind, h in servers.items()}
    assert outcomes[JSBROKER] == outcomes[NATS_SERVER], outcomes
    admitted = {"alice-self", "by_signer-self", "bearer-None", "own_network-self", "no_perms-self"}
    assert (outcomes[JSBROKER] == "admitted") == (f"{user}-{signer}" in admitted), outcomes


def test_a_jwt_that_is_not_one_is_refused(servers: dict[str, ServerHandle]) -> None:
    tampered = JWTS["alice"][:-4] + ("AAAA" if not JWTS["alice"].endswith("AAAA") else "BBBB")
    outcomes = {kind: [_outcome(h.port, "alice", jwt=j) for j in ("garbage", tampered, JWTS["alice"].split(".")[0])]
                for kind, h in servers.items()}
    assert outcomes[JSBROKER] == outcomes[NATS_SERVER] == [
        "-ERR 'Authorization Violation' (closed)"] * 3


def test_connect_fields_of_the_wrong_type(servers: dict[str, ServerHandle]) -> None:
    """A JWT or signature that is not a string: nats-server cannot decode CONNECT and closes without a word;
    the server goes on serving."""
    out = {}
    for kind, h in servers.items():
        replies = []
        for opts in ({"jwt": 123}, {"jwt": JWTS["alice"], "sig": 5}, {"jwt": None}, {"jwt": JWTS["alice"], "sig": "!!"}):
            with Raw(h.port) as raw:
                raw.send(f"CONNECT {json.dumps({'verbose': False, **opts})}\r\nPING\r\n".encode())
                replies.append(raw.read_to_close())
        out[kind] = (replies, _outcome(h.port, "alice"))
    assert out[JSBROKER] == out[NATS_SERVER] == (
        [b"", b"", b"-ERR 'Authorization Violation'\r\n", b"-ERR 'Authorization Violation'\r\n"], "admitted")


def _roundtrip(raw: Raw, data: bytes) -> bytes:
    """What the server answered `data` before the PONG of a PING sent after it; the INFO that follows the
    first PONG (protocol 1) is reduced to the account it names."""
    raw.send(data + b"PING\r\n")
    lines = raw.read_until(b"PONG\r\n")[:-len(b"PONG\r\n")].split(b"\r\n")
    return b"\r\n".join(b"INFO remote_account=" + json.loads(line[5:])["remote_account"].encode()
                         if line.startswith(b"INFO ") else line for line in lines)


def test_permissions_of_the_user_jwt_are_enforced(servers: dict[str, ServerHandle]) -> None:
    out = {}
    for kind, h in servers.items():
        alice, _ = _connect(h.port, "alice", "alice")
        responder, _ = _connect(h.port, "responder", "responder")
        free, _ = _connect(h.port, "no_perms", "no_perms")
        with alice, responder, free:
            out[kind] = {
                "subscribe": _roundtrip(alice, b"SUB foo.> 1\r\nSUB bar 2\r\nSUB foo.secret 3\r\n"),
                "publish": _roundtrip(alice, b"PUB foo.a 1\r\na\r\nPUB bar 1\r\nb\r\nPUB foo.secret 1\r\nc\r\n"),
                "received": _roundtrip(alice, b""),
                "responder": _roundtrip(responder, b"SUB svc 1\r\n"),
                "request": _roundtrip(free, b"SUB _INBOX.r 9\r\nPUB svc _INBOX.r 1\r\nq\r\n"),
                "answers": _roundtrip(responder, b"") + _roundtrip(responder, b"PUB _INBOX.r 1\r\ny\r\nPUB _INBOX.r 1"
                                                                              b"\r\nz\r\nPUB elsewhere 1\r\nx\r\n"),
                "answer received": _roundtrip(free, b""),
                "connected": not (alice.closed or responder.closed or free.closed),
            }
    assert out[JSBROKER] == out[NATS_SERVER]
    assert b"Permissions Violation for Subscription to \"bar\"" in out[JSBROKER]["subscribe"]
    assert out[JSBROKER]["responder"].startswith(b"INFO remote_account=" + APP.public.encode())
    assert out[JSBROKER]["connected"]


def _auth_lines(log: str) -> list[str]:
    """The authentication lines of clients' log entries, without times, ids and the Go pointer at the end."""
    lines = [re.sub(r"^.*?cid:\d+ - ", "", line) for line in log.splitlines() if "cid:" in line or "Account fetch" in line]
    return [re.sub(r" accused 0x[0-9a-f]+$", "", re.sub(r"^.*\] ", "", line)) for line in lines
            if "Client connection" not in line]


def test_payload_limit_of_the_user_jwt(servers: dict[str, ServerHandle]) -> None:
    out = {}
    for kind, h in servers.items():
        raw, _ = _connect(h.port, "small", "small")
        with raw:
            out[kind] = (_roundtrip(raw, b"PUB foo 8\r\n12345678\r\n").split(b"\r\n")[-1],
                         _roundtrip_or_close(raw, b"PUB foo 9\r\n123456789\r\n"))
    assert out[JSBROKER] == out[NATS_SERVER] == (b"", b"-ERR 'Maximum Payload Violation'\r\n")


def _roundtrip_or_close(raw: Raw, data: bytes) -> bytes:
    raw.send(data + b"PING\r\n")
    return raw.read_to_close()


def test_log_lines_as_nats_server_writes_them(tmp_path: Path) -> None:
    """Every case of test_connect_outcome_matches, with debug logging: the reason nats-server gives (or its
    'Authenticated JWT' line) and the error line, in the same order."""
    config = _config(tmp_path)
    logs = {}
    for kind in KINDS:
        with launch(kind, jetstream=False, extra_args=["-c", str(config), "-D"]) as handle:
            for user, signer in CASES:
                _outcome(handle.port, user, signer)
            poll(lambda: len(_auth_lines(handle.log_path.read_text())) >= 28, timeout=5, what=f"{kind}'s log")
            logs[kind] = _auth_lines(handle.log_path.read_text())
    assert logs[JSBROKER] == logs[NATS_SERVER]
    assert "Bad src Ip 127.0.0.1" in logs[JSBROKER] and "Account fetch failed: account missing" in logs[JSBROKER]


def test_account_default_permissions_apply_to_users_without_their_own(tmp_path: Path) -> None:
    config = _config(tmp_path, default_permissions={"pub": {"allow": ["foo.>"]}, "sub": {"deny": ["foo.secret"]}})
    out = {}
    for kind in KINDS:
        with launch(kind, jetstream=False, extra_args=["-c", str(config)]) as handle:
            free, _ = _connect(handle.port, "no_perms", "no_perms")
            alice, _ = _connect(handle.port, "alice", "alice")
            with free, alice:
                out[kind] = (_roundtrip(free, b"PUB foo.a 1\r\na\r\nPUB bar 1\r\nb\r\nSUB foo.secret 1\r\n"),
                             _roundtrip(alice, b"PUB foo.a 1\r\na\r\nSUB foo.secret 1\r\n"))
    assert out[JSBROKER] == out[NATS_SERVER]
    assert b'Publish to "bar"' in out[JSBROKER][0] and b"foo.secret" in out[JSBROKER][0]
    assert b"foo.secret" in out[JSBROKER][1]  # alice's own permissions deny it too


def test_natspy_with_creds(servers: dict[str, ServerHandle], tmp_path: Path) -> None:
    good = m.write_creds(tmp_path, "alice", JWTS["alice"], USERS["alice"])
    revoked = m.write_creds(tmp_path, "revoked", JWTS["revoked"], USERS["revoked"])

    async def scenario(url: str) -> dict[str, Any]:
        nc = await nats.connect(url, user_credentials=str(good))
        sub = await nc.subscribe("foo.x")
        await nc.publish("foo.x", b"hello")
        got = (await sub.next_msg(timeout=2)).data
        await nc.close()
        try:
            await nats.connect(url, user_credentials=str(revoked), allow_reconnect=False, max_reconnect_attempts=0)
            refused = ""
        except Exception as e:  # nats-py raises its plain Error for -ERR at connect
            refused = str(e)
        return {"received": got, "refused": refused}

    out = {kind: asyncio.run(scenario(h.url)) for kind, h in servers.items()}
    assert out[JSBROKER] == out[NATS_SERVER] == {"received": b"hello", "refused": "nats: 'Authorization Violation'"}


def test_bearer_tokens_refused_where_the_account_disallows_them(tmp_path: Path) -> None:
    config = _config(tmp_path, app_limits={"disallow_bearer": True})
    handles = [launch(kind, jetstream=False, extra_args=["-c", str(config)]) for kind in KINDS]
    try:
        outcomes = {h.kind: (_outcome(h.port, "bearer", None), _outcome(h.port, "alice")) for h in handles}
    finally:
        for h in handles:
            h.close()
    assert outcomes[JSBROKER] == outcomes[NATS_SERVER] == ("-ERR 'Authorization Violation' (closed)", "admitted")


# -- the full (directory) resolver ---------------------------------------------------------------------------

SYS_USER = USERS["sys"]
OTHER = m.new_key("account")


def _full_config(directory: Path, allow_delete: bool) -> Path:
    """A full resolver whose directory holds APP's JWT (as `nsc push` would have left it); SYS preloaded."""
    jwts = directory / "jwt"
    jwts.mkdir()
    app = m.account_jwt(OP_SIGNER, APP, "APP", signing_keys=[APP_SIGNER.public])
    (jwts / f"{APP.public}.jwt").write_text(app)
    operator = directory / "operator.jwt"
    operator.write_text(m.operator_jwt(OP, signing_keys=(OP_SIGNER,), system_account=SYS.public))
    config = directory / "full.conf"
    config.write_text(f"operator: {operator}\nsystem_account: {SYS.public}\n"
                      f"resolver {{\n  type: full\n  dir: '{jwts}'\n  allow_delete: {str(allow_delete).lower()}\n"
                      f"  interval: \"2m\"\n  limit: 1000\n}}\n"
                      f"resolver_preload {{\n  {SYS.public}: {m.account_jwt(OP, SYS, 'SYS')}\n}}\n")
    return config


def test_full_resolver_admits_the_accounts_in_its_directory(tmp_path: Path) -> None:
    handles = [launch(kind, jetstream=False, extra_args=["-c", str(_full_config(tmp_path / kind, False))])
               for kind in KINDS if (tmp_path / kind).mkdir() is None]
    try:
        outcomes = {h.kind: [_outcome(h.port, "alice"), _outcome(h.port, "by_signer"), _outcome(h.port, "stranger")]
                    for h in handles}
    finally:
        for h in handles:
            h.close()
    assert outcomes[JSBROKER] == outcomes[NATS_SERVER]
    assert outcomes[JSBROKER][:2] == ["admitted", "admitted"]
    assert sorted(p.name for p in (tmp_path / JSBROKER / "jwt").iterdir()) == sorted(
        p.name for p in (tmp_path / NATS_SERVER / "jwt").iterdir())  # the preloaded SYS JWT written there too


def _claims_requests() -> list[tuple[str, bytes]]:
    other = m.account_jwt(OP, OTHER, "OTHER").encode()
    return [
        ("$SYS.REQ.CLAIMS.LIST", b""),
        ("$SYS.REQ.CLAIMS.UPDATE", other),
        ("$SYS.REQ.CLAIMS.UPDATE", m.account_jwt(OP, OTHER, "OTHER", exp=NOW - 10).encode()),
        ("$SYS.REQ.CLAIMS.UPDATE", b"not a jwt"),
        ("$SYS.REQ.CLAIMS.UPDATE", JWTS["alice"].encode()),  # a user JWT is no account JWT
        (f"$SYS.REQ.ACCOUNT.{APP.public}.CLAIMS.UPDATE", other),  # another account's JWT
        (f"$SYS.REQ.ACCOUNT.{OTHER.public}.CLAIMS.UPDATE", other),
        (f"$SYS.REQ.ACCOUNT.{OTHER.public}.CLAIMS.LOOKUP", b""),
        (f"$SYS.REQ.ACCOUNT.{STRANGER.public}.CLAIMS.LOOKUP", b""),
        ("$SYS.REQ.CLAIMS.LIST", b""),
        ("$SYS.REQ.CLAIMS.DELETE", m.encode(OP, OP.public, "", {"accounts": [SYS.public]}).encode()),
        ("$SYS.REQ.CLAIMS.DELETE", m.encode(APP, APP.public, "", {"accounts": [OTHER.public]}).encode()),
        ("$SYS.REQ.CLAIMS.DELETE", m.encode(OP, OP.public, "", {"accounts": ["nope"]}).encode()),
        ("$SYS.REQ.CLAIMS.DELETE", m.encode(OP, OP.public, "", {"accounts": [OTHER.public]}).encode()),
        ("$SYS.REQ.CLAIMS.LIST", b""),
    ]


def _normal(reply: bytes) -> Any:
    """A claims reply without the server's own fields (its id, name, time)."""
    try:
        body = json.loads(reply)
    except ValueError:
        return reply
    if isinstance(body, dict):
        body.pop("server", None)
    return body


@pytest.mark.parametrize("allow_delete", [True, False])
def test_claims_requests_answered_as_nats_server_answers_them(tmp_path: Path, allow_delete: bool) -> None:
    """nsc push's and the nats CLI's requests to the full resolver ($SYS.REQ.CLAIMS.*, an account's CLAIMS.UPDATE
    and LOOKUP) from a system account user, against both servers: the same answers, the same JWT files left."""
    sys_creds = m.write_creds(tmp_path, "sys", m.user_jwt(SYS, SYS_USER, "sys"), SYS_USER)
    requests = _claims_requests()  # made once: a JWT's `iat` is the second it was made in, and LOOKUP returns it

    async def ask(url: str) -> list[Any]:
        nc = await nats.connect(url, user_credentials=str(sys_creds))
        try:
            return [_normal((await nc.request(subject, payload, timeout=2)).data) for subject, payload in requests]
        finally:
            await nc.close()

    answers = {}
    for kind in KINDS:
        (tmp_path / kind).mkdir()
        with launch(kind, jetstream=False, extra_args=["-c", str(_full_config(tmp_path / kind, allow_delete))]) as h:
            answers[kind] = asyncio.run(ask(h.url))
    assert answers[JSBROKER] == answers[NATS_SERVER]
    assert sorted(p.name for p in (tmp_path / JSBROKER / "jwt").iterdir()) == sorted(
        p.name for p in (tmp_path / NATS_SERVER / "jwt").iterdir())


def test_a_user_jwt_that_expires_closes_its_connection(servers: dict[str, ServerHandle]) -> None:
    out = {}
    for kind, h in servers.items():
        token = _user("alice", nats=PERMS, exp=int(time.time()) + 2)
        raw, reply = _connect(h.port, "alice", "alice", jwt=token)
        with raw:
            out[kind] = (reply, raw.read_to_close(timeout=8).split(b"\r\n")[-2:])
    assert out[JSBROKER] == out[NATS_SERVER]
    assert out[JSBROKER] == (b"PONG\r\n", [b"-ERR 'User Authentication Expired'", b""])


def test_the_go_nats_cli_with_creds(servers: dict[str, ServerHandle], tmp_path: Path) -> None:
    """natscli's --creds (it signs the nonce with the seed) against both servers: a good user publishes and
    requests, a revoked one is refused."""
    cli = go_tools.NATS_CLI.for_test()
    good = m.write_creds(tmp_path, "alice", JWTS["alice"], USERS["alice"])
    revoked = m.write_creds(tmp_path, "revoked", JWTS["revoked"], USERS["revoked"])

    def run(handle: ServerHandle, creds: Path, *args: str) -> tuple[int, bool]:
        done = subprocess.run([str(cli), "--server", handle.url, "--timeout", "3s", "--creds", str(creds), *args],
                              capture_output=True, text=True, timeout=60, env={"HOME": str(tmp_path)})
        return done.returncode, "Authorization Violation" in done.stderr

    out = {kind: (run(h, good, "pub", "foo.a", "hi"), run(h, revoked, "pub", "foo.a", "hi"))
           for kind, h in servers.items()}
    assert out[JSBROKER] == out[NATS_SERVER] == ((0, False), (1, True))


def test_connection_types_over_websocket(tmp_path: Path) -> None:
    """nats-py over ws:// with creds: a WEBSOCKET-only user is admitted there (and refused on the client port,
    test_connect_outcome_matches), a STANDARD-only user refused there."""
    standard = _user("own_network", nats={"allowed_connection_types": ["STANDARD"]})
    files = {name: m.write_creds(tmp_path, name, token, USERS[key]) for name, token, key in (
        ("websocket_only", JWTS["websocket_only"], "websocket_only"), ("standard_only", standard, "own_network"),
        ("alice", JWTS["alice"], "alice"))}

    async def connect(url: str, creds: Path) -> str:
        try:
            nc = await nats.connect(url, user_credentials=str(creds), allow_reconnect=False, max_reconnect_attempts=0)
        except Exception as e:  # nats-py's plain Error for -ERR at connect
            return str(e)
        await nc.close()
        return "admitted"

    out = {}
    for kind in KINDS:
        ws_port = free_port()
        config = _config(tmp_path / kind if (tmp_path / kind).mkdir() is None else tmp_path)
        config.write_text(config.read_text() + f"websocket {{\n  port: {ws_port}\n  no_tls: true\n}}\n")
        with launch(kind, jetstream=False, extra_args=["-c", str(config)]):
            out[kind] = {name: asyncio.run(connect(f"ws://127.0.0.1:{ws_port}", creds)) for name, creds in files.items()}
    assert out[JSBROKER] == out[NATS_SERVER] == {
        "websocket_only": "admitted", "standard_only": "nats: 'Authorization Violation'", "alice": "admitted"}


# -- generated users -------------------------------------------------------------------------------------------

def _random_user(rng: random.Random, index: int, revoked: set[str]) -> tuple[str, m.Key, str | None]:
    """A user JWT with a random mix of the claims CONNECT checks; (its JWT, its key, who signs the nonce)."""
    key = m.new_key("user")
    signer = rng.choice([APP, APP, APP_SIGNER, m.new_key("account"), STRANGER])
    issuer_account = APP.public if signer is not APP and signer is not STRANGER and rng.random() < 0.9 else ""
    nats: dict[str, Any] = {}
    if rng.random() < 0.3:
        nats["bearer_token"] = True
    if rng.random() < 0.3:
        nats["allowed_connection_types"] = rng.choice([["STANDARD"], ["WEBSOCKET"], ["MQTT"], ["STANDARD", "MQTT"],
                                                      ["FOO"], ["LEAFNODE", "FOO"]])
    if rng.random() < 0.3:
        nats["src"] = rng.choice([["127.0.0.0/8"], ["10.0.0.0/8"], ["10.0.0.0/8", "127.0.0.1/32"], ["garbage"]])
    if rng.random() < 0.2:
        nats["times"] = rng.choice([[{"start": "00:00:00", "end": "23:59:59"}], [{"start": "12:00:00", "end": "12:00:00"}]])
    standard: dict[str, Any] = {}
    if rng.random() < 0.2:
        standard["exp"] = NOW + rng.choice([-100, 3600])
    if rng.random() < 0.2:
        standard["nbf"] = NOW + rng.choice([-100, 3600])
    if rng.random() < 0.2:
        revoked.add(key.public)
        standard["iat"] = NOW - rng.choice([100, 0])  # revoked at NOW - 50: the older one is revoked
    token = m.user_jwt(signer, key, f"gen{index}", issuer_account=issuer_account, nats=nats, **standard)
    nonce_signer = rng.choice(["self", "self", "self", None, "other"])
    return token, key, nonce_signer


def test_generated_users_against_nats_server(tmp_path: Path) -> None:
    """40 users with random claims (seeded), each connected once to both servers: admitted or refused alike,
    with the same log lines."""
    seed = int(os.environ.get("JWT_SEED", "31"))
    rng = random.Random(seed)
    revoked: set[str] = set()
    users = [_random_user(rng, i, revoked) for i in range(40)]
    config = _config(tmp_path)
    app = m.account_jwt(OP_SIGNER, APP, "APP", signing_keys=[APP_SIGNER.public],
                        revocations={k: NOW - 50 for k in revoked})
    config.write_text(re.sub(rf"{APP.public}: \S+", f"{APP.public}: {app}", config.read_text()))
    stranger = m.new_key("user")
    results = {}
    for kind in KINDS:
        with launch(kind, jetstream=False, extra_args=["-c", str(config), "-D"]) as handle:
            outcomes = []
            for token, key, nonce_signer in users:
                USERS["generated"] = key if nonce_signer != "other" else stranger
                outcomes.append(_outcome(handle.port, "generated", None if nonce_signer is None else "generated",
                                         jwt=token))
            poll(lambda: len(_auth_lines(handle.log_path.read_text())) >= 40, timeout=5, what=f"{kind}'s log")
            results[kind] = (outcomes, _auth_lines(handle.log_path.read_text()))
    assert results[JSBROKER][0] == results[NATS_SERVER][0], f"seed {seed}"
    assert results[JSBROKER][1] == results[NATS_SERVER][1], f"seed {seed}"
    assert 0 < results[JSBROKER][0].count("admitted") < len(users)  # the mix admits some and refuses some


def test_the_system_account_answers_its_users_in_operator_mode(tmp_path: Path) -> None:
    """A system account user (its JWT signed by SYS) reaches the system account's services on both servers."""
    sys_creds = m.write_creds(tmp_path, "sys", m.user_jwt(SYS, SYS_USER, "sys"), SYS_USER)

    async def ask(url: str) -> list[Any]:
        nc = await nats.connect(url, user_credentials=str(sys_creds))
        try:
            replies = [json.loads((await nc.request(subject, b"", timeout=2)).data)
                       for subject in ("$SYS.REQ.SERVER.PING.HEALTHZ", "$SYS.REQ.USER.INFO", "$SYS.REQ.SERVER.PING")]
            return [replies[0]["data"], replies[1]["data"], sorted(replies[2])]
        finally:
            await nc.close()

    answers = {}
    for kind in KINDS:
        (tmp_path / kind).mkdir()
        with launch(kind, jetstream=False, extra_args=["-c", str(_full_config(tmp_path / kind, False))]) as h:
            answers[kind] = asyncio.run(ask(h.url))
    assert answers[JSBROKER] == answers[NATS_SERVER]
    assert answers[JSBROKER][1]["account"] == SYS.public


def test_the_memory_resolver_takes_updates_of_accounts_in_use(tmp_path: Path) -> None:
    """resolver: MEMORY answers only an account's own CLAIMS.UPDATE: skipped until a user of the account is
    admitted, then updated (new connections get the pushed claims); the full resolver's other subjects have
    no responders. The same answers from both servers."""
    sys_creds = m.write_creds(tmp_path, "sys", m.user_jwt(SYS, SYS_USER, "sys"), SYS_USER)
    alice = m.write_creds(tmp_path, "alice", JWTS["alice"], USERS["alice"])
    app = m.account_jwt(OP_SIGNER, APP, "APP2", signing_keys=[APP_SIGNER.public]).encode()
    update = f"$SYS.REQ.ACCOUNT.{APP.public}.CLAIMS.UPDATE"
    before = [(update, app), ("$SYS.REQ.CLAIMS.UPDATE", app), ("$SYS.REQ.CLAIMS.LIST", b""),
              (f"$SYS.REQ.ACCOUNT.{APP.public}.CLAIMS.LOOKUP", b"")]
    after = [(update, app), (f"$SYS.ACCOUNT.{APP.public}.CLAIMS.UPDATE", app), (update, b""), (update, b"not a jwt"),
             (update, m.account_jwt(OP, OTHER, "OTHER").encode())]

    async def scenario(url: str) -> list[Any]:
        nc = await nats.connect(url, user_credentials=str(sys_creds))

        async def ask(subject: str, payload: bytes) -> Any:
            try:
                return _normal((await nc.request(subject, payload, timeout=2)).data)
            except nats.errors.NoRespondersError:
                return "no responders"
        try:
            out = [await ask(s, p) for s, p in before]
            user = await nats.connect(url, user_credentials=str(alice))
            out += [await ask(s, p) for s, p in after]
            await user.close()
            return out
        finally:
            await nc.close()

    answers = {}
    for kind in KINDS:
        (tmp_path / kind).mkdir()
        with launch(kind, jetstream=False, extra_args=["-c", str(_config(tmp_path / kind))]) as h:
            answers[kind] = asyncio.run(scenario(h.url))
    assert answers[JSBROKER] == answers[NATS_SERVER]
    assert [a["data"]["message"] if isinstance(a, dict) and "data" in a else a for a in answers[JSBROKER][:2]] == [
        "jwt update skipped", "no responders"]
    assert answers[JSBROKER][4]["data"]["message"] == "jwt updated"
