"""What a waiting pull request hears when the server stops, against nats-server: on SIGTERM `409 Server
Shutdown` with the messages and bytes it was still owed, before the connection closes; in lame duck mode
(SIGUSR2) nothing (jsbroker used to send `409 Consumer Deleted` there, which clients take as final).
nats-jetstream's ordered consumer re-pulls on it after reconnecting and so finds its consumer gone; told
nothing (jsbroker before) it waited forever (`test_ordered_consumer_messages_server_restart` of its suite)."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

from tests.servers import JSBROKER, KINDS, NATS_SERVER, launch

CONNECT = b'CONNECT {"verbose":false,"headers":true,"no_responders":true,"protocol":1}\r\n'


def _command(subject: str, reply: str, body: dict[str, object]) -> bytes:
    payload = json.dumps(body).encode()
    return f"PUB {subject} {reply} {len(payload)}\r\n".encode() + payload + b"\r\n"


def _read_until(sock: socket.socket, marker: bytes, timeout: float = 10.0, count: int = 1) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while data.count(marker) < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _status_lines(data: bytes) -> list[str]:
    """The status header blocks sent to the pull's inbox, as text without the HMSG line."""
    out = []
    for block in data.split(b"HMSG pull ")[1:]:
        head, _, rest = block.partition(b"\r\n")
        size = int(head.split()[-2])
        out.append(rest[:size].decode().strip())
    return out


def _scenario(kind: str, stop: signal.Signals, tmp_path: Path) -> list[str]:
    config = tmp_path / f"{kind}.json"
    config.write_text(json.dumps({"lame_duck_duration": "30s", "lame_duck_grace_period": "1s"}))
    with launch(kind, extra_args=["-c", str(config)]) as server:
        sock = socket.create_connection(("127.0.0.1", server.port))
        try:
            _read_until(sock, b"\r\n")
            sock.sendall(CONNECT + b"SUB api 1\r\nSUB pull 2\r\n"
                         + _command("$JS.API.STREAM.CREATE.S", "api", {"name": "S", "subjects": ["s.>"]}))
            _read_until(sock, b"stream_create_response")
            sock.sendall(_command("$JS.API.CONSUMER.CREATE.S.C", "api",
                                  {"stream_name": "S", "config": {"durable_name": "C", "ack_policy": "none"}}))
            _read_until(sock, b"consumer_create_response")
            sock.sendall(b"".join(f"PUB s.{i} 1\r\nx\r\n".encode() for i in range(5)) + b"PING\r\n")
            _read_until(sock, b"PONG")
            sock.sendall(_command("$JS.API.CONSUMER.MSG.NEXT.S.C", "pull",
                                  {"batch": 100, "max_bytes": 100_000, "expires": 30_000_000_000}))
            delivered = _read_until(sock, b"MSG s.", count=5)
            assert delivered.count(b"MSG s.") == 5, delivered
            assert server.proc is not None
            started = time.monotonic()
            server.proc.send_signal(stop)
            told = _read_until(sock, b"Server Shutdown", timeout=15)  # or the connection's end
            assert time.monotonic() - started < 15
            return _status_lines(told)
        finally:
            sock.close()


def test_waiting_pull_hears_server_shutdown(tmp_path: Path) -> None:
    heard = {kind: _scenario(kind, signal.SIGTERM, tmp_path) for kind in KINDS}
    # 5 one-byte messages delivered (43 bytes each as nats-server counts them) of 100 asked and 100,000 bytes
    expected = ["NATS/1.0 409 Server Shutdown\r\nNats-Pending-Messages: 95\r\nNats-Pending-Bytes: 99785"]
    assert heard[NATS_SERVER] == expected, heard[NATS_SERVER]
    assert heard[JSBROKER] == heard[NATS_SERVER]


def test_waiting_pull_hears_nothing_in_lame_duck_mode(tmp_path: Path) -> None:
    heard = {kind: _scenario(kind, signal.SIGUSR2, tmp_path) for kind in KINDS}
    assert heard[JSBROKER] == heard[NATS_SERVER] == []
