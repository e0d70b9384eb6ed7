"""Operator mode's CONNECT: a user JWT and the nonce's signature, checked as nats-server 2.15.1 does.

`authenticate_user` follows nats-server's processClientOrLeafAuthentication step by step (the order decides
which reason is logged): the user JWT decodes and is current; its account (the issuer, or `issuer_account`
for a signing key) resolves to an account JWT that the operator (or one of its signing keys) signed and
that is current; the user's issuer is the account or one of its signing keys (a scoped key replaces the
user's permissions by its template); bearer tokens are allowed by the account; the connection type is
allowed; the nonce is signed by the user's key (unless a bearer token); the user is not revoked; the
client's address is in `src`; the time is within `times`. A refusal carries the reason nats-server logs
(at debug level, except the two it logs as errors) and the client gets `-ERR 'Authorization Violation'`.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from .claims import (CONNECTION_TYPES, AccountClaims, JwtError, OperatorClaims, UserClaims, UserLimits,
                     UserPermissionLimits, decode_account, decode_user, import_issues, is_revoked, time_issue,
                     user_issues)
from .config import Permissions, SubjectRules
from .nkeys import NkeyError, user_public_key, verified

DEFAULT_RESPONSE_MAX = 1  # nats-server's DEFAULT_ALLOW_RESPONSE_MAX_MSGS
DEFAULT_RESPONSE_EXPIRES = 120.0  # and DEFAULT_ALLOW_RESPONSE_EXPIRATION (2 minutes)


def trusted_keys(operator: OperatorClaims) -> frozenset[str]:
    """The keys that may sign accounts: the operator's signing keys, and its own key unless it is strict."""
    own = () if operator.strict_signing_key_usage else (operator.subject,)
    return frozenset((*own, *operator.signing_keys))


@dataclass(frozen=True)
class JwtUser:
    """An authenticated operator-mode user: the account it belongs to, its permissions and limits."""

    account: str  # the account's public key (its name in nats-server)
    account_name: str  # the account JWT's `name`
    user: str  # the user's public key
    name: str
    permissions: Permissions | None
    limits: UserLimits = field(default_factory=UserLimits)
    expires: int = 0  # unix seconds; 0: never (the user JWT's `exp`)
    tags: tuple[str, ...] = ()
    issuer: str = ""  # who signed the user JWT: the account or one of its signing keys
    account_issuer: str = ""  # who signed the account JWT: the operator or one of its signing keys
    account_tags: tuple[str, ...] = ()

    @property
    def log_line(self) -> str:
        """nats-server's debug line for an admitted user (without its last words, a Go pointer)."""
        def tags(t: tuple[str, ...]) -> str:
            return "[" + " ".join(f'"{x}"' for x in t) + "]"
        return (f'Authenticated JWT: Client "{self.user}" (claim-name: "{self.name}", claim-tags: {tags(self.tags)}) '
                f'signed with "{self.issuer}" by Account "{self.account}" (claim-name: "{self.account_name}", '
                f'claim-tags: {tags(self.account_tags)}) signed with "{self.account_issuer}" has mappings false')


@dataclass(frozen=True)
class Refusal:
    """Why a user was refused: nats-server's log line and its level."""

    reason: str
    level: str = "debug"  # "debug", "error", or "none" (the reason was a note already)
    warning: str = ""  # a server-wide warning nats-server logs first (without the client's prefix)


def permissions_of(grant: UserPermissionLimits) -> Permissions | None:
    """nats-server's buildPermissionsFromJwt + validateResponsePermissions: None when nothing is set."""
    pub = SubjectRules(grant.pub.allow or None, grant.pub.deny) if grant.pub.allow or grant.pub.deny else None
    sub = SubjectRules(grant.sub.allow or None, grant.sub.deny) if grant.sub.allow or grant.sub.deny else None
    if grant.resp is None:
        return Permissions(pub, sub) if pub or sub else None
    if pub is None or pub.allow is None:  # answering requests only: everything else is denied
        pub = SubjectRules(allow=(), deny=pub.deny if pub else ())
    return Permissions(pub, sub, grant.resp.max_msgs or DEFAULT_RESPONSE_MAX,
                       grant.resp.expires or DEFAULT_RESPONSE_EXPIRES)


def _template(scope_grant: UserPermissionLimits, user: UserClaims, account: AccountClaims) -> UserPermissionLimits:
    """A scoped key's template with the user's own subject-independent values filled in ({{name()}} ...)."""
    values = {"{{name()}}": user.name, "{{subject()}}": user.subject, "{{account-name()}}": account.name,
              "{{account-subject()}}": account.subject}

    def fill(subjects: tuple[str, ...]) -> tuple[str, ...]:
        out = []
        for s in subjects:
            for k, v in values.items():
                s = s.replace(k, v)
            out.append(s)
        return tuple(out)

    pub, sub = scope_grant.pub, scope_grant.sub
    return UserPermissionLimits(type(pub)(fill(pub.allow), fill(pub.deny)), type(sub)(fill(sub.allow), fill(sub.deny)),
                                scope_grant.resp, scope_grant.limits, scope_grant.bearer_token,
                                scope_grant.allowed_connection_types)


def _in_src(limits: UserLimits, host: str) -> bool:
    if not limits.src:
        return True
    try:
        ip = ipaddress.ip_address(host)
        return any(ip in ipaddress.ip_network(cidr, strict=False) for cidr in limits.src)
    except ValueError:
        return False


def _in_times(limits: UserLimits, now: float) -> bool:
    """nats-server's validateTimes: within one of the day's ranges (a range may cross midnight)."""
    if not limits.times:
        return True
    if limits.locale:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            moment = datetime.fromtimestamp(now, ZoneInfo(limits.locale))
        except (ZoneInfoNotFoundError, ValueError):
            return False
    else:
        moment = datetime.fromtimestamp(now).astimezone()
    for r in limits.times:
        try:
            start = datetime.combine(moment.date(), datetime.strptime(r.start, "%H:%M:%S").time(), moment.tzinfo)
            end = datetime.combine(moment.date(), datetime.strptime(r.end, "%H:%M:%S").time(), moment.tzinfo)
        except ValueError:
            return False
        if start < moment < end or start > end and (moment < end or moment > start):  # 22:00-06:00 crosses
            return True
    return False


def _signature_bytes(text: str) -> bytes | None:
    """Go's base64.RawURLEncoding, else StdEncoding (what nats-server tries), strictly."""
    try:
        if "=" not in text:
            return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        pass
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _no_note(line: str) -> None:
    pass


def authenticate_user(operator: OperatorClaims, fetch: Callable[[str], str | None], opts: dict[str, Any], nonce: str,
                      connection_type: str, host: str, now: float,
                      note: Callable[[str], None] = _no_note) -> JwtUser | Refusal:
    """CONNECT's `jwt` and `sig` (opts) checked against the operator, the account (`fetch`: the resolver's
    account JWT by public key) and the nonce sent in INFO; `connection_type` is one of CONNECTION_TYPES.
    `note` gets the debug lines nats-server writes on the way without deciding anything."""
    token = opts.get("jwt")
    if not isinstance(token, str) or not token:
        return Refusal("Authentication requires a user JWT")
    try:
        user = decode_user(token)
    except JwtError as e:
        return Refusal(f"User JWT not valid: {e}")
    issues = user_issues(user, now)
    if issues:  # Go's %+v of the validation results
        return Refusal(f"User JWT no longer valid: &{{Issues:[{' '.join(issues)}]}}")
    account_key = user.issuer_account or user.issuer
    found = fetch(account_key)
    if found is None:
        return Refusal("Account JWT lookup error: account missing", warning="Account fetch failed: account missing")
    try:
        account = decode_account(found)
    except JwtError as e:
        return Refusal(f"Account JWT lookup error: {e}")
    if account.subject != account_key or time_issue(account, now) is not None or import_issues(account):
        return Refusal("Account JWT lookup error: account validation failed")
    if account.issuer not in trusted_keys(operator):
        return Refusal("Account JWT not signed by trusted operator")
    if account.callout_users:
        return Refusal(f"account {account.subject} delegates its users to an auth callout (its JWT's authorization), "
                       "which jsbroker does not do in operator mode yet: remove it, or use a config-mode auth_callout",
                       "error")
    signers = dict(account.signing_keys)
    if not operator.strict_signing_key_usage:
        signers[account.subject] = None
    if user.issuer not in signers:
        return Refusal("User JWT issuer is not known")
    grant = user.permissions
    scope = signers[user.issuer]
    if scope is not None:
        if grant.has_permissions or grant.limits != UserLimits() or grant.bearer_token or grant.allowed_connection_types:
            return Refusal("User JWT is not valid: scoped users require no permissions or limits set")
        grant = _template(scope.template, user, account)
    if grant.bearer_token and account.disallow_bearer:
        return Refusal("Account does not allow bearer tokens")
    types = [t.upper() for t in grant.allowed_connection_types]
    known = [t for t in types if t in CONNECTION_TYPES]
    unknown = [t for t in types if t not in CONNECTION_TYPES]
    if unknown:  # Go's %q of a string slice
        note("invalid connection types [" + " ".join(json.dumps(t) for t in unknown) + "]")
        if not known:
            return Refusal("", "none")  # nats-server logs nothing more: the note said why
    if known and connection_type not in known:
        return Refusal("Connection type not allowed")
    if not grant.bearer_token:
        signature = opts.get("sig")
        if not isinstance(signature, str) or not signature:
            return Refusal("Signature missing")
        raw = _signature_bytes(signature)
        if raw is None:
            return Refusal("Signature not valid base64")
        try:
            key = user_public_key(user.subject)
        except NkeyError as e:
            return Refusal(f"User nkey not valid: {e}")
        if not verified(key, nonce.encode(), raw):
            return Refusal("Signature not verified")
    if is_revoked(account.revocations, user.subject, user.issued_at):
        return Refusal("User authentication revoked")
    if not _in_src(grant.limits, host):
        return Refusal(f"Bad src Ip {host}", "error")
    if not _in_times(grant.limits, now):
        return Refusal("Outside connect times", "error")
    permissions = permissions_of(grant)
    if permissions is None:
        permissions = permissions_of(account.default_permissions)
    admitted = JwtUser(account.subject, account.name, user.subject, user.name, permissions, grant.limits,
                       user.expires, user.tags, user.issuer, account.issuer, account.tags)
    why = unenforced(admitted, account)
    return admitted if why is None else Refusal(why, "error")


_UNLIMITED = -1


def unenforced(user: JwtUser, account: AccountClaims) -> str | None:
    """A limit of the user or account JWT that jsbroker does not enforce yet: such users are refused, never
    admitted with the limit ignored."""
    for what, value in (("subs", user.limits.subs), ("data", user.limits.data)):
        if value != _UNLIMITED:
            return f"the user JWT limits {what} to {value}, which jsbroker does not enforce yet; issue it with -1"
    for what in ("subs", "data", "payload", "conn"):
        value = account.limits.get(what, _UNLIMITED)
        if value != _UNLIMITED:
            return (f"the account JWT limits {what} to {value}, which jsbroker does not enforce yet; "
                    "set it to -1 (unlimited)")
    return None

