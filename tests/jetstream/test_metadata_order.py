"""Config metadata in responses is written with its keys sorted, as Go marshals a map: a tool that diffs or
prints `nats stream info --json` sees the same bytes from jsbroker and nats-server (the user's keys mixed
with the server's `_nats.*` ones)."""

from __future__ import annotations

import json
import re
import socket

from tests.servers import JSBROKER, KINDS, NATS_SERVER, launch

METADATA = {"zeta": "1", "alpha": "2", "_nats.custom": "3"}


def _request(sock: socket.socket, subject: str, body: dict[str, object], marker: bytes) -> bytes:
    payload = json.dumps(body).encode()
    sock.sendall(f"PUB {subject} api {len(payload)}\r\n".encode() + payload + b"\r\n")
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return data


def _metadata_bytes(kind: str) -> list[bytes]:
    with launch(kind) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        try:
            sock.recv(4096)
            sock.sendall(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\nSUB api 1\r\n')
            stream = _request(sock, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"], "metadata": METADATA},
                              b"stream_create_response")
            consumer = _request(sock, "$JS.API.CONSUMER.CREATE.S.C",
                                {"stream_name": "S", "config": {"durable_name": "C", "metadata": METADATA}},
                                b"consumer_create_response")
        finally:
            sock.close()
    return [re.search(rb'"metadata":\{[^}]*\}', reply).group(0) for reply in (stream, consumer)]  # type: ignore[union-attr]


def test_metadata_keys_in_go_map_order() -> None:
    seen = {kind: _metadata_bytes(kind) for kind in KINDS}
    assert seen[JSBROKER] == seen[NATS_SERVER]
    keys = list(json.loads(b"{" + seen[JSBROKER][0] + b"}")["metadata"])
    assert keys == sorted(keys) and "alpha" in keys
