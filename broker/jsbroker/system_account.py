"""The system account's services, as nats-server 2.15.1's events.go has them on a single server.

In the system account (`system_account`, default `$SYS`):
- Server requests, each answered `{"server": {...}, "data": {...}}` (or `"error"`): `$SYS.REQ.SERVER.PING`
  (STATSZ), `$SYS.REQ.SERVER.PING.<KIND>` and `$SYS.REQ.SERVER.<id>.<KIND>` for the kinds in `SERVER_KINDS`;
  the data comes from the monitoring views (monitor.py), so HTTP and $SYS answer alike. A request body is
  the kind's options as JSON (CONNZ's `subscriptions`, `acc`...), with nats-server's filters (`server_name`,
  `host`, `cluster`, `tags`, `domain`): a server they do not name stays silent.
- Account requests `$SYS.REQ.ACCOUNT.<account>.<KIND>` (`ACCOUNT_KINDS`) and `$SYS.REQ.ACCOUNT.PING.STATZ`
  (account_views.py builds ACCOUNTZ, INFO and STATZ, as /accountz and /accstatz).
- Client actions `$SYS.REQ.SERVER.<id>.KICK` and `.LDM` (`{"cid": N}`); `.RELOAD` answers an error, as
  jsbroker reads its config once.
- Events: `$SYS.ACCOUNT.<account>.CONNECT` / `.DISCONNECT`, the account's connection counts on
  `$SYS.ACCOUNT.<account>.SERVER.CONNS` and `$SYS.SERVER.ACCOUNT.<account>.CONNS` (again every 30s while it has
  connections), and the `$SYS.SERVER.<id>.STATSZ` heartbeat (after 250ms, doubling up to every 10s, sent only
  while someone listens), `$SYS.SERVER.<id>.LAMEDUCK` in lame duck mode, `$SYS.SERVER.<id>.SHUTDOWN` when the
  server stops.
In every other account, as nats-server's system imports: `$SYS.REQ.USER.INFO` (who the requester is),
`$SYS.REQ.ACCOUNT.PING.CONNZ` and `$SYS.REQ.SERVER.PING.CONNZ` (the account's connections) and
`$SYS.REQ.ACCOUNT.PING.STATZ` (its counts), answered straight into the requester's account.

A handler that fails (a bug of jsbroker's) logs one error line naming the request's subject; a request with
options is answered the 500 nats-server answers a request that failed, and the server goes on serving.

Data flows one way: the broker calls `connected`/`disconnected` and reads nothing back; the services read
the broker through the narrow `SystemHost` and `Views` protocols.
"""

from __future__ import annotations

import json
import re
import secrets
import string
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, TypeVar

from .account_views import AccountViews, UnknownAccount
from .accounts import Account, Routes, Timer
from .config import VERSION, Permissions
from .go_time import rfc3339
from .internal import Origin
from .monitor_options import (ConnzOptions, HealthzOptions, JszOptions, NotLeader, SubszOptions,
                              ViewRefusal, connz_options, go_decode, healthz_options, jsz_options, subsz_options)
from .sublist import Subscription

if TYPE_CHECKING:
    from .resolvers import ClaimsAnswerer  # operator mode's JWT code: imported only with an operator

SERVER_KINDS = ("STATSZ", "VARZ", "CONNZ", "SUBSZ", "JSZ", "HEALTHZ", "IDZ", "ACCOUNTZ", "ROUTEZ", "GATEWAYZ",
                "LEAFZ", "EXPVARZ", "IPQUEUESZ", "RAFTZ", "PROFILEZ")
ACCOUNT_KINDS = ("SUBSZ", "CONNZ", "LEAFZ", "JSZ", "INFO", "STATZ", "CONNS")
# nats-server 2.15.1's feature flags, as every "server" object of its events carries them
FEATURE_FLAGS = {"js_ack_fc_v2": False, "js_api_reply_v2": False, "js_raft_delete_range": True,
                 "js_snapshot_sources": False}
# nats-server's capability flags with JetStream on: JetStream, binary stream snapshots, NRG traffic in accounts
JETSTREAM_FLAGS = 1 | 2 | 4
STATSZ_FIRST, STATSZ_EVERY = 0.25, 10.0  # the heartbeat's first interval, doubled up to its last
CONNS_EVERY = 30.0  # an account's connection counts again, while it has connections
# nats-server's closed-connection reasons for the errors jsbroker closes a client with
_REASONS = {"User Authentication Expired": "Authentication Expired", "Stale Connection": "Stale Connection",
            "Authentication Timeout": "Authentication Timeout"}
_NS = 1_000_000_000
GO_JSON_MAX_DEPTH = 10_000  # Go's encoding/json: a deeper text is refused ("exceeded max depth")
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def _event_id() -> str:
    """An event's id: 22 letters and digits, as nats-server's nuids."""
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(22))


class ClientView(Protocol):
    """What the services read of a client connection."""

    cid: int
    name: str
    lang: str
    version: str
    user_name: str
    account: Account
    peer: tuple[str, int]
    in_msgs: int
    out_msgs: int
    in_bytes: int
    out_bytes: int
    rtt_ns: int
    started: float  # the loop's clock when it connected
    perms: Any  # a PermissionChecker (its `permissions`), None for a user without permissions
    jwt_user: Any  # operator mode: the user JWT's (its `account`), None otherwise
    connected: bool
    websocket: bool
    subs: dict[bytes, Subscription]


class Views(Protocol):
    """monitor.py's builders: the same data /varz, /connz, /jsz and /healthz show."""

    def varz_body(self) -> dict[str, Any]: ...

    def connz_body(self, options: ConnzOptions) -> dict[str, Any]: ...

    def jsz_body(self, options: JszOptions) -> dict[str, Any]: ...

    def subsz_body(self, options: SubszOptions) -> dict[str, Any]: ...

    def healthz_body(self, options: HealthzOptions) -> dict[str, Any]: ...

    def cluster_body(self, kind: str) -> dict[str, Any]: ...


class SystemHost(Protocol):
    """What the services read of the server."""

    server_id: str
    server_name: str

    @property
    def clients(self) -> Mapping[int, ClientView]: ...

    def views(self) -> Views: ...

    @property
    def account_views(self) -> AccountViews: ...

    def kick(self, cid: int) -> str | None:
        """Disconnect client `cid` (nats-server's Kicked); the error when there is no such client."""

    def lame_duck_client(self, cid: int) -> str | None:
        """Send client `cid` an INFO in lame duck mode; the error when there is none or it cannot take one."""

    def listen_host(self) -> str: ...

    def jetstream_domain(self) -> str | None:
        """None: JetStream is off; "" without a domain."""

    def jetstream_account(self, name: str, streams: bool, consumers: bool, config: bool) -> dict[str, Any] | None:
        """Account `name`'s entry of /jsz's account_details (its own usage, limits and API counts; `streams`,
        `consumers`, `config`: as nats-server's JSzOptions), None when it has no JetStream."""

    def started_at(self) -> float:
        """The wall-clock time the server started."""

    def wall_time(self, loop_time: float) -> float:
        """The wall-clock time of a moment on the loop's clock."""


class _Error(Exception):
    """A request's error answer: nats-server's code and description."""

    def __init__(self, code: int, description: str, typed: bool = True) -> None:
        super().__init__(description)
        self.code = code
        self.typed = typed  # nats-server's answer has a (null) data of the kind's type besides the error


class _Silent(Exception):
    """No answer (nats-server's errSkipZreq): a filter does not name this server, an account without use."""


@dataclass
class _AccountTotals:
    """How many connections an account has open, and the timer repeating its count."""

    conns: int = 0
    conns_timer: Callable[[], None] | None = None


class SystemServices:
    def __init__(self, host: SystemHost, system: Account, accounts: Mapping[str, Account], routes: Routes,
                 timer: Timer, claims: tuple[tuple[str, ...], ClaimsAnswerer] | None = None,
                 log: Callable[[str, str], None] = lambda level, line: None) -> None:
        self.host, self.system, self.accounts, self.routes, self.timer = host, system, accounts, routes, timer
        self.claims, self.log = claims, log  # operator mode: the resolver's subjects and answers; its log lines
        self.seq = 0
        self._totals: dict[str, _AccountTotals] = {}
        self._statsz_interval = STATSZ_FIRST
        self._statsz_cancel: Callable[[], None] | None = None
        self._subs: list[tuple[Subscription, Account]] = []

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        sid = self.host.server_id
        self._subscribe(self.system, "$SYS.REQ.SERVER.PING", lambda *m: self._statsz_request(*m))
        for kind in SERVER_KINDS:
            for subject in (f"$SYS.REQ.SERVER.PING.{kind}", f"$SYS.REQ.SERVER.{sid}.{kind}"):
                self._subscribe(self.system, subject, self._server_handler(kind))
        for kind in ACCOUNT_KINDS:
            self._subscribe(self.system, f"$SYS.REQ.ACCOUNT.*.{kind}", self._account_handler(kind))
        for kind, act in (("KICK", self.host.kick), ("LDM", self.host.lame_duck_client)):
            self._subscribe(self.system, f"$SYS.REQ.SERVER.{sid}.{kind}", self._client_handler(kind, act))
        self._subscribe(self.system, f"$SYS.REQ.SERVER.{sid}.RELOAD", self._reload_request)
        self._subscribe(self.system, "$SYS.REQ.USER.*.INFO", self._user_info_in(None))
        self._subscribe(self.system, "$SYS.REQ.USER.INFO", self._user_info_in(None))
        if self.claims is not None:
            for subject in self.claims[0]:
                self._subscribe(self.system, subject, self._claims_request)
        for account in self.accounts.values():
            if account is not self.system:
                self._import_into(account)
        self._statsz_cancel = self.timer(self._statsz_interval, self._heartbeat)

    def account_added(self, account: Account) -> None:
        """An account registered while the server runs (operator mode's): the system's imports into it."""
        self._import_into(account)

    def _import_into(self, account: Account) -> None:
        """nats-server's system imports of every other account (registerSystemImports)."""
        connz = self._account_request(account, "CONNZ")
        self._subscribe(account, "$SYS.REQ.ACCOUNT.PING.CONNZ", connz)
        self._subscribe(account, "$SYS.REQ.SERVER.PING.CONNZ", connz)
        self._subscribe(account, "$SYS.REQ.ACCOUNT.PING.STATZ", self._account_request(account, "STATZ"))
        self._subscribe(account, "$SYS.REQ.USER.INFO", self._user_info_in(account))

    def lame_duck(self) -> None:
        """The server enters lame duck mode: nats-server's LAMEDUCK event (the server info alone)."""
        self._send(f"$SYS.SERVER.{self.host.server_id}.LAMEDUCK", None, self._server())

    def stop(self) -> None:
        """The server is stopping: nats-server's SHUTDOWN event, then no more timers."""
        self._send(f"$SYS.SERVER.{self.host.server_id}.SHUTDOWN", None, self._server())
        if self._statsz_cancel is not None:
            self._statsz_cancel()
            self._statsz_cancel = None
        for totals in self._totals.values():
            if totals.conns_timer is not None:
                totals.conns_timer()
                totals.conns_timer = None
        for sub, account in self._subs:
            account.sublist.remove(sub)
        self._subs.clear()

    def _subscribe(self, account: Account, subject: str, handler: Callable[..., None]) -> None:
        sub = Subscription(None, subject, None, b"0", self._guarded(handler))
        self.routes.insert(sub, account.sublist)
        self._subs.append((sub, account))

    def _guarded(self, handler: Callable[..., None]) -> Callable[..., None]:
        """The handler, a failure of which (jsbroker's bug) is logged as one error line naming the request's
        subject; the server goes on serving (a zReq kind's requester was answered the error by `_answer`)."""
        def guarded(subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
            try:
                handler(subject, reply, hdr, payload, origin)
            except Exception as e:
                self.log("error", f'Error handling system request on "{subject}": {_failure(e)}')
        return guarded

    # -- output -----------------------------------------------------------------------------------------

    def _server(self) -> dict[str, Any]:
        """The "server" object of every answer and event: who sent it, its message sequence and time."""
        self.seq += 1
        h = self.host
        domain = h.jetstream_domain()
        server: dict[str, Any] = {"name": h.server_name, "host": h.listen_host(), "id": h.server_id}
        if domain:
            server["domain"] = domain
        server.update(ver=VERSION, feature_flags=FEATURE_FLAGS, jetstream=domain is not None,
                      flags=JETSTREAM_FLAGS if domain is not None else 0, seq=self.seq, time=rfc3339(time.time()))
        return server

    def _send(self, subject: str, account: Account | None, body: dict[str, Any]) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.routes.route_into((account or self.system).sublist, subject.encode(), None, -1, data + b"\r\n")

    def _has_interest(self, subject: str) -> bool:
        found = self.system.sublist.match(subject)
        return bool(found.plain or found.groups)

    # -- server requests --------------------------------------------------------------------------------

    def _server_handler(self, kind: str) -> Callable[..., None]:
        def handle(subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
            if not reply:
                return
            if kind == "STATSZ":
                self._statsz_request(subject, reply, hdr, payload, origin)
            elif kind == "IDZ":
                h = self.host
                self._send(reply, None, {"name": h.server_name, "host": h.listen_host(), "id": h.server_id})
            else:
                self._answer(reply, None, payload, lambda options: self._server_data(kind, options))
        return handle

    def _answer(self, reply: str, account: Account | None, payload: bytes,
                data: Callable[[dict[str, Any]], dict[str, Any] | None], key: str = "data") -> None:
        """nats-server's zReq (and statszReq, its answer under `key` "statsz"): decode the options, apply the
        filters, answer the data (None: none, as an action's answer) or the error. A failure of jsbroker's is
        answered as nats-server answers a request that failed (500, a null data), then raised for `_guarded`
        to log."""
        try:
            body = self._answer_body(payload, data, key)
        except Exception as e:
            self._send(reply, account, {"server": self._server(), **({"data": None} if key == "data" else {}),
                                        "error": {"code": 500, "description": f"jsbroker failed answering this "
                                                  f"request ({_failure(e)}): its log has it; please report it"}})
            raise
        if body is not None:
            self._send(reply, account, {"server": self._server(), **body})

    def _answer_body(self, payload: bytes, data: Callable[[dict[str, Any]], dict[str, Any] | None],
                     key: str) -> dict[str, Any] | None:
        """The answer's data or error; None: no answer."""
        try:
            options = _options(payload)
        except _Error as e:
            return {"error": {"code": e.code, "description": str(e)}}
        try:
            if not self._filtered_in(options):
                return None
            answer = data(options)
            return {} if answer is None else {key: answer}
        except _Silent:
            return None
        except _Error as e:  # bad options (400) were not decoded: nats-server has no data then, else a null
            body: dict[str, Any] = {"error": {"code": e.code, "description": str(e)}}
            return {"data": None, **body} if e.code != 400 and e.typed else body

    def _filtered_in(self, options: dict[str, Any]) -> bool:
        """nats-server's filterRequest: whether this server is one the request's filters name."""
        name, host, cluster = (str(options.get(k) or "") for k in ("server_name", "host", "cluster"))
        mine = {"server_name": self.host.server_name, "host": self.host.listen_host(), "cluster": ""}
        for key, wanted in (("server_name", name), ("host", host), ("cluster", cluster)):
            if wanted and not (wanted == mine[key] if options.get("exact_match") else wanted in mine[key]):
                return False
        if options.get("tags"):  # jsbroker's server has no tags
            return False
        domain = options.get("domain")
        return not domain or domain == (self.host.jetstream_domain() or "")

    def _server_data(self, kind: str, options: dict[str, Any]) -> dict[str, Any]:
        views = self.host.views()
        if kind == "VARZ":
            return views.varz_body()
        if kind == "CONNZ":
            return views.connz_body(_connz(options))
        if kind == "JSZ":
            try:
                return views.jsz_body(_jsz(options))
            except NotLeader:
                raise _Silent from None
        if kind == "HEALTHZ":
            health = views.healthz_body(_healthz(options))
            return {k: v for k, v in health.items() if k != "error"} if health["status"] == "ok" else health
        if kind == "SUBSZ":
            return views.subsz_body(_subsz(options))
        if kind == "ACCOUNTZ":
            return self._accountz(options)
        if kind in ("ROUTEZ", "GATEWAYZ", "LEAFZ"):  # one server: none
            return views.cluster_body(kind.lower())
        if kind == "RAFTZ":  # no Raft groups on a single server
            return {}
        raise _Error(500, f"{kind} is not available from jsbroker (it is the Go runtime's or a cluster's)")

    def _statsz_request(self, subject: str, reply: str | None, hdr: bytes, payload: bytes,
                        origin: Origin | None) -> None:
        if reply:
            self._answer(reply, None, payload, lambda options: self._statsz(), key="statsz")

    def _statsz(self) -> dict[str, Any]:
        varz = self.host.views().varz_body()
        clients = [c for c in self.host.clients.values() if c.connected]
        statsz: dict[str, Any] = {k: varz[k] for k in ("start", "mem", "cores", "cpu", "connections",
                                                       "total_connections")}
        statsz.update(
            active_accounts=len({c.account.name for c in clients}),
            subscriptions=varz["subscriptions"],
            sent={"msgs": varz["out_msgs"], "bytes": varz["out_bytes"]},
            sent_to_clients={"msgs": varz["out_msgs"], "bytes": varz["out_bytes"]},
            received={"msgs": varz["in_msgs"], "bytes": varz["in_bytes"]},
            received_from_clients={"msgs": varz["in_msgs"], "bytes": varz["in_bytes"]},
            slow_consumers=varz["slow_consumers"], active_servers=1)
        js = varz.get("jetstream")
        if js:  # nats-server's STATSZ leaves the store directory out
            statsz["jetstream"] = {**js, "config": {k: v for k, v in js["config"].items() if k != "store_dir"}}
        return statsz

    def _heartbeat(self) -> None:
        """`$SYS.SERVER.<id>.STATSZ`, sent only while someone listens (a single server checks the interest)."""
        subject = f"$SYS.SERVER.{self.host.server_id}.STATSZ"
        if self._has_interest(subject):
            self._send(subject, None, {"server": self._server(), "statsz": self._statsz()})
        self._statsz_interval = min(self._statsz_interval * 2, STATSZ_EVERY)
        self._statsz_cancel = self.timer(self._statsz_interval, self._heartbeat)

    def _accountz(self, options: dict[str, Any]) -> dict[str, Any]:
        _decode(options, {"account": "string"}, "AccountzEventOptions")
        name = options.get("account")
        try:
            return self.host.account_views.accountz(name or "")
        except UnknownAccount as e:
            raise _Error(500, str(e)) from None

    # -- KICK, LDM, RELOAD ------------------------------------------------------------------------------

    def _client_handler(self, kind: str, act: Callable[[int], str | None]) -> Callable[..., None]:
        """nats-server's KICK and LDM: `{"cid": N}` names the client; a body that is no such JSON gets no
        answer (nats-server logs it), an unknown client the error."""
        def handle(subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
            try:
                request = json.loads(payload)
                cid = request.get("cid", 0) if isinstance(request, dict) else None
                if not isinstance(cid, int) or isinstance(cid, bool) or cid < 0:
                    raise ValueError(f"cid is {cid!r}, not a connection id")
            except ValueError as e:
                self.log("error", f"Error unmarshalling {kind.lower()} client request: {e}")
                return
            if reply:
                self._answer(reply, None, payload, lambda options: _done(act(cid)))
        return handle

    def _reload_request(self, subject: str, reply: str | None, hdr: bytes, payload: bytes,
                        origin: Origin | None) -> None:
        """jsbroker reads its config once: a RELOAD request gets nats-server's answer to a reload that failed."""
        if reply:
            self._answer(reply, None, payload, lambda options: _done(
                "config reload is not supported by jsbroker: restart it to apply a changed config "
                "(SIGHUP re-reads its TLS certificate files only)"))

    # -- account requests -------------------------------------------------------------------------------

    def _account_handler(self, kind: str) -> Callable[..., None]:
        def handle(subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
            name = subject.split(".")[3]
            if kind == "CONNS":
                self._conns_request(name, reply, payload)
            elif reply:
                self._answer(reply, None, payload, lambda options: self._account_data(kind, name, options))
        return handle

    def _account_request(self, account: Account, kind: str) -> Callable[..., None]:
        """A system import: the request in `account`, answered there as the system account's request for it."""
        def handle(subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
            if reply:
                self._answer(reply, account, payload, lambda options: self._account_data(kind, account.name, options))
        return handle

    def _account_data(self, kind: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
        if kind == "STATZ" and name == "PING":
            return self._account_statz(options, None)
        account = self.accounts.get(name)
        if kind == "JSZ":
            return self._account_jsz(account, name, options)
        if kind == "CONNZ":
            return self.host.views().connz_body(_connz(options, name))
        if kind == "LEAFZ":
            return self.host.views().cluster_body("leafz")
        if kind == "STATZ":
            return self._account_statz(options, name)
        if kind == "SUBSZ":  # nats-server filters by the name: an account it does not have has no subscriptions
            return self.host.views().subsz_body(_subsz(options, name))
        if account is None:
            raise _Error(500, f"Account {name} does not exist")
        return self._account_info(account)

    def _account_jsz(self, account: Account | None, name: str, options: dict[str, Any]) -> dict[str, Any]:
        """nats-server's JszAccount: the account's own JetStream use (never the server's totals); its options
        decoded first (a bad one is a 400), then taken as given (consumer without streams lists no streams)."""
        jsz = _jsz(options, normalise=False)
        if self.host.jetstream_domain() is None:
            raise _Error(500, "jetstream not enabled")
        if account is None:
            raise _Error(500, f'account "{name}" not found')
        detail = self.host.jetstream_account(name, jsz.streams, jsz.consumers, jsz.config)
        if detail is None:
            raise _Error(500, f'account "{name}" not jetstream enabled')
        return detail

    def _account_info(self, account: Account) -> dict[str, Any]:
        return self.host.account_views.account_info(account)

    def _account_statz(self, options: dict[str, Any], name: str | None) -> dict[str, Any]:
        """nats-server's AccountStatz: the accounts with connections (all named ones with include_unused); no
        answer when none is left."""
        _decode(options, {"accounts": "[]string", "include_unused": "bool"}, "AccountStatzEventOptions")
        wanted, unused = options.get("accounts") or [], options.get("include_unused")
        statz = self.host.account_views.accstatz((name,) if name else tuple(wanted), unused is True)
        if not statz["account_statz"] and not unused:
            raise _Silent
        return statz

    def _conns_request(self, name: str, reply: str | None, payload: bytes) -> None:
        """Another server asking for an account's connection counts: answered only when it has some here."""
        account = self.accounts.get(name)
        if account is None or not reply:
            return
        try:
            asked = json.loads(payload) if payload else {"account": name}
        except ValueError:
            return
        if isinstance(asked, dict) and asked.get("account", name) == name and self.host.account_views.account_stat(account)["conns"]:
            self._send_conns(account, (reply,))

    def _claims_request(self, subject: str, reply: str | None, hdr: bytes, payload: bytes,
                        origin: Origin | None) -> None:
        """`nsc push` and the nats CLI's account pushes, lists, lookups and deletes (resolvers.py answers)."""
        assert self.claims is not None
        answer = self.claims[1](subject, payload, self._server())
        if answer.log:
            self.log(answer.log_level, answer.log)
        if reply and answer.payload is not None:
            self.routes.route_into(self.system.sublist, reply.encode(), None, -1, answer.payload + b"\r\n")

    # -- USER.INFO --------------------------------------------------------------------------------------

    def _user_info_in(self, account: Account | None) -> Callable[..., None]:
        def handle(subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
            if not reply:
                return
            client = self.host.clients.get(origin.client_id) if origin is not None else None
            if client is None:
                body: dict[str, Any] = {"server": self._server(), "error": {"code": 400}}
            else:
                acc, jwt = _account_name(client), client.jwt_user
                data: dict[str, Any] = {"user": jwt.user if jwt else client.user_name, "account": acc,
                                        "account_name": jwt.account_name if jwt else acc}
                if jwt is not None and jwt.name:  # operator mode: the user JWT's name
                    data["user_name"] = jwt.name
                permissions = _permissions(client)
                if permissions:
                    data["permissions"] = permissions
                body = {"server": self._server(), "data": data}
            self._send(reply, account, body)
        return handle

    # -- events -----------------------------------------------------------------------------------------

    def _client_info(self, c: ClientView) -> dict[str, Any]:
        info: dict[str, Any] = {"start": rfc3339(self.host.wall_time(c.started)), "host": c.peer[0], "id": c.cid,
                                "acc": _account_name(c)}
        for key, value in (("user", c.user_name), ("name", c.name), ("lang", c.lang), ("ver", c.version)):
            if value:
                info[key] = value
        return info

    def connected(self, c: ClientView) -> None:
        """A client finished its CONNECT: the account's counts, then the CONNECT event."""
        totals = self._totals.setdefault(c.account.name, _AccountTotals())
        totals.conns += 1
        self._send_conns(c.account)
        client = {**self._client_info(c), "name_tag": _account_name(c), "kind": "Client",
                  "client_type": "websocket" if c.websocket else "nats"}
        self._event(f"$SYS.ACCOUNT.{_account_name(c)}.CONNECT", "io.nats.server.advisory.v1.client_connect",
                    {"client": client})

    def disconnected(self, c: ClientView, reason: str) -> None:
        """A connected client is gone: its traffic joins the account's, the counts, the DISCONNECT event."""
        totals = self._totals.setdefault(c.account.name, _AccountTotals())
        totals.conns -= 1
        self._send_conns(c.account)
        client = {**self._client_info(c), "rtt": c.rtt_ns, "stop": rfc3339(time.time()), "name_tag": _account_name(c),
                  "kind": "Client", "client_type": "websocket" if c.websocket else "nats"}
        self._event(f"$SYS.ACCOUNT.{_account_name(c)}.DISCONNECT", "io.nats.server.advisory.v1.client_disconnect",
                    {"client": client, "sent": {"msgs": c.out_msgs, "bytes": c.out_bytes},
                     "received": {"msgs": c.in_msgs, "bytes": c.in_bytes}, "reason": reason})

    def _event(self, subject: str, kind: str, fields: dict[str, Any]) -> None:
        if not self._has_interest(subject):  # nobody would see it: not built (a connect costs no JSON then)
            return
        body = {"type": kind, "id": _event_id(), "timestamp": rfc3339(time.time()), "server": self._server(), **fields}
        self._send(subject, None, body)

    def _send_conns(self, account: Account, subjects: tuple[str, ...] = ()) -> None:
        """nats-server's account_connections event (both subjects), repeated every 30s while it has connections."""
        totals = self._totals.setdefault(account.name, _AccountTotals())
        if totals.conns_timer is not None:
            totals.conns_timer()
            totals.conns_timer = None
        if totals.conns:
            totals.conns_timer = self.timer(CONNS_EVERY, lambda: self._send_conns(account))
        subjects = subjects or tuple(s for s in (f"$SYS.SERVER.ACCOUNT.{account.name}.CONNS",
                                                 f"$SYS.ACCOUNT.{account.name}.SERVER.CONNS") if self._has_interest(s))
        if not subjects:  # nobody listens: the counts (a walk over the clients) are not gathered
            return
        stat = self.host.account_views.account_stat(account)
        body = {"type": "io.nats.server.advisory.v1.account_connections", "id": _event_id(),
                "timestamp": rfc3339(time.time())}
        for subject in subjects:
            self._send(subject, None, {**body, "server": self._server(), **stat})


def _account_name(c: ClientView) -> str:
    """The client's account: in operator mode the user JWT's (jsbroker serves it in $G's subject space)."""
    return str(c.jwt_user.account) if c.jwt_user is not None else c.account.name


def _failure(e: Exception) -> str:
    """An unexpected exception in one line: its type, text and the jsbroker line it came from."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "jsbroker" in f.filename] or \
        traceback.extract_tb(e.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(e).__name__}: {e}{where}"


def disconnect_reason(error: str | None, slow: bool, stopping: bool) -> str:
    """The DISCONNECT event's reason for a connection closed with `error` (None: by the client)."""
    if stopping:
        return "Server Shutdown"
    if slow:
        return "Slow Consumer (Write Deadline)"
    return _REASONS.get(error or "", error or "Client Closed")


def _options(payload: bytes) -> dict[str, Any]:
    """A request body: a JSON object of options (nats-server's 400 for anything else); empty: none."""
    if not payload.strip():
        return {}
    try:
        options = json.loads(payload)
    except ValueError as e:
        raise _Error(400, f"invalid JSON in the request body: {e}") from None
    except RecursionError:  # deeper than Python decodes: past Go's limit nats-server refuses it so, else decodes it
        if _nesting(payload) > GO_JSON_MAX_DEPTH:
            raise _Error(400, "exceeded max depth") from None
        raise
    if not isinstance(options, dict):
        raise _Error(400, f"json: cannot unmarshal {type(options).__name__} into Go value of type an options object")
    return options


def _nesting(payload: bytes) -> int:
    """How deep a JSON text's arrays and objects nest (its strings' brackets not counted)."""
    depth = deepest = 0
    for c in _JSON_STRING.sub(b'""', payload):
        if c in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in b"]}":
            depth -= 1
    return deepest


def _connz(options: dict[str, Any], account: str = "") -> ConnzOptions:
    return _view_options(connz_options, options, account)


def _subsz(options: dict[str, Any], account: str = "") -> SubszOptions:
    return _view_options(subsz_options, options, account)


_Options = TypeVar("_Options")


def _view_options(decode: Callable[[dict[str, Any], str], _Options], options: dict[str, Any], account: str) -> _Options:
    try:
        return decode(options, account)
    except ViewRefusal as e:  # decoded, refused by the view: nats-server's 500 with a null data
        raise _Error(500, str(e)) from None
    except ValueError as e:
        raise _Error(400, str(e)) from None


def _decode(options: dict[str, Any], fields: dict[str, str], struct: str) -> None:
    try:
        go_decode(options, fields, struct)
    except ValueError as e:
        raise _Error(400, str(e)) from None


def _healthz(options: dict[str, Any]) -> HealthzOptions:
    try:
        return healthz_options(options)
    except ValueError as e:
        raise _Error(400, str(e)) from None


def _jsz(options: dict[str, Any], normalise: bool = True) -> JszOptions:
    try:
        return jsz_options(options, normalise)
    except ValueError as e:
        raise _Error(400, str(e)) from None


def _done(error: str | None) -> None:
    """An action's answer: no data, or its error (500), as nats-server's (an untyped nil: no data either way)."""
    if error is not None:
        raise _Error(500, error, typed=False)


def _permissions(client: ClientView) -> dict[str, Any]:
    """The user's permissions as nats-server's USER.INFO shows them (publish/subscribe allow and deny)."""
    if client.perms is None:
        return {}
    rules: Permissions = client.perms.permissions
    out: dict[str, Any] = {}
    for kind, rule in (("publish", rules.publish), ("subscribe", rules.subscribe)):
        if rule is not None:
            part = {k: list(v) for k, v in (("allow", rule.allow), ("deny", rule.deny)) if v}
            if part:
                out[kind] = part
    if rules.response_max:
        out["responses"] = {"max": rules.response_max, "ttl": int(rules.response_expires * _NS)}
    return out
