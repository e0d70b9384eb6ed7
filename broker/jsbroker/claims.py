"""NATS JWTs (decentralized auth): operator, account, user and activation claims, decoded and verified.

A NATS JWT is `header.payload.signature`, each base64url without padding. The header says
`{"typ":"JWT","alg":"ed25519-nkey"}`; the payload holds the standard claims (`jti`, `iat`, `iss`, `sub`,
`name`, `exp`, `nbf`) and a `nats` object whose `type` says which claims they are; the signature is the
issuer's Ed25519 signature of `header.payload`. Who may issue what (nats-io/jwt v2): an operator signs itself,
an account is signed by an operator (or one of its signing keys), a user by an account (or one of its signing
keys, then `issuer_account` names the account). Decoding checks all of that; whether the issuer is *trusted*
(the configured operator, the account's own signing keys) and whether the claims are current are the
caller's questions (`time_issue`, operator_auth.py), as in nats-server.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from .nkeys import NkeyError, public_key, verified
from .subjects import is_subset

ALGORITHMS = ("ed25519-nkey", "ed25519")  # version 2 JWTs, and version 1 ones (nats-server still takes them)
ALL_USERS = "*"  # a revocation of every user issued up to its time
CONNECTION_TYPES = ("STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS", "IN_PROCESS")
NANOSECONDS = 1_000_000_000


class JwtError(ValueError):
    """A token that is not a valid NATS JWT of the expected kind; the message says what is wrong."""


@dataclass(frozen=True)
class SubjectPermission:
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResponsePermission:
    max_msgs: int  # replies allowed per request received
    expires: float  # seconds a reply is allowed for (the JWT says nanoseconds)


@dataclass(frozen=True)
class TimeRange:
    start: str  # "HH:MM:SS"
    end: str


@dataclass(frozen=True)
class UserLimits:
    """A user's limits (-1: unlimited), where it may connect from and when."""

    subs: int = -1
    data: int = -1
    payload: int = -1
    src: tuple[str, ...] = ()  # CIDRs the client's address must be in (empty: anywhere)
    times: tuple[TimeRange, ...] = ()
    locale: str = ""  # the IANA time zone `times` are in (empty: the server's)


@dataclass(frozen=True)
class UserPermissionLimits:
    """What a user JWT (or a scoped signing key's template) grants."""

    pub: SubjectPermission = field(default_factory=SubjectPermission)
    sub: SubjectPermission = field(default_factory=SubjectPermission)
    resp: ResponsePermission | None = None
    limits: UserLimits = field(default_factory=UserLimits)
    bearer_token: bool = False  # no nonce signature needed
    allowed_connection_types: tuple[str, ...] = ()  # empty: any

    @property
    def has_permissions(self) -> bool:
        return bool(self.pub.allow or self.pub.deny or self.sub.allow or self.sub.deny or self.resp)


@dataclass(frozen=True)
class Claims:
    """What every NATS JWT carries; `token` is the JWT itself."""

    token: str = field(repr=False)
    issuer: str
    subject: str
    name: str = ""
    jti: str = ""
    issued_at: int = 0  # unix seconds
    expires: int = 0  # 0: never
    not_before: int = 0


@dataclass(frozen=True)
class OperatorClaims(Claims):
    signing_keys: tuple[str, ...] = ()
    system_account: str = ""
    strict_signing_key_usage: bool = False  # only the signing keys sign accounts, never the operator's own key
    assert_server_version: str = ""
    account_server_url: str = ""


@dataclass(frozen=True)
class UserScope:
    """A scoped signing key: users it signs get the template's permissions and limits, not their own."""

    key: str
    role: str = ""
    template: UserPermissionLimits = field(default_factory=UserPermissionLimits)


@dataclass(frozen=True)
class AccountClaims(Claims):
    signing_keys: dict[str, UserScope | None] = field(default_factory=dict)  # key -> its scope (None: unscoped)
    revocations: dict[str, int] = field(default_factory=dict)  # user key (or "*") -> users issued up to then
    limits: dict[str, Any] = field(default_factory=dict)  # nats-server's operator limits, as the JWT has them
    default_permissions: UserPermissionLimits = field(default_factory=UserPermissionLimits)
    exports: tuple[dict[str, Any], ...] = ()
    imports: tuple[dict[str, Any], ...] = ()
    tags: tuple[str, ...] = ()
    callout_users: tuple[str, ...] = ()  # `authorization.auth_users`: the account delegates to an auth callout

    @property
    def disallow_bearer(self) -> bool:
        return bool(self.limits.get("disallow_bearer", False))


@dataclass(frozen=True)
class UserClaims(Claims):
    permissions: UserPermissionLimits = field(default_factory=UserPermissionLimits)
    issuer_account: str = ""  # the account, when a signing key of it issued the user
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class ActivationClaims(Claims):
    """An account's permission for another account (the subject) to import a private export."""

    import_subject: str = ""
    import_type: str = ""  # "stream" or "service"
    issuer_account: str = ""


# -- decoding ----------------------------------------------------------------------------------------------

def _b64(part: str, what: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise JwtError(f"the JWT's {what} is not base64url") from None


def _json(part: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(_b64(part, what))
    except ValueError:
        raise JwtError(f"the JWT's {what} is not JSON") from None
    if not isinstance(value, dict):
        raise JwtError(f"the JWT's {what} is not a JSON object")
    return value


def _strs(d: dict[str, Any], key: str) -> tuple[str, ...]:
    value = d.get(key) or ()
    if isinstance(value, str):  # older JWTs wrote lists such as `src` comma-separated
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise JwtError(f"{key!r} must be a list of strings")
    return tuple(value)


def _int(d: dict[str, Any], key: str, default: int = 0) -> int:
    value = d.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise JwtError(f"{key!r} must be an integer")
    return value


def _obj(d: dict[str, Any], key: str) -> dict[str, Any]:
    value = d.get(key) or {}
    if not isinstance(value, dict):
        raise JwtError(f"{key!r} must be an object")
    return value


def _subject_permission(d: dict[str, Any], key: str) -> SubjectPermission:
    p = _obj(d, key)
    return SubjectPermission(_strs(p, "allow"), _strs(p, "deny"))


def _permission_limits(d: dict[str, Any]) -> UserPermissionLimits:
    resp = d.get("resp")
    if resp is not None and not isinstance(resp, dict):
        raise JwtError("'resp' must be an object")
    times = d.get("times") or []
    if not isinstance(times, list) or not all(isinstance(t, dict) for t in times):
        raise JwtError("'times' must be a list of {start, end}")
    return UserPermissionLimits(
        pub=_subject_permission(d, "pub"),
        sub=_subject_permission(d, "sub"),
        resp=ResponsePermission(_int(resp, "max"), _int(resp, "ttl") / NANOSECONDS) if resp is not None else None,
        limits=UserLimits(
            subs=_int(d, "subs", -1), data=_int(d, "data", -1), payload=_int(d, "payload", -1),
            src=_strs(d, "src"), times=tuple(TimeRange(str(t.get("start", "")), str(t.get("end", ""))) for t in times),
            locale=str(d.get("times_location", "")),
        ),
        bearer_token=bool(d.get("bearer_token", False)),
        allowed_connection_types=_strs(d, "allowed_connection_types"),
    )


def _signing_keys(nats: dict[str, Any]) -> dict[str, UserScope | None]:
    keys: dict[str, UserScope | None] = {}
    for entry in nats.get("signing_keys") or ():
        if isinstance(entry, str):
            keys[entry] = None
        elif isinstance(entry, dict) and entry.get("kind") == "user_scope" and isinstance(entry.get("key"), str):
            keys[entry["key"]] = UserScope(entry["key"], str(entry.get("role", "")),
                                           _permission_limits(_obj(entry, "template")))
        else:
            raise JwtError(f"signing key {entry!r} is neither a public key nor a user scope")
    return keys


_ISSUERS = {  # who may sign each kind of claims (nats-io/jwt v2's ExpectedPrefixes, in its order)
    "operator": ("operator",), "account": ("account", "operator"), "user": ("account",),
    "activation": ("account", "operator"), "authorization_response": ("account",),
}
_SUBJECTS = {"operator": "operator", "account": "account", "user": "user"}


def _key_kind(key: str, kinds: tuple[str, ...]) -> bytes | None:
    for kind in kinds:
        try:
            return public_key(key, kind)
        except NkeyError:
            continue
    return None


def _verified_payload(token: str) -> dict[str, Any]:
    """The payload of a JWT whose header is NATS' and whose signature is its issuer's, checked in nats-io/jwt's
    order and with its messages (they reach clients' logs and claim update replies)."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise JwtError("expected 3 chunks")
    header = _json(parts[0], "header")
    if str(header.get("typ", "")).upper() != "JWT":
        raise JwtError(f"not supported type {header.get('typ', '')!r}")
    if str(header.get("alg", "")).lower() not in ALGORITHMS:
        raise JwtError(f"unexpected {header.get('alg', '')!r} algorithm")
    payload = _json(parts[1], "payload")
    issuer, subject = payload.get("iss"), payload.get("sub")
    if not isinstance(issuer, str) or not isinstance(subject, str):
        raise JwtError("the JWT has no issuer or subject")
    version = 1 if "type" in payload else _int(_obj(payload, "nats"), "version", 1)
    signed_part = parts[1] if version == 1 else f"{parts[0]}.{parts[1]}"  # version 1 signed the payload only
    key = _key_kind(issuer, ("operator", "account", "user"))
    if key is None or not verified(key, signed_part.encode(), _b64(parts[2], "signature")):
        raise JwtError(f"claim failed V{min(version, 2)} signature verification")
    issuers = _ISSUERS.get(_kind(payload))
    if issuers is not None and _key_kind(issuer, issuers) is None:
        raise JwtError(f"unable to validate expected prefixes - [{' '.join(issuers)}]")
    return payload


def _kind(payload: dict[str, Any]) -> str:
    """The claims' type: version 1 JWTs have it at the top, version 2 in `nats`."""
    return str(payload.get("type") or _obj(payload, "nats").get("type", ""))


def encode(payload: dict[str, Any], sign: Callable[[bytes], bytes]) -> str:
    """A version 2 NATS JWT of `payload` (its `nats` claims get the version): `jti` is the base32 SHA-512/256
    of the claims with an empty jti, as nats-io/jwt makes it; `sign` is the issuer's Ed25519 signer."""
    claims = {"jti": "", **payload}
    claims["nats"] = {**claims.get("nats", {}), "version": 2}
    digest = hashlib.new("sha512_256", json.dumps(claims, separators=(",", ":")).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    header = _b64url(json.dumps({"typ": "JWT", "alg": ALGORITHMS[0]}, separators=(",", ":")).encode())
    body = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    return f"{header}.{body}.{_b64url(sign(f'{header}.{body}'.encode()))}"


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_generic(token: str) -> dict[str, Any]:
    """Any NATS JWT's payload, its signature verified (nats-io/jwt's DecodeGeneric)."""
    return _verified_payload(token)


def decode(token: str, kind: str) -> Claims:
    """The claims of a NATS JWT of `kind` (operator, account, user, activation), with the signature
    verified against the issuer's key; JwtError says what is wrong. Times are not checked here."""
    payload = _verified_payload(token)
    nats = _obj(payload, "nats")
    if _kind(payload) != kind:
        raise JwtError(f"not {kind} claim")
    issuer, subject = payload["iss"], payload["sub"]
    if kind in _SUBJECTS and _key_kind(subject, (_SUBJECTS[kind],)) is None:
        raise JwtError(f"the subject of {kind} claims must be a public {kind} key, not {subject[:8]}...")
    common = dict(token=token.strip(), issuer=issuer, subject=subject, name=str(payload.get("name", "")),
                  jti=str(payload.get("jti", "")), issued_at=_int(payload, "iat"), expires=_int(payload, "exp"),
                  not_before=_int(payload, "nbf"))
    if kind == "operator":
        return OperatorClaims(**common, signing_keys=_strs(nats, "signing_keys"),  # type: ignore[arg-type]
                              system_account=str(nats.get("system_account", "")),
                              strict_signing_key_usage=bool(nats.get("strict_signing_key_usage", False)),
                              assert_server_version=str(nats.get("assert_server_version", "")),
                              account_server_url=str(nats.get("account_server_url", "")))
    if kind == "account":
        revocations = _obj(nats, "revocations")
        return AccountClaims(**common, signing_keys=_signing_keys(nats),  # type: ignore[arg-type]
                             revocations={k: _int(revocations, k) for k in revocations},
                             limits=_obj(nats, "limits"), default_permissions=_permission_limits(
                                 _obj(nats, "default_permissions")),
                             exports=tuple(nats.get("exports") or ()), imports=tuple(nats.get("imports") or ()),
                             tags=_strs(nats, "tags"), callout_users=_strs(_obj(nats, "authorization"), "auth_users"))
    if kind == "user":
        return UserClaims(**common, permissions=_permission_limits(nats),  # type: ignore[arg-type]
                          issuer_account=str(nats.get("issuer_account", "")), tags=_strs(nats, "tags"))
    return ActivationClaims(**common, import_subject=str(nats.get("subject", "")),  # type: ignore[arg-type]
                            import_type=str(nats.get("kind", "")), issuer_account=str(nats.get("issuer_account", "")))


def decode_operator(token: str) -> OperatorClaims:
    claims = decode(token, "operator")
    assert isinstance(claims, OperatorClaims)
    return claims


def decode_account(token: str) -> AccountClaims:
    claims = decode(token, "account")
    assert isinstance(claims, AccountClaims)
    return claims


def decode_user(token: str) -> UserClaims:
    claims = decode(token, "user")
    assert isinstance(claims, UserClaims)
    return claims


def decode_activation(token: str) -> ActivationClaims:
    claims = decode(token, "activation")
    assert isinstance(claims, ActivationClaims)
    return claims


def time_issue(claims: Claims, now: float) -> str | None:
    """Why claims are not valid at `now` (unix seconds), in nats-io/jwt's words, or None."""
    if claims.expires and int(now) > claims.expires:
        return "claim is expired"
    if claims.not_before and claims.not_before > int(now):
        return "claim is not yet valid"
    return None


def _subject_issues(subject: str) -> list[str]:
    """nats-io/jwt's Subject.Validate."""
    if not subject:
        return ["subject cannot be empty"]
    issues = []
    if " " in subject:
        issues.append(f"subject {json.dumps(subject)} cannot have spaces")
    if subject[0] == "." or subject[-1] == ".":
        issues.append(f"subject {json.dumps(subject)} cannot start or end with a `.`")
    if ".." in subject:
        issues.append(f"subject {json.dumps(subject)} cannot contain consecutive `.`")
    return issues


def _permission_issues(rules: SubjectPermission, queues: bool) -> list[str]:
    issues = []
    for subject in (*rules.allow, *rules.deny):
        tokens = subject.split(" ")
        if len(tokens) > 2:
            issues.append(f'Permission Subject "{subject}" contains too many spaces')
            continue
        for token in tokens:
            issues += _subject_issues(token)
        if len(tokens) == 2 and not queues:
            issues.append(f'Permission Subject "{subject}" is not allowed to contain queue')
    return issues


def _is_cidr(text: str) -> bool:
    import ipaddress

    try:
        return "/" in text and ipaddress.ip_network(text, strict=False) is not None
    except ValueError:
        return False


def _is_clock(text: str) -> bool:
    import datetime

    try:
        datetime.datetime.strptime(text, "%H:%M:%S")
    except ValueError:
        return False
    return True


def user_issues(user: UserClaims, now: float) -> list[str]:
    """What nats-io/jwt's UserClaims.Validate finds, in its order (nats-server refuses a user with any)."""
    issues = [issue for issue in (time_issue(user, now),) if issue]
    grant = user.permissions
    issues += _permission_issues(grant.sub, True) + _permission_issues(grant.pub, False)
    issues += [f"invalid cidr {json.dumps(c)} in user src limits" for c in grant.limits.src if not _is_cidr(c)]
    for r in grant.limits.times:
        for what, value in (("start", r.start), ("end", r.end)):
            if not value:
                issues.append(f"time ranges {what} must contain {'a start' if what == 'start' else 'an end'}")
            elif not _is_clock(value):
                issues.append(f"{what} in time range is invalid {json.dumps(value)}")
    if grant.limits.locale:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(grant.limits.locale)
        except (ZoneInfoNotFoundError, ValueError):
            issues.append(f"could not parse iana time zone by name: unknown time zone {grant.limits.locale}")
    if user.issuer_account and _key_kind(user.issuer_account, ("account",)) is None:
        issues.append("account_id is not an account public key")
    return issues


def import_issues(account: AccountClaims) -> list[str]:
    """What nats-io/jwt's Import.Validate finds wrong with the activation tokens of the account's imports
    (nats-server refuses an account JWT with any; an expired token only leaves its import out)."""
    issues = []
    for imp in account.imports:
        token, subject = imp.get("token"), str(imp.get("subject", ""))
        if not token:
            continue
        try:
            act = decode_activation(str(token))
        except JwtError:
            issues.append(f"import {json.dumps(subject)} contains an invalid activation token")
            continue
        if imp.get("account") not in (act.issuer, act.issuer_account):
            issues.append(f"activation token doesn't match account for import {json.dumps(subject)}")
        if act.subject != account.subject:
            issues.append(f"activation token doesn't match account it is being included in, {json.dumps(subject)}")
        if act.import_type != imp.get("type"):
            issues.append(f"mismatch between token import type {act.import_type} and type of import {imp.get('type')}")
        contained = str(imp.get("to") or subject) if imp.get("type") == "service" else subject
        if not act.import_subject or not is_subset(contained, act.import_subject):
            issues.append(f"activation token import subject {json.dumps(act.import_subject)} doesn't match import "
                          f"{json.dumps(subject)}")
    return issues


def is_revoked(revocations: dict[str, int], user: str, issued_at: int) -> bool:
    """nats-server's isRevoked: a user issued at or before its revocation's time (or the all-users one)."""
    for key in (ALL_USERS, user):
        revoked_at = revocations.get(key)
        if revoked_at is not None and issued_at <= revoked_at:
            return True
    return False
