"""The broker: listener, connection registry, message router and lifecycle; implements `InternalBus`.

`Router` owns delivery: it matches a published subject in the `Sublist`, appends MSG/HMSG frames to the
subscribers' output lists, calls internal handlers synchronously, answers no-responders with a 503, and
flushes every touched connection once per read (or on the next loop turn for timer-driven publishes).
`Broker` owns everything with a lifetime: the listening socket, connections, the monitoring endpoint and
the optional JetStream service, which it only reaches through the `InternalBus` it implements.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import shutil
import socket
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from .config import VERSION, BrokerConfig
from .connection import Connection
from .internal import InterestListener, InternalHandler, Origin
from .logs import Logger, get_logger
from .subjects import subject_matches
from .sublist import EMPTY, Sublist, Subscription

_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
API_LEVEL = 5


def new_server_id() -> str:
    """A nats-server-like id: 'N' + 55 base32 characters."""
    return "N" + "".join(secrets.choice(_B32) for _ in range(55))


class Router:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.sublist = Sublist()
        self._cache_get = self.sublist.cache.get  # the match cache, looked up inline on the hot path
        self.pending: list[Connection] = []  # connections with output to flush
        self.reading: Connection | None = None  # the connection whose read is being parsed
        self._flush_scheduled = False
        self._watches: dict[str, list[_Watch]] = {}
        self.in_msgs = self.out_msgs = self.in_bytes = self.out_bytes = 0
        self.slow_consumers = 0

    # -- subscriptions ------------------------------------------------------------------------------

    def insert(self, sub: Subscription) -> None:
        self.sublist.insert(sub)
        if self._watches:
            self._check_watches(sub.subject)

    def remove(self, sub: Subscription) -> None:
        if sub.closed:
            return
        sub.closed = True
        self.sublist.remove(sub)
        if self._watches:
            self._check_watches(sub.subject)

    def watch(self, subject: str, listener: InterestListener) -> "_Watch":
        w = _Watch(self, subject, listener, self.has_interest(subject))
        self._watches.setdefault(subject, []).append(w)
        return w

    def _check_watches(self, changed: str) -> None:
        for subject, watches in list(self._watches.items()):
            if not subject_matches(changed, subject):
                continue
            now = self.has_interest(subject)
            for w in list(watches):
                if w.state != now:
                    w.state = now
                    w.listener(now)

    def has_interest(self, subject: str, queue: str | None = None) -> bool:
        plain, groups = self.sublist.match(subject)
        if queue is None:
            return bool(plain or groups)
        return any(g[0].queue == queue for g in groups)

    # -- delivery -----------------------------------------------------------------------------------

    def touch(self, conn: Connection) -> None:
        conn.dirty = True
        self.pending.append(conn)
        if self.reading is None and not self._flush_scheduled:
            self._flush_scheduled = True
            self.broker.loop.call_soon(self.flush)

    def route(self, pub: Connection | None, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> bool:
        """Deliver one message; `data` is header block + payload + CRLF. True if anyone received it."""
        result = self._cache_get(subject) or self.sublist.match(subject)
        self.in_msgs += 1
        if pub is not None:
            pub.in_msgs += 1
        if result is EMPTY:
            if reply and pub is not None and pub.no_responders:
                self._no_responders(pub, subject, reply)
            return False
        plain, groups = result
        if groups:  # one member per queue group, chosen at random, plus every plain subscriber
            plain = plain + tuple(sub for sub in (self._pick(g, pub) for g in groups) if sub is not None)
        size = len(data) - 2
        if hdr_len < 0:
            verb = b"MSG "
            tail = b" %s %d\r\n" % (reply, size) if reply else b" %d\r\n" % size
        else:
            verb = b"HMSG "
            tail = b" %s %d %d\r\n" % (reply, hdr_len, size) if reply else b" %d %d\r\n" % (hdr_len, size)
            # clients that did not negotiate headers get a plain MSG without the header block
            plain_data = data[hdr_len:]
            plain_tail = b" %s %d\r\n" % (reply, size - hdr_len) if reply else b" %d\r\n" % (size - hdr_len)
        delivered = 0
        pending = self.pending
        for sub in plain:
            c = sub.client
            if c is None:
                delivered += self._internal(sub, pub, subject, reply, hdr_len, data)
                continue
            if c is pub and not c.echo:
                continue
            if hdr_len >= 0 and not c.headers:
                c.out += (b"MSG ", subject, sub.head, plain_tail, plain_data)
            else:
                c.out += (verb, subject, sub.head, tail, data)
            if not c.dirty:
                c.dirty = True
                pending.append(c)
            delivered += 1
            c.out_msgs += 1
            sub.delivered += 1
            if sub.max_msgs and sub.delivered >= sub.max_msgs:
                self._expire(sub)
        self.out_msgs += delivered
        if pending and self.reading is None and not self._flush_scheduled:
            self._flush_scheduled = True
            self.broker.loop.call_soon(self.flush)
        if not delivered and reply and pub is not None and pub.no_responders:
            self._no_responders(pub, subject, reply)
        return delivered > 0

    @staticmethod
    def _pick(group: tuple[Subscription, ...], pub: Connection | None) -> Subscription | None:
        n = len(group)
        start = 0 if n == 1 else int(random.random() * n)
        for i in range(n):
            sub = group[(start + i) % n]
            c = sub.client
            if c is not None and (c.closed or (c is pub and not c.echo)):
                continue
            return sub
        return None

    def _internal(
        self, sub: Subscription, pub: Connection | None, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes
    ) -> int:
        if sub.closed:
            return 0
        payload_end = len(data) - 2
        hdr = data[:hdr_len] if hdr_len > 0 else b""
        payload = data[max(hdr_len, 0) : payload_end]
        origin: Origin | None = pub.origin if pub is not None else None
        try:
            sub.handler(  # type: ignore[misc]
                subject.decode() if isinstance(subject, bytes) else subject,
                reply.decode() if isinstance(reply, bytes) else reply,
                hdr,
                payload,
                origin,
            )
        except Exception:
            self.broker.log.exception("internal handler failed", subject=sub.subject)
        sub.delivered += 1
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self._expire(sub)
        return 1

    def _expire(self, sub: Subscription) -> None:
        """The subscription reached its UNSUB max."""
        if sub.client is not None:
            sub.client.remove_sub(sub)
        else:
            self.remove(sub)

    def _no_responders(self, pub: Connection, subject: bytes, reply: bytes) -> None:
        plain, groups = self.sublist.match(reply)
        for sub in (*plain, *(s for g in groups for s in g)):
            if sub.client is pub:
                hdr = b"NATS/1.0 503\r\nNats-Subject: " + subject + b"\r\n\r\n"
                pub.send(b"HMSG %s%s %d %d\r\n%s\r\n" % (reply, sub.head, len(hdr), len(hdr), hdr))
                return

    def flush(self) -> None:
        """Write each touched connection's output once; apply backpressure and the slow-consumer limit."""
        self._flush_scheduled = False
        pending = self.pending
        if not pending:
            return
        self.pending = []
        max_pending = self.broker.config.max_pending
        reading = self.reading
        for c in pending:
            c.dirty = False
            if c.closed:
                c.out.clear()
                continue
            data = b"".join(c.out)
            c.out.clear()
            c.out_bytes += len(data)
            transport = c.transport
            transport.write(data)  # type: ignore[union-attr]
            if c.congested:
                if transport.get_write_buffer_size() > max_pending:  # type: ignore[union-attr]
                    self.slow_consumer(c)
                elif reading is not None and reading is not c:
                    self._block(reading, c)

    def slow_consumer(self, c: Connection) -> None:
        """Drop a connection whose output is over max_pending or stalled past the write deadline."""
        self.slow_consumers += 1
        self.broker.log.warning("slow consumer detected, closing", cid=c.cid)
        c.abort()

    def _block(self, publisher: Connection, subscriber: Connection) -> None:
        if publisher in subscriber.blocked_publishers or publisher.closed:
            return
        subscriber.blocked_publishers.add(publisher)
        if not publisher.blockers:
            publisher.transport.pause_reading()  # type: ignore[union-attr]
        publisher.blockers.add(subscriber)

    def resume_publishers(self, subscriber: Connection) -> None:
        blocked = subscriber.blocked_publishers
        if not blocked:
            return
        subscriber.blocked_publishers = set()
        for p in blocked:
            p.blockers.discard(subscriber)
            if not p.blockers and not p.closed:
                p.transport.resume_reading()  # type: ignore[union-attr]


class _Watch:
    def __init__(self, router: Router, subject: str, listener: InterestListener, state: bool) -> None:
        self.router, self.subject, self.listener, self.state = router, subject, listener, state

    def cancel(self) -> None:
        watches = self.router._watches.get(self.subject)
        if watches and self in watches:
            watches.remove(self)
            if not watches:
                del self.router._watches[self.subject]


class Broker:
    """The NATS server, usable in-process: `async with Broker(port=0, store_dir=...) as b: b.client_url`.

    Implements `jsbroker.internal.InternalBus` for the JetStream service."""

    def __init__(self, config: BrokerConfig | None = None, **kw: Any) -> None:
        if config is None:
            config = BrokerConfig.build(**kw)
        elif kw:
            config = replace(config, **kw)
        self.config = config
        self.server_id = new_server_id()
        self.server_name = config.server_name or self.server_id
        self.log: Logger = get_logger("jsbroker", server=self.server_name[:8])
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.router = Router(self)
        self.clients: dict[int, Connection] = {}
        self.port = 0
        self.http_port: int | None = None
        self.jetstream: Any = None
        self.js_settings = config.jetstream  # with the temp store dir filled in once started
        self.start_time = 0.0
        self.total_connections = 0
        self._next_cid = 0
        self._server: asyncio.AbstractServer | None = None
        self._monitor: Any = None
        self._tmp_store: str | None = None
        self._info_base: dict[str, Any] = {}
        self._drained: asyncio.Event | None = None  # set during shutdown once all clients are gone
        self._draining: set[int] = set()

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
        if self.http_port is None:
            return None
        host = self.config.http_host or self.config.host
        host = host if host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"http://{host}:{self.http_port}"

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.start_time = self.loop.time()
        await self._start_jetstream()
        cfg = self.config
        self._server = await self.loop.create_server(
            self._new_connection, cfg.host, cfg.port, reuse_address=True, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._info_base = self._info_fields()
        if cfg.http_port is not None:
            from .monitor import Monitor

            self._monitor = Monitor(self)
            self.http_port = await self._monitor.start(cfg.http_host or cfg.host, cfg.http_port)
        self.log.info("server ready", port=self.port, http_port=self.http_port, jetstream=self.jetstream is not None)

    async def _start_jetstream(self) -> None:
        js = self.config.jetstream
        if js is None:
            return
        try:
            from .jetstream.service import JetStream
        except ImportError as e:
            self.log.info("jetstream unavailable, running core only", error=str(e))
            return
        if js.store_dir is None:
            self._tmp_store = tempfile.mkdtemp(prefix="jsbroker-")
            js = replace(js, store_dir=Path(self._tmp_store))
        Path(js.store_dir).mkdir(parents=True, exist_ok=True)  # type: ignore[arg-type]
        self.js_settings = js
        self.jetstream = JetStream(self, js)
        await self.jetstream.start()

    async def stop(self) -> None:
        """Lame-duck style: stop accepting, flush pending output, close connections, stop services."""
        if self._server is not None:
            self._server.close()
        self.router.flush()
        await self._close_clients()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.jetstream is not None:
            await self.jetstream.stop()
            self.jetstream = None
        if self._monitor is not None:
            await self._monitor.stop()
            self._monitor = None
        if self._tmp_store is not None:
            shutil.rmtree(self._tmp_store, ignore_errors=True)
            self._tmp_store = None
        self.log.info("server stopped")

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

    # -- connections --------------------------------------------------------------------------------

    def _new_connection(self) -> Connection:
        self._next_cid += 1
        return Connection(self, self._next_cid)

    def register(self, conn: Connection) -> bool:
        if len(self.clients) >= self.config.max_connections:
            conn.close("maximum connections exceeded")
            return False
        self.clients[conn.cid] = conn
        self.total_connections += 1
        sock = conn.transport.get_extra_info("socket") if conn.transport else None
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        return True

    def unregister(self, conn: Connection) -> None:
        if self.clients.pop(conn.cid, None) is None:
            return
        for sub in list(conn.subs.values()):
            self.router.remove(sub)
        conn.subs.clear()

    def _info_fields(self) -> dict[str, Any]:
        cfg = self.config
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.server_name,
            "version": VERSION,
            "proto": 1,
            "host": cfg.host,
            "port": self.port,
            "headers": True,
        }
        if cfg.auth.required:
            info["auth_required"] = True
        info["max_payload"] = cfg.max_payload
        if self.jetstream is not None:
            info["jetstream"] = True
            if cfg.jetstream is not None and cfg.jetstream.domain:
                info["domain"] = cfg.jetstream.domain
        return info

    def info_line(self, conn: Connection) -> bytes:
        import json

        info = dict(self._info_base, client_id=conn.cid, client_ip=conn.peer[0] or "127.0.0.1", api_lvl=API_LEVEL)
        return b"INFO " + json.dumps(info, separators=(",", ":")).encode() + b" \r\n"

    # -- InternalBus --------------------------------------------------------------------------------

    def subscribe_internal(self, subject: str, handler: InternalHandler, queue: str | None = None) -> Subscription:
        sub = Subscription(None, subject, queue, b"0", handler)
        self.router.insert(sub)
        return sub

    def unsubscribe_internal(self, sub: Subscription) -> None:  # type: ignore[override]
        self.router.remove(sub)

    def publish(self, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> bool:
        return self.router.route(
            None,
            subject.encode(),
            reply.encode() if reply else None,
            len(hdr) if hdr else -1,
            hdr + payload + b"\r\n" if hdr else payload + b"\r\n",
        )

    def has_interest(self, subject: str, queue: str | None = None) -> bool:
        return self.router.has_interest(subject, queue)

    def watch_interest(self, subject: str, listener: InterestListener) -> _Watch:
        return self.router.watch(subject, listener)

