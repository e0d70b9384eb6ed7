"""The monitoring port's requests and answers: what a route's handler (http_server.py) is given and
returns, and what an HTTP connection (http_connection.py) parses into and writes out."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl, unquote, urlsplit


class Request:
    __slots__ = ("method", "path", "query")

    def __init__(self, method: str, target: str) -> None:
        parts = urlsplit(target)
        self.method = method
        self.path = unquote(parts.path)
        self.query: dict[str, str] = dict(parse_qsl(parts.query, keep_blank_values=True))


class Response:
    __slots__ = ("status", "body", "content_type")

    def __init__(self, body: bytes, status: int = 200, content_type: str = "application/json") -> None:
        self.status = status
        self.body = body
        self.content_type = content_type


Handler = Callable[[Request], Response]
