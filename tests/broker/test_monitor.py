"""Monitoring endpoints: the basic /healthz, /varz, /connz and /jsz fields match nats-server's."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import time
import urllib.error
import urllib.request

import nats
import pytest

from tests.differential import normalise
from tests.servers import JSBROKER

pytestmark = pytest.mark.xdist_group("broker-monitor")


def get(server, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(server.http_url + path, timeout=5) as r:
            assert r.headers.get("Content-Type", "").startswith("application/json")
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = e.read()
        return e.code, json.loads(body) if body.startswith(b"{") else {}


@pytest.mark.parametrize("query", ["", "?js-enabled-only=true", "?js-server-only=true"])
def test_healthz(server_kind, server_factory, query):
    # a server of its own: health is server-wide, and streams other tests leave behind can make a shared
    # nats-server unhealthy (it reports a stream it could not recover)
    server = server_factory(server_kind, http=True)
    deadline = time.monotonic() + 10
    # nats-server answers 503 for a moment after it accepts clients, until JetStream is ready
    while (got := get(server, "/healthz" + query))[0] == 503 and time.monotonic() < deadline:
        time.sleep(0.05)  # poll: there is no event to wait on
    assert got == (200, {"status": "ok"}), got


def test_unknown_path_is_404(server):
    assert get(server, "/nope")[0] == 404


def test_varz_basics(server):
    status, varz = get(server, "/varz")
    assert status == 200
    same = {k: varz[k] for k in ("proto", "max_payload", "max_control_line", "max_pending", "ping_max",
                                  "ping_interval", "max_connections", "auth_timeout", "write_deadline")}
    assert same == {"proto": 1, "max_payload": 1048576, "max_control_line": 4096, "max_pending": 67108864,
                    "ping_max": 2, "ping_interval": 120_000_000_000, "max_connections": 65536,
                    "auth_timeout": 2, "write_deadline": 10_000_000_000}
    assert varz["port"] == server.port and varz["http_port"] == server.http_port
    for key in ("server_id", "server_name", "version", "start", "now", "uptime", "mem", "cores", "connections",
                "total_connections", "in_msgs", "out_msgs", "in_bytes", "out_bytes", "slow_consumers",
                "subscriptions", "jetstream"):
        assert key in varz, key
    assert normalise(varz)["version"] == "<version>" and varz["version"].startswith("2.")


async def test_connz_lists_named_client(server):
    nc = await nats.connect(server.url, name="monitor-probe")
    try:
        sub = await nc.subscribe("mon.probe.x")
        await nc.publish("mon.probe.x", b"12345")
        await sub.next_msg(timeout=2)
        await nc.flush()
        status, connz = get(server, "/connz?subs=1")
        assert status == 200
        assert {"server_id", "now", "num_connections", "total", "offset", "limit", "connections"} <= connz.keys()
        mine = [c for c in connz["connections"] if c.get("name") == "monitor-probe"]
        assert len(mine) == 1
        c = mine[0]
        assert (c["lang"], c["ip"], c["in_msgs"], c["out_msgs"], c["subscriptions"]) == ("python3", "127.0.0.1", 1, 1, 1)
        assert "mon.probe.x" in c["subscriptions_list"]
        assert {"cid", "kind", "type", "port", "start", "uptime", "pending_bytes", "in_bytes", "out_bytes"} <= c.keys()
    finally:
        await nc.close()


def test_jsz_basics(server):
    status, jsz = get(server, "/jsz")
    assert status == 200
    for key in ("memory", "storage", "reserved_memory", "reserved_storage", "accounts", "api", "server_id", "now",
                "config", "streams", "consumers", "messages", "bytes"):
        assert key in jsz, key
    assert set(jsz["api"]) == {"level", "total", "errors"}


def test_healthz_answers_503_while_the_store_recovers(tmp_path):
    """After a crash the store is rebuilt from its blocks; meanwhile /healthz says 503 and why (a refused
    connection would tell a probe nothing), then 200 once clients are served."""
    from tests.servers import fill_stream, launch, read_info

    handle = launch(JSBROKER, store_dir=tmp_path, http=True)
    try:
        asyncio.run(_add_stream(handle.url, "RECOVER", ["recover.>"]))
        fill_stream(handle.port, "recover.x", 150_000)
        handle.kill()
        handle.spawn()
        seen: list[tuple[int, dict]] = []
        deadline = time.monotonic() + 60
        while not seen or seen[-1][0] != 200:
            assert time.monotonic() < deadline, f"never healthy: {seen[-3:]}\n{handle.log_tail()}"
            try:
                with urllib.request.urlopen(f"{handle.http_url}/healthz", timeout=5) as response:
                    seen.append((response.status, json.loads(response.read())))
            except urllib.error.HTTPError as exc:
                seen.append((exc.code, json.loads(exc.read())))
            except OSError:
                pass  # the monitoring port is not open yet
            time.sleep(0.01)  # poll interval
        read_info(handle.port)  # clients are served once healthy
    finally:
        handle.close()
    statuses = [status for status, _ in seen]
    assert statuses[0] == 503 and statuses[-1] == 200 and set(statuses) == {503, 200}, statuses
    assert seen[0][1] == {"status": "unavailable", "status_code": 503, "error": "JetStream is recovering its store"}


async def _add_stream(url: str, name: str, subjects: list[str]) -> None:
    nc = await nats.connect(url)
    await nc.jetstream().add_stream(name=name, subjects=subjects)
    await nc.close()


def _exchange(port: int, raw: bytes) -> bytes:
    """Send `raw` on a new connection to the monitoring port; everything until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def test_methods_head_and_errors_like_nats_server(server):
    """nats-server's monitoring answers any method, HEAD with the headers only, an unknown path with Go's
    404 text, a request that is not HTTP with 400 and a close; each request on a kept-alive connection."""
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
    seen = {}
    for method, path in (("POST", "/healthz"), ("HEAD", "/varz"), ("GET", "/nope"), ("GET", "/healthz")):
        connection.request(method, path)
        response = connection.getresponse()
        body = response.read()
        seen[method, path] = (response.status, response.getheader("Content-Type"),
                              response.getheader("Access-Control-Allow-Origin"), body if path != "/varz" else len(body))
    connection.close()
    assert seen == {
        ("POST", "/healthz"): (200, "application/json", "*", seen["POST", "/healthz"][3]),
        ("HEAD", "/varz"): (200, "application/json", "*", 0),
        ("GET", "/nope"): (404, "text/plain; charset=utf-8", None, b"404 page not found\n"),
        ("GET", "/healthz"): seen["POST", "/healthz"],
    }, seen
    assert json.loads(seen["POST", "/healthz"][3]) == {"status": "ok"}
    assert _exchange(server.http_port, b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_an_endless_request_head_is_refused_and_others_are_served(jsbroker_server):
    """A request head still unfinished past 16 KiB gets 431 and a close (memory stays bounded); the next
    client is answered as usual."""
    raw = b"GET /varz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 1_000_000
    assert _exchange(jsbroker_server.http_port, raw).startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert get(jsbroker_server, "/healthz") == (200, {"status": "ok"})


def test_monitoring_answers_as_soon_as_clients_are_accepted(server_factory):
    """The monitoring port comes up before the client port: once INFO arrives, /healthz says 200 at once."""
    handle = server_factory(JSBROKER, http=True)  # returns as soon as a client reads INFO
    assert get(handle, "/healthz") == (200, {"status": "ok"})


def test_a_kept_alive_monitoring_connection_does_not_hold_up_the_stop(server_factory):
    handle = server_factory(JSBROKER, http=True)
    connection = http.client.HTTPConnection("127.0.0.1", handle.http_port, timeout=10)
    connection.request("GET", "/varz")
    assert connection.getresponse().read().startswith(b"{")
    assert handle.stop(timeout=10) == 0  # a graceful exit: not killed after the timeout
    assert connection.sock.recv(1) == b""  # closed by the server
    connection.close()
