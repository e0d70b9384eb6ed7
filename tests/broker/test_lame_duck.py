"""Lame duck mode against nats-server: `<server> --signal ldm=<pid file>` (SIGUSR2) makes the server refuse
new clients, tell its clients (nats-py's lame duck callback), close them over the lame duck duration
after the grace period, and exit 0. Both servers read the same JSON config file."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from jsbroker import lameduck
from jsbroker.config import BrokerConfig, ConfigError
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, launch, nats_server_binary

CONFIG = {"lame_duck_duration": "30s", "lame_duck_grace_period": "1s"}


def _signal_command(kind: str, spec: str) -> list[str]:
    return [nats_server_binary(), "--signal", spec] if kind == NATS_SERVER else [sys.executable, "-m", "jsbroker", "--signal", spec]


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


async def _scenario(kind: str, server: ServerHandle, pid_file: Path) -> dict[str, Any]:
    told = [asyncio.Event(), asyncio.Event()]
    gone = [asyncio.Event(), asyncio.Event()]
    clients = []
    for i in range(2):
        async def on_ldm(i: int = i) -> None:
            told[i].set()

        async def on_closed(i: int = i) -> None:
            gone[i].set()

        clients.append(await nats.connect(server.url, allow_reconnect=False, lame_duck_mode_cb=on_ldm,
                                          closed_cb=on_closed))
    start = time.monotonic()
    subprocess.run(_signal_command(kind, f"ldm={pid_file}"), check=True, timeout=30)
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in told)), 10)
    refused = _refused(server.port)
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in gone)), 15)  # grace 1 s, then at most 1 s apart
    closed_after = time.monotonic() - start
    assert server.proc is not None
    code = server.proc.wait(timeout=15)
    return {"told": all(e.is_set() for e in told), "new clients refused": refused,
            "all closed after the grace period": closed_after >= 1.0, "exit code": code}


def test_lame_duck_mode_like_nats_server(tmp_path: Path) -> None:
    config = tmp_path / "ldm.json"
    config.write_text(json.dumps(CONFIG))
    out = {}
    for kind in KINDS:
        pid_file = tmp_path / f"{kind}.pid"
        with launch(kind, extra_args=["-c", str(config), "-P", str(pid_file)]) as server:
            out[kind] = asyncio.run(_scenario(kind, server, pid_file))
    assert out[JSBROKER] == out[NATS_SERVER] == {
        "told": True, "new clients refused": True, "all closed after the grace period": True, "exit code": 0}


def test_sigterm_does_not_cut_a_lame_duck_short(tmp_path: Path) -> None:
    """As nats-server: SIGTERM during lame duck mode is ignored, the clients are still let go one by one."""
    config = tmp_path / "ldm.json"
    config.write_text(json.dumps({"lame_duck_duration": "30s", "lame_duck_grace_period": "3s"}))
    pid_file = tmp_path / "jsbroker.pid"
    with launch(JSBROKER, extra_args=["-c", str(config), "-P", str(pid_file)]) as server:

        async def run() -> bool:
            told = asyncio.Event()

            async def on_ldm() -> None:
                told.set()

            nc = await nats.connect(server.url, allow_reconnect=False, lame_duck_mode_cb=on_ldm)
            subprocess.run(_signal_command(JSBROKER, f"ldm={pid_file}"), check=True, timeout=30)
            await asyncio.wait_for(told.wait(), 10)
            assert server.proc is not None
            server.proc.terminate()
            await asyncio.sleep(0.5)  # within the 3 s grace period: still connected
            connected = nc.is_connected
            await nc.close()
            return connected

        assert asyncio.run(run()) is True
        assert server.proc is not None and server.proc.wait(timeout=15) == 0
    assert not pid_file.exists()


def test_close_pauses_spread_at_most_a_second_apart() -> None:
    assert lameduck.pauses(1, 30, 10) == []
    many = lameduck.pauses(1000, 30, 10)  # 20 s over 1000 clients: 10-20 ms each
    assert len(many) == 999 and all(0.01 <= p <= 0.02 for p in many)
    few = lameduck.pauses(3, 120, 10)  # capped at a second, never under half of it
    assert all(0.5 <= p <= 1.0 for p in few)


@pytest.mark.parametrize(("settings", "message"), [
    ({"lame_duck_duration": 10.0}, "minimum is 30 seconds"),
    ({"lame_duck_grace_period": 120.0}, "less than lame_duck_duration"),
    ({"lame_duck_grace_period": -1.0}, "positive"),
])
def test_bad_lame_duck_settings_are_refused(settings: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(**settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(("spec", "message"), [
    ("ldm", "give the process: --signal ldm=<pid or pid file>"),
    ("reopen=1", "reopen is not supported"),
    ("bogus=1", "unknown signal 'bogus'"),
    ("ldm=/nonexistent/jsbroker.pid", "cannot read the pid file"),
])
def test_bad_signal_requests_fail_clearly(spec: str, message: str) -> None:
    done = subprocess.run(_signal_command(JSBROKER, spec), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and message in done.stderr, done.stderr
