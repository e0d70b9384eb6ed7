"""The test harness itself: both servers start, serve nats-py, stop and restart by pid as promised."""

from __future__ import annotations

import importlib.util
import json
import os

import nats
import pytest

from tests.differential import normalise
from tests.servers import JSBROKER, read_info

pytestmark = pytest.mark.xdist_group("broker-harness")


async def test_same_body_runs_against_both(server):
    nc = await nats.connect(server.url)
    try:
        sub = await nc.subscribe("harness.ping")
        await nc.publish("harness.ping", b"x")
        msg = await sub.next_msg(timeout=2)
        assert msg.data == b"x"
        assert nc.connected_url.port == server.port
    finally:
        await nc.close()


def test_info_advertises_headers_and_jetstream(server):
    info = json.loads(read_info(server.port)[5:])
    assert info["headers"] is True
    # jsbroker advertises JetStream once its service module exists (it runs core-only without it).
    js_expected = server.kind != JSBROKER or importlib.util.find_spec("jsbroker.jetstream.service") is not None
    assert info.get("jetstream", False) is js_expected
    major, minor, _ = info["version"].split(".")
    assert int(major) == 2 and int(minor) >= 9
    assert info["port"] == server.port


def test_stop_is_graceful_and_restart_keeps_port_and_store(server_factory, server_kind):
    handle = server_factory(server_kind)
    port, store, pid = handle.port, handle.store_dir, handle.pid
    assert os.path.isdir(store)
    assert handle.stop() == 0
    handle.restart()
    assert (handle.port, handle.store_dir) == (port, store)
    assert handle.pid != pid
    read_info(handle.port)
    handle.kill()
    assert handle.proc.returncode == -9


def test_normalise_blanks_volatile_values():
    a = {"server_id": "N" + "A" * 55, "created": "2026-01-02T03:04:05.123456789Z", "seq": 3, "x": [{"ts": 5}]}
    b = {"server_id": "N" + "B" * 55, "created": "2027-01-02T03:04:05Z", "seq": 3, "x": [{"ts": 9}]}
    assert normalise(a) == normalise(b)
    assert normalise({**a, "seq": 4}) != normalise(b)
    assert normalise({"created": "0001-01-01T00:00:00Z"}) == {"created": "0001-01-01T00:00:00Z"}


def test_info_fields_match_nats_server(jsbroker_server, nats_server):
    ours = json.loads(read_info(jsbroker_server.port)[5:])
    theirs = json.loads(read_info(nats_server.port)[5:])
    assert list(ours) == [k for k in theirs if k != "git_commit"]  # nats-server's keys in its order (test_info.py)
    own = {"git_commit", "go", "xkey"}  # each server's build and key
    assert normalise({k: v for k, v in ours.items() if k not in own}) == normalise(
        {k: v for k, v in theirs.items() if k not in own})
