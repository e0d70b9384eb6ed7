"""A raw WebSocket client for the frame-level tests: the upgrade request as bytes, and frames built and read
by hand, so a test can send what no well-behaved client library sends (unmasked or fragmented frames, bad
opcodes and close codes) and see the server's exact answer."""

from __future__ import annotations

import os
import socket
import struct
import zlib
from dataclasses import dataclass, field

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def upgrade_request(path: str = "/", headers: dict[str, str] | None = None, method: str = "GET") -> bytes:
    head = {"Host": "127.0.0.1", "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": KEY,
            "Sec-WebSocket-Version": "13", **(headers or {})}
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items() if v is not None)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def exchange(port: int, request: bytes, timeout: float = 2.0) -> bytes:
    """Send `request` and read one HTTP answer (nats-server keeps a refused connection open, jsbroker
    closes it): up to the end of its body, or to the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
                head, sep, body = out.partition(b"\r\n\r\n")
                if sep and (b" 101 " in head.split(b"\r\n")[0] or len(body) >= _content_length(head)):
                    break
        except (TimeoutError, ConnectionResetError):
            pass
        return out


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 1 << 30


def response_summary(raw: bytes) -> dict[str, object]:
    """Status code, the body and the WebSocket headers of an HTTP answer (Date and keep-alive left out)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else None
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    kept = {k: v for k, v in headers.items() if k.startswith("sec-websocket") or k in ("upgrade", "nats-no-masking")}
    return {"status": status, "body": body.decode("latin-1") if status != 101 else "", "headers": kept}


def frame(opcode: int, payload: bytes, *, final: bool = True, mask: bool = True, rsv1: bool = False) -> bytes:
    first = opcode | (0x80 if final else 0) | (0x40 if rsv1 else 0)
    n = len(payload)
    length = bytes([n | (0x80 if mask else 0)]) if n < 126 else (
        struct.pack("!BH", 126 | (0x80 if mask else 0), n) if n < 65536 else struct.pack("!BQ", 127 | (0x80 if mask else 0), n))
    if not mask:
        return bytes([first]) + length + payload
    key = os.urandom(4)
    return bytes([first]) + length + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def deflate(data: bytes) -> bytes:
    d = zlib.compressobj(6, zlib.DEFLATED, -15)
    out = d.compress(data) + d.flush(zlib.Z_SYNC_FLUSH)
    return out[:-4]


def inflate(message: bytes) -> bytes:
    """A permessage-deflate message's payload (its sync-flush tail restored)."""
    return zlib.decompressobj(-15).decompress(message + b"\x00\x00\xff\xff")


@dataclass
class Frame:
    opcode: int
    final: bool
    rsv1: bool
    payload: bytes


@dataclass
class Session:
    """An upgraded connection: `send` raw bytes, `frames` reads every frame until the server closes."""

    sock: socket.socket
    response: bytes
    buffer: bytes = field(default=b"")

    @classmethod
    def open(cls, port: int, headers: dict[str, str] | None = None) -> "Session":
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(upgrade_request(headers=headers))
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        return cls(sock, head, rest)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def next_frame(self) -> Frame:
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read(8))[0]
        return Frame(b0 & 0x0F, bool(b0 & 0x80), bool(b0 & 0x40), self._read(n))

    def messages_until(self, marker: bytes) -> tuple[bytes, list[Frame]]:
        """The NATS bytes (inflated) and frames received until `marker` appears in the stream."""
        stream, frames, message, compressed = b"", [], b"", False
        while marker not in stream:
            f = self.next_frame()
            frames.append(f)
            if f.opcode in (1, 2, 0):
                compressed = f.rsv1 if f.opcode else compressed
                message += f.payload
                if f.final:
                    stream += inflate(message) if compressed else message
                    message = b""
            elif f.opcode == 8:
                raise EOFError(f"closed: {f.payload!r}")
        return stream, frames

    def close_frame(self) -> tuple[int | None, str]:
        """Read until the server's close frame: its code and reason."""
        while True:
            f = self.next_frame()
            if f.opcode == 8:
                if len(f.payload) < 2:
                    return None, ""
                return struct.unpack("!H", f.payload[:2])[0], f.payload[2:].decode()

    def close(self) -> None:
        self.sock.close()
