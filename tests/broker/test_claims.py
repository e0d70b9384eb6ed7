"""The pure pieces of operator mode, without a server: JWT decoding (claims.py), .creds files (creds.py),
CONNECT's checks (operator_auth.py), the directory resolver (resolvers.py) and the config settings. What a
client sees is compared with nats-server in test_operator_mode.py; here each reason and error is pinned."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest

from jsbroker import claims
from jsbroker.config import ConfigError, SubjectRules, load_file
from jsbroker.creds import CredsError, decorated_jwt, parse_creds
from jsbroker.config import AccountLimits, Import
from jsbroker.operator_accounts import account_settings, jetstream_limits
from jsbroker.operator_auth import JwtUser, Refusal, authenticate_user, permissions_of
from jsbroker.resolvers import DirResolver
from tests.broker import jwt_material as m

OP, SYS, APP, SCOPED = m.new_key("operator"), m.new_key("account"), m.new_key("account"), m.new_key("account")
USER = m.new_key("user")
NOW = time.time()
APP_JWT = m.account_jwt(OP, APP, "APP", signing_keys=[{"kind": "user_scope", "key": SCOPED.public, "role": "r",
                                                       "template": {"pub": {"allow": ["{{name()}}.>"]}, "sub": {},
                                                                    "subs": -1, "data": -1, "payload": -1}}])


def _tamper(token: str, **payload_changes: Any) -> str:
    header, payload, sig = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body.update(payload_changes)
    return f"{header}.{base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip('=')}.{sig}"


@pytest.mark.parametrize("token,error", [
    ("a.b", "expected 3 chunks"),
    (base64.urlsafe_b64encode(b'{"typ":"JOSE","alg":"ed25519-nkey"}').decode() + ".e30.AA", "not supported type 'JOSE'"),
    (base64.urlsafe_b64encode(b'{"typ":"JWT","alg":"HS256"}').decode() + ".e30.AA", "unexpected 'HS256' algorithm"),
    (_tamper(m.user_jwt(APP, USER, "u"), name="mallory"), "claim failed V2 signature verification"),
    (m.user_jwt(OP, USER, "u"), "unable to validate expected prefixes - [account]"),  # a user the operator signed
    (m.account_jwt(OP, APP, "APP"), "not user claim"),
], ids=["chunks", "type", "algorithm", "signature", "issuer", "kind"])
def test_decode_refuses_what_nats_io_jwt_refuses(token: str, error: str) -> None:
    with pytest.raises(claims.JwtError) as e:
        claims.decode_user(token)
    assert str(e.value) == error


def test_user_claims_decoded_into_typed_values() -> None:
    token = m.user_jwt(APP, USER, "u", nats={
        "pub": {"allow": ["a.>"], "deny": ["a.b"]}, "resp": {"max": 3, "ttl": 2_000_000_000}, "src": "10.0.0.0/8, 1.2.3.4/32",
        "times": [{"start": "08:00:00", "end": "17:00:00"}], "times_location": "UTC", "bearer_token": True,
        "allowed_connection_types": ["STANDARD"], "tags": ["t"]}, exp=int(NOW) + 60)
    user = claims.decode_user(token)
    assert (user.subject, user.issuer, user.name, user.expires, user.tags) == (USER.public, APP.public, "u",
                                                                                int(NOW) + 60, ("t",))
    grant = user.permissions
    assert grant.pub == claims.SubjectPermission(("a.>",), ("a.b",))
    assert grant.resp == claims.ResponsePermission(3, 2.0)
    assert grant.limits.src == ("10.0.0.0/8", "1.2.3.4/32")  # older JWTs' comma-separated form
    assert grant.limits.times == (claims.TimeRange("08:00:00", "17:00:00"),) and grant.limits.locale == "UTC"
    assert grant.bearer_token and grant.allowed_connection_types == ("STANDARD",)


def test_account_and_operator_claims() -> None:
    account = claims.decode_account(APP_JWT)
    scope = account.signing_keys[SCOPED.public]
    assert scope is not None and scope.role == "r" and scope.template.pub.allow == ("{{name()}}.>",)
    operator = claims.decode_operator(m.operator_jwt(OP, system_account=SYS.public, strict_signing_key_usage=True))
    assert operator.system_account == SYS.public and operator.strict_signing_key_usage


def test_times_and_revocations() -> None:
    token = claims.decode_user(m.user_jwt(APP, USER, "u", exp=100, nbf=50))
    assert [claims.time_issue(token, t) for t in (40, 60, 101)] == [
        "claim is not yet valid", None, "claim is expired"]
    assert claims.is_revoked({USER.public: 10}, USER.public, 10)
    assert not claims.is_revoked({USER.public: 10}, USER.public, 11)
    assert claims.is_revoked({"*": 20}, USER.public, 11)


def test_user_issues_as_nats_io_jwt_words_them() -> None:
    user = claims.decode_user(m.user_jwt(APP, USER, "u", issuer_account="nope", exp=10, nats={
        "pub": {"allow": ["a..b", "q g"]}, "sub": {"deny": ["x y z"]}, "src": ["10.0.0.1", "10.0.0.0/8"],
        "times": [{"start": "25:00:00", "end": ""}], "times_location": "Mars/Base"}))
    assert claims.user_issues(user, NOW) == [
        "claim is expired", 'Permission Subject "x y z" contains too many spaces',
        'subject "a..b" cannot contain consecutive `.`', 'Permission Subject "q g" is not allowed to contain queue',
        'invalid cidr "10.0.0.1" in user src limits', 'start in time range is invalid "25:00:00"',
        "time ranges end must contain an end", "could not parse iana time zone by name: unknown time zone Mars/Base",
        "account_id is not an account public key"]


# -- creds ---------------------------------------------------------------------------------------------------

def test_creds_and_decorated_files() -> None:
    token = m.user_jwt(APP, USER, "u")
    parsed = parse_creds(m.creds(token, USER))
    assert (parsed.jwt, parsed.seed) == (token, USER.seed)
    assert USER.seed not in repr(parsed)
    assert decorated_jwt(f"-----BEGIN NATS OPERATOR JWT-----\n{token}\n------END NATS OPERATOR JWT------\n") == token
    assert decorated_jwt(f"  {token}\n") == token
    with pytest.raises(CredsError, match="two blocks"):
        parse_creds(f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n")
    with pytest.raises(CredsError, match="no JWT found"):
        decorated_jwt("hello")


# -- CONNECT's checks ----------------------------------------------------------------------------------------

def _auth(token: str, account_jwt: str = APP_JWT, sign: bool = True, host: str = "127.0.0.1",
          now: float = NOW, **operator: Any) -> JwtUser | Refusal:
    nonce = "abc"
    opts = {"jwt": token, "sig": base64.urlsafe_b64encode(USER.sign(nonce.encode())).decode().rstrip("=") if sign else ""}
    op = claims.decode_operator(m.operator_jwt(OP, **operator))
    return authenticate_user(op, {APP.public: account_jwt}.get, opts, nonce, "STANDARD", host, now)


def test_scoped_signing_key_gives_its_template() -> None:
    result = _auth(m.user_jwt(SCOPED, USER, "bob", issuer_account=APP.public))
    assert isinstance(result, JwtUser) and result.account == APP.public
    assert result.permissions is not None and result.permissions.publish == SubjectRules(allow=("bob.>",))
    own = _auth(m.user_jwt(SCOPED, USER, "bob", issuer_account=APP.public, nats={"pub": {"allow": [">"]}}))
    assert own == Refusal("User JWT is not valid: scoped users require no permissions or limits set")


@pytest.mark.parametrize("times,hour,admitted", [
    ([{"start": "08:00:00", "end": "17:00:00"}], 12, True),
    ([{"start": "08:00:00", "end": "17:00:00"}], 18, False),
    ([{"start": "22:00:00", "end": "06:00:00"}], 23, True),
    ([{"start": "22:00:00", "end": "06:00:00"}], 3, True),
    ([{"start": "22:00:00", "end": "06:00:00"}], 12, False),
])
def test_connect_times(times: list[dict[str, str]], hour: int, admitted: bool) -> None:
    now = time.mktime(time.strptime(f"2026-06-01 {hour:02d}:30:00", "%Y-%m-%d %H:%M:%S"))
    result = _auth(m.user_jwt(APP, USER, "u", nats={"times": times}), now=now)
    assert isinstance(result, JwtUser) == admitted, result
    assert admitted or result == Refusal("Outside connect times", "error")


@pytest.mark.parametrize("nats,account_limits,reason", [
    ({}, {}, None),
    ({"src": ["10.0.0.0/8"]}, {}, Refusal("Bad src Ip 127.0.0.1", "error")),
    ({"allowed_connection_types": ["MQTT_NEW"]}, {}, Refusal("", "none")),  # noted: "invalid connection types"
    ({"subs": 10}, {}, Refusal("the user JWT limits subs to 10, which jsbroker does not enforce yet; issue it with "
                               "-1", "error")),
    ({}, {"conn": 5}, Refusal("the account JWT limits conn to 5, which jsbroker does not enforce yet; set it to -1 "
                              "(unlimited)", "error")),
])
def test_refusal_reasons(nats: dict[str, Any], account_limits: dict[str, Any], reason: Refusal | None) -> None:
    result = _auth(m.user_jwt(APP, USER, "u", nats=nats), m.account_jwt(OP, APP, "APP", limits=account_limits))
    assert (None if isinstance(result, JwtUser) else result) == reason


def test_strict_operator_refuses_accounts_its_own_key_signed() -> None:
    assert _auth(m.user_jwt(APP, USER, "u"), strict_signing_key_usage=True) == Refusal(
        "Account JWT not signed by trusted operator")


def test_response_permissions_default_and_deny_other_publishing() -> None:
    grant = claims.decode_user(m.user_jwt(APP, USER, "u", nats={"resp": {"max": 0, "ttl": 0}})).permissions
    perms = permissions_of(grant)
    assert perms is not None and (perms.publish, perms.response_max, perms.response_expires) == (
        SubjectRules(allow=()), 1, 120.0)
    assert permissions_of(claims.UserPermissionLimits()) is None


def test_account_jwt_jetstream_limits() -> None:
    """JetStream is on when memory or disk storage is not 0 (nats-io/jwt's IsJSEnabled); unset pending and
    stream bytes limits are unlimited (-1, as nats-server reports them); tiered limits give their R1 tier."""
    assert jetstream_limits(m.UNLIMITED) is None
    assert jetstream_limits({"tiered_limits": {"R3": {"mem_storage": -1}}}) is None
    assert jetstream_limits({"disk_storage": 1024, "streams": 2}) == AccountLimits(
        max_mem=0, max_file=1024, max_streams=2, max_consumers=0, max_ack_pending=-1)
    tiered = {"tiered_limits": {"R1": {"mem_storage": -1, "max_bytes_required": True}}}
    assert jetstream_limits(tiered) == AccountLimits(max_mem=-1, max_file=0, max_streams=0, max_consumers=0,
                                                     max_bytes_required=True, tier="R1")


def test_account_jwt_imports_and_exports() -> None:
    """`local_subject`, or in older JWTs `to`: a stream's prefix, a service's subject in the exporter."""
    token = m.account_jwt(OP, APP, "APP", imports=[
        {"subject": "a.>", "account": SYS.public, "local_subject": "b.>", "type": "stream"},
        {"subject": "ev", "account": SYS.public, "to": "pre", "type": "stream"},
        {"subject": "local", "account": SYS.public, "to": "remote", "type": "service"},
        {"subject": "bad subject", "account": SYS.public, "type": "service"},
        {"subject": "x", "account": SYS.public, "type": "neither"},
    ], exports=[{"subject": "svc", "type": "service", "response_type": "Stream", "response_threshold": 5 * 10**9},
                {"subject": "priv.>", "type": "stream", "token_req": True}])
    settings, wanted = account_settings(claims.decode_account(token))
    assert [w.imp for w in wanted] == [Import(SYS.public, "a.>", "b.>", False),
                                       Import(SYS.public, "ev", "pre.ev", False),
                                       Import(SYS.public, "remote", "local", True)]
    assert [(e.subject, e.service, e.accounts, e.response_type, e.response_threshold) for e in settings.exports] == [
        ("svc", True, None, "stream", 5.0), ("priv.>", False, (), "singleton", 120.0)]


# -- the directory resolver ----------------------------------------------------------------------------------

def test_dir_resolver_limit_preload_and_delete(tmp_path: Path) -> None:
    resolver = DirResolver(tmp_path / "jwt", allow_delete=True, limit=1)
    resolver.store(APP.public, APP_JWT)
    with pytest.raises(ValueError, match="jwt store is full"):
        resolver.store(SYS.public, m.account_jwt(OP, SYS, "SYS"))
    older = m.account_jwt(OP, APP, "OLD", iat=int(NOW) - 100)
    resolver.store_if_newer(APP.public, older)  # the directory's JWT is newer: kept
    assert resolver.fetch(APP.public) == APP_JWT
    resolver.delete(APP.public)
    assert resolver.accounts() == [] and (tmp_path / "jwt" / f"{APP.public}.jwt.deleted").exists()
    assert resolver.fetch("not a key") is None


# -- config --------------------------------------------------------------------------------------------------

def _load(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "s.conf"
    path.write_text(text)
    return load_file(path)


OPERATOR = m.operator_jwt(OP, system_account=SYS.public)


@pytest.mark.parametrize("text,error", [
    (f"operator: {OPERATOR}\n", "operators require an account resolver to be configured"),
    (f"operator: {OPERATOR}\nresolver: MEMORY\nsystem_account: {APP.public}\n",
     "system_account in config and operator JWT must be identical"),
    (f"operator: {m.operator_jwt(OP)}\nresolver {{ type: full, dir: /tmp/x }}\n",
     "the system account needs to be specified in configuration or the operator jwt"),
    (f"operator: {OPERATOR}\nresolver: URL(http://x)\n", "jsbroker has resolver MEMORY or a block"),
    (f"operator: {OPERATOR}\nresolver {{ type: cache, dir: /tmp/x }}\n", "type 'cache' is not supported"),
    (f"operator: {OPERATOR}\nresolver: MEMORY\nresolver_preload {{ {SYS.public}: {APP_JWT} }}\n",
     "the JWT is account"),
    (f"operator: {OPERATOR}\nresolver: MEMORY\nauthorization {{ users [{{user: a, password: b}}] }}\n",
     "operators do not allow users to be configured directly"),
    (f"operator: {OPERATOR}\nresolver: MEMORY\njetstream {{ account {{ max_streams: 3 }} }}\n",
     "in operator mode each account's come from its account JWT"),
    (f"operator: {APP_JWT}\nresolver: MEMORY\n", "is not an operator JWT"),
    ("operator: /does/not/exist.jwt\nresolver: MEMORY\n", "cannot read /does/not/exist.jwt"),
    (f"resolver: MEMORY\nsystem_account: {SYS.public}\n", "given without operator"),
], ids=["no resolver", "system mismatch", "full without system", "url resolver", "cache resolver",
        "preload key mismatch", "users", "global jetstream limits", "not operator", "missing file", "no operator"])
def test_config_errors(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    assert error in str(e.value)


def test_config_operator_from_a_decorated_file(tmp_path: Path) -> None:
    (tmp_path / "op.jwt").write_text(f"-----BEGIN NATS OPERATOR JWT-----\n{OPERATOR}\n------END NATS OPERATOR JWT------\n")
    cfg = _load(tmp_path, f"operator: {tmp_path / 'op.jwt'}\nresolver: MEMORY\nresolver_preload {{\n"
                          f"  {APP.public}: {APP_JWT}\n}}\n")
    settings = cfg.auth.operator
    assert settings is not None and cfg.auth.required and cfg.auth.nkeys
    assert (settings.operator.subject, settings.system_account, settings.resolver, settings.preload) == (
        OP.public, SYS.public, "MEMORY", ((APP.public, APP_JWT),))
