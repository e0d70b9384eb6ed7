"""NATS over WebSocket: jsbroker against nats-server 2.15.1 with the same `websocket` block (no_tls,
compression offered), raw clients so the server is what is measured.

    python3 bench/websocket.py --quick

| workload | what is counted |
|---|---|
| ws raw ingest | 128-byte PUBs in masked binary frames of ~64 KiB, then PING/PONG; no subscribers |
| ws raw ingest, deflate | the same frames compressed (permessage-deflate negotiated) |
| ws raw pub -> sub | the same publisher over TCP, one WebSocket subscriber counting the frames' bytes |
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import KINDS, ByteCounter, Sample, Workload, cpu_seconds, main  # noqa: E402

from tests.servers import ServerHandle, free_port, launch  # noqa: E402

SIZE = 128
BLOCK = 64 * 1024
KEY = b"\x11\x22\x33\x44"
WS_PORTS: dict[str, int] = {}


def _frame(payload: bytes, compressed: bool = False) -> bytes:
    if compressed:
        deflater = zlib.compressobj(1, zlib.DEFLATED, -15)
        payload = (deflater.compress(payload) + deflater.flush(zlib.Z_SYNC_FLUSH))[:-4]
    n = len(payload)
    head = bytes([0x82 | (0x40 if compressed else 0)])
    head += bytes([0x80 | n]) if n < 126 else struct.pack("!BH", 0xFE, n) if n < 65536 else struct.pack("!BQ", 0xFF, n)
    stream = (KEY * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "little") ^ int.from_bytes(stream, "little")).to_bytes(n, "little")
    return head + KEY + masked


def _ws_connect(port: int, deflate: bool) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    extension = "Sec-WebSocket-Extensions: permessage-deflate\r\n" if deflate else ""
    s.sendall(("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extension}\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(4096)
    s.sendall(_frame(b'CONNECT {"verbose":false,"pedantic":false}\r\n'))
    return s


def _await_pong(s: socket.socket, deflate: bool) -> None:
    """Read frames until one carries PONG (the server's INFO first, compressed when negotiated)."""
    buf = b""
    while True:
        while len(buf) < 2:
            buf += s.recv(65536)
        n, pos = buf[1] & 0x7F, 2
        if n == 126:
            n, pos = struct.unpack_from("!H", buf, 2)[0], 4
        elif n == 127:
            n, pos = struct.unpack_from("!Q", buf, 2)[0], 10
        while len(buf) < pos + n:
            buf += s.recv(65536)
        payload, compressed, buf = buf[pos:pos + n], bool(buf[0] & 0x40), buf[pos + n:]
        if compressed:
            payload = zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff")
        if b"PONG\r\n" in payload:
            return


def _blocks(subject: bytes, n: int, deflate: bool) -> list[bytes]:
    pub = b"PUB %s %d\r\n%s\r\n" % (subject, SIZE, b"x" * SIZE)
    per = BLOCK // len(pub)
    full, rest = divmod(n, per)
    block = _frame(pub * per, deflate)
    return [block] * full + ([_frame(pub * rest, deflate)] if rest else [])


def ingest(deflate: bool) -> Callable[[ServerHandle, int], Sample]:
    def run(handle: ServerHandle, n: int) -> Sample:
        blocks = _blocks(b"bench.ws", n, deflate)
        s = _ws_connect(WS_PORTS[handle.kind], deflate)
        try:
            before, start = cpu_seconds(handle.pid), time.perf_counter()
            for block in blocks:
                s.sendall(block)
            s.sendall(_frame(b"PING\r\n"))
            _await_pong(s, deflate)
            return Sample(n, time.perf_counter() - start, cpu_seconds(handle.pid) - before)
        finally:
            s.close()

    return run


def pub_sub(handle: ServerHandle, n: int) -> Sample:
    """A raw TCP publisher, a WebSocket subscriber (uncompressed) counting the delivered bytes."""
    sub = _ws_connect(WS_PORTS[handle.kind], False)
    sub.sendall(_frame(b"SUB bench.wsfan 1\r\nPING\r\n"))
    _await_pong(sub, False)
    # frame headers counted too: at most 10 bytes per server write
    reader = ByteCounter(sub, n * (len(b"MSG bench.wsfan 1 %d\r\n\r\n" % SIZE) + SIZE))

    pub = socket.create_connection(("127.0.0.1", handle.port))
    pub.recv(4096)
    pub.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
    line = b"PUB bench.wsfan %d\r\n%s\r\n" % (SIZE, b"x" * SIZE)
    per = BLOCK // len(line)
    before, start = cpu_seconds(handle.pid), time.perf_counter()
    reader.start()
    for _ in range(n // per):
        pub.sendall(line * per)
    pub.sendall(line * (n % per))
    reader.done.wait(600)
    elapsed = time.perf_counter() - start
    pub.close()
    sub.close()
    return Sample(n, elapsed, cpu_seconds(handle.pid) - before)


def start() -> dict[str, ServerHandle]:
    servers = {}
    for kind in KINDS:
        WS_PORTS[kind] = free_port()
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"websocket": {"host": "127.0.0.1", "port": WS_PORTS[kind], "no_tls": True,
                                     "compression": True}}, f)
        servers[kind] = launch(kind, jetstream=False, extra_args=["-c", f.name])
        os.unlink(f.name)
    return servers


WORKLOADS: list[Workload] = [
    ("ws raw ingest", ingest(False), 500_000),
    ("ws raw ingest, deflate", ingest(True), 500_000),
    ("ws raw pub -> sub", pub_sub, 300_000),
]

if __name__ == "__main__":
    main(__doc__, WORKLOADS, start)
