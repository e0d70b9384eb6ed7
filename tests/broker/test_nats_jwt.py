"""Operator-mode material judged by nats-io/jwt v2, the library `nsc` makes JWTs with (through jwtgen, the Go
program in tests/broker/jwtgen/, built by `python3 -m tests.chart.go_tools ensure`):

- an operator, two accounts with JetStream and a service and a stream export/import, and their users, all made
  by nats-io/jwt's own encoders, are served alike by jsbroker and nats-server 2.15.1 (resolver MEMORY);
- every JWT tests/broker/jwt_material.py makes for the operator-mode tests decodes and validates with
  nats-io/jwt (jwt.Decode and Validate), so our encoder is checked against the real library.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.broker import jwt_material as m
from tests.broker import test_claims, test_operator_accounts, test_operator_mode
from tests.broker.test_operator_accounts import _delivered, _imported, _request
from tests.chart import go_tools
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, launch

MIB = 1 << 20
A_JETSTREAM = {"mem_storage": MIB, "disk_storage": 4 * MIB, "streams": 3, "consumer": 5, "max_ack_pending": 100,
               "disk_max_stream_bytes": 2 * MIB, "max_bytes_required": True}
B_JETSTREAM = {"mem_storage": -1, "disk_storage": 8 * MIB, "streams": -1, "consumer": -1}
SPEC = {"operator": "OP", "system_account": "SYS", "accounts": [
    {"name": "SYS", "users": ["sys"]},
    {"name": "A", "jetstream": A_JETSTREAM, "users": ["a"], "exports": [
        {"name": "svc", "subject": "svc.>", "type": "service"},
        {"name": "feed", "subject": "feed.>", "type": "stream"}]},
    {"name": "B", "jetstream": B_JETSTREAM, "users": ["b"], "imports": [
        {"name": "svc", "subject": "svc.>", "account": "A", "local_subject": "asvc.>", "type": "service"},
        {"name": "feed", "subject": "feed.>", "account": "A", "local_subject": "a.feed.>", "type": "stream"}]}]}


def _jwtgen(mode: str, given: Any) -> Any:
    done = subprocess.run([str(go_tools.JWTGEN.for_test()), mode], input=json.dumps(given), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def material() -> dict[str, Any]:
    made: dict[str, Any] = _jwtgen("make", SPEC)
    return made


@pytest.fixture(scope="module")
def servers(material: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerHandle]]:
    root = tmp_path_factory.mktemp("nats_jwt")
    accounts = material["accounts"]
    preload = "".join(f"  {a['public']}: {a['jwt']}\n" for a in accounts.values())
    (root / "server.conf").write_text(f"operator: {material['operator']['jwt']}\n"
                                      f"system_account: {accounts['SYS']['public']}\nresolver: MEMORY\n"
                                      f"resolver_preload {{\n{preload}}}\n")
    handles = {kind: launch(kind, store_dir=root / kind, extra_args=["-c", str(root / "server.conf")])
               for kind in KINDS}
    yield handles
    for handle in handles.values():
        handle.close()


def test_nats_io_jwt_material_is_served_alike(servers: dict[str, ServerHandle], material: dict[str, Any],
                                              tmp_path: Path) -> None:
    creds = {}
    for account in material["accounts"].values():
        for name, user in account["users"].items():
            creds[name] = tmp_path / f"{name}.creds"
            creds[name].write_text(user["creds"])

    async def scenario(url: str) -> list[Any]:
        a = await nats.connect(url, user_credentials=str(creds["a"]))
        b = await nats.connect(url, user_credentials=str(creds["b"]))
        out: list[Any] = []
        try:
            same = await a.subscribe("same")
            await b.publish("same", b"from b")  # another account's subject space: never reaches A
            await b.flush()
            await a.publish("same", b"from a")
            out.append((await same.next_msg(timeout=2)).data)

            async def answer(msg: Any) -> None:
                await msg.respond(f"A answers {msg.subject}".encode())
            await a.subscribe("svc.>", cb=answer)
            await a.flush()
            await _imported(b, "asvc.ready")
            out += [await _request(b, "asvc.hello"), await _request(b, "svc.hello")]
            feed = await b.subscribe("a.feed.>")
            await b.flush()
            await _delivered(a, "feed.warm", [feed])
            await a.publish("feed.one", b"1")
            got = await feed.next_msg(timeout=2)
            out.append((got.subject, got.data))
            out += [await _request(a, "$JS.API.INFO"), await _request(b, "$JS.API.INFO")]
        finally:
            await a.close()
            await b.close()
        return out

    outcomes = {kind: asyncio.run(scenario(h.url)) for kind, h in servers.items()}
    assert outcomes[JSBROKER] == outcomes[NATS_SERVER]
    same, imported, unimported, streamed, a_info, b_info = outcomes[JSBROKER]
    assert (same, imported, unimported, streamed) == (b"from a", "A answers svc.hello", "no responders",
                                                      ("a.feed.one", b"1"))
    assert a_info["limits"] == {"max_memory": MIB, "max_storage": 4 * MIB, "max_streams": 3, "max_consumers": 5,
                                "max_ack_pending": 100, "memory_max_stream_bytes": -1,
                                "storage_max_stream_bytes": 2 * MIB, "max_bytes_required": True}
    assert b_info["limits"]["max_storage"] == 8 * MIB and b_info["limits"]["max_memory"] == -1


_TOKEN = re.compile(r"eyJ[\w-]+\.[\w-]+\.[\w-]+")


def _payload(token: str) -> dict[str, Any]:
    part = token.split(".")[1]
    body: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return body


def _activations(tokens: dict[str, str]) -> dict[str, str]:
    """The activation tokens the accounts' imports carry, by their account and import."""
    return {f"{name} imports {i['subject']}": i["token"] for name, token in tokens.items()
            for i in _payload(token)["nats"].get("imports", []) if i.get("token")}


def _operator_tests_material(directory: Path) -> dict[str, str]:
    """The JWTs jwt_material makes for the operator-mode tests, by what they are for."""
    (directory / "mode").mkdir()
    test_operator_mode._config(directory / "mode")
    test_operator_accounts._config(directory / "accounts", test_operator_accounts._jwts(), "MEMORY")
    tokens = {f"{path.parent.name}: {_payload(t)['name']}": t for path in sorted(directory.rglob("*"))
              if path.is_file() for t in _TOKEN.findall(path.read_text())}  # their operators and accounts
    tokens |= {f"mode user: {name}": token for name, token in test_operator_mode.JWTS.items()}
    accounts = test_operator_accounts
    tokens |= {f"accounts user: {name}": m.user_jwt(accounts.ACCOUNT_OF[name], key, name)
               for name, key in accounts.USERS.items()}
    tokens |= {"claims: APP (scoped signing key)": test_claims.APP_JWT, "claims: operator": test_claims.OPERATOR}
    issuer, user, server = m.new_key("account"), m.new_key("user"), m.new_key("server")
    granted = m.user_jwt(issuer, user, "alice", nats={"pub": {"allow": ["foo"]}}, aud="APP")
    tokens["callout: response"] = m.authorization_response(issuer, user.public, server.public, user_jwt=granted)
    tokens["callout: refusal"] = m.authorization_response(issuer, user.public, server.public, error="no")
    tokens |= _activations(tokens)
    return tokens


def test_jwt_material_validates_with_nats_io_jwt(tmp_path: Path) -> None:
    tokens = _operator_tests_material(tmp_path)
    verdicts = dict(zip(tokens, _jwtgen("verify", list(tokens.values())), strict=True))
    issues = {name: v.get("decode_error") or [(i["description"], i["time_check"]) for i in v["issues"]]
              for name, v in verdicts.items() if v.get("decode_error") or v["issues"]}
    assert issues == {  # only what the tests make wrong on purpose: nothing else has a validation issue
        "accounts: BADTOKEN": [("activation token import subject \"private.b\" doesn't match import "
                                '"private.y"', False)],
        "accounts: B imports private.z": [("claim is expired", True)],
        "mode user: expired": [("claim is expired", True)],
        "mode user: not_yet": [("claim is not yet valid", True)],
    }
    assert {v["type"] for v in verdicts.values()} == {"operator", "account", "user", "activation",
                                                     "authorization_response"}
    assert len(verdicts) > 30  # the operator-mode tests' material was found
