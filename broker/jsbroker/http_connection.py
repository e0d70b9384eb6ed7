"""One connection of the monitoring port (http_server.py): h11's HTTP/1.1 state machine over an asyncio
transport. Requests are answered in order (keep-alive and pipelining as HTTP/1.1 has them); a malformed
request is answered with h11's status for it (400, 431 for a head past 16 KiB) and the connection closed
once the client has closed its side (closing with its bytes unread would reset the connection, which can
destroy the answer in flight); a connection idle for `IDLE_TIMEOUT` is closed, so half-sent requests
cannot pile up.
"""

from __future__ import annotations

import asyncio
import time
from http import HTTPStatus
from collections.abc import Mapping

import h11

from .http_messages import Handler, Request, Response
from .logs import Logger

IDLE_TIMEOUT = 60.0  # seconds a connection may wait for (the rest of) its next request


def plain(status: int, text: str) -> Response:
    return Response(text.encode() + b"\n", status, "text/plain; charset=utf-8")


class HttpConnection(asyncio.Protocol):
    def __init__(self, routes: Mapping[str, Handler], log: Logger, connections: set[HttpConnection]) -> None:
        self.routes = routes
        self.log = log
        self.connections = connections  # the server's open connections, which it closes when it stops
        self.http = h11.Connection(h11.SERVER)
        self.transport: asyncio.Transport | None = None
        self.request: h11.Request | None = None
        self.idle: asyncio.TimerHandle | None = None
        self.failed = False  # a malformed request was answered: only the client's close is awaited

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.connections.add(self)
        self._wait_for_request()

    def data_received(self, data: bytes) -> None:
        if self.failed:
            return
        self.http.receive_data(data)
        self._advance()

    def eof_received(self) -> bool:
        if self.failed:
            return False
        self.http.receive_data(b"")
        self._advance()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.connections.discard(self)
        if self.idle is not None:
            self.idle.cancel()

    def _wait_for_request(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.idle = asyncio.get_running_loop().call_later(IDLE_TIMEOUT, self.close)

    def _fail(self) -> None:
        assert self.transport is not None
        if not self.transport.can_write_eof():  # TLS: no half-close
            self.close()
            return
        self.failed = True
        self.transport.write_eof()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _advance(self) -> None:
        """Answer every complete request received so far, in order."""
        while self.transport is not None:
            try:
                event = self.http.next_event()
            except h11.RemoteProtocolError as exc:
                if self.http.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # no answer begun yet
                    status = exc.error_status_hint
                    self._send(plain(status, f"{status} {HTTPStatus(status).phrase}"))
                self._fail()
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self.request = event
            elif isinstance(event, h11.EndOfMessage) and self.request is not None:
                self._answer(self.request)
            elif isinstance(event, h11.ConnectionClosed):
                self.close()
                return
            # h11.Data: a body sent with a GET is read and ignored

    def _answer(self, event: h11.Request) -> None:
        method = event.method.decode("ascii")
        request = Request(method, event.target.decode("ascii"))
        handler = self.routes.get(request.path)
        if handler is None:
            response = plain(404, "404 page not found")
        else:  # any method, as nats-server's monitoring answers any
            try:
                response = handler(request)
            except Exception:
                self.log.exception("monitoring request failed", path=request.path)
                response = plain(500, "500 internal server error")
        self._send(response, head=method == "HEAD", routed=handler is not None)
        if self.http.our_state is h11.MUST_CLOSE:
            self.close()
        else:
            self.http.start_next_cycle()
            self._wait_for_request()

    def _send(self, response: Response, head: bool = False, routed: bool = False) -> None:
        assert self.transport is not None
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
                   ("Date", time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()))]
        if routed:  # nats-server's endpoints let any web page read them
            headers.append(("Access-Control-Allow-Origin", "*"))
        reason = HTTPStatus(response.status).phrase
        out = self.http.send(h11.Response(status_code=response.status, headers=headers, reason=reason)) or b""
        if not head:  # a HEAD answer has the headers of a GET's, without its body
            out += self.http.send(h11.Data(data=response.body)) or b""
        out += self.http.send(h11.EndOfMessage()) or b""
        self.transport.write(out)
