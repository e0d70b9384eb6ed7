"""WebSocket (RFC 6455) as nats-server speaks it, sans-IO: the upgrade request's checks and the frames.

`check_upgrade` answers an HTTP request the way nats-server's `wsUpgrade` does (the same checks in the same
order, the same status codes); `FrameReader` turns the client's frames into the NATS byte stream (masking,
fragmentation, control frames, permessage-deflate) and `FrameWriter` frames the server's output. The NATS
protocol itself is untouched: ws_transport.py hands the bytes to the same `Connection` as the TCP port's.

nats-server's choices, kept here:
- compression (permessage-deflate) is accepted whenever the client offers it, always with
  `server_no_context_takeover; client_no_context_takeover`: every message is (de)compressed on its own;
- the server's output is one binary frame per write, compressed only above 64 bytes; clients that look like
  browsers (a `Mozilla/` user agent) get frames of at most 4 KiB (compressed ones unfragmented for Safari);
- a compressed message may not exceed 8 x max_payload (64 MiB at most) nor inflate past max_payload;
- text frames are taken as binary ones (no UTF-8 check), a client may ask for unmasked frames
  (`Nats-No-Masking: true`), and every protocol error closes with 1002 and its reason.

Why not wsproto (sans-IO, on h11 like the monitoring port): measured on the same 64 KiB frames of 128-byte
PUBs, its FrameProtocol decodes at 1.4-2.0 us/message against 1.2-1.4 here (both unmask with the same
strided `translate`), and it cannot say what nats-server says: it refuses unmasked client frames (no
Nats-No-Masking), checks text frames' UTF-8 (nats-server does not), inflates without a size limit (a
compressed message could blow past max_payload in memory) and compresses every message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterable
from urllib.parse import urlsplit

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PMC_RESPONSE = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
BROWSER_FRAME_SIZE = 4096
COMPRESS_THRESHOLD = 64
MAX_CONTROL_PAYLOAD = 125
MAX_MESSAGE_LIMIT = 64 * 1024 * 1024
DEFLATE_TAIL = b"\x00\x00\xff\xff"

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0, 1, 2, 8, 9, 10
GOING_AWAY, PROTOCOL_ERROR, INVALID_DATA, POLICY, TOO_BIG = 1001, 1002, 1007, 1008, 1009


class UpgradeRefused(Exception):
    """An upgrade request answered with an HTTP error: `status`, and the reason nats-server logs."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class WebSocketError(Exception):
    """A protocol error in the client's frames: the connection closes with `code` (1002 or 1009)."""

    def __init__(self, reason: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(reason)
        self.code = code


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: str


def origin_of(url: str) -> Origin:
    """scheme, lower-case host and port (80/443 by default) of an origin URL; ValueError if it has none."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an absolute http:// or https:// URL with a host")
    port = parts.port  # ValueError for a port that is not a number
    return Origin(parts.scheme, parts.hostname.lower(), str(port or (443 if parts.scheme == "https" else 80)))


def _host_and_port(hostport: str, tls: bool) -> tuple[str, str]:
    """Go's net.SplitHostPort, with the scheme's port when there is none (as nats-server's wsGetHostAndPort)."""
    default = "443" if tls else "80"
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise ValueError(f"address {hostport}: missing ']' in address")
        host, rest = hostport[1:end], hostport[end + 1:]
        if rest and not rest.startswith(":"):
            raise ValueError(f"address {hostport}: unexpected characters after ']'")
        return host.lower(), rest[1:] if rest else default
    host, sep, port = hostport.partition(":")
    if ":" in port:
        raise ValueError(f"address {hostport}: too many colons in address")
    return host.lower(), port if sep else default


@dataclass
class Upgrade:
    """An accepted upgrade: the 101 response and what the connection needs to know."""

    response: bytes
    compress: bool
    masked: bool  # the client masks its frames (all but those that asked for Nats-No-Masking)
    browser: bool
    no_compressed_fragments: bool  # Safari: compressed frames unfragmented
    cookies: dict[str, str] = field(default_factory=dict)


def _tokens(headers: dict[str, list[str]], name: str) -> list[str]:
    return [t.strip(" \t").lower() for value in headers.get(name, ()) for t in value.split(",")]


def _offers_deflate(headers: dict[str, list[str]]) -> bool:
    return any(param.strip(" \t").lower() == "permessage-deflate"
               for ext in _tokens(headers, "sec-websocket-extensions") for param in ext.split(";"))


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def _cookies(headers: dict[str, list[str]]) -> dict[str, str]:
    jar: dict[str, str] = {}
    for line in headers.get("cookie", ()):
        for pair in line.split(";"):
            name, sep, value = pair.strip().partition("=")
            if sep and name:
                jar.setdefault(name, value.strip('"'))
    return jar


def check_upgrade(method: str, target: str, headers: dict[str, list[str]], tls: bool, *, compression: bool,
                  same_origin: bool, allowed_origins: Iterable[Origin], extra_headers: str = "") -> Upgrade:
    """nats-server's checks of an upgrade request (RFC 6455 4.2.1), in its order; `headers` by lower-case
    name. Raises UpgradeRefused with the status nats-server answers."""
    if target.split("?", 1)[0].endswith("/mqtt"):
        raise UpgradeRefused(404, "mqtt websocket endpoint not enabled")
    if method != "GET":
        raise UpgradeRefused(405, "request method must be GET")
    host = (headers.get("host") or [""])[0]
    if not host:
        raise UpgradeRefused(400, "'Host' missing in request")
    if "websocket" not in _tokens(headers, "upgrade"):
        raise UpgradeRefused(400, "invalid value for header 'Upgrade'")
    if "upgrade" not in _tokens(headers, "connection"):
        raise UpgradeRefused(400, "invalid value for header 'Connection'")
    key = (headers.get("sec-websocket-key") or [""])[0]
    if not key:
        raise UpgradeRefused(400, "key missing")
    try:
        valid_key = len(base64.b64decode(key, validate=True)) == 16
    except binascii.Error:
        valid_key = False
    if not valid_key:
        raise UpgradeRefused(400, "invalid websocket key")
    if "13" not in _tokens(headers, "sec-websocket-version"):
        raise UpgradeRefused(400, "invalid version")
    _check_origin(headers, host, tls, same_origin, tuple(allowed_origins))
    compress = compression and _offers_deflate(headers)
    masked = (headers.get("nats-no-masking") or [""])[0] != "true"
    agent = (headers.get("user-agent") or [""])[0]
    browser = agent.startswith("Mozilla/")
    response = ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Accept: {accept_key(key)}\r\n")
    if compress:
        response += f"Sec-WebSocket-Extensions: {PMC_RESPONSE}\r\n"
    if not masked:
        response += "Nats-No-Masking: true\r\n"
    return Upgrade(
        response=(response + extra_headers + "\r\n").encode(), compress=compress, masked=masked, browser=browser,
        no_compressed_fragments=browser and compress and "Version/" in agent and "Safari/" in agent,
        cookies=_cookies(headers),
    )


def _check_origin(headers: dict[str, list[str]], host: str, tls: bool, same_origin: bool,
                  allowed: tuple[Origin, ...]) -> None:
    """No Origin header (a non-browser client) is always accepted, as by nats-server."""
    if not same_origin and not allowed:
        return
    origin = (headers.get("origin") or headers.get("sec-websocket-origin") or [""])[0]
    if not origin:
        return
    try:
        parts = urlsplit(origin)
        if not parts.scheme or not parts.netloc:
            raise ValueError(f"parse {origin!r}: invalid URI for request")
        given = Origin(parts.scheme, *_host_and_port(parts.netloc, parts.scheme == "https"))
    except ValueError as exc:
        raise UpgradeRefused(403, f"origin not allowed: {exc}") from None
    if same_origin:
        own = Origin("https" if tls else "http", *_host_and_port(host, tls))
        if (given.host, given.port, given.scheme.lower()) != (own.host, own.port, own.scheme):
            raise UpgradeRefused(403, "origin not allowed: not same origin")
    if allowed and given not in allowed:
        raise UpgradeRefused(403, "origin not allowed: not in the allowed list")


def error_response(status: int) -> bytes:
    """Go's http.Error, as nats-server answers a refused upgrade (the connection then closes)."""
    from http import HTTPStatus

    body = f"{HTTPStatus(status).phrase}\n".encode()
    return (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Sec-Websocket-Version: 13\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def bad_request_response(status: int) -> bytes:
    """Go's HTTP server's own answer to a request it cannot parse (before nats-server sees it)."""
    from http import HTTPStatus

    return (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Connection: close\r\n\r\n{status} {HTTPStatus(status).phrase}").encode()


_XOR = [bytes(b ^ k for b in range(256)) for k in range(256)]  # translate tables: XOR with each key byte


def _unmask(data: bytes, key: bytes) -> bytes:
    """XOR with the 4-byte key repeated: four strided `translate`s (C speed, ~1 GB/s here; a big-integer
    XOR was 40 MB/s, a loop over bytes far less)."""
    if not data:
        return data
    out = bytearray(data)
    for i in range(4):
        out[i::4] = out[i::4].translate(_XOR[key[i]])
    return bytes(out)


def valid_close_code(code: int) -> bool:
    return 1000 <= code < 5000 and code not in (1004, 1005, 1006, 1015) and not 1016 <= code <= 2999


def close_payload(code: int, reason: str) -> bytes:
    """A close frame's payload: the code and the reason, cut to fit a control frame (with "...")."""
    body = reason.encode()
    if len(body) > MAX_CONTROL_PAYLOAD - 2:
        body = body[:MAX_CONTROL_PAYLOAD - 5] + b"..."
    return struct.pack("!H", code) + body


# Connection.close's error -> the close frame nats-server sends for that reason (its ClosedState).
_CLOSE_REASONS = {
    None: (GOING_AWAY, "Server Shutdown"),
    "Authorization Violation": (POLICY, "Authentication Failure"),
    "Authentication Timeout": (POLICY, "Authentication Timeout"),
    "maximum connections exceeded": (POLICY, "Maximum Connections Exceeded"),
    "Maximum Control Line Exceeded": (POLICY, "Maximum Control Line Exceeded"),
    "Maximum Payload Violation": (TOO_BIG, "Maximum Message Payload Exceeded"),
    "Stale Connection": (GOING_AWAY, "Stale Connection"),
}


def close_reason(err: str | None) -> tuple[int, str]:
    """The close code and text for a connection the server closes with `err` (a protocol error otherwise)."""
    return _CLOSE_REASONS.get(err, (PROTOCOL_ERROR, "Parse Error"))


def frame_header(opcode: int, length: int, *, final: bool = True, compressed: bool = False) -> bytes:
    first = opcode | (0x80 if final else 0) | (0x40 if compressed else 0)
    if length <= 125:
        return struct.pack("!BB", first, length)
    if length < 65536:
        return struct.pack("!BBH", first, 126, length)
    return struct.pack("!BBQ", first, 127, length)


class FrameReader:
    """The client's frames in, the NATS bytes and control frames out. `feed` returns the data to parse
    and the control frames to answer (opcode, payload); a protocol error raises WebSocketError."""

    def __init__(self, *, compressed: bool, masked: bool, max_payload: int) -> None:
        self.compression = compressed
        self.masked = masked
        self.max_payload = max_payload
        self.max_message = min(max_payload * 8, MAX_MESSAGE_LIMIT)
        self._buf = b""
        self._remaining = 0  # payload bytes of the current data frame still to come
        self._in_frame = False
        self._key = b""
        self._key_pos = 0
        self._message_done = True  # the last data frame had FIN: the next must not be a continuation
        self._message_compressed = False
        self._deflated: list[bytes] = []
        self._deflated_size = 0

    def feed(self, data: bytes) -> tuple[list[bytes], list[tuple[int, bytes]]]:
        self._buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        controls: list[tuple[int, bytes]] = []
        while self._buf:
            if not self._in_frame:
                control = self._header()
                if control is None:
                    break  # a header cut short: wait for the rest
                if isinstance(control, tuple):
                    controls.append(control)
                    if control[0] == CLOSE:
                        self._buf = b""
                        break
                elif self._remaining == 0:
                    self._deliver(b"", out)  # an empty data frame (it may end a compressed message)
                continue
            chunk, self._buf = self._buf[:self._remaining], self._buf[self._remaining:]
            self._remaining -= len(chunk)
            if self.masked:
                key = self._key[self._key_pos:] + self._key[:self._key_pos]
                self._key_pos = (self._key_pos + len(chunk)) % 4
                chunk = _unmask(chunk, key)
            self._deliver(chunk, out)
        return out, controls

    def _deliver(self, chunk: bytes, out: list[bytes]) -> None:
        if self._remaining == 0:
            self._in_frame = False
        if not self._message_compressed:
            if chunk:
                out.append(chunk)
            return
        self._collect(chunk)
        if self._message_done and not self._in_frame:
            out.append(self._inflate())

    def _header(self) -> tuple[int, bytes] | None | bool:
        """Consume one frame header (and a control frame whole): None if incomplete, False for a data
        frame, (opcode, payload) for a control frame."""
        buf = self._buf
        if len(buf) < 2:
            return None
        b0, b1 = buf[0], buf[1]
        opcode, final, rsv1 = b0 & 0x0F, bool(b0 & 0x80), bool(b0 & 0x40)
        if b0 & 0x30:
            raise WebSocketError("RSV2 and RSV3 must be clear")
        if rsv1 and not self.compression:
            raise WebSocketError("compressed frame received without negotiated permessage-deflate")
        if self.masked and not b1 & 0x80:
            raise WebSocketError("mask bit missing")
        length, pos = b1 & 0x7F, 2
        if opcode in (CLOSE, PING, PONG):
            if length > MAX_CONTROL_PAYLOAD:
                raise WebSocketError(f"control frame length bigger than maximum allowed of {MAX_CONTROL_PAYLOAD} bytes")
            if not final:
                raise WebSocketError("control frame does not have final bit set")
            if rsv1:
                raise WebSocketError("control frame must not be compressed")
        elif opcode in (TEXT, BINARY):
            if not self._message_done:
                raise WebSocketError("new message started before final frame for previous message was received")
        elif opcode == CONTINUATION:
            if self._message_done or rsv1:
                raise WebSocketError("invalid continuation frame")
        else:
            raise WebSocketError(f"unknown opcode {opcode}")
        if length == 126:
            if len(buf) < 4:
                return None
            length, pos = struct.unpack_from("!H", buf, 2)[0], 4
        elif length == 127:
            if len(buf) < 10:
                return None
            length, pos = struct.unpack_from("!Q", buf, 2)[0], 10
            if length >> 63:
                raise WebSocketError("invalid 64-bit payload length")
        key = b""
        if self.masked:
            if len(buf) < pos + 4:
                return None
            key, pos = buf[pos:pos + 4], pos + 4
        if opcode >= CLOSE:
            if len(buf) < pos + length:
                return None
            payload = buf[pos:pos + length]
            self._buf = buf[pos + length:]
            return opcode, _unmask(payload, key) if key else payload
        self._buf = buf[pos:]
        self._message_done = final
        if opcode != CONTINUATION:
            self._message_compressed = rsv1
        self._key, self._key_pos = key, 0
        self._remaining = length
        self._in_frame = True
        return False

    def _collect(self, chunk: bytes) -> None:
        if chunk:
            self._deflated_size += len(chunk)
            if self._deflated_size + len(DEFLATE_TAIL) > self.max_message:
                raise WebSocketError("Read Error", GOING_AWAY)  # nats-server: ErrMaxPayload ends the read loop
            self._deflated.append(chunk)

    def _inflate(self) -> bytes:
        """A compressed message is inflated whole once its last frame is in (no context takeover)."""
        data, self._deflated, self._deflated_size = b"".join(self._deflated) + DEFLATE_TAIL, [], 0
        try:
            inflated = zlib.decompressobj(-zlib.MAX_WBITS).decompress(data, self.max_payload + 1)
        except zlib.error as exc:
            raise WebSocketError("Read Error", GOING_AWAY) from exc  # nats-server: a read error, as for the limits
        if len(inflated) > self.max_payload:
            raise WebSocketError("Read Error", GOING_AWAY)  # nats-server: ErrMaxPayload ends the read loop
        return inflated


class FrameWriter:
    """The server's output as frames: one binary message per write, as nats-server sends it."""

    def __init__(self, *, compress: bool, browser: bool, no_compressed_fragments: bool) -> None:
        self.compress = compress
        self.max_frame = BROWSER_FRAME_SIZE if browser else 0
        self.no_compressed_fragments = no_compressed_fragments

    def message(self, data: bytes) -> bytes:
        if self.compress and len(data) > COMPRESS_THRESHOLD:
            deflater = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)  # BestSpeed, fresh: no context takeover
            body = deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH)
            return self._frames(body[:-4] if body.endswith(DEFLATE_TAIL) else body, compressed=True)
        return self._frames(data, compressed=False)

    def _frames(self, data: bytes, compressed: bool) -> bytes:
        size = self.max_frame if not (compressed and self.no_compressed_fragments) else 0
        if not size or len(data) <= size:
            return frame_header(BINARY, len(data), compressed=compressed) + data
        parts: list[bytes] = []
        for start in range(0, len(data), size):
            chunk = data[start:start + size]
            first, final = start == 0, start + size >= len(data)
            parts += (frame_header(BINARY if first else CONTINUATION, len(chunk), final=final,
                                   compressed=compressed and first), chunk)
        return b"".join(parts)

    @staticmethod
    def control(opcode: int, payload: bytes = b"") -> bytes:
        return frame_header(opcode, len(payload)) + payload
