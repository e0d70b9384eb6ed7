"""`jsoperator check` (the chart's helm test) against both servers with token auth, as the chart sets it up:
the round trips work and leave nothing behind; a wrong token and a server without JetStream fail with a
message saying so."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import nats
import pytest

pytestmark = pytest.mark.timeout(60)
TOKEN = "s3cret-token"


def check(url: str, token: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JSOPERATOR_SERVERS": url, "JSOPERATOR_TOKEN": token, "JSOPERATOR_REQUEST_TIMEOUT": "2"}
    return subprocess.run([sys.executable, "-m", "jsoperator", "check"], env=env, capture_output=True, text=True,
                          timeout=30)


def streams(url: str) -> list[str]:
    async def main() -> list[str]:
        nc = await nats.connect(url, token=TOKEN)
        try:
            return [str(s.config.name) for s in await nc.jetstream().streams_info()]
        finally:
            await nc.close()

    return asyncio.run(main())


def test_check_round_trips_a_message_and_leaves_nothing(server_kind, server_factory):
    server = server_factory(server_kind, extra_args=["--auth", TOKEN])
    done = check(server.url, TOKEN)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ok: core NATS: a message to _INBOX.") and lines[0].endswith(" came back")
    assert lines[1].startswith("ok: JetStream: a message stored in memory stream JSOPERATOR_CHECK_")
    assert lines[1].endswith("(seq 1) read back, stream deleted")
    assert lines[2].startswith("ok: the server is nats-server 2.15.1 (JetStream API level 5)")
    assert lines[3] == f"jsoperator check: {server.url} works for the operator"
    assert streams(server.url) == []


def test_a_wrong_token_fails_naming_the_server(server_kind, server_factory):
    server = server_factory(server_kind, extra_args=["--auth", TOKEN])
    done = check(server.url, "wrong")
    assert done.returncode == 1
    assert done.stdout.startswith(f"jsoperator check: {server.url}: ") and "uthorization" in done.stdout, done.stdout


def test_a_server_without_jetstream_fails_saying_so(server_kind, server_factory):
    server = server_factory(server_kind, jetstream=False, extra_args=["--auth", TOKEN])
    done = check(server.url, TOKEN)
    assert done.returncode == 1
    assert done.stdout.strip() == (f"jsoperator check: {server.url}: no JetStream responder at {server.url}: "
                                   "is JetStream enabled?"), done.stdout
