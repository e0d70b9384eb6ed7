"""Users and their publish/subscribe permissions: the same raw-wire and nats-py scenarios against jsbroker
and nats-server, both reading one JSON config file (nats-server parses JSON; jsbroker reads `.json`)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import nkeys
import pytest

from tests.broker.raw import Raw
from tests.chart import go_tools
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, launch

USERS = [
    {"user": "admin", "password": "admin-pw"},
    {"user": "app", "password": "app-pw", "permissions": {
        "publish": {"allow": ["orders.>", "$JS.API.>", "_INBOX.>"], "deny": ["orders.secret"]},
        "subscribe": {"allow": ["orders.>", "_INBOX.>"], "deny": ["orders.secret", "orders.*.internal"]},
    }},
    {"user": "svc", "password": "svc-pw", "permissions": {"subscribe": ["svc"], "allow_responses": True}},
    {"user": "reader", "password": "reader-pw", "permissions": {
        "publish": ["$JS.API.INFO", "$JS.API.STREAM.INFO.>"], "subscribe": ["_INBOX.>"]}},
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerHandle]]:
    config = tmp_path_factory.mktemp("auth") / "users.json"
    config.write_text(json.dumps({"authorization": {"users": USERS}}))
    handles = {kind: launch(kind, extra_args=["-c", str(config)]) for kind in KINDS}
    yield handles
    for handle in handles.values():
        handle.close()


def _login(port: int, user: str) -> Raw:
    raw = Raw(port)
    connect = json.dumps({"verbose": False, "pedantic": False, "user": user, "pass": f"{user}-pw"})
    raw.send(f"CONNECT {connect}\r\nPING\r\n".encode())
    assert raw.read_until(b"PONG\r\n") == b"PONG\r\n"
    return raw


def _roundtrip(raw: Raw, data: bytes) -> bytes:
    """Send `data` and a PING; everything the server answered before the PONG."""
    raw.send(data + b"PING\r\n")
    return raw.read_until(b"PONG\r\n")[:-len(b"PONG\r\n")]


def _wire(port: int) -> dict[str, Any]:
    admin, app, svc = _login(port, "admin"), _login(port, "app"), _login(port, "svc")
    try:
        out: dict[str, Any] = {
            "app subscribes": _roundtrip(app, b"SUB orders.> 1\r\nSUB orders.secret 2\r\nSUB foo 3\r\n"
                                              b"SUB orders.*.internal 4\r\nSUB orders.a.* 5\r\n"),
            "app publishes": _roundtrip(app, b"PUB orders.new 2\r\nhi\r\nPUB orders.secret 2\r\nno\r\n"
                                             b"PUB other.x 2\r\nno\r\n"),
        }
        # What admin publishes reaches app's wildcard subscriptions except where app's deny list says no.
        _roundtrip(admin, b"PUB orders.secret 1\r\n1\r\nPUB orders.a.internal 1\r\n2\r\nPUB orders.a.b 1\r\n3\r\n"
                          b"PUB orders.b 1\r\n4\r\n")
        out["app receives"] = sorted(_roundtrip(app, b"").split(b"MSG ")[1:])
        # allow_responses: svc may answer each request once, and publish nothing else.
        _roundtrip(svc, b"SUB svc 1\r\n")
        _roundtrip(admin, b"SUB _INBOX.r1 9\r\nPUB svc _INBOX.r1 3\r\nreq\r\n")
        out["svc receives"] = _roundtrip(svc, b"")
        out["svc answers"] = _roundtrip(svc, b"PUB _INBOX.r1 3\r\nyes\r\nPUB _INBOX.r1 5\r\nagain\r\n"
                                             b"PUB elsewhere 1\r\nx\r\nSUB other 2\r\n")
        out["admin gets one answer"] = _roundtrip(admin, b"")
        out["all still connected"] = not (admin.closed or app.closed or svc.closed)
        return out
    finally:
        for raw in (admin, app, svc):
            raw.close()


def test_publish_and_subscribe_permissions_on_the_wire(servers: dict[str, ServerHandle]) -> None:
    out = {kind: _wire(handle.port) for kind, handle in servers.items()}
    assert out[JSBROKER] == out[NATS_SERVER]
    assert out[JSBROKER] == {
        "app subscribes": b"-ERR 'Permissions Violation for Subscription to \"orders.secret\"'\r\n"
                          b"-ERR 'Permissions Violation for Subscription to \"foo\"'\r\n"
                          b"-ERR 'Permissions Violation for Subscription to \"orders.*.internal\"'\r\n",
        "app publishes": b"MSG orders.new 1 2\r\nhi\r\n"
                         b"-ERR 'Permissions Violation for Publish to \"orders.secret\"'\r\n"
                         b"-ERR 'Permissions Violation for Publish to \"other.x\"'\r\n",
        "app receives": [b"orders.a.b 1 1\r\n3\r\n", b"orders.a.b 5 1\r\n3\r\n", b"orders.b 1 1\r\n4\r\n"],
        "svc receives": b"MSG svc 1 _INBOX.r1 3\r\nreq\r\n",
        "svc answers": b"-ERR 'Permissions Violation for Publish to \"_INBOX.r1\"'\r\n"
                       b"-ERR 'Permissions Violation for Publish to \"elsewhere\"'\r\n"
                       b"-ERR 'Permissions Violation for Subscription to \"other\"'\r\n",
        "admin gets one answer": b"MSG _INBOX.r1 9 3\r\nyes\r\n",
        "all still connected": True,
    }


async def _jetstream(url: str) -> dict[str, Any]:
    """The JetStream API is subjects like any other: app may create a stream, reader may only look."""
    app = await nats.connect(url, user="app", password="app-pw")
    reader = await nats.connect(url, user="reader", password="reader-pw")
    try:
        created = await app.jetstream().add_stream(name="ORD", subjects=["orders.>"])
        await app.jetstream().publish("orders.one", b"1")
        info = await reader.jetstream().stream_info("ORD")
        try:
            await reader.jetstream(timeout=0.5).add_stream(name="NOPE", subjects=["nope.>"])
            refused = "created"
        except (nats.errors.TimeoutError, nats.js.errors.Error) as exc:
            refused = type(exc).__name__
        names = [s.config.name for s in await app.jetstream().streams_info()]
        return {"created": created.config.name, "reader sees": info.state.messages, "reader creates": refused,
                "streams": names}
    finally:
        await app.close()
        await reader.close()


def test_jetstream_api_follows_the_same_permissions(servers: dict[str, ServerHandle]) -> None:
    out = {kind: asyncio.run(_jetstream(handle.url)) for kind, handle in servers.items()}
    assert out[JSBROKER] == out[NATS_SERVER] == {
        "created": "ORD", "reader sees": 1, "reader creates": "TimeoutError", "streams": ["ORD"]}


def test_wrong_password_is_refused_and_secrets_stay_out_of_logs_and_varz(tmp_path: Path) -> None:
    config = tmp_path / "users.json"
    config.write_text(json.dumps({"authorization": {"users": USERS}}))
    with launch(JSBROKER, extra_args=["-c", str(config), "-D"], http=True) as handle:
        raw = Raw(handle.port)
        raw.send(b'CONNECT {"verbose":false,"user":"app","pass":"guess-pw"}\r\nPING\r\n')
        refused = raw.read_to_close()
        raw.close()
        good = _login(handle.port, "app")
        good.close()
        with urllib.request.urlopen(f"{handle.http_url}/varz", timeout=5) as response:
            varz = response.read().decode()
        log = handle.log_path.read_text()
    assert refused == b"-ERR 'Authorization Violation'\r\n"
    for secret in ("app-pw", "admin-pw", "svc-pw", "guess-pw"):
        assert secret not in log and secret not in varz


@pytest.mark.parametrize("users,message", [
    ([{"password": "p"}], "users.json:1:30: authorization.users[0]: user is required"),
    ([{"user": "a", "password": "p", "permissions": {"publish": {"allow": ["bad..subject"]}}}],
     "authorization.users[0].permissions.publish.allow: a subject or an array of valid subjects"),
    ([{"user": "a", "password": "p", "permissions": {"pubish": ["x"]}}], "unknown setting 'authorization.users[0].permissions.pubish'"),
    ([{"user": "a", "password": "p"}, {"user": "a", "password": "q"}], "duplicate user 'a' in authorization.users"),
    ([{"user": "a", "password": "p", "permissions": {"allow_responses": "yes"}}], "permissions.allow_responses: true, false, or a block"),
])
def test_bad_user_settings_fail_at_start_with_a_clear_message(tmp_path: Path, users: list[Any], message: str) -> None:
    config = tmp_path / "users.json"
    config.write_text(json.dumps({"authorization": {"users": users}}))
    done = subprocess.run([sys.executable, "-m", "jsbroker", "-a", "127.0.0.1", "-p", "-1", "-c", str(config)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "-pw" not in done.stderr


def _nkey_user() -> tuple[str, str]:
    """A fresh user nkey: (seed, public key)."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    return seed.decode(), nkeys.from_seed(bytearray(seed)).public_key.decode()


async def _nkey_scenario(url: str, seed: str, stranger: str) -> dict[str, Any]:
    nc = await nats.connect(url, nkeys_seed_str=seed)
    try:
        ok = (await nc.request("$JS.API.INFO", b"", timeout=5)).data.startswith(b"{")
    finally:
        await nc.close()
    try:
        await nats.connect(url, nkeys_seed_str=stranger, allow_reconnect=False, max_reconnect_attempts=0)
        refused = "connected"
    except nats.errors.Error as exc:
        refused = str(exc)
    return {"jetstream api": ok, "stranger": refused}


def test_nkey_users_sign_the_nonce(tmp_path: Path) -> None:
    seed, public = _nkey_user()
    stranger, _ = _nkey_user()
    config = tmp_path / "nkeys.json"
    config.write_text(json.dumps({"authorization": {"users": [
        {"nkey": public, "permissions": {"publish": ["$JS.API.>"], "subscribe": ["_INBOX.>"]}}]}}))

    def run(kind: str) -> dict[str, Any]:
        with launch(kind, extra_args=["-c", str(config)]) as handle:
            info = json.loads(Raw(handle.port).info[5:])
            out = asyncio.run(_nkey_scenario(handle.url, seed, stranger))
            raw = Raw(handle.port)
            raw.send(f'CONNECT {{"verbose":false,"nkey":"{public}","sig":"AAAA"}}\r\nPING\r\n'.encode())
            out["bad signature"] = raw.read_to_close()
            raw.close()
            return {"nonce in INFO": len(info.get("nonce", "")), **out}

    out = {kind: run(kind) for kind in KINDS}
    assert out[JSBROKER] == out[NATS_SERVER] == {
        "nonce in INFO": 15, "jetstream api": True, "stranger": "nats: 'Authorization Violation'",
        "bad signature": b"-ERR 'Authorization Violation'\r\n"}


@pytest.mark.parametrize("nkey,message", [
    ("UABC", "is not a user nkey"),
    ("SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4", "is not a user nkey"),
])
def test_a_bad_nkey_fails_at_start(tmp_path: Path, nkey: str, message: str) -> None:
    config = tmp_path / "users.json"
    config.write_text(json.dumps({"authorization": {"users": [{"nkey": nkey}]}}))
    done = subprocess.run([sys.executable, "-m", "jsbroker", "-a", "127.0.0.1", "-p", "-1", "-c", str(config)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and message in done.stderr, done.stderr


def test_the_go_nats_cli_signs_with_an_nkey(tmp_path: Path) -> None:
    """natscli's --nkey (a seed file) against both servers; a stranger's seed is refused."""
    cli = go_tools.NATS_CLI.for_test()
    seed, public = _nkey_user()
    stranger, _ = _nkey_user()
    (tmp_path / "user.nk").write_text(seed)
    (tmp_path / "stranger.nk").write_text(stranger)
    config = tmp_path / "nkeys.json"
    config.write_text(json.dumps({"authorization": {"users": [{"nkey": public}]}}))

    def run(kind: str) -> tuple[tuple[int, bool], tuple[bool, bool]]:
        with launch(kind, extra_args=["-c", str(config)]) as handle:
            base = [str(cli), "--server", handle.url, "--timeout", "5s", "account", "info"]
            env = {"HOME": str(tmp_path)}
            good = subprocess.run([*base, "--nkey", str(tmp_path / "user.nk")], capture_output=True, text=True,
                                  timeout=60, env=env)
            bad = subprocess.run([*base, "--nkey", str(tmp_path / "stranger.nk")], capture_output=True, text=True,
                                 timeout=60, env=env)
            return (good.returncode, "Account Information" in good.stdout), (
                bad.returncode != 0, "Authorization Violation" in bad.stderr)

    out = {kind: run(kind) for kind in KINDS}
    assert out[JSBROKER] == out[NATS_SERVER] == ((0, True), (True, True))
