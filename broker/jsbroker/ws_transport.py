"""The websocket port's connections: the HTTP upgrade, then a transport adapter under the usual `Connection`.

`WebSocketProtocol` is the asyncio protocol of one accepted socket. It reads the upgrade request with h11
(within `handshake_timeout`, as nats-server's ReadTimeout), answers it (websocket.py's checks), and then
creates a `Connection` whose transport is a `WebSocketTransport`: what the connection writes goes out as
frames, the frames' payload goes to its parser. Pings are answered here; a close frame is echoed and
ends the connection; the connection's own close sends the close code nats-server sends for its reason.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

import h11

from . import websocket as ws
from .config import BrokerConfig, WebSocketSettings

if TYPE_CHECKING:
    from .connection import Connection
    from .logs import Logger

MAX_REQUEST_HEAD = 1 << 20  # Go's http.DefaultMaxHeaderBytes, as nats-server's upgrade reads it


class WebSocketHost(Protocol):
    """What the websocket port's connections use of the server (server.py's `Broker`): the upgrade's settings
    parsed once, the sockets not upgraded yet (a stop aborts them), and a new `Connection` once upgraded."""

    ws_handshakes: set[asyncio.Transport]

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def log(self) -> Logger: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def ws_origins(self) -> tuple[ws.Origin, ...]: ...  # websocket.allowed_origins

    @property
    def ws_headers(self) -> str: ...  # websocket.headers, as response header lines

    def new_connection(self, websocket: bool = False) -> Connection: ...


class WebSocketTransport(asyncio.Transport):
    """What `Connection` writes to and closes: frames over the socket's transport."""

    def __init__(self, raw: asyncio.Transport, writer: ws.FrameWriter) -> None:
        super().__init__()
        self.raw = raw
        self.writer = writer
        self.connection: Connection | None = None
        self.close_sent = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if data and not self.close_sent:
            self.raw.write(self.writer.message(bytes(data)))

    def send_close(self, code: int, reason: str) -> None:
        if not self.close_sent:
            self.close_sent = True
            self.raw.write(self.writer.control(ws.CLOSE, ws.close_payload(code, reason)))

    def close(self) -> None:
        conn = self.connection
        self.send_close(*ws.close_reason(conn.close_error if conn is not None else None))
        self.raw.close()

    def abort(self) -> None:
        self.raw.abort()

    def is_closing(self) -> bool:
        return self.raw.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.raw.get_extra_info(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.raw.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self.raw.get_write_buffer_size()

    def pause_reading(self) -> None:
        self.raw.pause_reading()

    def resume_reading(self) -> None:
        self.raw.resume_reading()

    def is_reading(self) -> bool:
        return self.raw.is_reading()

    def can_write_eof(self) -> bool:
        return False


class WebSocketProtocol(asyncio.Protocol):
    def __init__(self, broker: WebSocketHost, settings: WebSocketSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.raw: asyncio.Transport | None = None
        self.http: h11.Connection | None = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD)
        self.timer: asyncio.TimerHandle | None = None
        self.reader: ws.FrameReader | None = None
        self.transport: WebSocketTransport | None = None
        self.connection: Connection | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = transport  # type: ignore[assignment]
        self.broker.ws_handshakes.add(self.raw)  # type: ignore[arg-type]  # a stop aborts those not upgraded yet
        if self.settings.handshake_timeout > 0:
            self.timer = self.broker.loop.call_later(self.settings.handshake_timeout, self._timed_out)

    def _timed_out(self) -> None:
        if self.connection is None and self.raw is not None:
            self.broker.log.debug("websocket handshake timed out", peer=self._peer())
            self.raw.abort()

    def _peer(self) -> str:
        peer = self.raw.get_extra_info("peername") if self.raw else None
        return f"{peer[0]}:{peer[1]}" if peer else "?"

    def data_received(self, data: bytes) -> None:
        if self.reader is not None:
            self._frames(data)
        elif self.http is not None:
            self.http.receive_data(data)
            self._request()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.broker.ws_handshakes.discard(self.raw)  # type: ignore[arg-type]
        if self.timer is not None:
            self.timer.cancel()
        if self.connection is not None:
            self.connection.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.connection is not None:
            self.connection.pause_writing()

    def resume_writing(self) -> None:
        if self.connection is not None:
            self.connection.resume_writing()

    # -- the upgrade --------------------------------------------------------------------------------

    def _request(self) -> None:
        assert self.http is not None and self.raw is not None
        try:
            event = self.http.next_event()
        except h11.RemoteProtocolError as exc:  # as Go's server: 400 (431 for a long head), then close
            self.http = None
            self.raw.write(ws.bad_request_response(exc.error_status_hint))
            self.raw.close()
            return
        if event is h11.NEED_DATA:
            return
        if not isinstance(event, h11.Request):
            self.http = None
            self.raw.close()
            return
        headers: dict[str, list[str]] = {}
        for name, value in event.headers:
            headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        settings = self.settings
        try:
            upgrade = ws.check_upgrade(
                event.method.decode("ascii", "replace"), event.target.decode("ascii", "replace"), headers,
                settings.tls is not None, compression=settings.compression, same_origin=settings.same_origin,
                allowed_origins=self.broker.ws_origins, extra_headers=self.broker.ws_headers)
        except ws.UpgradeRefused as refused:
            self._refuse(refused.status, str(refused))
            return
        if self.http.trailing_data[0]:  # nats-server closes without an answer (its connection is hijacked)
            self.http = None
            self.broker.log.error("websocket handshake error", peer=self._peer(),
                                  error="client sent data before handshake is complete")
            self.raw.close()
            return
        self.http = None
        self.broker.ws_handshakes.discard(self.raw)
        if self.timer is not None:
            self.timer.cancel()
        self.raw.write(upgrade.response)
        self._start(upgrade)

    def _refuse(self, status: int, reason: str) -> None:
        assert self.raw is not None
        self.http = None  # what else the client sends is not read
        self.broker.log.error("websocket handshake error", peer=self._peer(), error=reason)
        self.raw.write(ws.error_response(status))
        self.raw.close()

    def _start(self, upgrade: ws.Upgrade) -> None:
        assert self.raw is not None
        broker, settings = self.broker, self.settings
        self.reader = ws.FrameReader(compressed=upgrade.compress, masked=upgrade.masked,
                                     max_payload=broker.config.max_payload)
        self.transport = WebSocketTransport(self.raw, ws.FrameWriter(
            compress=upgrade.compress, browser=upgrade.browser, no_compressed_fragments=upgrade.no_compressed_fragments))
        conn = broker.new_connection(websocket=True)
        cookies = upgrade.cookies
        for option, cookie in (("user", settings.user_cookie), ("pass", settings.pass_cookie),
                               ("auth_token", settings.token_cookie)):
            if cookie is not None and cookies.get(cookie):
                conn.cookie_credentials[option] = cookies[cookie]
        self.connection = self.transport.connection = conn
        conn.connection_made(self.transport)

    # -- frames -------------------------------------------------------------------------------------

    def _frames(self, data: bytes) -> None:
        assert self.reader is not None and self.transport is not None and self.connection is not None
        conn, transport = self.connection, self.transport
        try:
            chunks, controls = self.reader.feed(data)
        except ws.WebSocketError as exc:
            self.broker.log.debug("websocket protocol error", cid=conn.cid, error=str(exc))
            transport.send_close(exc.code, str(exc))
            conn.close(None)
            return
        if chunks:
            conn.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        for opcode, payload in controls:
            if conn.closed:
                return
            if opcode == ws.PING:
                self.raw.write(transport.writer.control(ws.PONG, payload))  # type: ignore[union-attr]
            elif opcode == ws.CLOSE:
                self._closed_by_client(payload)

    def _closed_by_client(self, payload: bytes) -> None:
        """Echo the client's close (its code; 1002 for a malformed one), then close as nats-server does."""
        assert self.transport is not None and self.connection is not None
        if len(payload) == 1:
            self.transport.send_close(ws.PROTOCOL_ERROR, "close frame payload cannot be 1 byte")
        elif len(payload) >= 2:
            code = int.from_bytes(payload[:2], "big")
            body = payload[2:]
            if not ws.valid_close_code(code):
                self.transport.send_close(ws.PROTOCOL_ERROR, f"invalid close status code {code}")
            else:
                try:
                    text = body.decode()
                except UnicodeDecodeError:
                    code, text = ws.INVALID_DATA, "invalid utf8 body in close frame"
                self.transport.send_close(code, text)
        else:
            self.transport.close_sent = True  # no status received: none is sent back
            self.raw.write(self.transport.writer.control(ws.CLOSE))  # type: ignore[union-attr]
        self.connection.close(None)
