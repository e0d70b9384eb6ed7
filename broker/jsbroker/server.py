"""The broker: listener, connection registry and lifecycle; implements `InternalBus` over the router.

`Broker` owns everything with a lifetime: the listening socket, the connections, the monitoring
endpoint and the optional JetStream service (one per account with JetStream, each reached only through
its account's `AccountBus`). Its own `InternalBus` is the global account's. Delivery itself belongs to
`router.py`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from . import __version__, info, lameduck, passwords
from .account_bus import AccountBus
from .account_views import AccountViews
from .accounts import Accounts
from .config import (GLOBAL_ACCOUNT, VERSION, AccountLimits, BrokerConfig, ConfigError, JetStreamSettings,
                     WebSocketSettings)
from .connection import Connection
from .internal import BatchHandler, Delivery, InterestListener, InterestWatch, InternalHandler, InternalSubscription
from .listen import advertised, dual_stack_socket, host_port
from .logs import Logger, get_logger
from .router import Router
from .sublist import Subscription
from .system_account import SystemServices, disconnect_reason

if TYPE_CHECKING:  # imported at start with TLS on: the ssl context code is on no other path
    import ssl

    from .auth_callout import ServerKeys
    from .accounts import Account
    from .config import OperatorSettings
    from .operator_accounts import OperatorAccounts
    from .resolvers import ClaimsAnswerer, DirResolver, MemoryResolver
    from .tls import TlsContext
    from .websocket import Origin


def friendly_bytes(value: int) -> str:
    """nats-server's banner sizes ("17.66 GB", powers of 1024); jsbroker's -1 is no limit."""
    if value < 0:
        return "unlimited"
    if value < 1024:
        return f"{value} B"
    exp = min(int(math.log(value, 1024)), 6)
    return f"{value / 1024 ** exp:.2f} {'KMGTPE'[exp - 1]}B"


def _traffic(conn: Connection) -> tuple[int, int, int, int]:
    return conn.in_msgs, conn.in_bytes, conn.out_msgs, conn.out_bytes


def _resolver(operator: OperatorSettings) -> MemoryResolver | DirResolver:
    """Operator mode's account JWTs; its JWT code is imported only then (a plain start skips it)."""
    from .resolvers import resolver_for

    return resolver_for(operator)


def _claims_answerer(operator: OperatorSettings, resolver: MemoryResolver | DirResolver, in_use: Callable[[str], bool],
                     updated: Callable[[str, str], None]) -> tuple[tuple[str, ...], ClaimsAnswerer]:
    """The system account's `$SYS.REQ.CLAIMS.*` answers (operator mode only, like its JWT code)."""
    from .resolvers import claims_answerer

    return claims_answerer(operator, resolver, in_use, updated)


def _jwt_accounts(broker: Broker, operator: OperatorSettings,
                  resolver: MemoryResolver | DirResolver) -> OperatorAccounts:
    """Operator mode's accounts (operator_accounts.py: imported only then, like the rest of its JWT code)."""
    from .operator_accounts import OperatorAccounts
    from .operator_auth import trusted_keys

    def log(level: str, line: str) -> None:
        (broker.log.warning if level == "warning" else broker.log.info)(line)
    def subscriptions(account: Account) -> list[Subscription]:
        return [sub for c in broker.clients.values() if c.account is account for sub in c.subs.values()]
    return OperatorAccounts(broker.accounts, resolver.fetch, trusted_keys(operator.operator), log, time.time,
                            subscriptions)


def _callout_keys() -> ServerKeys:
    """The server's nkey and xkey for auth callout requests (auth_callout.py: imported only when configured)."""
    from .auth_callout import ServerKeys

    return ServerKeys()


def new_server_id() -> str:
    """A nats-server-like id: 'N' + 55 base32 characters (35 random bytes are 56 of them)."""
    return "N" + base64.b32encode(os.urandom(35)).decode()[:55]


class Broker:
    """The NATS server, usable in-process: `async with Broker(port=0, store_dir=...) as b: b.client_url`.

    Implements `jsbroker.internal.InternalBus` for the JetStream service."""

    def __init__(self, config: BrokerConfig | None = None, **kw: Any) -> None:
        if config is None:
            config = BrokerConfig.build(**kw)
        elif kw:
            config = replace(config, **kw)
        self.config = config
        # with an auth callout the server id is the public half of the nkey that signs its requests
        self.callout_keys = _callout_keys() if config.auth.callout is not None else None
        self.server_id = self.callout_keys.server_id if self.callout_keys is not None else new_server_id()
        self.server_name = config.server_name or self.server_id
        self.max_payload = config.max_payload
        self.log: Logger = get_logger("jsbroker", server=self.server_name[:8])
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.router = Router(self)
        self.accounts = Accounts(config.auth, self.router, self._call_later, self.router.sublist,
                                 config.jetstream.account if config.jetstream is not None else None)
        self.bus = AccountBus(self, self.router, GLOBAL_ACCOUNT, self.router.sublist)  # the embedding API's
        self.clients: dict[int, Connection] = {}
        self.port = 0
        self.http_port: int | None = None  # the monitoring listener's port, HTTP or (monitor_tls) HTTPS
        self.monitor_tls = config.https_port is not None
        self.jetstream: Any = None
        self.js_settings = config.jetstream  # with the temp store dir filled in once started
        operator = config.auth.operator
        self.resolver = _resolver(operator) if operator is not None else None  # operator mode's account JWTs
        # operator mode: the resolver's accounts, registered when first needed (operator_accounts.py)
        self.jwt_accounts = _jwt_accounts(self, operator, self.resolver) if operator and self.resolver else None
        self.accounts.added.append(self._account_added)
        self.account_starts: dict[str, asyncio.Task[None]] = {}  # accounts whose JetStream is being started
        self.account_stops: dict[str, asyncio.Task[None]] = {}  # and stopped (a claims update turned it off)
        self.start_time = 0.0
        self.total_connections = 0
        self._closed_traffic = (0, 0, 0, 0)  # in_msgs, in_bytes, out_msgs, out_bytes of closed connections
        self._next_cid = 0
        self._server: asyncio.AbstractServer | None = None
        self._ws_server: asyncio.AbstractServer | None = None  # the websocket port's listener (ws_transport.py)
        self.ws_port: int | None = None
        self.ws_tls: TlsContext | None = None
        self.ws_origins: tuple[Origin, ...] = ()  # websocket.allowed_origins, parsed once
        self.ws_headers = ""  # websocket.headers, as response header lines
        self.ws_handshakes: set[asyncio.Transport] = set()  # websocket sockets not upgraded yet
        self._monitor: Any = None
        self._views: Any = None  # monitor.py's builders for the system account when no monitoring port is open
        self.system: SystemServices | None = None  # the system account's services (system_account.py)
        self.account_views = AccountViews(self, self.accounts.by_name, self.accounts.system)
        self._kicked: set[int] = set()  # clients closed by a KICK request (their DISCONNECT's reason)
        self._stopping = False
        self._tmp_store: str | None = None
        self._info_base: dict[str, Any] = {}
        self._ws_info_base: dict[str, Any] = {}  # websocket clients': the websocket port's address and TLS
        self.xkey = self.callout_keys.xkey if self.callout_keys is not None else info.new_xkey()
        self._drained: asyncio.Event | None = None  # set during shutdown once all clients are gone
        self._draining: set[int] = set()
        self.tls: TlsContext | None = None  # loaded at start: ConfigError names a bad file
        self._tls_watches: list[asyncio.Task[None]] = []
        self.recovering = False  # JetStream is reading its store (start); /healthz says 503
        self.serving = False  # the client listener accepts connections; otherwise /healthz says 503
        self.lame_duck_mode = False  # entered with `lame_duck()`: no new clients, the others are let go
        self._ports_file: Path | None = None
        self.program = "jsbroker"  # the name the start-up lines give (the command sets nats-server under that name)

    # -- lifecycle ----------------------------------------------------------------------------------

    async def __aenter__(self) -> "Broker":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def client_url(self) -> str:
        host = self.config.host if self.config.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"nats://{host}:{self.port}"

    @property
    def http_url(self) -> str | None:
        """The monitoring listener's URL (https:// with `https_port`)."""
        if self.http_port is None:
            return None
        host = self.config.http_host or self.config.host
        host = host if host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"{'https' if self.monitor_tls else 'http'}://{host}:{self.http_port}"

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.start_time = self.loop.time()
        self._log_start()
        cfg = self.config
        if cfg.tls is not None:
            from .tls import TlsContext

            self.tls = TlsContext.load(cfg.tls)
        monitor_port = self._monitor_port()
        # The client port bound first (a port in use fails the start at once), accepting last; it yields to
        # the loop (as every create_server does) before the monitoring port exists, so an empty store's
        # start gets to accepting clients without answering a monitoring request in between.
        sock = dual_stack_socket(cfg.host, cfg.port)
        if sock is not None:
            self._server = await self.loop.create_server(self._new_connection, sock=sock, start_serving=False)
        else:
            self._server = await self.loop.create_server(
                self._new_connection, cfg.host, cfg.port, reuse_address=True, backlog=1024, start_serving=False
            )
        self.port = self._server.sockets[0].getsockname()[1]
        if cfg.websocket is not None:
            await self._bind_websocket()
        self._tls_watches = [self.loop.create_task(self._watch_tls(tls)) for tls in self._tls_contexts()
                             if tls.settings.reload_interval > 0]
        # Monitoring next: during the store's recovery /healthz answers 503 (probes see why, not a refusal).
        if monitor_port is not None:
            from .monitor import Monitor

            self._monitor = Monitor(self)
            self.http_port = await self._monitor.start(cfg.http_host or cfg.host, monitor_port,
                                                       self.tls.monitoring if self.tls and self.monitor_tls else None)
            self.log.info(f"Starting {'https' if self.monitor_tls else 'http'} monitor on "
                          f"{host_port(cfg.http_host or cfg.host, self.http_port)}", port=self.http_port)
        self.recovering = True
        await self._start_jetstream()
        self.recovering = False
        if self.accounts.system is not None:
            claims = (_claims_answerer(cfg.auth.operator, self.resolver, self._account_in_use, self._claims_updated)
                      if cfg.auth.operator and self.resolver else None)
            self.system = SystemServices(self, self.accounts.system, self.accounts.by_name, self.router,
                                         self._call_later, claims, self._system_log)
            self.system.start()
        # /healthz turns 200 only once clients can connect.
        self._info_base = self._info_fields()
        if cfg.websocket is not None:
            self._ws_info_base = self._ws_info_fields(cfg.websocket)
        await self._server.start_serving()
        if self._ws_server is not None:
            await self._ws_server.start_serving()
        self.serving = True
        ws = cfg.websocket
        if ws is not None:  # nats-server starts its websocket listener before the client one, and says so first
            self.log.info(f"Listening for websocket clients on {'wss' if self.ws_tls else 'ws'}://"
                          f"{host_port(ws.host, self.ws_port or 0)}", port=self.ws_port)
            if self.ws_tls is None:
                self.log.warning("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")
        self.log.info(f"Listening for client connections on {host_port(cfg.host, self.port)}", port=self.port)
        if self.tls is not None:
            self.log.info("TLS required for client connections", verify_client_certificates=self.tls.settings.verify)
        self._write_ports_file()
        self.log.info("Server is ready", port=self.port, http_port=self.http_port, jetstream=self.jetstream is not None)

    def _write_ports_file(self) -> None:
        """nats-server's `<program>_<pid>.ports`: every URL a listener answers on (a wildcard one: all interfaces')."""
        cfg = self.config
        if cfg.ports_file_dir is None:
            return
        from .listen import WILDCARDS, interface_addresses

        def urls(scheme: str, host: str, port: int) -> list[str]:
            return [f"{scheme}://{host_port(h, port)}" for h in (interface_addresses() if host in WILDCARDS else [host])]

        ports = {"nats": urls("tls" if self.tls else "nats", cfg.host, self.port)}
        if cfg.websocket is not None and self.ws_port is not None:
            ports["websocket"] = urls("wss" if self.ws_tls else "ws", cfg.websocket.host, self.ws_port)
        if self.http_port is not None:
            ports["monitoring"] = urls("https" if self.monitor_tls else "http", cfg.http_host or cfg.host, self.http_port)
        path = Path(cfg.ports_file_dir) / f"{self.program}_{os.getpid()}.ports"
        try:
            path.write_text(json.dumps(ports, separators=(",", ":")))
        except OSError as e:  # as nats-server: logged, and the server runs on
            self.log.error(f"Error writing ports file ({path}): {e.strerror or e}")
            return
        self._ports_file = path

    async def _bind_websocket(self) -> None:
        """The websocket port (websocket.py, ws_transport.py): bound now, serving with the client port."""
        from .tls import TlsContext
        from .websocket import origin_of
        from .ws_transport import WebSocketProtocol

        settings = self.config.websocket
        assert settings is not None
        self.ws_origins = tuple(origin_of(url) for url in settings.allowed_origins)
        self.ws_headers = "".join(f"{name}: {value}\r\n" for name, value in settings.headers)
        if settings.tls is not None:
            self.ws_tls = TlsContext.load(settings.tls)
            self.ws_tls.context.sni_callback = self._current_ws_context
        self._ws_server = await self.loop.create_server(
            lambda: WebSocketProtocol(self, settings), settings.host, settings.port, reuse_address=True, backlog=1024,
            start_serving=False, ssl=self.ws_tls.context if self.ws_tls else None,
            ssl_handshake_timeout=(settings.handshake_timeout or settings.tls.timeout) if settings.tls else None)
        self.ws_port = self._ws_server.sockets[0].getsockname()[1]

    def _monitor_port(self) -> int | None:
        """The monitoring port asked for (nats-server's rules: HTTP or HTTPS, HTTPS only with TLS)."""
        cfg = self.config
        if cfg.http_port is not None and cfg.https_port is not None:
            raise ConfigError(f"monitoring: give http_port ({cfg.http_port}) or https_port ({cfg.https_port}), not both")
        if cfg.https_port is not None and self.tls is None:
            raise ConfigError("https_port serves monitoring with the client port's TLS certificate: configure TLS "
                              "(tls.cert_file and tls.key_file, or --tlscert and --tlskey), or use http_port")
        return cfg.https_port if cfg.https_port is not None else cfg.http_port

    def _log_start(self) -> None:
        """nats-server's first lines (its Git line is jsbroker's version here, its Go build line the runtime)."""
        self.log.info(f"Starting {self.program}", pid=os.getpid())
        self.log.info(f"  Version:  {VERSION}", version=VERSION)
        self.log.info(f"  jsbroker: {__version__}", jsbroker=__version__)
        self.log.debug(f"  Python:   {info.RUNTIME}")
        self.log.info(f"  Name:     {self.server_name}", name=self.server_name)
        self.log.info(f"  ID:       {self.server_id}", id=self.server_id)
        auth = self.config.auth
        if passwords.plaintext([auth.password, *(u.password for u in auth.users if u.nkey is None)]):
            self.log.warning("Plaintext passwords detected, use nkeys or bcrypt")

    def _log_jetstream(self, js: JetStreamSettings) -> None:
        """nats-server's JetStream block (its ASCII-art banner left out), with jsbroker's sync setting."""
        self.log.info("Starting JetStream")
        if self._tmp_store is not None:
            self.log.warning("Temporary storage directory used, data is removed when the server exits")
        self.log.info("---------------- JETSTREAM ----------------")
        self.log.info(f"  Max Memory:      {friendly_bytes(js.max_memory)}", max_memory=js.max_memory)
        self.log.info(f"  Max Storage:     {friendly_bytes(js.max_storage)}", max_storage=js.max_storage)
        self.log.info(f'  Store Directory: "{js.store_dir}"', store_dir=js.store_dir)
        if js.domain:
            self.log.info(f"  Domain:          {js.domain}", domain=js.domain)
        self.log.info(f"  Sync:            {'always' if js.sync_always else f'every {js.sync_interval:g}s'}")
        self.log.info(f"  API Level:       {info.API_LEVEL}")
        self.log.info("-------------------------------------------")

    async def _start_jetstream(self) -> None:
        js = self.config.jetstream
        if js is None:
            return
        system = self.accounts.system
        if system is not None and system.jetstream:  # refused only with JetStream on, as nats-server refuses it
            raise ConfigError(f"Not allowed to enable JetStream on the system account: remove jetstream from account "
                              f"{system.name}, or name another account as system_account")
        try:
            from .jetstream.service import JetStreamServer
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.jetstream.service":
                raise  # a broken JetStream must fail loudly, not silently turn into core-only
            self.log.warning("jetstream service not installed, running core only")
            return
        if js.store_dir is None:
            import tempfile

            self._tmp_store = tempfile.mkdtemp(prefix="jsbroker-")
            js = replace(js, store_dir=Path(self._tmp_store))
        try:
            Path(js.store_dir).mkdir(parents=True, exist_ok=True)  # type: ignore[arg-type]
        except OSError as e:
            raise ConfigError(f"Can't start JetStream: could not create storage directory - {e}") from None
        self.js_settings = js
        self._log_jetstream(js)
        self.jetstream = JetStreamServer(js)
        for account in self.accounts.with_jetstream():  # each its own streams, API and bus (account_bus.py)
            limits = account.settings.jetstream
            assert limits is not None
            self.jetstream.add_account(account.name, self._account_bus(account), limits)
        await self.jetstream.start()
        self.accounts.refuse_jetstream(self.jetstream.refusal)
        usage = self.jetstream.info()
        if usage["streams"]:
            self.log.info(f"  Recovered {usage['streams']} streams, {usage['consumers']} consumers, "
                          f"{usage['messages']} messages", **{k: usage[k] for k in ("streams", "consumers", "messages")})

    def _tls_contexts(self) -> list[TlsContext]:
        return [tls for tls in (self.tls, self.ws_tls) if tls is not None]

    def reload(self) -> bool:
        """SIGHUP: re-read the TLS certificate, key and CA files (the client port's, the websocket port's).
        New connections use them, connections already up keep theirs; on an error the current
        certificates stay (False)."""
        contexts = self._tls_contexts()
        if not contexts:
            self.log.info("reload requested: nothing to reload (TLS is off)")
        return all([self._reload(tls) for tls in contexts])

    def _reload(self, tls: TlsContext) -> bool:
        try:
            tls.reload()
        except ConfigError as e:
            self.log.error("reload failed, keeping the current certificates", error=str(e))
            return False
        self.log.info("TLS certificates reloaded", cert_file=tls.settings.cert_file)
        return True

    async def _watch_tls(self, tls: TlsContext) -> None:
        """Reload the certificates when their files change (a rotated Secret, a renewed certificate)."""
        while True:
            await asyncio.sleep(tls.settings.reload_interval)
            if tls.changed():
                self._reload(tls)

    def _current_ws_context(self, connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        """The websocket listener's TLS context hands each handshake to the current (reloaded) one, as
        nats-server's GetConfigForClient does."""
        assert self.ws_tls is not None
        connection.context = self.ws_tls.context

    async def lame_duck(self) -> None:
        """nats-server's lame duck mode (see lameduck.py); the caller stops the broker when it returns."""
        if self.lame_duck_mode or self._server is None:
            return
        self.lame_duck_mode = True
        cfg = self.config
        self.log.info("Entering lame duck mode, stop accepting new clients")
        if self.system is not None:
            self.system.lame_duck()
        self._server.close()
        if self._ws_server is not None:
            self._ws_server.close()
        self.serving = False
        self._release_waiting_pulls(tell=False)  # as nats-server in lame duck mode
        await self._stop_jetstream()
        clients = list(self.clients.values())
        if not clients:
            return
        for c in clients:
            if c.protocol >= 1 and c.connected:
                c.send(self.info_line(c, ldm=True))
        await asyncio.sleep(cfg.lame_duck_grace_period)
        self.log.info("Closing existing clients", count=len(clients))
        pauses = lameduck.pauses(len(clients), cfg.lame_duck_duration, cfg.lame_duck_grace_period)
        for c, pause in zip(clients, [*pauses, 0.0]):
            c.close(None)
            if pause:
                await asyncio.sleep(pause)

    async def stop(self) -> None:
        """Lame-duck style: stop accepting, flush pending output, close connections, stop services."""
        self.log.info("Initiating Shutdown...")
        self._stopping = True
        if self.system is not None:
            self.system.stop()
            self.system = None
        for watch in self._tls_watches:
            watch.cancel()
        self._tls_watches = []
        if self._server is not None:
            self._server.close()
            self.serving = False
        if self._ws_server is not None:
            self._ws_server.close()
        for handshake in list(self.ws_handshakes):  # no client yet: nothing to say to it
            handshake.abort()
        self._release_waiting_pulls(tell=True)
        self.router.flush()
        await self._close_clients()
        for server in (self._server, self._ws_server):
            if server is not None:
                await server.wait_closed()
        self._server = self._ws_server = None
        await self._stop_jetstream()
        if self._monitor is not None:
            await self._monitor.stop()
            self._monitor = None
        if self._tmp_store is not None:
            import shutil

            shutil.rmtree(self._tmp_store, ignore_errors=True)
            self._tmp_store = None
        if self._ports_file is not None:
            self._ports_file.unlink(missing_ok=True)
        self.log.info("Server Exiting..")

    def _release_waiting_pulls(self, tell: bool) -> None:
        if self.jetstream is not None:
            self.jetstream.release_waiting_pulls(tell)

    async def _stop_jetstream(self) -> None:
        await asyncio.gather(*self.account_starts.values(), *self.account_stops.values(), return_exceptions=True)
        if self.jetstream is not None:
            self.log.info("Initiating JetStream Shutdown...")
            await self.jetstream.stop()
            self.jetstream = None
            self.log.info("JetStream Shutdown")

    async def _close_clients(self) -> None:
        """Close every client and wait (up to `write_deadline`) until their output has been sent."""
        closing = [c for c in self.clients.values() if c.transport is not None]
        if not closing:
            return
        self._drained = asyncio.Event()
        self._draining = {c.cid for c in closing}
        for c in closing:
            c.close(None)
        try:
            await asyncio.wait_for(self._drained.wait(), self.config.write_deadline)
        except asyncio.TimeoutError:
            self.log.warning("clients did not drain before shutdown", count=len(self._draining))
            for c in closing:
                if c.cid in self._draining and c.transport is not None:
                    c.transport.abort()
        self._drained = None

    def connection_gone(self, conn: Connection) -> None:
        """The transport of `conn` is closed and its output sent (or dropped)."""
        self.unregister(conn)
        if self._drained is not None:
            self._draining.discard(conn.cid)
            if not self._draining:
                self._drained.set()

    def _call_later(self, seconds: float, callback: Callable[[], None]) -> Callable[[], None]:
        return self.loop.call_later(seconds, callback).cancel

    # -- connections --------------------------------------------------------------------------------

    def _new_connection(self) -> Connection:
        return self.new_connection()

    def new_connection(self, websocket: bool = False) -> Connection:
        self._next_cid += 1
        return Connection(self, self._next_cid, websocket)

    def register(self, conn: Connection) -> bool:
        if len(self.clients) >= self.config.max_connections:
            conn.close("maximum connections exceeded")
            return False
        self.clients[conn.cid] = conn
        self.total_connections += 1
        return True

    def unregister(self, conn: Connection) -> None:
        if self.clients.pop(conn.cid, None) is None:
            return
        self._closed_traffic = tuple(map(sum, zip(self._closed_traffic, _traffic(conn))))  # type: ignore[assignment]
        for sub in list(conn.subs.values()):
            self.router.remove(sub)
        conn.subs.clear()
        kicked = conn.cid in self._kicked
        self._kicked.discard(conn.cid)
        if conn.connected:
            self.account_views.closed(conn)
        if self.system is not None and conn.connected:
            reason = "Kicked" if kicked else disconnect_reason(conn.close_error, conn.slow, self._stopping)
            self.system.disconnected(conn, reason)

    def registered_account(self, name: str) -> Account | None:
        """The account `name`; in operator mode registered now from the resolver's JWT if it is not yet, as
        nats-server's account lookup (a CONNZ of an account) registers it. None: there is no such account."""
        if self.jwt_accounts is not None:
            return self.jwt_accounts.account(name)
        return self.accounts.lookup(name)

    def _account_in_use(self, account: str) -> bool:
        """Operator mode: whether the account is registered (nats-server has it loaded)."""
        return self.accounts.lookup(account) is not None

    def _claims_updated(self, key: str, token: str) -> None:
        """A pushed account JWT (nsc push) applied to a registered account as nats-server's claims update does:
        exports and imports (operator_accounts.py), JetStream limits at once, JetStream started or stopped."""
        assert self.jwt_accounts is not None
        account = self.jwt_accounts.replaced(key, token)
        if account is None:
            return
        limits = account.settings.jetstream
        js = self.jetstream.accounts.get(key) if self.jetstream is not None else None
        if js is not None and limits is not None:
            js.settings = replace(js.settings, account=limits)
        elif js is None and limits is not None and self.jetstream is not None:
            self.accounts.allow_jetstream(account)
            self._start_account_jetstream(account, limits)
        elif js is not None:
            self._stop_account_jetstream(account)

    def _account_added(self, account: Account) -> None:
        """An account registered while the server runs (operator mode): its JetStream, when its limits enable
        it, started now (its streams restored from `<store_dir>/jetstream/<account>/`); its clients wait for
        `account_starts[name]` before their CONNECT is answered, as nats-server's read loop waits."""
        if self.system is not None:
            self.system.account_added(account)
        limits = account.settings.jetstream
        if self.jetstream is not None and limits is not None:
            self._start_account_jetstream(account, limits)

    def _account_bus(self, account: Account) -> AccountBus:
        """The bus of the account's JetStream: its sublist, its service imports' replies, its stream imports."""
        return AccountBus(self, self.router, account.name, account.sublist, partial(account.deliver_reply, self.router),
                          partial(account.add_internal_shadows, routes=self.router))

    def _start_account_jetstream(self, account: Account, limits: AccountLimits) -> None:
        """The account's JetStream, its API answering once its streams are read (after the stop of a JetStream
        the account had before, when a claims update turned it off)."""
        assert self.jetstream is not None
        js = self.jetstream.add_account(account.name, self._account_bus(account), limits)
        js.hold_requests()
        name, stopping = account.name, self.account_stops.get(account.name)

        async def start() -> None:
            if stopping is not None:
                await stopping
            await js.start()

        def started(task: asyncio.Task[None]) -> None:
            self.account_starts.pop(name, None)
            if not task.cancelled() and task.exception() is not None:
                self.log.error(f"JetStream of account {name} did not start: {task.exception()}")
        task = self.account_starts[name] = self.loop.create_task(start())
        task.add_done_callback(started)

    def _stop_account_jetstream(self, account: Account) -> None:
        """A claims update turned the account's JetStream off: its API answers 10039, its streams are closed
        (kept on disk, back when JetStream is turned on again), as nats-server does."""
        assert self.jetstream is not None
        js = self.jetstream.accounts.pop(account.name)
        self.accounts.deny_jetstream(account)
        name, starting = account.name, self.account_starts.get(account.name)

        async def stop() -> None:
            if starting is not None:  # its streams are being read: they are closed once they are
                await asyncio.gather(starting, return_exceptions=True)
            await js.stop()
        task = self.account_stops[name] = self.loop.create_task(stop())
        task.add_done_callback(lambda _: self.account_stops.pop(name, None) if self.account_stops.get(name) is task
                               else None)

    def _system_log(self, level: str, line: str) -> None:
        (self.log.error if level == "error" else self.log.debug)(line)

    def client_connected(self, conn: Connection) -> None:
        """`conn` finished its first CONNECT: the system account's CONNECT event."""
        if self.system is not None:
            self.system.connected(conn)

    # -- what the system account's services read (system_account.SystemHost) ------------------------

    def views(self) -> Any:
        if self._monitor is not None:
            return self._monitor
        if self._views is None:  # the builders without their HTTP listener
            from .monitor import Monitor

            self._views = Monitor(self)
            self._views.started = self.wall_time(self.start_time)
        return self._views

    def kick(self, cid: int) -> str | None:
        conn = self.clients.get(cid)
        if conn is None:
            return "no such client or leafnode id"
        self.log.info("Client kicked by a system account request", cid=cid)
        self._kicked.add(cid)
        conn.close(None)
        return None

    def lame_duck_client(self, cid: int) -> str | None:
        conn = self.clients.get(cid)
        if conn is None:
            return "no such client id"
        if conn.protocol < 1 or not conn.ponged:  # as nats-server: a client that announced INFO updates, past its PONG
            return "client does not support Lame Duck Mode or is not ready to receive the notification"
        conn.send(self.info_line(conn, ldm=True))
        return None

    def listen_host(self) -> str:
        return self.config.host

    def jetstream_domain(self) -> str | None:
        return None if self.jetstream is None or self.js_settings is None else self.js_settings.domain or ""

    def jetstream_account(self, name: str, streams: bool, consumers: bool, config: bool) -> dict[str, Any] | None:
        if self.jetstream is None or name not in self.jetstream.accounts:
            return None
        detail: dict[str, Any] = self.jetstream.account_detail(name, streams, consumers, config)
        return detail

    def started_at(self) -> float:
        return self.wall_time(self.start_time)

    def wall_time(self, loop_time: float) -> float:
        return time.time() - (self.loop.time() - loop_time)

    def traffic(self) -> dict[str, int]:
        """Messages and bytes (headers + payloads) from and to clients since the start, closed ones too."""
        totals = tuple(map(sum, zip(self._closed_traffic, *(_traffic(c) for c in self.clients.values()))))
        return dict(zip(("in_msgs", "in_bytes", "out_msgs", "out_bytes"), totals))

    def _info_fields(self) -> dict[str, Any]:
        cfg = self.config
        host, port = cfg.host, self.port
        if cfg.client_advertise:  # nats-server: the advertised address replaces host and port
            host, port = advertised(cfg.client_advertise, port)
        return info.server_fields(server_id=self.server_id, server_name=self.server_name, version=VERSION, host=host,
                                  port=port, auth_required=cfg.auth.required,
                                  tls=self.tls.info_fields() if self.tls is not None else {},
                                  max_payload=cfg.max_payload, jetstream=self.jetstream is not None)

    def _ws_info_fields(self, ws: WebSocketSettings) -> dict[str, Any]:
        """As nats-server: the websocket port's address and its own TLS, not the client port's."""
        assert self.ws_port is not None
        cfg = self.config
        return info.server_fields(server_id=self.server_id, server_name=self.server_name, version=VERSION,
                                  host=ws.host, port=self.ws_port, auth_required=cfg.auth.required,
                                  tls={"tls_required": True, "tls_available": True} if self.ws_tls is not None else {},
                                  max_payload=cfg.max_payload, jetstream=self.jetstream is not None)

    def info_line(self, conn: Connection, ldm: bool = False, connect_info: bool = False) -> bytes:
        js = self.config.jetstream
        head = self._ws_info_base if conn.websocket else self._info_base
        return info.info_line(head, client_id=conn.cid, client_ip=conn.peer[0] or "127.0.0.1",
                              nonce=conn.nonce, domain=js.domain if js is not None and head.get("jetstream") else None,
                              xkey=self.xkey, ldm=ldm, connect_info=connect_info,
                              account=conn.jwt_user.account if conn.jwt_user is not None else conn.account.name,
                              system=conn.account is self.accounts.system)

    # -- InternalBus: the global account's (embedding), through its AccountBus ----------------------------

    @property
    def account_name(self) -> str:
        return self.bus.account_name

    def subscribe_internal(self, subject: str, handler: InternalHandler, queue: str | None = None) -> Subscription:
        return self.bus.subscribe_internal(subject, handler, queue)

    def subscribe_batched(self, subject: str, handler: BatchHandler) -> Subscription:
        return self.bus.subscribe_batched(subject, handler)

    def unsubscribe_internal(self, sub: InternalSubscription) -> None:
        self.bus.unsubscribe_internal(sub)

    def publish(self, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> bool:
        return self.bus.publish(subject, reply, hdr, payload)

    def deliver(self, target: str, msgs: Sequence[Delivery]) -> bool:
        return self.bus.deliver(target, msgs)

    def before_output(self, callback: Callable[[], None]) -> None:
        self.bus.before_output(callback)

    def wait_for_drain(self, subject: str, callback: Callable[[], None]) -> bool:
        return self.bus.wait_for_drain(subject, callback)

    def has_interest(self, subject: str, queue: str | None = None) -> bool:
        return self.bus.has_interest(subject, queue)

    def watch_interest(self, subject: str, listener: InterestListener, queue: str | None = None) -> InterestWatch:
        return self.bus.watch_interest(subject, listener, queue)

    def has_literal_interest(self, subject: str) -> bool:
        return self.bus.has_literal_interest(subject)
