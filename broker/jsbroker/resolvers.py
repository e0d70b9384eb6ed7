"""Account resolvers: where operator mode finds an account's JWT by its public key.

- `MemoryResolver` (`resolver: MEMORY`): the JWTs of `resolver_preload`, fixed at start.
- `DirResolver` (`resolver { type: full, dir: ... }`): one file per account, `<public key>.jwt`, in a
  directory (nats-server's DirJWTStore without sharding), kept current by `nsc push`'s requests to the
  system account. `claims_request` answers those requests as nats-server's full resolver does: it takes the
  subject and payload and returns the reply payload (plus a log line), so it is wired to the system account
  wherever that lives; it does no I/O beyond the resolver's own files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from .claims import JwtError, decode_account, decode_generic, import_issues
from .config import OperatorSettings
from .nkeys import is_public_key

CLAIMS_UPDATE = "$SYS.REQ.CLAIMS.UPDATE"
CLAIMS_LIST = "$SYS.REQ.CLAIMS.LIST"
CLAIMS_DELETE = "$SYS.REQ.CLAIMS.DELETE"
ACCOUNT_CLAIMS_PREFIX = "$SYS.REQ.ACCOUNT."  # + <account>.CLAIMS.UPDATE / .CLAIMS.LOOKUP
CLAIMS_SUBJECTS = (CLAIMS_UPDATE, CLAIMS_LIST, CLAIMS_DELETE, "$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE",
                   "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP", "$SYS.ACCOUNT.*.CLAIMS.UPDATE")


class Resolver(Protocol):
    def fetch(self, account: str) -> str | None:
        """The account's JWT, or None when the resolver has none."""

    def accounts(self) -> list[str]:
        """The public keys of every account the resolver holds."""


class MemoryResolver:
    """`resolver: MEMORY`: the preloaded JWTs, by account public key."""

    def __init__(self, preload: dict[str, str]) -> None:
        self._jwts = dict(preload)

    def fetch(self, account: str) -> str | None:
        return self._jwts.get(account)

    def accounts(self) -> list[str]:
        return sorted(self._jwts)

    def update(self, account: str, token: str) -> None:
        """A pushed JWT of an account in use: the connections that follow get its claims."""
        self._jwts[account] = token


class DirResolver:
    """`resolver { type: full, dir: ... }`: `<dir>/<account>.jwt`, written by claim updates."""

    def __init__(self, directory: Path, allow_delete: bool = False, hard_delete: bool = False,
                 limit: int = 1000) -> None:
        self.directory = Path(directory)
        self.allow_delete = allow_delete
        self.hard_delete = hard_delete
        self.limit = limit

    def _path(self, account: str) -> Path | None:
        return self.directory / f"{account}.jwt" if is_public_key(account, "account") else None

    def fetch(self, account: str) -> str | None:
        path = self._path(account)
        try:
            return path.read_text() if path is not None else None
        except FileNotFoundError:
            return None

    def accounts(self) -> list[str]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(n[:-4] for n in names if n.endswith(".jwt") and is_public_key(n[:-4], "account"))

    def store(self, account: str, token: str) -> None:
        path = self._path(account)
        if path is None:
            raise ValueError("invalid public key")
        self.directory.mkdir(parents=True, exist_ok=True)
        if not path.exists() and len(self.accounts()) >= self.limit:
            raise ValueError("jwt store is full")
        temp = path.with_suffix(".jwt.tmp")  # a crash mid-write leaves the old JWT, never half a new one
        temp.write_text(token)
        os.replace(temp, path)

    def store_if_newer(self, account: str, token: str) -> None:
        """resolver_preload's JWTs at start: kept unless the directory has a newer one (nats-server's saveIfNewer)."""
        found = self.fetch(account)
        if found is not None:
            try:
                old, new = decode_account(found), decode_account(token)
            except JwtError:
                pass  # an unreadable file is replaced
            else:
                if old.jti == new.jti or old.issued_at > new.issued_at:
                    return
        self.store(account, token)

    def delete(self, account: str) -> None:
        path = self._path(account)
        if path is None:
            return
        try:
            path.unlink() if self.hard_delete else os.replace(path, path.with_name(path.name + ".deleted"))
        except FileNotFoundError:
            pass


def resolver_for(settings: OperatorSettings) -> MemoryResolver | DirResolver:
    if settings.resolver == "full":
        assert settings.resolver_dir is not None
        resolver = DirResolver(settings.resolver_dir, settings.allow_delete, settings.hard_delete,
                               settings.resolver_limit)
        for account, token in settings.preload:  # nats-server stores them in the directory at start
            resolver.store_if_newer(account, token)
        return resolver
    return MemoryResolver(dict(settings.preload))


@dataclass(frozen=True)
class ClaimsReply:
    """What a claims request gets back (None: no reply, as nats-server sends none) and the server's log line."""

    payload: bytes | None
    log_level: str = "debug"  # "debug" or "error"
    log: str = ""


def _update_reply(server: dict[str, Any], account: str, message: str, error: str | None) -> ClaimsReply:
    """nats-server's respondToUpdate (an empty account is left out, as Go's omitempty does)."""
    named = {"account": account} if account else {}
    if error is None:
        body: dict[str, Any] = {"server": server, "data": {**named, "code": 200, "message": message}}
        return ClaimsReply(json.dumps(body).encode(), "debug", f"{message} - {account}" if account else message)
    body = {"server": server, "error": {**named, "code": 500, "description": f"{message} - {error}"}}
    return ClaimsReply(json.dumps(body).encode(), "error",
                       f"{message} - {account} - {error}" if account else f"{message} - {error}")


@dataclass(frozen=True)
class OperatorKeys:
    """Who may change the resolver: the operator's key (unless strict) and its signing keys."""

    operator: str
    keys: frozenset[str]
    strict: bool = False
    system_account: str = ""


def claims_request(resolver: DirResolver, operator: OperatorKeys, subject: str, payload: bytes,
                   server: dict[str, Any]) -> ClaimsReply:
    """The full resolver's answer to a request on one of CLAIMS_SUBJECTS (`server`: the reply's server info)."""
    text = payload.decode("utf-8", "replace")
    if subject == CLAIMS_LIST:
        return ClaimsReply(json.dumps({"server": server, "data": resolver.accounts()}).encode(), "debug",
                           f"list request responded with {len(resolver.accounts())} account ids")
    if subject == CLAIMS_DELETE:
        return _delete(resolver, operator, text, server)
    tokens = subject.split(".")
    if subject == CLAIMS_UPDATE:
        return _update(resolver, operator, None, text, server)
    if len(tokens) == 6 and subject.startswith(ACCOUNT_CLAIMS_PREFIX) and tokens[4] == "CLAIMS":
        if tokens[5] == "UPDATE":
            return _update(resolver, operator, tokens[3], text, server)
        if tokens[5] == "LOOKUP":
            found = resolver.fetch(tokens[3])
            return ClaimsReply(found.encode() if found is not None else b"", "debug",
                               "" if found is not None else f"DirResolver - Could not find account {tokens[3]!r}")
    if len(tokens) == 5 and subject.startswith("$SYS.ACCOUNT.") and tokens[3:] == ["CLAIMS", "UPDATE"]:
        return _update(resolver, operator, tokens[2], text, server)
    return ClaimsReply(None, "debug", f"DirResolver - jwt update skipped due to bad subject {subject!r}")


ClaimsAnswerer = Callable[[str, bytes, dict[str, Any]], ClaimsReply]  # (subject, payload, server info) -> reply
# the MEMORY resolver answers only an account's own update subjects (nats-server's accountClaimUpdate)
MEMORY_CLAIMS_SUBJECTS = ("$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE", "$SYS.ACCOUNT.*.CLAIMS.UPDATE")


def claims_answerer(settings: OperatorSettings, resolver: MemoryResolver | DirResolver,
                    in_use: Callable[[str], bool],
                    updated: Callable[[str, str], None]) -> tuple[tuple[str, ...], ClaimsAnswerer]:
    """The subjects the system account answers claims requests on, and the answers: the full resolver's
    `claims_request` for this operator; the MEMORY resolver's update of an account in use (`in_use`: it is
    registered), as nats-server's accountClaimUpdate. `updated(account, jwt)` is told of each JWT stored."""
    if isinstance(resolver, MemoryResolver):
        memory = resolver

        def update(subject: str, payload: bytes, server: dict[str, Any]) -> ClaimsReply:
            return _told(updated, subject, payload, _memory_update(memory, in_use, subject, payload, server))
        return MEMORY_CLAIMS_SUBJECTS, update
    op = settings.operator
    keys = OperatorKeys(op.subject, frozenset((op.subject, *op.signing_keys)), op.strict_signing_key_usage,
                        settings.system_account)

    def answer(subject: str, payload: bytes, server: dict[str, Any]) -> ClaimsReply:
        return _told(updated, subject, payload, claims_request(resolver, keys, subject, payload, server))
    return CLAIMS_SUBJECTS, answer


def _told(updated: Callable[[str, str], None], subject: str, payload: bytes, reply: ClaimsReply) -> ClaimsReply:
    """`updated` told of a JWT the reply says was stored ("jwt updated")."""
    if reply.log.startswith("jwt updated - "):
        updated(reply.log[len("jwt updated - "):], payload.decode("utf-8", "replace"))
    return reply


def _memory_update(resolver: MemoryResolver, in_use: Callable[[str], bool], subject: str, payload: bytes,
                   server: dict[str, Any]) -> ClaimsReply:
    tokens = subject.split(".")
    account = tokens[3] if subject.startswith(ACCOUNT_CLAIMS_PREFIX) else tokens[2]
    if not payload:
        return _update_reply(server, account, "jwt update error", "request body is empty")
    text = payload.decode("utf-8", "replace")
    try:
        claims = decode_account(text)
    except JwtError as e:
        return _update_reply(server, account, "jwt update resulted in error", str(e))
    if claims.subject != account:
        return _update_reply(server, account, "jwt update resulted in error", "subject does not match jwt content")
    if not in_use(account):
        return _update_reply(server, account, "jwt update skipped", None)
    resolver.update(account, text)
    return _update_reply(server, account, "jwt updated", None)


def _update(resolver: DirResolver, operator: OperatorKeys, account: str | None, text: str,
            server: dict[str, Any]) -> ClaimsReply:
    """One account JWT pushed: to $SYS.REQ.CLAIMS.UPDATE (account None) or to the account's own subject."""
    try:
        claims = decode_account(text)
    except JwtError as e:
        return _update_reply(server, "n/a", "jwt update resulted in error", str(e))
    strict = claims.issuer == operator.operator and operator.strict
    if account is None and strict:  # the two handlers check in this order in nats-server
        return _update_reply(server, claims.subject, "jwt update resulted in error",
                             "operator requires issuer to be a signing key")
    # nats-server validates pushed claims without time checks: an expired account JWT is stored
    target = account or claims.subject
    if claims.subject != target:
        return _update_reply(server, target, "jwt update resulted in error", "subject does not match jwt content")
    if strict:
        return _update_reply(server, target, "jwt update resulted in error",
                             "operator requires issuer to be a signing key")
    issues = import_issues(claims)
    if issues:  # nats-io/jwt's validation of the claims (Go's %v of its errors)
        return _update_reply(server, target, "jwt validation failed", f"validation errors: [{' '.join(issues)}]")
    try:
        resolver.store(target, text)
    except OSError as e:
        return _update_reply(server, target, "jwt update resulted in error", e.strerror or str(e))
    except ValueError as e:
        return _update_reply(server, target, "jwt update resulted in error", str(e))
    return _update_reply(server, target, "jwt updated", None)


def _delete(resolver: DirResolver, operator: OperatorKeys, text: str, server: dict[str, Any]) -> ClaimsReply:
    subject, error, accounts = "", None, []
    try:
        generic = decode_generic(text)
    except JwtError as e:
        error = str(e)
    else:
        subject = str(generic.get("sub", ""))
        listed = (generic.get("nats") or {}).get("accounts")
        if not resolver.allow_delete:
            error = "delete must be enabled in server config"
        elif subject != generic.get("iss"):
            error = "not self signed"
        elif subject not in operator.keys:
            error = "not trusted"
        elif not isinstance(listed, list) or not all(isinstance(a, str) and is_public_key(a, "account") for a in listed):
            error = "malformed request"
        elif operator.system_account in listed:
            error = "not allowed to delete system account"
        else:
            accounts = listed
    if error is not None:
        return _update_reply(server, "", f"delete accounts request by {subject} failed", error)
    for account in accounts:
        resolver.delete(account)
    return _update_reply(server, "", f"deleted {len(accounts)} accounts", None)
