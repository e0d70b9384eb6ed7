"""The monitoring port's HTTP/1.1 server: the listener and its connections (http_connection.py, h11's
sans-IO protocol state machine), a table of paths, each answered at once by a synchronous handler (any
method, as nats-server's monitoring answers any; HEAD without the body).

Not aiohttp: importing it cost every broker start 0.13-0.3 s (its client side builds SSL contexts at
import), more than the rest of the start-up together, for read-only GETs. h11 is imported with the first
connection, so a start pays nothing for the monitoring port but binding it.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .http_messages import Handler, Request, Response
from .listen import dual_stack_socket
from .logs import Logger

if TYPE_CHECKING:
    from .http_connection import HttpConnection

__all__ = ["Handler", "HttpServer", "Request", "Response"]  # the monitor's routes are written with these


class HttpServer:
    """Answers requests for `routes`' paths once `listen` returned, until `close`."""

    def __init__(self, routes: Mapping[str, Handler], log: Logger) -> None:
        self.routes = routes
        self.log = log
        self.connections: set[HttpConnection] = set()
        self._server: asyncio.Server | None = None

    async def listen(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> int:
        """Listen on host:port (HTTPS with `ssl_context`); returns the port (for port 0, the one chosen)."""
        loop = asyncio.get_running_loop()
        sock = dual_stack_socket(host, port)
        if sock is not None:
            self._server = await loop.create_server(self._connection, sock=sock, ssl=ssl_context)
        else:
            self._server = await loop.create_server(self._connection, host, port, reuse_address=True,
                                                    ssl=ssl_context)
        return int(self._server.sockets[0].getsockname()[1])

    def _connection(self) -> asyncio.Protocol:
        from .http_connection import HttpConnection  # with h11: paid by the first request, not by the start

        return HttpConnection(self.routes, self.log, self.connections)

    async def close(self) -> None:
        """Stop listening and close every connection (an idle keep-alive one too)."""
        if self._server is not None:
            self._server.close()
            for connection in list(self.connections):
                connection.close()
            await self._server.wait_closed()
            self._server = None
