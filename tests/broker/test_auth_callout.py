"""Auth callout (`authorization { auth_callout {...} }`) side by side with nats-server 2.15.1: one config file,
a real nats-py callout service (tests/broker/callout_service.py) answering `$SYS.REQ.USER.AUTH`, and raw-wire
clients whose outcomes, and the servers' log lines about them, are compared: a user placed in another account
with permissions, refusals by the service, answers signed by the wrong key, for the wrong server, with an
expired user JWT, for another user, into a missing account, garbage; the sealed (xkey) exchange; auth_users
bypassing the service; no service (the timeout); other clients unaffected while an answer is pending."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from jsbroker import auth_callout
from jsbroker.auth_callout import ServerKeys
from jsbroker.claims import decode_operator
from jsbroker.config import CalloutSettings, ConfigError, load_file
from jsbroker.operator_auth import Refusal, authenticate_user
from tests.broker import jwt_material as m
from tests.broker.certs import Authority
from tests.broker.callout_service import CalloutService, claims_of, grant, refuse, seal, unseal
from tests.broker.raw import Raw
from tests.broker.test_accounts import _nats_server_start_error
from tests.polling import poll_async
from tests.servers import KINDS, NATS_SERVER, ServerHandle, free_port, launch

ISSUER = m.new_key("account")
XKEY = m.new_curve_key()
PERMS = {"pub": {"allow": ["foo.>"]}, "sub": {"allow": ["foo.>", "_INBOX.>"]}}


def _config(xkey: bool) -> str:
    return f"""
accounts {{
  AUTH: {{ users: [{{user: auth, password: pwd}}, {{user: member, password: pwd}}] }}
  APP: {{ users: [{{user: direct, password: pwd}}] }}
  LIMITED: {{ default_permissions: {{ publish: "foo.>", subscribe: "foo.>" }} }}
}}
authorization {{
  auth_callout {{
    issuer: {ISSUER.public}
    auth_users: [auth]
    account: AUTH
    {f"xkey: {XKEY.public}" if xkey else ""}
  }}
}}
"""


def decide(request: dict[str, Any]) -> str:
    """The service's policy, by the CONNECT's user name."""
    user = request["nats"]["connect_opts"].get("user", "")
    if user in ("alice", "direct", "slow"):
        return grant(ISSUER, request, "APP", PERMS)
    if user == "defaulted":  # no permissions of its own: nats-server does not apply the account's defaults
        return grant(ISSUER, request, "LIMITED")
    if user == "member":  # placed in the callout account itself
        return grant(ISSUER, request, "AUTH")
    if user == "wrong_key":  # the answer and the user signed by a key that is not the issuer
        return grant(m.new_key("account"), request, "APP")
    if user == "user_by_other":  # the answer by the issuer, the user by another key
        token = claims_of(grant(m.new_key("account"), request, "APP"))["nats"]["jwt"]
        return m.authorization_response(ISSUER, request["nats"]["user_nkey"], request["nats"]["server_id"]["id"],
                                        user_jwt=token)
    if user == "wrong_audience":
        token = claims_of(grant(ISSUER, request, "APP"))["nats"]["jwt"]
        return m.authorization_response(ISSUER, request["nats"]["user_nkey"], m.new_key("account").public,
                                        user_jwt=token)
    if user == "expired":
        return grant(ISSUER, request, "APP", exp=int(time.time()) - 10)
    if user == "other_user":
        other = dict(request, nats=dict(request["nats"], user_nkey=m.new_key("user").public))
        token = claims_of(grant(ISSUER, other, "APP"))["nats"]["jwt"]
        return m.authorization_response(ISSUER, request["nats"]["user_nkey"], request["nats"]["server_id"]["id"],
                                        user_jwt=token)
    if user == "expiring":
        return grant(ISSUER, request, "APP", exp=int(time.time()) + 2)
    if user == "nowhere":
        return grant(ISSUER, request, "NOPE")
    if user == "garbage":
        return "not a jwt"
    return refuse(ISSUER, request, f"no such user {user}")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, bool], ServerHandle]]:
    directory = tmp_path_factory.mktemp("callout")
    handles = {}
    for xkey in (False, True):
        path = directory / f"callout-{xkey}.conf"
        path.write_text(_config(xkey))
        for kind in KINDS:
            handles[kind, xkey] = launch(kind, jetstream=False, extra_args=["-c", str(path), "-D"])
    yield handles
    for handle in handles.values():
        handle.close()


def _connect(port: int, user: str, password: str = "pwd", then: bytes = b"") -> Raw:
    raw = Raw(port)
    opts = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1, "user": user, "pass": password}
    raw.send(f"CONNECT {json.dumps(opts)}\r\nPING\r\n".encode() + then)
    return raw


def _answer(raw: Raw) -> bytes:
    """What the server said to a CONNECT + PING: PONG and the account-naming INFO (its remote_account only),
    or the error and the close."""
    out = raw.read_until(b"PONG\r\n")
    if not out.endswith(b"PONG\r\n"):
        return out + raw.read_to_close(2)
    info = raw.read_until(b"\r\n")
    account = json.loads(info[5:]).get("remote_account") if info.startswith(b"INFO ") else info
    return out + f"[remote_account {account}]".encode()


def _session(port: int, user: str) -> bytes:
    """CONNECT, then (if admitted) a subscription, a publish inside and one outside the permissions."""
    with _connect(port, user) as raw:
        answer = _answer(raw)
        if b"remote_account" not in answer:
            return answer
        raw.send(b"SUB foo.> 1\r\nPUB foo.a 2\r\nhi\r\nPUB bar 2\r\nhi\r\nPING\r\n")
        return answer + raw.read_until(b"PONG\r\n")


USERS = ("alice", "direct", "member", "defaulted", "stranger", "wrong_key", "user_by_other", "wrong_audience", "expired",
         "other_user", "nowhere", "garbage")
_KEY = re.compile(r"\b[UANX][A-Z2-7]{55}\b")


def _callout_log(handle: ServerHandle, after: int) -> list[str]:
    """The log lines about authentication after byte `after`, without time, pid, address and keys (and Go's
    warning about a read loop that waited, which a callout's wait of more than 2s causes)."""
    lines = handle.log_path.read_text()[after:].splitlines()
    keep = ("authentication error", "[WRN]", "callout")
    out = []
    for line in lines:
        if any(k in line for k in keep) and "Plaintext passwords" not in line and "Readloop" not in line:
            line = re.sub(r"^\[\d+\] \S+ \S+ ", "", line)
            line = re.sub(r"127\.0\.0\.1:\d+ - cid:\d+", "<client>", line)
            out.append(_KEY.sub("<key>", line))
    return out


async def _outcomes(handle: ServerHandle, xkey: bool, users: tuple[str, ...]) -> tuple[dict[str, bytes], list[str]]:
    start = handle.log_path.stat().st_size
    async with CalloutService(handle.url, "auth", "pwd", decide, XKEY if xkey else None) as service:
        out = {user: await asyncio.to_thread(_session, handle.port, user) for user in users}
        asked = [r["nats"]["connect_opts"]["user"] for r in service.requests]
    assert asked == list(users), asked  # each CONNECT asked the service once
    await poll_async(lambda: len(_callout_log(handle, start)) >= 2 * (len(users) - 4), timeout=5)
    return out, _callout_log(handle, start)


@pytest.mark.parametrize("xkey", [False, True], ids=["clear", "sealed"])
async def test_the_service_decides_as_in_nats_server(servers, xkey: bool):
    results = {kind: await _outcomes(servers[kind, xkey], xkey, USERS) for kind in KINDS}
    assert results["jsbroker"][0] == results[NATS_SERVER][0]
    assert results["jsbroker"][1] == results[NATS_SERVER][1]
    outcomes = results["jsbroker"][0]
    assert outcomes["alice"] == (b"PONG\r\n[remote_account APP]MSG foo.a 1 2\r\nhi\r\n"
                                 b"-ERR 'Permissions Violation for Publish to \"bar\"'\r\nPONG\r\n")
    assert outcomes["direct"] == outcomes["alice"]  # a configured user goes to the service too
    assert outcomes["member"].startswith(b"PONG\r\n[remote_account AUTH]MSG foo.a 1 2\r\n")
    assert outcomes["defaulted"] == b"PONG\r\n[remote_account LIMITED]MSG foo.a 1 2\r\nhi\r\nPONG\r\n"
    for user in USERS[4:]:
        assert outcomes[user] == b"-ERR 'Authorization Violation'\r\n", user


async def test_the_request_carries_what_nats_server_sends(servers):
    requests = {}
    for kind in KINDS:
        handle = servers[kind, True]
        async with CalloutService(handle.url, "auth", "pwd", decide, XKEY) as service:
            await asyncio.to_thread(_session, handle.port, "alice")
            requests[kind] = service.requests[0]
        info = json.loads(Raw(handle.port).info[5:])
        claims = requests[kind]
        assert claims["iss"] == claims["nats"]["server_id"]["id"] == info["server_id"]  # signed by the server
        assert claims["nats"]["server_id"]["xkey"] == info["xkey"]
        assert claims["exp"] - claims["iat"] == 2  # the authorization timeout

    def shape(claims: dict[str, Any]) -> dict[str, Any]:
        nats = dict(claims["nats"])
        nats["server_id"] = sorted(nats["server_id"])
        nats["user_nkey"] = nats["user_nkey"][0]
        nats["client_info"] = {k: v for k, v in nats["client_info"].items() if k != "id"}
        nats["connect_opts"] = {k: v for k, v in nats["connect_opts"].items() if k not in ("lang", "version")}
        return {"aud": claims["aud"], "sub": claims["sub"], "keys": sorted(claims), "nats": nats}

    assert shape(requests["jsbroker"]) == shape(requests[NATS_SERVER])
    assert shape(requests["jsbroker"])["sub"] == ISSUER.public


async def test_auth_users_bypass_the_service(servers):
    for kind in KINDS:
        handle = servers[kind, False]
        async with CalloutService(handle.url, "auth", "pwd", decide) as service:
            admitted = await asyncio.to_thread(_session, handle.port, "auth")
            again = await asyncio.to_thread(_session, handle.port, "auth")
            with _connect(handle.port, "auth", "wrong") as raw:
                refused = await asyncio.to_thread(_answer, raw)
            assert service.requests == [], kind
        assert admitted.startswith(b"PONG\r\n[remote_account AUTH]MSG foo.a 1 2\r\n"), kind
        assert admitted == again
        assert refused == b"-ERR 'Authorization Violation'\r\n", kind


async def test_no_service_is_the_authorization_timeout(servers):
    for kind in KINDS:
        handle = servers[kind, False]
        start = handle.log_path.stat().st_size
        began = time.monotonic()
        answer = await asyncio.to_thread(_session, handle.port, "alice")
        waited = time.monotonic() - began
        assert answer == b"-ERR 'Authorization Violation'\r\n", kind
        assert waited >= 1.9, (kind, waited)  # nats-server's authorization timeout, 2s by default
        await poll_async(lambda: len(_callout_log(handle, start)) >= 2, timeout=5)
        assert _callout_log(handle, start) == [
            '[DBG] Authorization callout response not received in time on account "AUTH"',
            '[ERR] <client> - authentication error - User "alice"'], kind


def _holding(user: str, release: asyncio.Event) -> Callable[[dict[str, Any]], Awaitable[None]]:
    """A service's `before` hook that holds `user`'s request until `release` is set."""
    async def hold(request: dict[str, Any]) -> None:
        if request["nats"]["connect_opts"].get("user") == user:
            await release.wait()
    return hold


async def test_other_clients_are_served_while_an_answer_is_pending(servers):
    for kind in KINDS:
        handle = servers[kind, False]
        release = asyncio.Event()
        hold_slow = _holding("slow", release)
        async with CalloutService(handle.url, "auth", "pwd", decide, before=hold_slow) as service:
            slow = await asyncio.to_thread(_connect, handle.port, "slow", "pwd", b"SUB foo.> 9\r\nPING\r\n")
            await poll_async(lambda: len(service.requests) == 1, timeout=5)
            # while slow's answer is pending: others connect, are answered and exchange messages
            assert (await asyncio.to_thread(_session, handle.port, "alice")).endswith(b"MSG foo.a 1 2\r\nhi\r\n"
                                                                                     b"-ERR 'Permissions Violation for "
                                                                                     b"Publish to \"bar\"'\r\nPONG\r\n")
            bypass = await asyncio.to_thread(_session, handle.port, "auth")
            assert bypass.startswith(b"PONG\r\n[remote_account AUTH]"), kind
            release.set()
            # slow's PING (sent with its CONNECT) and its SUB are handled once it is admitted, in order
            assert await asyncio.to_thread(_answer, slow) == b"PONG\r\n[remote_account APP]", kind
            assert await asyncio.to_thread(slow.read_until, b"PONG\r\n") == b"PONG\r\n"
            alice = await asyncio.to_thread(_connect, handle.port, "alice", "pwd", b"PUB foo.b 1\r\nx\r\nPING\r\n")
            await asyncio.to_thread(_answer, alice)
            assert await asyncio.to_thread(slow.read_until, b"x\r\n") == b"MSG foo.b 9 1\r\nx\r\n", kind
            slow.close()
            alice.close()
        assert [r["nats"]["connect_opts"]["user"] for r in service.requests] == ["slow", "alice", "alice"], kind


async def test_a_client_that_leaves_before_the_answer_costs_nothing(servers):
    """The answer for a client that is gone goes nowhere; the server stays up and serves the next ones."""
    for kind in KINDS:
        handle = servers[kind, False]
        release = asyncio.Event()
        hold_slow = _holding("slow", release)
        async with CalloutService(handle.url, "auth", "pwd", decide, before=hold_slow) as service:
            slow = await asyncio.to_thread(_connect, handle.port, "slow")
            await poll_async(lambda: len(service.requests) == 1, timeout=5)
            slow.close()
            release.set()
            assert (await asyncio.to_thread(_session, handle.port, "alice")).startswith(
                b"PONG\r\n[remote_account APP]MSG foo.a 1 2\r\n"), kind


async def test_a_websocket_client_goes_to_the_service_too(tmp_path: Path):
    path = tmp_path / "ws.conf"
    described = {}
    for kind in KINDS:
        ws_port = free_port()
        path.write_text(_config(False) + f"websocket {{ host: 127.0.0.1, port: {ws_port}, no_tls: true }}\n")
        with launch(kind, jetstream=False, extra_args=["-c", str(path)]) as handle:
            async with CalloutService(handle.url, "auth", "pwd", decide) as service:
                client = await nats.connect(f"ws://127.0.0.1:{ws_port}", user="alice", password="pwd",
                                            allow_reconnect=False)
                await client.close()
                with pytest.raises(nats.errors.Error, match="Authorization Violation"):
                    await nats.connect(f"ws://127.0.0.1:{ws_port}", user="stranger", password="pwd",
                                       allow_reconnect=False, max_reconnect_attempts=0)
            described[kind] = [{k: v for k, v in r["nats"]["client_info"].items() if k != "id"}
                               for r in service.requests]
    assert described["jsbroker"] == described[NATS_SERVER]
    assert [d["type"] for d in described["jsbroker"]] == ["websocket", "websocket"]


async def test_the_connection_ends_when_the_user_jwt_expires(servers):
    ends = {}
    for kind in KINDS:
        handle = servers[kind, False]
        async with CalloutService(handle.url, "auth", "pwd", decide):
            with _connect(handle.port, "expiring") as raw:
                admitted = await asyncio.to_thread(_answer, raw)
                ends[kind] = admitted + await asyncio.to_thread(raw.read_to_close, 6)
    assert ends["jsbroker"] == ends[NATS_SERVER]
    assert ends["jsbroker"] == b"PONG\r\n[remote_account APP]-ERR 'User Authentication Expired'\r\n"


async def test_allowed_accounts_limit_who_is_asked(tmp_path: Path):
    """With allowed_accounts: [APP], a configured user of AUTH is admitted by its password alone; one of APP and
    an unknown user go to the service."""
    path = tmp_path / "allowed.conf"
    path.write_text(_config(False).replace("account: AUTH", "account: AUTH\n    allowed_accounts: [APP]"))
    outcomes = {}
    for kind in KINDS:
        with launch(kind, jetstream=False, extra_args=["-c", str(path)]) as handle:
            async with CalloutService(handle.url, "auth", "pwd", decide) as service:
                seen = {user: await asyncio.to_thread(_session, handle.port, user) for user in ("member", "direct",
                                                                                                 "alice")}
                outcomes[kind] = seen, [r["nats"]["connect_opts"]["user"] for r in service.requests]
    assert outcomes["jsbroker"] == outcomes[NATS_SERVER]
    assert outcomes["jsbroker"][1] == ["direct", "alice"]


@pytest.mark.parametrize(("text", "message"), [
    ("auth_callout { auth_users: [auth] }", "Authorization callouts require an issuer to be specified"),
    ("auth_callout { issuer: ABC, auth_users: [auth] }", "Expected callout user to be a valid public account nkey"),
    (f"auth_callout {{ issuer: {ISSUER.public} }}", "Authorization callouts require authorized users to be specified"),
    (f"auth_callout {{ issuer: {ISSUER.public}, auth_users: [auth], xkey: XYZ }}",
     "Expected callout xkey to be a valid public xkey"),
    (f"auth_callout {{ issuer: {ISSUER.public}, auth_users: [auth], allowed_accounts: [NOPE] }}",
     'auth_callout allowed account "NOPE" not found in configured accounts'),
], ids=["no-issuer", "bad-issuer", "no-auth-users", "bad-xkey", "unknown-allowed-account"])
def test_bad_callout_configs_are_refused_alike(tmp_path: Path, text: str, message: str):
    path = tmp_path / "server.conf"
    path.write_text(f"port: -1\naccounts {{ AUTH: {{ users: [{{user: auth, password: pwd}}] }} }}\n"
                    f"authorization {{ {text} }}\n")
    assert message in _nats_server_start_error(path)
    with pytest.raises(ConfigError) as refused:
        load_file(path, env={})
    assert message in str(refused.value)


def test_a_config_callout_in_operator_mode_is_refused_by_name(tmp_path: Path):
    operator, system = m.new_key("operator"), m.new_key("account")
    path = tmp_path / "operator.conf"
    path.write_text(f"operator: {m.operator_jwt(operator, system_account=system.public)}\nresolver: MEMORY\n"
                    f"resolver_preload {{ {system.public}: {m.account_jwt(operator, system, 'SYS')} }}\n"
                    f"authorization {{ auth_callout {{ issuer: {ISSUER.public}, auth_users: [auth] }} }}\n")
    with pytest.raises(ConfigError) as refused:
        load_file(path, env={})
    assert "in operator mode the account JWT's `authorization` sets up a callout" in str(refused.value)


@pytest.mark.parametrize(("text", "message"), [
    ("account: NOPE", 'Authorization callout account "NOPE" not valid'),
    ("account: AUTH, auth_users: [nobody]", 'Authorization callout user "nobody" not valid'),
])
def test_what_nats_server_only_logs_is_refused_by_name(tmp_path: Path, text: str, message: str):
    """nats-server starts and logs these as errors (then every callout fails); jsbroker refuses to start."""
    path = tmp_path / "server.conf"
    users = "" if "auth_users" in text else ", auth_users: [auth]"
    path.write_text(f"accounts {{ AUTH: {{ users: [{{user: auth, password: pwd}}] }} }}\n"
                    f"authorization {{ auth_callout {{ issuer: {ISSUER.public}, {text}{users} }} }}\n")
    with pytest.raises(ConfigError) as refused:
        load_file(path, env={})
    assert message in str(refused.value)


def test_operator_mode_callout_accounts_are_refused_by_name():
    """An account JWT whose `authorization` delegates to a callout: jsbroker serves operator mode without
    callouts yet, so its users are refused with a line saying so (never admitted by their JWT alone)."""
    operator, account, user = m.new_key("operator"), m.new_key("account"), m.new_key("user")
    account_jwt = m.encode(operator, account.public, "CALLOUT", {
        "type": "account", "limits": m.UNLIMITED, "authorization": {"auth_users": [user.public]}})
    token = m.user_jwt(account, user, "service", nats={"bearer_token": True})
    result = authenticate_user(decode_operator(m.operator_jwt(operator)), {account.public: account_jwt}.get,
                               {"jwt": token}, "", "STANDARD", "127.0.0.1", time.time())
    assert isinstance(result, Refusal) and result.level == "error"
    assert result.reason.startswith(f"account {account.public} delegates its users to an auth callout")


def test_a_sealed_answer_that_does_not_open_is_refused():
    keys = ServerKeys()
    settings = CalloutSettings(ISSUER.public, ("auth",), "AUTH", XKEY.public)
    user = auth_callout.new_user_nkey()
    hdr, sealed = auth_callout.request(keys, settings, user, {"name": "n", "host": "h", "version": "v"},
                                       auth_callout.CalloutClient("127.0.0.1", 1, {"user": "alice"}, ""),
                                       time.time(), 2.0)
    assert hdr == f"NATS/1.0\r\nNats-Server-Xkey: {keys.xkey}\r\n\r\n".encode()
    request = claims_of(unseal(XKEY, keys.xkey, sealed).decode())
    answer = grant(ISSUER, request, "APP", PERMS)
    admitted = auth_callout.check_response(seal(XKEY, keys.xkey, answer.encode()), keys=keys, settings=settings,
                                           user_nkey=user, accounts=("APP", "AUTH"), now=time.time())
    assert admitted.account == "APP" and admitted.name == "alice"
    assert admitted.permissions is not None and admitted.permissions.publish is not None
    assert admitted.permissions.publish.allow == ("foo.>",)
    tampered = bytearray(seal(XKEY, keys.xkey, answer.encode()))
    tampered[-1] ^= 1
    with pytest.raises(auth_callout.CalloutRefused) as refused:
        auth_callout.check_response(bytes(tampered), keys=keys, settings=settings, user_nkey=user,
                                    accounts=("APP",), now=time.time())
    assert str(refused.value) == 'Error decrypting auth callout response on account "AUTH": could not decrypt message'


async def test_a_tls_client_is_described_as_nats_server_does(tmp_path: Path):
    """client_tls: the TLS version and suite (no certificates: neither server asks for one without verify)."""
    authority = Authority(tmp_path / "ca")
    server = authority.issue("server", server=True, names=("localhost", "127.0.0.1"))
    path = tmp_path / "tls.conf"
    path.write_text(_config(False) + f'tls {{ cert_file: "{server.cert}", key_file: "{server.key}" }}\n')
    context = ssl.create_default_context(cafile=str(authority.ca))
    described = {}
    for kind in KINDS:
        with launch(kind, jetstream=False, extra_args=["-c", str(path)]) as handle:
            service = CalloutService(handle.url, "auth", "pwd", decide, tls=context)
            async with service:
                client = await nats.connect(handle.url, user="alice", password="pwd", tls=context,
                                            allow_reconnect=False)
                await client.close()
            described[kind] = service.requests[0]["nats"]["client_tls"]
    # the suite each server's TLS stack prefers differs (OpenSSL's AES-256, Go's AES-128): their names do not
    assert {k: sorted(v) for k, v in described.items()} == {kind: ["cipher", "version"] for kind in KINDS}
    assert {k: (v["version"], v["cipher"][:8]) for k, v in described.items()} == {
        kind: ("1.3", "TLS_AES_") for kind in KINDS}
