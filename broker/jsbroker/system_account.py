"""The system account's services, as nats-server 2.15.1's events.go has them on a single server.

In the system account (`system_account`, default `$SYS`):
- Server requests, each answered `{"server": {...}, "data": {...}}` (or `"error"`): `$SYS.REQ.SERVER.PING`
  (STATSZ), `$SYS.REQ.SERVER.PING.<KIND>` and `$SYS.REQ.SERVER.<id>.<KIND>` for the kinds in `SERVER_KINDS`;
  the data comes from the monitoring views (monitor.py), so HTTP and $SYS answer alike. A request body is
  the kind's options as JSON (CONNZ's `subscriptions`, `acc`...), with nats-server's filters (`server_name`,
  `host`, `cluster`, `tags`, `domain`): a server they do not name stays silent.
- Account requests `$SYS.REQ.ACCOUNT.<account>.<KIND>` (`ACCOUNT_KINDS`) and `$SYS.REQ.ACCOUNT.PING.STATZ`.
- Events: `$SYS.ACCOUNT.<account>.CONNECT` / `.DISCONNECT`, the account's connection counts on
  `$SYS.ACCOUNT.<account>.SERVER.CONNS` and `$SYS.SERVER.ACCOUNT.<account>.CONNS` (again every 30s while it has
  connections), and the `$SYS.SERVER.<id>.STATSZ` heartbeat (after 250ms, doubling up to every 10s, sent only
  while someone listens), `$SYS.SERVER.<id>.LAMEDUCK` in lame duck mode, `$SYS.SERVER.<id>.SHUTDOWN` when the
  server stops.
In every other account, as nats-server's system imports: `$SYS.REQ.USER.INFO` (who the requester is),
`$SYS.REQ.ACCOUNT.PING.CONNZ` and `$SYS.REQ.SERVER.PING.CONNZ` (the account's connections) and
`$SYS.REQ.ACCOUNT.PING.STATZ` (its counts), answered straight into the requester's account.

Data flows one way: the broker calls `connected`/`disconnected` and reads nothing back; the services read
the broker through the narrow `SystemHost` and `Views` protocols.
"""

from __future__ import annotations

import json
import secrets
import string
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from .accounts import Account, Routes, Timer
from .config import VERSION, Permissions
from .internal import Origin
from .monitor_options import ConnzOptions, connz_options
from .subjects import subject_matches
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


def _event_id() -> str:
    """An event's id: 22 letters and digits, as nats-server's nuids."""
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(22))


def rfc3339(epoch: float) -> str:
    """Go's time.Time in JSON: UTC, nanoseconds (microseconds here)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 1e6):06d}000Z"


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

    def jsz_body(self) -> dict[str, Any]: ...

    def healthz_body(self) -> dict[str, Any]: ...


class SystemHost(Protocol):
    """What the services read of the server."""

    server_id: str
    server_name: str

    @property
    def clients(self) -> Mapping[int, ClientView]: ...

    def views(self) -> Views: ...

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

    def __init__(self, code: int, description: str) -> None:
        super().__init__(description)
        self.code = code


class _Silent(Exception):
    """No answer (nats-server's errSkipZreq): a filter does not name this server, an account without use."""


@dataclass
class _AccountTotals:
    """An account's traffic by its closed connections (its open ones add theirs) and how many are open."""

    in_msgs: int = 0
    in_bytes: int = 0
    out_msgs: int = 0
    out_bytes: int = 0
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
        sub = Subscription(None, subject, None, b"0", handler)
        self.routes.insert(sub, account.sublist)
        self._subs.append((sub, account))

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
                data: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """nats-server's zReq: decode the options, apply the filters, answer the data or the error."""
        try:
            options = _options(payload)
        except _Error as e:
            self._send(reply, account, {"server": self._server(), "error": {"code": e.code, "description": str(e)}})
            return
        try:
            if not self._filtered_in(options):
                return
            body: dict[str, Any] = {"data": data(options)}
        except _Silent:
            return
        except _Error as e:  # bad options (400) were not decoded: nats-server has no data then, else a null
            body = {"error": {"code": e.code, "description": str(e)}}
            if e.code != 400:
                body = {"data": None, **body}
        self._send(reply, account, {"server": self._server(), **body})

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
        views, h = self.host.views(), self.host
        if kind == "VARZ":
            return views.varz_body()
        if kind == "CONNZ":
            return self._connz(_connz(options))
        if kind == "JSZ":
            return views.jsz_body()
        if kind == "HEALTHZ":
            health = views.healthz_body()
            return {k: v for k, v in health.items() if k != "error"} if health["status"] == "ok" else health
        if kind == "SUBSZ":
            return self._subsz(None, options)
        if kind == "ACCOUNTZ":
            return self._accountz(options)
        now = rfc3339(time.time())
        if kind == "ROUTEZ":
            return {"server_id": h.server_id, "server_name": h.server_name, "now": now, "num_routes": 0, "routes": []}
        if kind == "GATEWAYZ":
            return {"server_id": h.server_id, "now": now, "outbound_gateways": {}, "inbound_gateways": {}}
        if kind == "LEAFZ":
            return {"server_id": h.server_id, "now": now, "leafnodes": 0, "leafs": []}
        if kind == "RAFTZ":  # no Raft groups on a single server
            return {}
        raise _Error(500, f"{kind} is not available from jsbroker (it is the Go runtime's or a cluster's)")

    def _connz(self, options: ConnzOptions) -> dict[str, Any]:
        connz = self.host.views().connz_body(options)
        if options.account and options.account not in self.accounts:  # nats-server: no server, no list
            connz.update(server_id="", connections=None)
        return connz

    def _statsz_request(self, subject: str, reply: str | None, hdr: bytes, payload: bytes,
                        origin: Origin | None) -> None:
        if not reply:
            return
        try:
            options = _options(payload)
        except _Error as e:
            self._send(reply, None, {"server": self._server(), "error": {"code": e.code, "description": str(e)}})
            return
        if self._filtered_in(options):
            self._send(reply, None, {"server": self._server(), "statsz": self._statsz()})

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

    def _subsz(self, account: Account | None, options: dict[str, Any]) -> dict[str, Any]:
        """nats-server's Subsz over the clients' subscriptions (of one account when given)."""
        subs = [(c, s) for c in sorted(self.host.clients.values(), key=lambda c: c.cid) if c.connected
                and (account is None or c.account is account) for s in c.subs.values()]
        test = options.get("test")
        if test:
            subs = [(c, s) for c, s in subs if _matches(s.subject, str(test))]
        offset, limit = _int_option(options, "offset", 0), _int_option(options, "limit", 1024) or 1024
        body: dict[str, Any] = {"server_id": self.host.server_id, "now": rfc3339(time.time()),
                                "num_subscriptions": len(subs), "num_cache": 0, "num_inserts": 0, "num_removes": 0,
                                "num_matches": 0, "cache_hit_rate": 0.0, "max_fanout": 0, "avg_fanout": 0.0,
                                "total": len(subs), "offset": offset, "limit": limit}
        if account is not None or options.get("subscriptions"):
            listed = []
            for c, s in subs[offset:offset + limit]:
                item: dict[str, Any] = {"account": c.account.name, "account_tag": c.account.name,
                                        "subject": s.subject, "sid": s.sid.decode(), "msgs": s.delivered,
                                        "cid": c.cid}
                if s.queue:
                    item["qgroup"] = s.queue
                listed.append(item)
            body["subscriptions_list"] = listed
        return body

    def _accountz(self, options: dict[str, Any]) -> dict[str, Any]:
        now = rfc3339(time.time())
        name = options.get("account")
        if name:
            account = self.accounts.get(str(name))
            if account is None:
                raise _Error(500, f"Account {name} does not exist")
            return {"server_id": self.host.server_id, "now": now, "system_account": self.system.name,
                    "account_detail": self._account_info(account)}
        return {"server_id": self.host.server_id, "now": now, "system_account": self.system.name,
                "accounts": sorted(self.accounts)}

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
        h = self.host
        if kind == "STATZ" and name == "PING":
            return self._account_statz(options, None)
        account = self.accounts.get(name)
        if kind == "JSZ":
            return self._account_jsz(account, name, options)
        if kind == "CONNZ":
            return self._connz(_connz(options, name))
        if kind == "LEAFZ":
            return {"server_id": h.server_id, "now": rfc3339(time.time()), "leafnodes": 0, "leafs": []}
        if kind == "STATZ":
            return self._account_statz(options, name)
        if account is None:
            raise _Error(500, f"Account {name} does not exist")
        if kind == "SUBSZ":
            return self._subsz(account, options)
        return self._account_info(account)

    def _account_jsz(self, account: Account | None, name: str, options: dict[str, Any]) -> dict[str, Any]:
        """nats-server's JszAccount: the account's own JetStream use (never the server's totals)."""
        if self.host.jetstream_domain() is None:
            raise _Error(500, "jetstream not enabled")
        if account is None:
            raise _Error(500, f'account "{name}" not found')
        streams, consumers, config = (_bool_option(options, k) for k in ("streams", "consumer", "config"))
        detail = self.host.jetstream_account(name, streams, consumers, config)
        if detail is None:
            raise _Error(500, f'account "{name}" not jetstream enabled')
        return detail

    def _account_info(self, account: Account) -> dict[str, Any]:
        """nats-server's accountInfo (INFO): the account's use, its imports (the system ones too) and exports."""
        conns = [c for c in self.host.clients.values() if c.connected and c.account is account]
        imports = [{"subject": imp.subject, "account": imp.account, "local_subject": imp.local,
                    "type": "service" if imp.service else "stream", "invalid": False, "share": False,
                    "tracking": False} for imp in account.settings.imports]
        system = [("$SYS.REQ.USER.INFO", f"$SYS.REQ.USER.{account.name}.INFO", True)]
        if account is not self.system:  # in nats-server's order
            system = [("$SYS.REQ.ACCOUNT.PING.CONNZ", f"$SYS.REQ.ACCOUNT.{account.name}.CONNZ", False),
                      ("$SYS.REQ.SERVER.PING.CONNZ", f"$SYS.REQ.ACCOUNT.{account.name}.CONNZ", False),
                      ("$SYS.REQ.ACCOUNT.PING.STATZ", f"$SYS.REQ.ACCOUNT.{account.name}.STATZ", False), *system]
            if not account.jetstream and self.host.jetstream_domain() is not None:  # JetStream's refusal (10039)
                system.append(("$JS.API.>", "$JS.API.>", True))
        imports += [{"subject": subject, "account": self.system.name, "to": local, "local_subject": local,
                     "type": "service", "invalid": False, "share": share, "tracking": False}
                    for local, subject, share in system]
        info: dict[str, Any] = {
            "account_name": account.name, "update_time": rfc3339(self.host.started_at()), "expired": False,
            "complete": True, "jetstream_enabled": account.jetstream and self.host.jetstream_domain() is not None,
            "leafnode_connections": 0, "client_connections": len(conns), "subscriptions": account.sublist.count,
        }
        if imports:  # nats-server's order is its map's (random): sorted here
            info["imports"] = sorted(imports, key=lambda i: (i["local_subject"], i["subject"]))
        exports = [{"subject": e.subject, "type": "service", "response_type": e.response_type.capitalize()}
                   if e.service else {"subject": e.subject, "type": "stream"} for e in account.settings.exports]
        if exports:
            info["exports"] = exports
        info.update(name_tag=account.name, sublist_stats={"num_subscriptions": account.sublist.count, "num_cache": 0,
                                                          "num_inserts": 0, "num_removes": 0, "num_matches": 0,
                                                          "cache_hit_rate": 0.0, "max_fanout": 0, "avg_fanout": 0.0})
        return info

    def _account_statz(self, options: dict[str, Any], name: str | None) -> dict[str, Any]:
        """nats-server's AccountStatz: the accounts with connections (all named ones with include_unused)."""
        wanted = [name] if name else [str(a) for a in options.get("accounts") or ()]
        unused = bool(options.get("include_unused"))
        names = wanted or sorted(self.accounts)
        stats = [self._account_stat(self.accounts[n]) for n in names if n in self.accounts]
        stats = [s for s in stats if unused or s["conns"]]
        if not stats and not unused:
            raise _Silent
        return {"server_id": self.host.server_id, "now": rfc3339(time.time()), "account_statz": stats}

    def _account_stat(self, account: Account) -> dict[str, Any]:
        conns = [c for c in self.host.clients.values() if c.connected and c.account is account]
        totals = self._totals.get(account.name) or _AccountTotals()

        def traffic(msgs: int, size: int) -> dict[str, Any]:
            zero = {"msgs": 0, "bytes": 0}
            return {"msgs": msgs, "bytes": size, "gateways": zero, "routes": zero, "leafs": zero}

        return {"acc": account.name, "name": account.name, "conns": len(conns), "leafnodes": 0,
                "total_conns": len(conns), "num_subscriptions": account.sublist.count,
                "sent": traffic(totals.out_msgs + sum(c.out_msgs for c in conns),
                                totals.out_bytes + sum(c.out_bytes for c in conns)),
                "received": traffic(totals.in_msgs + sum(c.in_msgs for c in conns),
                                    totals.in_bytes + sum(c.in_bytes for c in conns)),
                "slow_consumers": 0}

    def _conns_request(self, name: str, reply: str | None, payload: bytes) -> None:
        """Another server asking for an account's connection counts: answered only when it has some here."""
        account = self.accounts.get(name)
        if account is None or not reply:
            return
        try:
            asked = json.loads(payload) if payload else {"account": name}
        except ValueError:
            return
        if isinstance(asked, dict) and asked.get("account", name) == name and self._account_stat(account)["conns"]:
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
        totals.in_msgs += c.in_msgs
        totals.in_bytes += c.in_bytes
        totals.out_msgs += c.out_msgs
        totals.out_bytes += c.out_bytes
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
        stat = self._account_stat(account)
        body = {"type": "io.nats.server.advisory.v1.account_connections", "id": _event_id(),
                "timestamp": rfc3339(time.time())}
        for subject in subjects:
            self._send(subject, None, {**body, "server": self._server(), **stat})


def _account_name(c: ClientView) -> str:
    """The client's account: in operator mode the user JWT's (jsbroker serves it in $G's subject space)."""
    return str(c.jwt_user.account) if c.jwt_user is not None else c.account.name


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
    if not isinstance(options, dict):
        raise _Error(400, f"json: cannot unmarshal {type(options).__name__} into Go value of type an options object")
    return options


def _connz(options: dict[str, Any], account: str = "") -> ConnzOptions:
    try:
        return connz_options(options, account)
    except ValueError as e:
        raise _Error(400, str(e)) from None


def _int_option(options: dict[str, Any], key: str, default: int) -> int:
    value = options.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Error(400, f"json: cannot unmarshal {type(value).__name__} into Go struct field {key} of type int")
    return value


def _bool_option(options: dict[str, Any], key: str) -> bool:
    value = options.get(key)  # null: Go leaves the field false
    if value is not None and not isinstance(value, bool):
        raise _Error(400, f"json: cannot unmarshal {type(value).__name__} into Go struct field {key} of type bool")
    return bool(value)


def _matches(subject: str, literal: str) -> bool:
    return subject_matches(subject, literal)


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
