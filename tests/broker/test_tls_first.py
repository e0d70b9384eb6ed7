"""TLS `handshake_first` (nats-server 2.10+): the client starts TLS before the server's INFO. Each mode
(off, on, a fallback delay, "auto") against jsbroker and nats-server with the same config file, with a
TLS-first nats-py client, a usual TLS client (waits for INFO), a client that says nothing, and one that
speaks plain NATS at once.

On a loaded machine a client can be scheduled later than a short fallback delay: the configured delay is
2 s (the fallback is the point, not its length), and in "auto" mode (nats-server's fixed 50 ms) a client that
must speak first gets a few tries to be on time, so a late scheduler is not taken for a server's fault."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import urllib.request
from pathlib import Path
from typing import Any, Callable

import nats
import pytest

from jsbroker.config import ConfigError, parse_handshake_first
from tests.broker.certs import Authority
from tests.polling import poll
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, free_port


def _start(kind: str, config: Path, store: Path) -> ServerHandle:
    """Ready when /healthz answers: with handshake_first on there is no INFO to wait for."""
    handle = ServerHandle(kind=kind, port=free_port(), store_dir=store / kind, http_port=free_port(),
                          extra_args=("-c", str(config)))
    handle.spawn()

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"{handle.http_url}/healthz", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        poll(healthy, timeout=20, what=f"{kind} healthy")
    except BaseException:
        handle.close()
        raise
    return handle


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    authority = Authority(tmp_path_factory.mktemp("pki") / "ca")
    return {"ca": authority.ca, "server": authority.issue("server", server=True)}


def _tls_first_flags(http_url: str, cid: int | None) -> list[bool]:
    with urllib.request.urlopen(f"{http_url}/connz", timeout=10) as response:
        # This client's entry only: the previous client's may still be listed until the server sees it close.
        return [c.get("tls_first", False) for c in json.loads(response.read())["connections"] if c["cid"] == cid]


async def _client(url: str, context: ssl.SSLContext, first: bool, http_url: str) -> str:
    try:
        nc = await nats.connect(url, tls=context, tls_handshake_first=first, allow_reconnect=False,
                                max_reconnect_attempts=0, connect_timeout=10)
    except (OSError, asyncio.TimeoutError, nats.errors.Error, ssl.SSLError):
        return "refused"  # how (a TLS error, a timeout, the close) races in nats-py with either server
    try:
        reply = await nc.request("$JS.API.INFO", b"", timeout=10)
        if not json.loads(reply.data)["type"].endswith("account_info_response"):
            return "no answer"
        return f"connected, /connz tls_first={_tls_first_flags(http_url, nc.client_id)}"
    finally:
        await nc.close()


def _silent(port: int) -> str:
    """A client that waits for the server to speak: the INFO's tls_required, or the server closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        line = sock.makefile("rb").readline()
    return f"INFO tls_required={json.loads(line[5:])['tls_required']}" if line.startswith(b"INFO ") else "closed"


def _plain(port: int) -> str:
    """A client that speaks plain NATS before any INFO: never answered in clear text."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        data = b""
        try:
            while chunk := sock.recv(4096):
                data += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return "PONG" if b"PONG" in data else "INFO, no PONG" if data.startswith(b"INFO") else "closed"


MODES: dict[str, Any] = {"off": False, "on": True, "fallback 2s": "2s", "auto": "auto"}
FIRST, INFO_FIRST = "connected, /connz tls_first=[True]", "connected, /connz tls_first=[False]"
EXPECTED: dict[str, dict[str, str]] = {
    "off": {"tls first": "refused", "info first": INFO_FIRST, "silent": "INFO tls_required=True",
            "plain": "INFO, no PONG"},
    "on": {"tls first": FIRST, "info first": "refused", "silent": "closed", "plain": "closed"},
    "fallback 2s": {"tls first": FIRST, "info first": INFO_FIRST, "silent": "INFO tls_required=True",
                       "plain": "closed"},
    "auto": {"tls first": FIRST, "info first": INFO_FIRST, "silent": "INFO tls_required=True", "plain": "closed"},
}


AUTO_TRIES = 5


def _on_time(client: Callable[[], str], within_window: str, tries: int) -> str:
    """A client that speaks first, up to `tries` times until it gets the answer to speaking within the
    fallback window (a loaded scheduler can start it late); the last answer otherwise."""
    for _ in range(tries):
        answer = client()
        if answer == within_window:
            break
    return answer


@pytest.mark.parametrize("mode", list(MODES))
def test_handshake_first(pki: dict[str, Any], tmp_path: Path, mode: str) -> None:
    server = pki["server"]
    path = tmp_path / "tls.json"
    path.write_text(json.dumps({"tls": {"cert_file": str(server.cert), "key_file": str(server.key),
                                        "handshake_first": MODES[mode]}}))
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    results = {}
    tries = AUTO_TRIES if mode == "auto" else 1
    for kind in KINDS:
        with _start(kind, path, tmp_path) as s:
            url = f"tls://127.0.0.1:{s.port}"
            http_url = s.http_url
            assert http_url is not None
            results[kind] = {
                "tls first": _on_time(lambda: asyncio.run(_client(url, context, True, http_url)), FIRST, tries),
                "info first": asyncio.run(_client(url, context, False, http_url)),
                "silent": _silent(s.port), "plain": _on_time(lambda: _plain(s.port), "closed", tries)}
    assert results[JSBROKER] == results[NATS_SERVER], results
    assert results[JSBROKER] == EXPECTED[mode]


@pytest.mark.parametrize("value, parsed", [(True, (True, 0.0)), ("on", (True, 0.0)), ("false", (False, 0.0)),
                                           ("auto", (True, 0.05)), ("auto_fallback", (True, 0.05)),
                                           ("300ms", (True, 0.3))])
def test_handshake_first_values(value: Any, parsed: tuple[bool, float]) -> None:
    assert parse_handshake_first(value, "tls.handshake_first") == parsed


@pytest.mark.parametrize("value", ["sometimes", 5, ["on"]])
def test_handshake_first_bad_values(value: Any) -> None:
    with pytest.raises(ConfigError, match="tls.handshake_first"):
        parse_handshake_first(value, "tls.handshake_first")
