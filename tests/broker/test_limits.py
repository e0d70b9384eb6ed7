"""Auth, keepalive and resource limits on servers started with special settings (both kinds)."""

from __future__ import annotations

import json
import os
import time

import nats
import pytest
from nats.errors import Error as NatsError

from tests.broker.configs import config_file
from tests.broker.raw import CONNECT, Raw, exchange

pytestmark = pytest.mark.xdist_group("broker-limits")

AUTH_ERR = b"-ERR 'Authorization Violation'\r\n"


@pytest.fixture
def token_server(server_factory, server_kind):
    return server_factory(server_kind, jetstream=False, extra_args=["--auth", "s3cret"])


@pytest.fixture
def userpass_server(server_factory, server_kind):
    return server_factory(server_kind, jetstream=False, extra_args=["--user", "u", "--pass", "p"])


async def test_token_auth(token_server):
    nc = await nats.connect(token_server.url, token="s3cret")
    sub = await nc.subscribe("auth.t")
    await nc.publish("auth.t", b"ok")
    assert (await sub.next_msg(timeout=2)).data == b"ok"
    await nc.close()
    with pytest.raises(NatsError):
        await nats.connect(token_server.url, token="wrong", allow_reconnect=False, max_reconnect_attempts=0)


async def test_user_password_auth(userpass_server):
    nc = await nats.connect(userpass_server.url, user="u", password="p")
    await nc.flush()
    await nc.close()
    with pytest.raises(NatsError):
        await nats.connect(userpass_server.url, user="u", password="x", allow_reconnect=False, max_reconnect_attempts=0)


def test_auth_wire(token_server):
    info = json.loads(Raw(token_server.port).info[5:])
    assert info["auth_required"] is True
    good = b'CONNECT {"auth_token":"s3cret","verbose":false}\r\n'
    assert exchange(token_server.port, b"", connect=good) == (b"PONG\r\n", False)
    bad = b'CONNECT {"auth_token":"bad","verbose":false}\r\n'
    assert exchange(token_server.port, b"", connect=bad) == (AUTH_ERR, True)
    assert exchange(token_server.port, b"", connect=b'CONNECT {"verbose":false}\r\n') == (AUTH_ERR, True)
    for before_connect in (b"", b"PUB foo 2\r\nhi\r\n", b"SUB foo 1\r\n", b"FOO\r\n"):
        assert exchange(token_server.port, before_connect, connect=None) == (AUTH_ERR, True)


def test_user_password_wire(userpass_server):
    ok = b'CONNECT {"user":"u","pass":"p","verbose":false}\r\n'
    assert exchange(userpass_server.port, b"", connect=ok) == (b"PONG\r\n", False)
    for bad in (b'{"user":"u","pass":"x"}', b'{"auth_token":"p"}', b'{"user":"x","pass":"p"}'):
        assert exchange(userpass_server.port, b"", connect=b"CONNECT " + bad + b"\r\n") == (AUTH_ERR, True)


def test_authentication_timeout(server_factory, server_kind):
    conf = config_file({}, authorization={"token": "t", "timeout": 0.5})
    handle = server_factory(server_kind, jetstream=False, extra_args=["-c", conf])
    os.unlink(conf)
    with Raw(handle.port) as r:
        started = time.monotonic()
        assert r.read_to_close(timeout=5) == b"-ERR 'Authentication Timeout'\r\n"
        assert 0.3 < time.monotonic() - started < 3


def test_stale_connection(server_factory, server_kind):
    conf = config_file({"ping_interval": "300ms", "ping_max": 2})
    handle = server_factory(server_kind, jetstream=False, extra_args=["-c", conf])
    os.unlink(conf)
    with Raw(handle.port) as quiet, Raw(handle.port) as alive:
        quiet.send(CONNECT)
        alive.send(CONNECT)
        for _ in range(4):  # a client answering PINGs stays
            assert alive.read_until(b"PING\r\n") == b"PING\r\n"
            alive.send(b"PONG\r\n")
        assert quiet.read_to_close(timeout=5) == b"PING\r\nPING\r\n-ERR 'Stale Connection'\r\n"
        assert quiet.closed
        alive.send(b"PING\r\n")
        assert alive.read_until(b"PONG\r\n").endswith(b"PONG\r\n")
        assert not alive.closed


def test_max_payload_setting(server_factory, server_kind):
    conf = config_file({"max_payload": 1024})
    handle = server_factory(server_kind, jetstream=False, extra_args=["-c", conf])
    os.unlink(conf)
    info = json.loads(Raw(handle.port).info[5:])
    assert info["max_payload"] == 1024
    assert exchange(handle.port, b"PUB foo 1024\r\n" + b"x" * 1024 + b"\r\n") == (b"PONG\r\n", False)
    assert exchange(handle.port, b"PUB foo 1025\r\n") == (b"-ERR 'Maximum Payload Violation'\r\n", True)


def test_slow_consumer_is_dropped_and_others_continue(server_factory, server_kind):
    conf = config_file({"max_pending": 512 * 1024, "max_payload": 65536, "write_deadline": "1s"})
    handle = server_factory(server_kind, jetstream=False, extra_args=["-c", conf])
    os.unlink(conf)
    payload = b"z" * 60_000
    frame = b"PUB slow.x %d\r\n%s\r\n" % (len(payload), payload)
    with Raw(handle.port) as stuck, Raw(handle.port) as pub:
        stuck.send(CONNECT + b"SUB slow.x 1\r\nPING\r\n")
        assert stuck.read_until(b"PONG\r\n") == b"PONG\r\n"
        pub.send(CONNECT)
        for _ in range(400):  # 24 MB towards a subscriber that never reads
            pub.send(frame)
        pub.send(b"PING\r\n")
        assert pub.read_until(b"PONG\r\n", timeout=30) == b"PONG\r\n"  # the publisher is never cut off
        received = stuck.read_to_close(timeout=30)
        assert stuck.closed
        assert len(received) < 400 * len(frame)
        assert b"-ERR" not in received[-100:]  # dropped silently, as nats-server does
        # The server and other clients are fine.
        assert exchange(handle.port, b"SUB ok 1\r\nPUB ok 1\r\na\r\n") == (b"MSG ok 1 1\r\na\r\nPONG\r\n", False)


def test_max_connections(server_factory, server_kind):
    conf = config_file({"max_connections": 1})
    handle = server_factory(server_kind, jetstream=False, extra_args=["-c", conf])
    os.unlink(conf)
    deadline = time.monotonic() + 10
    while True:  # the launcher's readiness probe may still hold the only slot for a moment
        first = Raw(handle.port)
        first.send(CONNECT + b"PING\r\n")
        if first.read_until(b"PONG\r\n") == b"PONG\r\n" or time.monotonic() > deadline:
            break
        first.close()
    with first:
        with Raw(handle.port) as second:
            out = second.info + second.read_to_close()
            assert out.endswith(b"-ERR 'maximum connections exceeded'\r\n")
            assert second.closed
        first.send(b"PING\r\n")
        assert first.read_until(b"PONG\r\n") == b"PONG\r\n"
