"""One client connection: asyncio.Protocol glue between the transport, the parser and the router.

A connection owns its CONNECT options, its subscriptions by sid, its output buffer and its liveness
(server PINGs, auth timeout). Output is only appended to `out` and the connection put on the router's
pending-flush list; the router writes each touched connection once per read (see `router.Router`).
A client that reads slower than it is sent to meets nats-server's rules (slow_consumer.py): the router
holds its publishers briefly past the stall gate and marks it a slow consumer past max_pending; the
connection times its blocked writes against write_deadline. Past the transport's high-water mark
(`congested`) internal producers wait for it to drain (`Router.wait_for_drain`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import ssl
import time
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from . import passwords
from .config import VERSION, AuthSettings, BrokerConfig, CalloutSettings, OperatorSettings, User
from .internal import Origin
from .listen import host_port, plain_ip
from .nkeys import new_nonce, signed
from .permissions import PermissionChecker
from .protocol import ProtocolError, Parser
from .router import RoutedConnection
from .subjects import is_valid_publish_subject, is_valid_subject
from .sublist import Subscription

if TYPE_CHECKING:
    from . import auth_callout  # imported by the first CONNECT a callout is asked about
    from .accounts import Accounts
    from .logs import Logger
    from .operator_accounts import OperatorAccounts
    from .operator_auth import JwtUser  # operator mode's JWT code: imported by its first CONNECT
    from .resolvers import Resolver
    from .router import Router
    from .tls import TlsContext


class ConnectionHost(Protocol):
    """What a connection uses of the server that accepted it (server.py's `Broker`): the bus, the accounts,
    settings and TLS, its INFO line, the connection registry, and operator mode's resolver."""

    jwt_accounts: OperatorAccounts | None  # operator mode: the accounts of the resolver's JWTs
    account_starts: dict[str, asyncio.Task[None]]  # accounts whose JetStream is being started (their streams read)
    server_name: str
    callout_keys: auth_callout.ServerKeys | None  # the nkey and xkey of auth callout requests, when configured

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def log(self) -> Logger: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def router(self) -> Router: ...

    @property
    def accounts(self) -> Accounts: ...

    @property
    def tls(self) -> TlsContext | None: ...

    @property
    def resolver(self) -> Resolver | None: ...

    def info_line(self, conn: Connection, ldm: bool = False, connect_info: bool = False) -> bytes: ...

    def register(self, conn: Connection) -> bool: ...  # False: refused (and closed), max_connections reached

    def unregister(self, conn: Connection) -> None: ...

    def connection_gone(self, conn: Connection) -> None: ...  # its transport closed, its output sent

    def client_connected(self, conn: Connection) -> None: ...  # its first CONNECT accepted (system events)


def _pause_again(raw: asyncio.Transport) -> None:
    """Pause `raw` for real. Some Python 3.11 releases (Debian 12's 3.11.2; not 3.11.7) re-add the reader a new
    transport schedules for itself after `connection_made` even when `connection_made` paused it; the
    paused flag stays set, so a second `pause_reading` alone would do nothing: resume, then pause. Else the
    bytes before the upgrade are read: a TLS-first ClientHello fed to the parser, or a client's EOF taken by the
    TLS layer before its handshake began (no "TLS handshake error" logged)."""
    if not raw.is_closing() and not raw.is_reading():
        raw.resume_reading()
        raw.pause_reading()


def _callout() -> Any:
    """auth_callout.py (and the JWT code it uses), imported only once a callout is configured and asked."""
    from . import auth_callout

    return auth_callout


OK = b"+OK\r\n"
PING = b"PING\r\n"
PONG = b"PONG\r\n"


def err_line(text: str) -> bytes:
    return f"-ERR '{text}'\r\n".encode()


def send_alert_on_failure(raw: asyncio.Transport) -> None:
    """Make a failed server-side handshake send its TLS alert before the socket closes, as nats-server does:
    asyncio's TLS protocol drops the alert ("certificate required", "unknown ca"), and with TLS 1.3 the
    client then sees only a closed socket after it believes the handshake succeeded. asyncio internals
    (3.11-3.13 sslproto); without them the connection is still refused, only less clearly."""
    tls = raw.get_protocol()
    fatal, flush = getattr(tls, "_fatal_error", None), getattr(tls, "_process_outgoing", None)
    if fatal is None or flush is None:
        return

    def flush_then_fail(exc: BaseException, message: str = "Fatal error on transport") -> None:
        if isinstance(exc, ssl.SSLError):
            try:
                flush()
            except Exception:  # the socket may already be gone
                pass
        fatal(exc, message)

    tls._fatal_error = flush_then_fail  # type: ignore[attr-defined]


class Connection(RoutedConnection, asyncio.Protocol):
    """A client connection: the router's compiled `RoutedConnection` (its subject space, CONNECT options, output
    and counters, backpressure state) plus the protocol's glue, authentication and liveness."""

    def __init__(self, broker: ConnectionHost, cid: int, websocket: bool = False) -> None:
        account = broker.accounts.global_account  # the user's account, bound at CONNECT (accounts.py)
        super().__init__(cid, account.sublist, Origin(cid, False))  # sublist: what it publishes and subscribes in
        self.account = account
        self.broker = broker
        self.websocket = websocket  # under ws_transport's adapter: TLS (if any) is the websocket port's
        self.cookie_credentials: dict[str, str] = {}  # CONNECT options the upgrade's cookies stand in for
        self.close_error: str | None = None  # why the server closed it (the websocket close frame says so)
        self.router = broker.router
        self.parser = Parser(self, broker.config.max_control_line, broker.config.max_payload)
        self.subs: dict[bytes, Subscription] = {}
        # CONNECT options; nats-server's defaults before/without CONNECT are verbose and pedantic.
        self.verbose = True
        self.pedantic = True
        self.protocol = 0
        self.name = ""
        self.lang = ""
        self.version = ""
        self.jwt_user: JwtUser | None = None  # operator mode: who the user JWT says this is, in which account
        self._jwt_expiry: asyncio.TimerHandle | None = None  # closes the connection when the user JWT expires
        self.user_name = ""  # the authenticated user's name (/connz?auth=true)
        self.nonce = new_nonce() if broker.config.auth.nkeys else ""  # INFO's, for nkey users to sign
        self.callout: auth_callout.PendingCallout | None = None  # CONNECT awaiting the auth callout's answer
        self.held: list[bytes] | None = None  # what the client sent after that CONNECT: parsed once it is answered
        self.gated = False  # past the stall gate, holding publishers (`gate`)
        self.slow = False  # a slow consumer (max_pending): gets nothing more, closed when its blocked write ends
        self._batch_end = 0  # the `queued` count that the blocked write must reach by its deadline
        self._deadline: asyncio.TimerHandle | None = None
        self.pings_out = 0
        self.ponged = False  # answered a PING after CONNECT (the first such PONG is followed by an INFO)
        self.started = broker.loop.time()
        self.rtt_ns = 0
        self.peer: tuple[str, int] = ("", 0)
        self._timer: asyncio.TimerHandle | None = None
        self._handshake: asyncio.Task[None] | None = None  # TLS: the upgrade after INFO
        self._gone = False  # connection_lost ran
        self._tls_up = False  # the TLS layer carries this connection's bytes
        self.tls_first = False  # the client started TLS before INFO (handshake_first; /connz's tls_first)
        self._early: list[bytes] = []  # decrypted before the upgrade finished

    @property
    def who(self) -> str:
        """nats-server's prefix of a client's log lines: `127.0.0.1:53410 - cid:5`."""
        return f"{host_port(*self.peer)} - {'wid' if self.websocket else 'cid'}:{self.cid}"

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        cfg = self.broker.config
        transport.set_write_buffer_limits(high=cfg.write_high_water)  # type: ignore[attr-defined]
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (plain_ip(peer[0]), peer[1])
        if not self.broker.register(self):
            return
        self.broker.log.debug(f"{self.who} - Client connection created", cid=self.cid)
        tls = None if self.websocket else self.broker.tls
        if tls is None:
            self.send(self.broker.info_line(self))
            self._start_timers()
            return
        transport.pause_reading()  # type: ignore[attr-defined]  # the handshake's bytes are for the TLS layer
        self.broker.loop.call_soon(_pause_again, transport)  # type: ignore[arg-type]  # before the handshake task
        if not tls.settings.handshake_first:  # INFO in clear text, then the client's handshake (tls.py)
            self._info_then_tls(transport)  # type: ignore[arg-type]
        elif tls.settings.handshake_first_fallback > 0:
            self._wait_for_tls_first(transport, tls.settings.handshake_first_fallback)  # type: ignore[arg-type]
        else:  # handshake_first: the client's handshake first, INFO over TLS after it
            self._handshake = self.broker.loop.create_task(self._start_tls(transport, tls_first=True))  # type: ignore[arg-type]

    def _info_then_tls(self, raw: asyncio.Transport) -> None:
        raw.write(self.broker.info_line(self))
        self._handshake = self.broker.loop.create_task(self._start_tls(raw, tls_first=False))

    def _wait_for_tls_first(self, raw: asyncio.Transport, fallback: float) -> None:
        """handshake_first's fallback (nats-server 2.10+): a client that sends anything within `fallback` is
        doing TLS first; a silent one waits for INFO, which it then gets in clear text. Readability is
        watched on a duplicate of the socket's descriptor, so no byte of the handshake is consumed here."""
        loop = self.broker.loop
        watched = os.dup(raw.get_extra_info("socket").fileno())

        def decide(tls_first: bool) -> None:
            loop.remove_reader(watched)
            os.close(watched)
            timer.cancel()
            if self.closed:
                return
            if tls_first:
                self._handshake = loop.create_task(self._start_tls(raw, tls_first=True))
            else:
                self._info_then_tls(raw)

        timer = loop.call_later(fallback, decide, False)
        loop.add_reader(watched, decide, True)

    async def _start_tls(self, raw: asyncio.Transport, tls_first: bool) -> None:
        # Runs once start_tls has put its TLS protocol on the transport, before the handshake starts.
        self.broker.loop.call_soon(send_alert_on_failure, raw)
        context = self.broker.tls.context  # type: ignore[union-attr]  # read now: a reload replaces it
        try:
            upgraded = await self.broker.loop.start_tls(raw, self, context, server_side=True,
                                                        ssl_handshake_timeout=self.broker.config.tls.timeout)  # type: ignore[union-attr]
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:  # a plain-text client, a bad certificate
            why = "EOF" if isinstance(exc, ConnectionError) else str(exc) or type(exc).__name__  # EOF: Go's words
            self.broker.log.error(f"{self.who} - TLS handshake error: {why}", cid=self.cid)
            raw.abort()
            self.connection_lost(None)
            return
        if upgraded is None or self.closed:  # closed meanwhile (server stopping)
            return
        self.transport = upgraded
        self._tls_up = True
        self.tls_first = tls_first
        upgraded.set_write_buffer_limits(high=self.broker.config.write_high_water)
        if tls_first:
            self.send(self.broker.info_line(self))
        self._start_timers()
        early, self._early = self._early, []
        for data in early:
            self.data_received(data)

    def _start_timers(self) -> None:
        cfg = self.broker.config
        if cfg.auth.required:
            self.parser.gate = True
            self._timer = self.broker.loop.call_later(cfg.auth.timeout, self._auth_timeout)
        else:
            self._timer = self.broker.loop.call_later(cfg.ping_interval, self._ping_timer)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._handshake is not None and not self._tls_up:
            self._before_tls(data)
            return
        if self.held is not None:
            self.held.append(data)
            return
        router = self.router
        router.reading = self
        try:
            if self.parser.gate and (self.broker.callout_keys is not None or self.broker.jwt_accounts is not None):
                self._feed_connect_alone(data)
            else:
                self.parser.feed(data)
        except ProtocolError as e:
            if e.err != "Authorization Violation":  # logged as the authentication error it is
                self.broker.log.error(f"{self.who} - Client parser ERROR: {e.err or 'malformed arguments'}", cid=self.cid)
            self.close(e.err)
        except Exception:  # a bug must cost one connection, never the server
            self.broker.log.exception("connection failed", cid=self.cid)
            self.close(None)
        finally:
            router.reading = None
            router.flush(self, len(data))  # a read that fed a backed-up client holds this publisher briefly

    def _feed_connect_alone(self, data: bytes) -> None:
        """Before CONNECT with an auth callout or in operator mode: the CONNECT line is parsed alone, and what
        follows it waits for the callout's answer or the account's JetStream to start (nats-server's read loop
        waits for them likewise)."""
        end = data.find(b"\n") + 1
        self.parser.feed(data[:end] if end else data)
        if end and end < len(data):
            if self.held is not None:
                self.held.append(data[end:])
            else:
                self.parser.feed(data[end:])

    def _before_tls(self, data: bytes) -> None:
        """Bytes that arrive while the TLS upgrade is under way. Decrypted ones (the handshake finished but
        start_tls has not returned yet) wait for it; raw ones mean an event loop that ignored pause_reading
        in connection_made, and clear text is never parsed on a TLS port."""
        raw = self.transport
        if raw is not None and raw.get_protocol() is self:
            self.broker.log.error(f"{self.who} - TLS handshake error: data before the TLS layer was ready", cid=self.cid)
            raw.abort()
            return
        self._early.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._gone:
            return
        self._gone = True
        self.broker.log.debug(f"{self.who} - Client connection closed" + (f": {exc}" if exc else ""), cid=self.cid)
        self.closed = True
        self.out.clear()
        self._cancel_timers()
        if self.callout is not None:
            self.callout.cancel()
        self.broker.connection_gone(self)
        self.router.resume_publishers(self)

    def pause_writing(self) -> None:
        self.congested = True

    def resume_writing(self) -> None:
        if self.slow:  # its blocked write ended before the deadline: nats-server closes it uncounted
            self.abort()
            return
        self.congested = False
        if self.gated:  # under the stall gate again: the publishers it holds go on
            self.gated = False
            self.router.release_publishers(self)
            self.transport.set_write_buffer_limits(high=self.broker.config.write_high_water)  # type: ignore[union-attr]
            if self.congested:  # still past the high-water mark (pause_writing ran again)
                return
        self.router.resume_publishers(self)

    def gate(self, limit: int) -> None:
        """Past the stall gate: resume_writing comes when the backlog falls under it again (not only once
        it drained), so the publishers held on it go on at once, as nats-server's stall channel does."""
        if not self.gated:
            self.gated = True
            self.transport.set_write_buffer_limits(high=limit, low=limit)  # type: ignore[union-attr]

    def blocked_write(self) -> None:
        """The socket did not take a write at once: everything queued so far must reach it within
        write_deadline (nats-server's deadline per flush batch)."""
        if self._deadline is None:
            self._batch_end = self.queued
            self._deadline = self.broker.loop.call_later(self.broker.config.write_deadline, self._deadline_passed)

    def _deadline_passed(self) -> None:
        self._deadline = None
        if self._gone or self.transport is None:
            return
        backlog = self.transport.get_write_buffer_size()
        if self.queued - backlog < self._batch_end:
            self.router.write_deadline_exceeded(self, backlog)
        elif self.slow:
            self.abort()
        elif backlog:
            self.blocked_write()  # the next batch (nats-server's began when this one ended, a little earlier)

    def mark_slow(self) -> None:
        """Past max_pending: nothing more is delivered or read; the socket closes when its blocked write
        ends (by its deadline, if the client never reads again), as nats-server's writeLoop does."""
        self.slow = self.closed = True
        self.out.clear()
        for sub in self.subs.values():
            self.router.remove(sub)
        self.router.resume_publishers(self)
        if self._deadline is None:
            self.abort()

    def _cancel_timers(self) -> None:
        for timer in (self._timer, self._deadline, self.stall_timer, self._jwt_expiry):
            if timer is not None:
                timer.cancel()

    # -- output -------------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self.out.append(data)
        if not self.dirty:
            self.router.touch(self)

    def close(self, err: str | None) -> None:
        """Send `-ERR '<err>'` (if given) after any pending output, then close."""
        if self.closed:
            if self.slow:  # nothing of a slow consumer's output is sent any more
                self.abort()
            return
        if err:
            self.out.append(err_line(err))
        self.close_error = err
        self.closed = True
        self._cancel_timers()
        transport = self.transport
        if transport is not None:
            if self.out:
                transport.write(b"".join(self.out))
                self.out.clear()
            transport.close()
        self.broker.unregister(self)
        self.router.resume_publishers(self)

    def abort(self) -> None:
        """Drop the connection now, discarding output (slow consumer)."""
        self.closed = True
        self._cancel_timers()
        self.out.clear()
        if self.transport is not None:
            self.transport.abort()
        self.broker.unregister(self)
        self.router.resume_publishers(self)

    # -- parser callbacks ---------------------------------------------------------------------------

    def on_msg(self, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> None:
        if hdr_len >= 0 and not self.headers:
            raise ProtocolError(None)  # nats-server drops a client that sends HPUB without headers
        if self.pedantic and not is_valid_publish_subject(subject.decode("utf-8", "replace")):
            self.send(b"-ERR 'Invalid Publish Subject'\r\n")
            if self.verbose:
                self.send(OK)
            return
        if self.perms is not None and not self.perms.can_publish(subject):
            self._violation("Publish to", subject.decode("utf-8", "replace"))
            return
        if self.verbose:  # nats-server acknowledges before delivering
            self.send(OK)
        self.router.route(self, subject, reply, hdr_len, data)

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        text = subject.decode("utf-8", "replace")
        if not is_valid_subject(text):
            self.send(b"-ERR 'Invalid Subject'\r\n")
            return
        if self.perms is not None and not self.perms.can_subscribe(text):
            self._violation("Subscription to", text)
            return
        old = self.subs.get(sid)
        if old is not None:
            self.router.remove(old)
        sub = Subscription(self, text, queue.decode("utf-8", "replace") if queue else None, sid)
        if self.perms is not None:
            sub.deny = self.perms.delivery_filter(text)
        self.subs[sid] = sub
        self.router.insert(sub)
        if self.account.stream_imports:
            self.account.add_shadows(sub, self.router)
        if self.verbose:
            self.send(OK)

    def on_unsub(self, sid: bytes, max_msgs: int) -> None:
        sub = self.subs.get(sid)
        if sub is not None:
            if max_msgs > sub.delivered:
                sub.max_msgs = max_msgs
            else:
                self.remove_sub(sub)
        if self.verbose:
            self.send(OK)

    def remove_sub(self, sub: Subscription) -> None:
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
        self.router.remove(sub)

    def on_ping(self) -> None:
        self.send(PONG)
        if self.connected and not self.ponged:  # nats-server's INFO naming the client's account, once
            self.ponged = True
            if self.protocol >= 1:
                self.send(self.broker.info_line(self, connect_info=True))

    def on_pong(self) -> None:
        self.pings_out = 0

    def on_connect(self, raw: bytes) -> None:
        try:
            opts: dict[str, Any] = json.loads(raw)
            if not isinstance(opts, dict):
                raise ValueError
        except ValueError:
            raise ProtocolError(None) from None
        for option, value in self.cookie_credentials.items():  # nats-server: only where CONNECT has none
            if not opts.get(option):
                opts[option] = value
        auth = self.broker.config.auth
        if auth.operator is not None and not self.connected:
            if not self._authenticate_jwt(auth.operator, opts):
                return
        elif auth.required and not self.connected:
            authorized, user = _authenticate(auth, opts, self.nonce)
            bound = user.account if authorized and user is not None else "$G"
            if auth.callout is not None and _callout().delegated(auth.callout, _callout().raw_user(opts), bound):
                self._ask_callout(auth.callout, opts)
                return
            if not authorized:
                self._authentication_error(opts)
                raise ProtocolError("Authorization Violation")
            if user is not None:
                self._bind(user)
        self._apply_connect(opts)

    def _apply_connect(self, opts: dict[str, Any]) -> None:
        """CONNECT's options, once its credentials are accepted."""
        proto = opts.get("protocol", 0)
        if not isinstance(proto, int) or not 0 <= proto <= 1:
            raise ProtocolError("invalid client protocol")
        self.verbose = bool(opts.get("verbose", True))
        self.pedantic = bool(opts.get("pedantic", True))
        self.echo = bool(opts.get("echo", True))
        self.headers = bool(opts.get("headers", False))
        self.no_responders = bool(opts.get("no_responders", False))
        if self.no_responders and not self.headers:
            raise ProtocolError("no responders requires headers support")
        self.name = str(opts.get("name", ""))
        self.lang = str(opts.get("lang", ""))
        self.version = str(opts.get("version", ""))
        self.protocol = proto  # 1: the client takes INFO updates (lame duck mode's)
        if not self.connected:  # nats-server's rtt is its first PING's; jsbroker's is the INFO -> CONNECT time
            self.rtt_ns = int((self.broker.loop.time() - self.started) * 1e9)
        self.origin = Origin(self.cid, self.headers, self.no_responders, self.rtt_ns)
        fast = not self.verbose and not self.pedantic and self.perms is None
        self.parser.on_pub = partial(self.router.route, self) if fast else self.on_msg
        self.parser.on_empty_pubs = partial(self.router.route_empty, self) if fast else self.parser.each_empty_pub
        if not self.connected:
            self.connected = True
            self.parser.gate = False
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.broker.loop.call_later(self.broker.config.ping_interval, self._ping_timer)
            self.broker.client_connected(self)
        if self.verbose:
            self.send(OK)

    def _authentication_error(self, opts: dict[str, Any]) -> None:
        name = f' - User "{opts["user"]}"' if isinstance(opts.get("user"), str) else ""
        self.broker.log.error(f"{self.who} - authentication error{name}", cid=self.cid)

    def _ask_callout(self, settings: CalloutSettings, opts: dict[str, Any]) -> None:
        """Publish the authorization request; the CONNECT is finished when the answer comes (or not)."""
        auth_callout = _callout()
        keys, broker = self.broker.callout_keys, self.broker
        account = broker.accounts.lookup(settings.account)
        assert keys is not None and account is not None  # made for a callout; config.py checks the account
        user_nkey = auth_callout.new_user_nkey()
        tls = self.transport.get_extra_info("ssl_object") if self.transport is not None else None
        client = auth_callout.CalloutClient(self.peer[0], self.cid, opts, self.nonce, self.websocket,
                                            auth_callout.client_tls(tls) if tls is not None else None)
        server = {"name": broker.server_name, "host": broker.config.host, "version": VERSION}
        message = auth_callout.request(keys, settings, user_nkey, server, client, time.time(), broker.config.auth.timeout)
        if self._timer is not None:  # the callout's own timeout (the same length) decides now
            self._timer.cancel()
        self._hold()  # the rest of this read; the socket is not read meanwhile (nats-server's read loop waits)
        self.callout = auth_callout.PendingCallout(broker.router, account.sublist, broker.loop,
                                                   broker.config.auth.timeout, message,
                                                   partial(self._callout_answered, settings, opts, user_nkey))

    def _callout_answered(self, settings: CalloutSettings, opts: dict[str, Any], user_nkey: str,
                          answer: bytes | None) -> None:
        auth_callout = _callout()
        self.callout = None
        if self.closed:
            return
        keys, log = self.broker.callout_keys, self.broker.log
        assert keys is not None
        if answer is None:
            log.debug(f'Authorization callout response not received in time on account "{settings.account}"')
            self._authentication_error(opts)
            self.close("Authorization Violation")
            return
        try:
            admitted = auth_callout.check_response(answer, keys=keys, settings=settings, user_nkey=user_nkey,
                                                   accounts=self.broker.accounts.by_name, now=time.time())
        except auth_callout.CalloutRefused as e:
            self._authentication_error(opts)
            self.close("Authorization Violation")
            log.warning(str(e))
            return
        self._bind(User(admitted.name or auth_callout.raw_user(opts), None, admitted.permissions, None, admitted.account))
        if admitted.expires:  # nats-server closes the connection when the user JWT expires
            self._jwt_expiry = self.broker.loop.call_later(max(admitted.expires - time.time(), 0), self._jwt_expired)
        self._finish_held_connect(opts)

    def _hold(self) -> None:
        """What the client sends after its CONNECT waits, and its socket is not read, until the CONNECT is done."""
        self.held = []
        if self.transport is not None:
            self.transport.pause_reading()

    def _finish_held_connect(self, opts: dict[str, Any]) -> None:
        """The held CONNECT's options applied, then what the client sent after it."""
        try:
            self._apply_connect(opts)
        except ProtocolError as e:
            self.close(e.err)
            return
        held, self.held = self.held or [], None
        for data in held:
            self.data_received(data)
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def _authenticate_jwt(self, operator: OperatorSettings, opts: dict[str, Any]) -> bool:
        """Operator mode: the user JWT and the nonce's signature (operator_auth.py); nats-server logs the
        reason (mostly at debug level) before the authentication error. The user's account is registered
        now if it is new (operator_accounts.py); False: the CONNECT is held until its JetStream has started."""
        if any(opts.get(k) is not None and not isinstance(opts[k], str) for k in ("jwt", "sig")):
            raise ProtocolError(None)  # nats-server's CONNECT does not decode: closed without an error line
        from .operator_auth import Refusal, authenticate_user

        broker = self.broker
        assert broker.resolver is not None and broker.jwt_accounts is not None
        result = authenticate_user(operator.operator, broker.resolver.fetch, opts, self.nonce,
                                   "WEBSOCKET" if self.websocket else "STANDARD", self.peer[0], time.time(),
                                   lambda line: broker.log.debug(f"{self.who} - {line}", cid=self.cid))
        account = broker.jwt_accounts.account(result.account) if not isinstance(result, Refusal) else None
        if isinstance(result, Refusal) or account is None:
            refusal = result if isinstance(result, Refusal) else Refusal("Account JWT lookup error: account missing")
            if refusal.warning:
                broker.log.warning(refusal.warning)
            if refusal.level != "none":
                log = broker.log.error if refusal.level == "error" else broker.log.debug
                log(f"{self.who} - {refusal.reason}", cid=self.cid)
            broker.log.error(f"{self.who} - authentication error", cid=self.cid)
            raise ProtocolError("Authorization Violation")
        broker.log.debug(f"{self.who} - {result.log_line}", cid=self.cid)
        self.jwt_user = result
        self.account, self.sublist = account, account.sublist
        self.perms = PermissionChecker(result.permissions) if result.permissions is not None else None
        if 0 < result.limits.payload < self.parser.max_payload:
            self.parser.max_payload = result.limits.payload
        if result.expires:  # nats-server closes the connection when the user JWT expires
            self._jwt_expiry = broker.loop.call_later(max(result.expires - time.time(), 0), self._jwt_expired)
        starting = broker.account_starts.get(account.name)
        if starting is None:
            return True
        if self._timer is not None:  # the account's streams are read: the wait ends when they are
            self._timer.cancel()
        self._hold()
        starting.add_done_callback(lambda _: None if self.closed else self._finish_held_connect(opts))
        return False

    def _jwt_expired(self) -> None:
        self.broker.log.debug(f"{self.who} - User Authentication Expired", cid=self.cid)
        self.close("User Authentication Expired")

    def _bind(self, user: User) -> None:
        """The authenticated user's permissions and account."""
        self.perms = PermissionChecker(user.permissions) if user.permissions is not None else None
        account = self.broker.accounts.lookup(user.account)
        assert account is not None, user.account  # config.py checks every user's account exists
        self.account, self.sublist = account, account.sublist
        self.user_name = user.user

    def _violation(self, what: str, subject: str) -> None:
        """nats-server's answer to a denied PUB or SUB: an error line, and the connection stays."""
        self.broker.log.debug(f'{self.who} - Permissions Violation for {what} "{subject}"', cid=self.cid)
        self.send(err_line(f'Permissions Violation for {what} "{subject}"'))

    # -- liveness -----------------------------------------------------------------------------------

    def _auth_timeout(self) -> None:
        if not self.connected:
            self.close("Authentication Timeout")

    def _ping_timer(self) -> None:
        if self.closed:
            return
        cfg = self.broker.config
        if self.pings_out + 1 > cfg.ping_max:
            self.broker.log.debug(f"{self.who} - Stale Client Connection - Closing", cid=self.cid)
            self.close("Stale Connection")
            return
        self.pings_out += 1
        self.send(PING)
        self._timer = self.broker.loop.call_later(cfg.ping_interval, self._ping_timer)


_CREDENTIALS = ("user", "pass", "auth_token", "nkey", "jwt")


def _authenticate(auth: AuthSettings, opts: dict[str, Any], nonce: str) -> tuple[bool, User | None]:
    """Whether CONNECT's credentials are valid, and the user they name (None: the token, in $G).
    A client that gives none is `no_auth_user`, when there is one."""
    if auth.no_auth_user is not None and not any(opts.get(k) for k in _CREDENTIALS):
        return True, next(u for u in auth.users if u.user == auth.no_auth_user)
    if auth.token is not None:
        given = opts.get("auth_token")
        return isinstance(given, str) and passwords.matches(given, auth.token), None
    nkey, signature = opts.get("nkey"), opts.get("sig")
    if isinstance(nkey, str) and isinstance(signature, str) and nonce:
        for entry in auth.users:
            if entry.nkey is not None and entry.user == nkey:
                return signed(entry.nkey, nonce, signature), entry
        return False, None
    user, password = opts.get("user"), opts.get("pass")
    if not isinstance(user, str) or not isinstance(password, str):
        return False, None
    if auth.user is not None and auth.password is not None and _same(user, auth.user) \
            and passwords.matches(password, auth.password):
        return True, User(auth.user, auth.password)
    for entry in auth.users:
        if entry.password is not None and _same(user, entry.user) and passwords.matches(password, entry.password):
            return True, entry
    return False, None


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())
