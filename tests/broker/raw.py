"""A raw-socket NATS client for wire-level tests: exact bytes in, exact bytes out, close detection."""

from __future__ import annotations

import socket
import time

CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'


class Raw:
    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = b""
        self.closed = False
        self.info = self.read_until(b"\r\n")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_until(self, marker: bytes, timeout: float = 5.0) -> bytes:
        """Bytes up to and including `marker`; stops early (returning what came) if the server closes."""
        deadline = time.monotonic() + timeout
        while marker not in self.buf:
            left = deadline - time.monotonic()
            if self.closed or left <= 0:
                break
            self._recv(left)
        idx = self.buf.find(marker)
        cut = len(self.buf) if idx < 0 else idx + len(marker)
        out, self.buf = self.buf[:cut], self.buf[cut:]
        return out

    def read_to_close(self, timeout: float = 5.0) -> bytes:
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self._recv(deadline - time.monotonic())
        out, self.buf = self.buf, b""
        return out

    def _recv(self, timeout: float | None = None) -> None:
        if timeout is not None:
            self.sock.settimeout(max(timeout, 0.001))
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed = True
        self.buf += chunk

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Raw":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def exchange(port: int, data: bytes, connect: bytes | None = CONNECT) -> tuple[bytes, bool]:
    """Send (CONNECT +) data + PING; return (everything until the last PONG or close, whether it closed)."""
    pings = data.upper().count(b"PING") + 1
    with Raw(port) as r:
        r.send((connect or b"") + data + b"PING\r\n")
        out = b""
        for _ in range(pings):
            out += r.read_until(b"PONG\r\n")
            if r.closed or not out.endswith(b"PONG\r\n"):
                out += r.read_to_close()
                break
        return out, r.closed
