"""Accounts: each its own subject space, joined only by exports and imports, as in nats-server.

Every connection is bound to one `Account` (its user's; `$G` without accounts) and publishes and
subscribes in that account's `Sublist`. Imports cross accounts the way nats-server does them:

- A stream import gives each subscription of the importer that overlaps the import's local subject a
  shadow subscription in the exporter's sublist (same client, sid and queue group, so a queue group spans
  both accounts), whose deliveries show the local subject (`Subscription.rename`).
- A service import is an internal subscription on the local subject in the importer; a request it gets is
  routed into the exporter, with a `Nats-Request-Info` header naming the requester's account, and a reply
  subject `_R_.<account's id>.<request's id>` that the exporter's internal `_R_.<id>.>` subscription routes
  back to the requester's reply in the importer: the first answer (singleton) or every answer until
  `response_threshold` after the request (stream, chunked). A request nobody receives gets the 503.
- JetStream answers in every account that enables it (`$G` without accounts), each with its own streams
  (server.py starts one service per account on an `AccountBus`); the others get nats-server's 10039 refusal.

`Accounts.lookup(name)` is the one way to an account by name (users name theirs); `Accounts.add` registers one
while the server runs (operator mode's, operator_accounts.py).
"""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import replace
from typing import Callable, Iterable, Protocol, Sequence

from .config import GLOBAL_ACCOUNT, AccountLimits, AccountSettings, AuthSettings, Export, Import
from .internal import Delivery, Origin
from .subjects import is_subset, subjects_overlap
from .sublist import Sublist, Subscription

_REPLY_PREFIX = "_R_."
_ALPHANUM = string.ascii_letters + string.digits


class Routes(Protocol):
    """What accounts need of the router: route a message into a sublist, add a subscription to one."""

    def route_into(self, sublist: Sublist, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> bool:
        ...

    def route(self, pub: None, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes,
              target: bytes | None = None, into: Sublist | None = None) -> bool: ...

    def insert(self, sub: Subscription, sublist: Sublist | None = None) -> None: ...

    def remove(self, sub: Subscription) -> None: ...


Timer = Callable[[float, Callable[[], None]], Callable[[], None]]  # call_later(seconds, fn) -> cancel


def _token() -> str:
    """Six random letters and digits: nats-server's reply subjects are `_R_.<account's>.<request's>`."""
    return "".join(secrets.choice(_ALPHANUM) for _ in range(6))


def transform(source: str, target: str, subject: str) -> str:
    """`subject` (matched by `source`) under `target`: the tokens `source`'s wildcards took, in order, fill
    `target`'s wildcards (an import's subjects have the same wildcards in the same order)."""
    tokens, taken = subject.split("."), []
    for i, token in enumerate(source.split(".")):
        if token == "*":
            taken.append(tokens[i])
        elif token == ">":
            taken.append(".".join(tokens[i:]))
    it = iter(taken)
    return ".".join(next(it) if token in ("*", ">") else token for token in target.split("."))


_REQUEST_INFO = re.compile(rb'Nats-Request-Info: \{"acc":"([^"]*)"(?:,"svc":"[^"]*")?,"rtt":([0-9]+)\}\r\n')


def _with_request_info(hdr: bytes, importer: str, origin: Origin | None) -> bytes:
    """nats-server's header on a request through a service import: the requester's account and round-trip
    time; through a second import, the first's account stays and `svc` names the account in between."""
    m = _REQUEST_INFO.search(hdr) if hdr else None
    if m is not None:
        info = b'Nats-Request-Info: {"acc":"%s","svc":"%s","rtt":%s}\r\n' % (m.group(1), importer.encode(), m.group(2))
        return hdr[:m.start()] + info + hdr[m.end():]
    info = b'Nats-Request-Info: {"acc":"%s","rtt":%d}\r\n\r\n' % (importer.encode(), origin.rtt_ns if origin else 0)
    return (hdr[:-2] if hdr else b"NATS/1.0\r\n") + info


class _Rename:
    """A shadow subscription's delivered subject: the exporter's subject under the import's local one."""

    __slots__ = ("source", "target", "cache")

    def __init__(self, source: str, target: str) -> None:
        self.source, self.target = source, target
        self.cache: dict[bytes, bytes] = {}

    def __call__(self, subject: bytes) -> bytes:
        local = self.cache.get(subject)
        if local is None:
            if len(self.cache) > 1024:
                self.cache.clear()
            local = self.cache[subject] = transform(self.source, self.target, subject.decode()).encode()
        return local


class Account:
    def __init__(self, name: str, sublist: Sublist, settings: AccountSettings | None = None) -> None:
        self.name = name
        self.sublist = sublist
        self.settings = settings or AccountSettings(name)
        self.stream_imports: list[tuple[Import, Account]] = []
        self.jetstream = False  # JetStream's API answers in this account (its own service)
        self.refusal: Subscription | None = None  # the 10039 answer on $JS.API.> when JetStream is not enabled
        self.service_imports: list[Subscription] = []  # the internal subscriptions of its service imports
        self._internal: list[Subscription] = []  # its services' subscriptions (JetStream's), closed ones pruned
        self._internal_live = 0
        self.reply_prefix = f"{_REPLY_PREFIX}{_token()}."
        self._replies: dict[str, tuple[Account, bytes, str, Callable[[], None]]] = {}
        self._reply_sub: Subscription | None = None

    def __repr__(self) -> str:
        return f"Account({self.name!r})"

    def add_shadows(self, sub: Subscription, routes: Routes) -> None:
        """A new subscription of a client or of a service (a stream's subjects): what it overlaps of the stream
        imports, in the exporters (one hop: as in nats-server, what an exporter itself imports is not passed
        on)."""
        shadows = []
        for imp, exporter in self.stream_imports:
            if not subjects_overlap(sub.subject, imp.local):
                continue
            subject = transform(imp.local, imp.subject, sub.subject) if is_subset(sub.subject, imp.local) else imp.subject
            shadow = Subscription(sub.client, subject, sub.queue, sub.sid, sub.handler)  # internal: its handler
            shadow.rename = None if imp.local == imp.subject else _Rename(imp.subject, imp.local)
            shadow.deny = sub.deny
            routes.insert(shadow, exporter.sublist)
            shadows.append(shadow)
        if shadows:
            sub.shadows = shadows

    def add_internal_shadows(self, sub: Subscription, routes: Routes) -> None:
        """`add_shadows` for a service's subscription (the account bus's), which is kept to be shadowed again
        when the imports change (closed ones are dropped as the list doubles)."""
        self._internal.append(sub)
        if len(self._internal) > 2 * self._internal_live + 16:
            self._internal = [s for s in self._internal if not s.closed]
            self._internal_live = len(self._internal)
        self.add_shadows(sub, routes)

    def internal_subscriptions(self) -> list[Subscription]:
        return [s for s in self._internal if not s.closed]

    # -- service responses --------------------------------------------------------------------------

    def open_reply(self, routes: Routes, timer: Timer, importer: "Account", reply: bytes, export: Export) -> bytes:
        """A reply subject in this (exporting) account that routes responses to `reply` in `importer`."""
        if self._reply_sub is None:
            self._reply_sub = Subscription(None, self.reply_prefix + ">", None, b"0",
                                           lambda *msg: self._respond(routes, *msg))
            routes.insert(self._reply_sub, self.sublist)
        local = self.reply_prefix + _token()
        cancel = timer(export.response_threshold, lambda: self._close_reply(local))
        self._replies[local] = (importer, reply, export.response_type, cancel)
        return local.encode()

    def deliver_reply(self, routes: Routes, target: str, msgs: Sequence[Delivery]) -> bool | None:
        """JetStream's deliveries to one of this account's reply subjects (a pull request through a service
        import): routed to the requester's reply in the importer, each showing its own subject and ack reply,
        as nats-server's response import does (a singleton takes the first). None: `target` is no open reply."""
        entry = self._replies.get(target) if target.startswith(self.reply_prefix) else None
        if entry is None:
            return None
        importer, to, response_type, cancel = entry
        if response_type == "singleton":
            del self._replies[target]
            cancel()
            msgs = msgs[:1]
        delivered = False
        for subject, reply, hdr, data in msgs:
            delivered |= routes.route(None, subject.encode(), reply.encode(), len(hdr) if hdr else -1,
                                      hdr + data + b"\r\n", to, importer.sublist)
        return delivered

    def _close_reply(self, local: str) -> None:
        self._replies.pop(local, None)

    def _respond(self, routes: Routes, subject: str, reply: str | None, hdr: bytes, payload: bytes,
                 origin: Origin | None) -> None:
        entry = self._replies.get(subject)
        if entry is None:
            return
        importer, to, response_type, cancel = entry
        if response_type == "singleton":
            del self._replies[subject]
            cancel()
        data = hdr + payload + b"\r\n"
        routes.route_into(importer.sublist, to, reply.encode() if reply else None, len(hdr) if hdr else -1, data)


class Accounts:
    """The accounts of a server: `$G`, the configured ones, and their imports wired up."""

    def __init__(self, auth: AuthSettings, routes: Routes, timer: Timer, global_sublist: Sublist,
                 global_limits: AccountLimits | None = None) -> None:
        """`global_limits`: $G's JetStream limits (jsbroker's `[jetstream.account]`); JetStream answers in $G
        without accounts (nor operator mode), else in the accounts enabling it, as in nats-server."""
        self.routes, self.timer = routes, timer
        self.by_name: dict[str, Account] = {}
        self.added: list[Callable[[Account], None]] = []  # told of each account registered after the start
        self._refusal: Callable[[str], bytes | None] | None = None  # JetStream's 10039, once JetStream runs
        only_global = not auth.accounts and auth.operator is None
        global_limits = (global_limits or AccountLimits()) if only_global else None
        global_settings = AccountSettings(GLOBAL_ACCOUNT, jetstream=global_limits)
        for settings in (global_settings, *auth.accounts):
            self._register(settings, global_sublist if settings.name == GLOBAL_ACCOUNT else Sublist())
        self.global_account = self.by_name[GLOBAL_ACCOUNT]
        # The system account (system_account.py): made when the config does not define it, as nats-server does
        system = auth.system_account
        if system is not None and system not in self.by_name:
            self.by_name[system] = Account(system, Sublist())
        self.system = self.by_name[system] if system is not None else None
        for account in self.by_name.values():
            self._wire_imports(account)

    def _register(self, settings: AccountSettings, sublist: Sublist) -> Account:
        account = self.by_name[settings.name] = Account(settings.name, sublist, settings)
        account.jetstream = settings.jetstream is not None
        return account

    def _wire_imports(self, account: Account) -> None:
        for imp in account.settings.imports:
            self._wire(account, imp)

    def _wire(self, account: Account, imp: Import) -> None:
        exporter = self.by_name[imp.account]
        if imp.service:
            self._service_import(account, exporter, imp)
        else:
            account.stream_imports.append((imp, exporter))

    def add(self, settings: AccountSettings) -> Account:
        """An account registered while the server runs (operator mode's, when first needed): its own subject
        space, its imports wired (the exporters are registered already), then the `added` listeners told."""
        account = self._register(settings, Sublist())
        self._wire_imports(account)
        if self._refusal is not None and not account.jetstream:
            self._refuse_in(account, self._refusal)
        for listener in self.added:
            listener(account)
        return account

    def add_imports(self, account: Account, imports: tuple[Import, ...]) -> None:
        """Imports of a registered account whose exporters are registered now (operator mode registers an
        account before the exporters its imports name, which may import from it in turn)."""
        account.settings = replace(account.settings, imports=account.settings.imports + imports)
        for imp in imports:
            self._wire(account, imp)

    def replace_imports(self, account: Account, imports: tuple[Import, ...],
                        subscriptions: Iterable[Subscription]) -> None:
        """The account's imports replaced while the server runs (a pushed account JWT): the service imports'
        subscriptions made again, and the stream imports' shadows of `subscriptions` (its clients') and of its
        services' subscriptions."""
        for sub in account.service_imports:
            self.routes.remove(sub)
        account.service_imports, account.stream_imports = [], []
        account.settings = replace(account.settings, imports=())
        self.add_imports(account, imports)
        for sub in (*subscriptions, *account.internal_subscriptions()):
            for shadow in sub.shadows or ():
                self.routes.remove(shadow)
            sub.shadows = None
            account.add_shadows(sub, self.routes)

    def lookup(self, name: str) -> Account | None:
        return self.by_name.get(name)

    def with_jetstream(self) -> list[Account]:
        """The accounts JetStream answers in, by name."""
        return sorted((a for a in self.by_name.values() if a.jetstream), key=lambda a: a.name)

    def subscriptions(self) -> int:
        return sum(a.sublist.count for a in self.by_name.values())

    def refuse_jetstream(self, refusal: Callable[[str], bytes | None]) -> None:
        """JetStream's API in the accounts without JetStream: nats-server answers there with 10039."""
        self._refusal = refusal
        for account in self.by_name.values():
            if not account.jetstream:
                self._refuse_in(account, refusal)

    def _refuse_in(self, account: Account, refusal: Callable[[str], bytes | None]) -> None:
        account.refusal = Subscription(None, "$JS.API.>", None, b"0", self._refuser(account, refusal))
        self.routes.insert(account.refusal, account.sublist)

    def deny_jetstream(self, account: Account) -> None:
        """The account's JetStream is turned off while the server runs (a claims update): 10039 from now on."""
        account.jetstream = False
        if self._refusal is not None and account.refusal is None:
            self._refuse_in(account, self._refusal)

    def allow_jetstream(self, account: Account) -> None:
        """The account gets JetStream while the server runs (a claims update): the refusal goes."""
        account.jetstream = True
        if account.refusal is not None:
            self.routes.remove(account.refusal)
            account.refusal = None

    def _refuser(self, account: Account, refusal: Callable[[str], bytes | None]) -> Callable[..., None]:
        def refuse(subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
            body = refusal(subject) if reply else None
            if reply and body is not None:
                self.routes.route_into(account.sublist, reply.encode(), None, -1, body + b"\r\n")
        return refuse

    def _service_import(self, importer: Account, exporter: Account, imp: Import) -> None:
        covering = [e for e in exporter.settings.exports if e.service and is_subset(imp.subject, e.subject)]
        # checked before (config.py, or operator_accounts.py for a token's grant): the one allowing it comes first
        export = next((e for e in covering if e.allows(importer.name, imp.subject)), covering[0])
        routes, timer = self.routes, self.timer

        def forward(subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
            target = transform(imp.local, imp.subject, subject).encode()
            mapped = exporter.open_reply(routes, timer, importer, reply.encode(), export) if reply else None
            hdr = _with_request_info(hdr, importer.name, origin)
            if routes.route_into(exporter.sublist, target, mapped, len(hdr), hdr + payload + b"\r\n"):
                return
            if reply and origin is not None and origin.no_responders:  # as a request in the importer would get
                status = b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n" % subject.encode()
                routes.route_into(importer.sublist, reply.encode(), None, len(status), status + b"\r\n")

        sub = Subscription(None, imp.local, None, b"0", forward)
        importer.service_imports.append(sub)
        routes.insert(sub, importer.sublist)
