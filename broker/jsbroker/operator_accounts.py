"""Operator mode's accounts: each account JWT the resolver holds becomes a real account when first needed.

nats-server registers an account of operator mode when something first needs it: a user of it connects,
or another account's import names it. Then the account JWT (from the resolver, signed by the operator or
one of its signing keys, current) gives the account its own subject space (accounts.py), its exports and
imports, and its JetStream limits (`limits` or the R1 tier of `tiered_limits`; JetStream is on when memory
or disk storage is not 0, nats-io/jwt's IsJSEnabled). `account_settings` maps the claims onto the same
`AccountSettings` config mode's accounts have; `OperatorAccounts` registers them, exporters before the
imports that need them, and checks each import as nats-server does (the exporter's export covering it,
public or granted by an activation token). An import that does not check out is left out with a log line,
as nats-server leaves it out; the account is registered without it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from .accounts import Account, Accounts
from .claims import (AccountClaims, JwtError, decode_account, decode_activation, import_issues, is_revoked,
                     time_issue)
from .config import RESPONSE_TYPES, AccountLimits, AccountSettings, Export, Import
from .nkeys import is_public_key
from .subjects import is_subset, is_valid_subject
from .sublist import Subscription

NANOSECONDS = 1_000_000_000


def jetstream_limits(limits: dict[str, Any]) -> AccountLimits | None:
    """The account JWT's JetStream limits (None: JetStream is not enabled for the account)."""
    tiers = limits.get("tiered_limits") or {}
    js = tiers.get("R1", {}) if tiers else limits
    if not isinstance(js, dict) or not (js.get("mem_storage", 0) or js.get("disk_storage", 0)):
        return None

    def unlimited(key: str) -> int:  # nats-server reports these unset (0) as -1
        return int(js.get(key) or -1)
    return AccountLimits(max_mem=int(js.get("mem_storage", 0)), max_file=int(js.get("disk_storage", 0)),
                         max_streams=int(js.get("streams", 0)), max_consumers=int(js.get("consumer", 0)),
                         max_ack_pending=unlimited("max_ack_pending"),
                         max_bytes_required=bool(js.get("max_bytes_required", False)),
                         memory_max_stream_bytes=unlimited("mem_max_stream_bytes"),
                         store_max_stream_bytes=unlimited("disk_max_stream_bytes"), tier="R1" if tiers else "")


def _export(entry: dict[str, Any]) -> Export | None:
    subject, kind = entry.get("subject"), entry.get("type")
    if not isinstance(subject, str) or not is_valid_subject(subject) or kind not in ("service", "stream"):
        return None
    response = str(entry.get("response_type") or "singleton").lower()
    threshold = entry.get("response_threshold") or 0
    return Export(subject, kind == "service", () if entry.get("token_req") else None,
                  response if response in RESPONSE_TYPES else "singleton",
                  threshold / NANOSECONDS if isinstance(threshold, int) and threshold > 0 else 120.0)


@dataclass(frozen=True)
class WantedImport:
    """An import of the account JWT, before it is checked against the exporter."""

    imp: Import
    token: str  # the activation token ("": none)


def _import(entry: dict[str, Any]) -> WantedImport | None:
    """nats-io/jwt's import: `subject` is the exporter's; the local one is `local_subject`, else (older JWTs)
    `to`: a stream's prefix, or a service's subject in the exporter (then `subject` is the local one)."""
    fields = [entry.get(k) or "" for k in ("subject", "account", "local_subject", "to")]
    kind = entry.get("type")
    if not all(isinstance(x, str) for x in fields) or kind not in ("service", "stream"):
        return None
    subject, account, local, to = (str(x) for x in fields)
    service = kind == "service"
    if local:
        remote = subject
    elif service and to:
        local, remote = subject, to
    else:
        remote, local = subject, f"{to}.{subject}" if to else subject
    if not is_valid_subject(remote) or not is_valid_subject(local):
        return None
    token = entry.get("token")
    return WantedImport(Import(account, remote, local, service), token if isinstance(token, str) else "")


def account_settings(claims: AccountClaims) -> tuple[AccountSettings, list[WantedImport]]:
    """The account's settings without imports, and the imports its JWT asks for (checked when registered)."""
    exports = tuple(e for e in map(_export, claims.exports) if e is not None)
    wanted = [i for i in map(_import, claims.imports) if i is not None]
    return AccountSettings(claims.subject, exports, (), jetstream_limits(claims.limits)), wanted


class OperatorAccounts:
    """The registered accounts of operator mode, registered from the resolver's JWTs when first needed."""

    def __init__(self, accounts: Accounts, fetch: Callable[[str], str | None], trusted: frozenset[str],
                 log: Callable[[str, str], None], now: Callable[[], float],
                 subscriptions: Callable[[Account], Iterable[Subscription]]) -> None:
        """`subscriptions`: the clients' subscriptions in an account (their stream-import shadows are made again
        when its imports change)."""
        self.accounts, self._fetch, self._trusted, self._log, self._now = accounts, fetch, trusted, log, now
        self._subscriptions = subscriptions
        self.claims: dict[str, AccountClaims] = {}  # the claims each registered account was registered with

    def account(self, key: str) -> Account | None:
        """The account of this public key, registered now if it is not yet; None when the resolver has no
        current JWT for it that the operator signed."""
        found = self.accounts.lookup(key)
        if found is not None:
            return found
        claims = self._claims(key)
        if claims is None:
            return None
        settings, wanted = account_settings(claims)
        self.claims[key] = claims
        account = self.accounts.add(settings)  # first: an exporter that imports from it finds it
        imports = self._checked_imports(claims, wanted)
        if imports:
            self.accounts.add_imports(account, imports)
        return account

    def _claims(self, key: str) -> AccountClaims | None:
        token = self._fetch(key) if is_public_key(key, "account") else None
        if token is None:
            return None
        try:
            claims = decode_account(token)
        except JwtError:
            return None
        if claims.subject != key or time_issue(claims, self._now()) is not None or claims.issuer not in self._trusted:
            return None
        for issue in import_issues(claims):
            self._log("warning", f"Account {key}: its JWT is not valid: {issue}")
            return None
        return claims

    def _checked_imports(self, claims: AccountClaims, wanted: list[WantedImport]) -> tuple[Import, ...]:
        return tuple(imp for imp in (self._checked(claims, w) for w in wanted) if imp is not None)

    def _checked(self, claims: AccountClaims, wanted: WantedImport) -> Import | None:
        """The import when the exporter exports it to this account (publicly or by the token), else None
        with nats-server's reason logged."""
        imp = wanted.imp
        kind = "service" if imp.service else "stream"
        exporter = self.account(imp.account) if imp.account != claims.subject else None
        if exporter is None:
            self._log("warning", f"Account {claims.subject}: {kind} import of {imp.subject!r} from {imp.account} "
                                 "left out: account missing")
            return None
        export = next((e for e in exporter.settings.exports
                       if e.service == imp.service and is_subset(imp.subject, e.subject)), None)
        why = "no export covers it" if export is None else (
            self._token_issue(claims.subject, exporter, export, wanted) if export.accounts is not None else None)
        if why is not None:
            self._log("warning", f"Account {claims.subject}: {kind} import of {imp.subject!r} from {imp.account} "
                                 f"left out: {why}")
            return None
        return imp

    def _token_issue(self, importer: str, exporter: Account, export: Export, wanted: WantedImport) -> str | None:
        """nats-server's checkActivation (the token's subject, account and kind were checked with the account
        JWT, import_issues): signed by the exporter or one of its signing keys, current, not revoked."""
        if not wanted.token:
            return "the export requires an activation token and the import has none"
        act = decode_activation(wanted.token)
        owner = self.claims.get(exporter.name)
        if act.issuer != exporter.name and (owner is None or act.issuer not in owner.signing_keys):
            return "activation token not signed by the exporter or one of its signing keys"
        if time_issue(act, self._now()) is not None:
            return "activation token expired"
        export_claims = next((e for e in (owner.exports if owner is not None else ())
                              if e.get("subject") == export.subject), {})
        if is_revoked(export_claims.get("revocations") or {}, importer, act.issued_at):
            return "activation token revoked"
        return None

    def replaced(self, key: str, token: str) -> Account | None:
        """A claims update of an account (nsc push), applied to a registered one as nats-server applies it: its
        exports and JetStream limits replaced (the caller applies the limits to its JetStream), its imports
        checked and wired again if they changed, and so are those of the accounts importing from it if its
        exports changed. None: the account is not registered (nothing to do)."""
        account = self.accounts.lookup(key)
        if account is None or key not in self.claims:
            return None
        try:
            claims = decode_account(token)
        except JwtError:
            return None
        settings, _ = account_settings(claims)
        old = self.claims[key]
        self.claims[key] = claims
        account.settings = replace(account.settings, exports=settings.exports, jetstream=settings.jetstream)
        if old.imports != claims.imports:
            self._import_again(account)
        if old.exports != claims.exports:
            for name, importer in list(self.claims.items()):
                found = self.accounts.lookup(name)
                if name != key and found is not None and any(i.get("account") == key for i in importer.imports):
                    self._import_again(found)
        return account

    def _import_again(self, account: Account) -> None:
        claims = self.claims[account.name]
        _, wanted = account_settings(claims)
        self.accounts.replace_imports(account, self._checked_imports(claims, wanted), self._subscriptions(account))
