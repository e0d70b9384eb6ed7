"""NATS over WebSocket: jsbroker against nats-server 2.15.1 with the same `websocket` block (a JSON config
file both read). nats-py's WebSocket transport and nats.js (through Node's `ws`) run the same scenarios on
both; raw upgrade requests and hand-built frames check the answers byte for byte where clients never go
(refused upgrades, protocol errors and their close codes, fragments, compression, browser frame sizes)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import nats
import pytest

from jsbroker.config import ConfigError, websocket_settings
from tests.broker import wsclient
from tests.broker.wsclient import Session, deflate, frame
from tests.polling import poll, poll_async
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, free_port, launch, nats_server_binary

CONFIGS: dict[str, dict[str, Any]] = {
    # compression offered, an origin list (same-origin off)
    "deflate": {"no_tls": True, "compression": True,
                "allowed_origins": ["https://good.example:8443", "http://good.example"]},
    # no compression, same-origin checks
    "plain": {"no_tls": True, "compression": False, "same_origin": True},
}
NPM_PACKAGES = ("@nats-io/nats-core@3.4.0", "@nats-io/jetstream@3.4.0", "ws@8.18.3")
NPM_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jetstream-kopf" / "npm-nats-ws-3.4.0"


def _config_file(ws: dict[str, Any], port: int) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"websocket": {"host": "127.0.0.1", "port": port, **ws}}, f)
        return f.name


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[tuple[str, str], tuple[ServerHandle, int]]]:
    """Each config on both servers: (config, kind) -> (handle, websocket port)."""
    started: dict[tuple[str, str], tuple[ServerHandle, int]] = {}
    files = []
    try:
        for name, ws in CONFIGS.items():
            for kind in KINDS:
                port = free_port()
                files.append(_config_file(ws, port))
                started[name, kind] = (launch(kind, extra_args=["-c", files[-1]], http=True), port)
        yield started
    finally:
        for handle, _ in started.values():
            handle.close()
        for path in files:
            os.unlink(path)


def _both(servers: dict[tuple[str, str], tuple[ServerHandle, int]], config: str, run: Any) -> dict[str, Any]:
    return {kind: run(servers[config, kind][1]) for kind in KINDS}


def _same(results: dict[str, Any]) -> Any:
    assert results[JSBROKER] == results[NATS_SERVER], results
    return results[JSBROKER]


# -- clients ------------------------------------------------------------------------------------------


async def _respond(msg: Any) -> None:
    await msg.respond(b"re:" + msg.data)


async def _natspy(port: int) -> dict[str, Any]:
    """Core pub/sub and request/reply, a 1 MiB message, JetStream publish and fetch, over ws://."""
    nc = await nats.connect(f"ws://127.0.0.1:{port}", allow_reconnect=False, max_reconnect_attempts=0)
    try:
        info = nc._server_info
        sub = await nc.subscribe("svc", cb=_respond)
        reply = await nc.request("svc", b"ping", timeout=5)
        big = os.urandom(1024 * 1024 - 64)
        echo = await nc.subscribe("big", max_msgs=1)
        await nc.publish("big", big)
        got = await echo.next_msg(timeout=10)
        js = nc.jetstream()
        await js.add_stream(name="WS", subjects=["ws.>"])
        acks = [(await js.publish("ws.a", b"m%d" % i)).seq for i in range(3)]
        pull = await js.pull_subscribe("ws.a", "d")
        fetched = [m.data for m in await pull.fetch(3, timeout=5)]
        await js.delete_stream("WS")
        await sub.unsubscribe()
        keys = sorted(set(info) - {"go", "git_commit", "xkey"})  # those three: issue #30's INFO work
        return {"info": (info["port"] == port, info["host"], keys), "reply": reply.data, "big": got.data == big,
                "acks": acks, "fetched": fetched}
    finally:
        await nc.close()


@pytest.mark.parametrize("config", list(CONFIGS))
def test_natspy(servers: Any, config: str) -> None:
    result = _same(_both(servers, config, lambda port: asyncio.run(_natspy(port))))
    assert result["reply"] == b"re:ping" and result["big"] and result["fetched"] == [b"m0", b"m1", b"m2"]


NODE_SCRIPT = r"""
globalThis.WebSocket = require("ws");
const { wsconnect } = require("@nats-io/nats-core");
const { jetstream, jetstreamManager } = require("@nats-io/jetstream");
(async () => {
  const nc = await wsconnect({ servers: process.argv[2] });
  const out = {};
  nc.subscribe("svc", { callback: (err, m) => m.respond("re:" + m.string()) });
  out.reply = (await nc.request("svc", "hi", { timeout: 5000 })).string();
  const big = new Uint8Array(1024 * 1024 - 200).map((_, i) => i % 251);
  const sub = nc.subscribe("big", { max: 1 });
  nc.publish("big", big);
  for await (const m of sub) { out.big = m.data.length === big.length && m.data.every((v, i) => v === big[i]); }
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "JSWS", subjects: ["jsws.>"] });
  const js = jetstream(nc);
  out.acks = [];
  for (let i = 0; i < 3; i++) out.acks.push((await js.publish("jsws.a", "m" + i)).seq);
  await jsm.consumers.add("JSWS", { durable_name: "d", ack_policy: "explicit" });
  const consumer = await js.consumers.get("JSWS", "d");
  out.fetched = [];
  for await (const m of await consumer.fetch({ max_messages: 3, expires: 5000 })) { out.fetched.push(m.string()); m.ack(); }
  await jsm.streams.delete("JSWS");
  await nc.close();
  console.log(JSON.stringify(out));
})().catch((e) => { console.log(JSON.stringify({ error: String(e) })); process.exit(1); });
"""


def _node_modules() -> Path:
    """nats.js (nats-core, jetstream) and `ws`, installed once into the cache (npm: ~3 s cold)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are not installed")
    if not (NPM_CACHE / "node_modules" / "ws").is_dir():
        NPM_CACHE.mkdir(parents=True, exist_ok=True)
        (NPM_CACHE / "package.json").write_text('{"private": true}\n')
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(NPM_CACHE), *NPM_PACKAGES],
                              capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr
    (NPM_CACHE / "scenario.js").write_text(NODE_SCRIPT)
    return NPM_CACHE


@pytest.mark.parametrize("config", list(CONFIGS))
def test_natsjs(servers: Any, config: str) -> None:
    """nats.js over `ws` (which offers permessage-deflate: the "deflate" config compresses both ways)."""
    folder = _node_modules()

    def run(port: int) -> dict[str, Any]:
        done = subprocess.run(["node", str(folder / "scenario.js"), f"ws://127.0.0.1:{port}"], capture_output=True,
                              text=True, timeout=60, cwd=folder)
        return json.loads(done.stdout or json.dumps({"stderr": done.stderr}))

    result = _same(_both(servers, config, run))
    assert result == {"reply": "re:hi", "big": True, "acks": [1, 2, 3], "fetched": ["m0", "m1", "m2"]}


# -- the upgrade --------------------------------------------------------------------------------------

UPGRADES: dict[str, bytes] = {
    "plain": wsclient.upgrade_request(),
    "offers deflate": wsclient.upgrade_request(headers={"Sec-WebSocket-Extensions": "permessage-deflate; "
                                                        "client_max_window_bits"}),
    "no masking": wsclient.upgrade_request(headers={"Nats-No-Masking": "true"}),
    "any path": wsclient.upgrade_request("/some/path?x=1"),
    "POST": wsclient.upgrade_request(method="POST", headers={"Content-Length": "0"}),
    "no Upgrade": wsclient.upgrade_request(headers={"Upgrade": None}),  # type: ignore[dict-item]
    "Upgrade: h2c": wsclient.upgrade_request(headers={"Upgrade": "h2c"}),
    "Connection: keep-alive": wsclient.upgrade_request(headers={"Connection": "keep-alive"}),
    "no key": wsclient.upgrade_request(headers={"Sec-WebSocket-Key": None}),  # type: ignore[dict-item]
    "short key": wsclient.upgrade_request(headers={"Sec-WebSocket-Key": "c2hvcnQ="}),
    "version 8": wsclient.upgrade_request(headers={"Sec-WebSocket-Version": "8"}),
    "mqtt path": wsclient.upgrade_request("/mqtt"),
    "allowed origin": wsclient.upgrade_request(headers={"Origin": "https://good.example:8443"}),
    "allowed origin, default port": wsclient.upgrade_request(headers={"Origin": "http://GOOD.example:80"}),
    "other origin": wsclient.upgrade_request(headers={"Origin": "https://evil.example"}),
    "same origin": wsclient.upgrade_request(headers={"Origin": "http://127.0.0.1"}),
    "origin null": wsclient.upgrade_request(headers={"Origin": "null"}),
    "not HTTP": b"HELLO\r\n\r\n",
    "data before the handshake is done": wsclient.upgrade_request() + b"CONNECT {}\r\n",
}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", list(UPGRADES))
def test_upgrade_answers(servers: Any, config: str, name: str) -> None:
    """Status, body and WebSocket headers (the accept key, the negotiated extension) as nats-server's."""
    answer = _same(_both(servers, config, lambda port: wsclient.response_summary(
        wsclient.exchange(port, UPGRADES[name]))))
    assert answer["status"] in (None, 101, 400, 403, 404, 405)


# -- frames -------------------------------------------------------------------------------------------


def _connected(port: int, headers: dict[str, str] | None = None) -> Session:
    session = Session.open(port, headers)
    session.send(frame(2, b'CONNECT {"verbose":false,"protocol":1,"headers":true}\r\nPING\r\n'))
    session.messages_until(b"PONG\r\n")
    return session


def _fragmented_publish(port: int) -> tuple[bytes, bool]:
    """A PUB cut into three frames (text, then continuations, split inside the control line)."""
    session = _connected(port)
    try:
        payload = os.urandom(3000)
        wire = b"SUB big 1\r\nPUB big %d\r\n%s\r\nPING\r\n" % (len(payload), payload)
        session.send(frame(1, wire[:5], final=False) + frame(0, wire[5:1500], final=False) + frame(0, wire[1500:]))
        stream, _ = session.messages_until(b"PONG\r\n")
        return stream.split(b"\r\n", 1)[0], payload in stream
    finally:
        session.close()


def _ping_frame(port: int) -> tuple[int, bytes]:
    session = _connected(port)
    try:
        session.send(frame(9, b"hello"))
        f = session.next_frame()
        return f.opcode, f.payload
    finally:
        session.close()


def _compressed_publish(port: int) -> bool:
    """A client message compressed with permessage-deflate (negotiated), in two frames."""
    session = Session.open(port, {"Sec-WebSocket-Extensions": "permessage-deflate"})
    try:
        body = deflate(b'CONNECT {"verbose":false}\r\nSUB z 1\r\nPUB z 11\r\nhello world\r\nPING\r\n')
        session.send(frame(2, body[:7], final=False, rsv1=True) + frame(0, body[7:]))
        stream, _ = session.messages_until(b"PONG\r\n")
        return b"MSG z 1 11\r\nhello world\r\n" in stream
    finally:
        session.close()


def _browser_frames(port: int) -> tuple[bool, int]:
    """A Mozilla/ user agent: the server's frames carry at most 4 KiB each."""
    session = _connected(port, {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0"})
    try:
        payload = os.urandom(20000)
        session.send(frame(2, b"SUB b 1\r\nPUB b %d\r\n%s\r\nPING\r\n" % (len(payload), payload)))
        stream, frames = session.messages_until(b"PONG\r\n")
        return payload in stream, max(len(f.payload) for f in frames)
    finally:
        session.close()


def test_fragments_pings_compression_and_browser_frames(servers: Any) -> None:
    assert _same(_both(servers, "plain", _fragmented_publish)) == (b"MSG big 1 3000", True)
    assert _same(_both(servers, "plain", _ping_frame)) == (10, b"hello")
    assert _same(_both(servers, "deflate", _compressed_publish)) is True
    assert _same(_both(servers, "plain", _browser_frames)) == (True, 4096)


P = "plain"
BAD_FRAMES: dict[str, tuple[str, bytes, tuple[int | None, str]]] = {
    "unmasked": (P, frame(2, b"PING\r\n", mask=False), (1002, "mask bit missing")),
    "unknown opcode": (P, frame(3, b"x"), (1002, "unknown opcode 3")),
    "RSV2 set": (P, bytes([0x80 | 0x20 | 2, 0x80]) + b"\0\0\0\0", (1002, "RSV2 and RSV3 must be clear")),
    "compressed without deflate": (P, frame(2, deflate(b"PING\r\n"), rsv1=True),
                                   (1002, "compressed frame received without negotiated permessage-deflate")),
    "fragmented ping": (P, frame(9, b"x", final=False), (1002, "control frame does not have final bit set")),
    "ping over 125 bytes": (P, frame(9, b"x" * 126),
                            (1002, "control frame length bigger than maximum allowed of 125 bytes")),
    "continuation first": (P, frame(0, b"PING\r\n"), (1002, "invalid continuation frame")),
    "new message inside a fragmented one": (P, frame(2, b"PI", final=False) + frame(2, b"NG\r\n"), (
        1002, "new message started before final frame for previous message was received")),
    "close 1000": (P, frame(8, struct.pack("!H", 1000) + b"bye"), (1000, "bye")),
    "close without code": (P, frame(8, b""), (None, "")),
    "close of one byte": (P, frame(8, b"\x03"), (1002, "close frame payload cannot be 1 byte")),
    "close code 999": (P, frame(8, struct.pack("!H", 999)), (1002, "invalid close status code 999")),
    "close code 1005": (P, frame(8, struct.pack("!H", 1005)), (1002, "invalid close status code 1005")),
    "close reason not UTF-8": (P, frame(8, struct.pack("!H", 4000) + b"\xff\xfe"),
                               (1007, "invalid utf8 body in close frame")),
    "NATS parse error": (P, frame(2, b"FOO BAR\r\n"), (1002, "Parse Error")),
    "NATS max payload": (P, frame(2, b"PUB x 2000000\r\n"), (1009, "Maximum Message Payload Exceeded")),
    "invalid deflate data": ("deflate", frame(2, b"\xff\xff\xff\xff", rsv1=True), (1001, "Read Error")),
}


@pytest.mark.parametrize("name", list(BAD_FRAMES))
def test_protocol_errors_close_as_nats_server(servers: Any, name: str) -> None:
    """The close frame's code and reason for each bad frame: the one nats-server's code enqueues
    (wsHandleProtocolError, wsEnqueueCloseMessage). nats-server then closes as a read error, which skips
    flushing, so its close frame usually never leaves (a race: seen in 1 of 6 tries); jsbroker always sends
    it, as RFC 6455 asks. So nats-server's answer must be jsbroker's or a bare close."""
    config, bad, expected = BAD_FRAMES[name]
    headers = {"Sec-WebSocket-Extensions": "permessage-deflate"} if config == "deflate" else None

    def run(port: int) -> tuple[int | None, str] | str:
        session = Session.open(port, headers)
        try:
            session.send(frame(2, b'CONNECT {"verbose":false}\r\nPING\r\n'))
            session.messages_until(b"PONG\r\n")
            session.send(bad)
            while True:
                f = session.next_frame()
                if f.opcode == 8:
                    code = struct.unpack("!H", f.payload[:2])[0] if len(f.payload) >= 2 else None
                    return code, f.payload[2:].decode("utf-8", "replace")
        except (EOFError, ConnectionResetError):
            return "closed without a close frame"
        finally:
            session.close()

    results = _both(servers, config, run)
    assert results[JSBROKER] == expected
    assert results[NATS_SERVER] in (results[JSBROKER], "closed without a close frame"), results


def test_varz_websocket_section(servers: Any) -> None:
    def varz(handle: ServerHandle, port: int) -> dict[str, Any]:
        with urllib.request.urlopen(f"{handle.http_url}/varz", timeout=5) as response:
            section: dict[str, Any] = json.loads(response.read())["websocket"]
        assert section.pop("port") == port
        return section

    for config in CONFIGS:
        result = _same({kind: varz(*servers[config, kind]) for kind in KINDS})
        assert result["no_tls"] is True and result["host"] == "127.0.0.1"


def test_connz_types_websocket_connections(servers: Any) -> None:
    def connz(handle: ServerHandle, port: int) -> list[tuple[str, int]]:
        session = _connected(port)
        try:
            with urllib.request.urlopen(f"{handle.http_url}/connz", timeout=5) as response:
                connections = json.loads(response.read())["connections"]
            return [(c.get("type"), c["subscriptions"]) for c in connections]
        finally:
            session.close()

    assert _same({kind: connz(*servers["plain", kind]) for kind in KINDS}) == [("websocket", 0)]


# -- wss:// -------------------------------------------------------------------------------------------


def test_wss(tmp_path: Path) -> None:
    """The websocket block's own TLS (wss://): INFO says tls_required, nats-py connects with the CA."""
    import ssl

    from tests.broker.certs import Authority

    authority = Authority(tmp_path / "ca")
    pair = authority.issue("server", server=True)
    context = ssl.create_default_context(cafile=str(authority.ca))

    async def scenario(port: int) -> tuple[Any, bytes]:
        nc = await nats.connect(f"wss://127.0.0.1:{port}", tls=context, allow_reconnect=False)
        try:
            reply = await nc.request("$JS.API.INFO", b"", timeout=5)
            return nc._server_info.get("tls_required"), json.loads(reply.data)["type"].encode()
        finally:
            await nc.close()

    results = {}
    for kind in KINDS:
        port = free_port()
        path = _config_file({"tls": {"cert_file": str(pair.cert), "key_file": str(pair.key)}}, port)
        try:
            with launch(kind, extra_args=["-c", path]):
                results[kind] = asyncio.run(scenario(port))
        finally:
            os.unlink(path)
    assert _same(results) == (True, b"io.nats.jetstream.api.v1.account_info_response")


# -- settings -----------------------------------------------------------------------------------------

REFUSED_BY_BOTH = {
    "no TLS and no no_tls": {"port": 8080},
    "origin without scheme": {"port": 8080, "no_tls": True, "allowed_origins": ["good.example"]},
    "ftp origin": {"port": 8080, "no_tls": True, "allowed_origins": ["ftp://good.example"]},
    "reserved header": {"port": 8080, "no_tls": True, "headers": {"Connection": "close"}},
    "Sec-WebSocket- header": {"port": 8080, "no_tls": True, "headers": {"Sec-WebSocket-Protocol": "x"}},
    "jwt_cookie without operators": {"port": 8080, "no_tls": True, "jwt_cookie": "jwt"},
    "unknown setting": {"port": 8080, "no_tls": True, "colour": "blue"},
}


@pytest.mark.parametrize("name", list(REFUSED_BY_BOTH))
def test_settings_both_refuse(tmp_path: Path, name: str) -> None:
    block = REFUSED_BY_BOTH[name]
    path = tmp_path / "ws.json"
    path.write_text(json.dumps({"websocket": block}))
    # nats-server checks the websocket block when it starts (not with -t): it must exit at once
    checked = subprocess.run([nats_server_binary(), "-a", "127.0.0.1", "-p", "-1", "-c", str(path)],
                             capture_output=True, text=True, timeout=20)
    assert checked.returncode != 0, checked.stdout + checked.stderr
    with pytest.raises(ConfigError, match="websocket"):
        websocket_settings(block, str(path), tls=lambda t: t)


@pytest.mark.parametrize("key, value", [("authorization", {"token": "t"}), ("no_auth_user", "a"),
                                        ("ping_interval", "10s")])
def test_settings_jsbroker_cannot_honour_are_refused(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"websocket.{key}: .*(not supported|no no_auth_user)"):
        websocket_settings({"port": 8080, "no_tls": True, key: value}, "f.conf")


def test_settings_mapping() -> None:
    settings = websocket_settings({"listen": "127.0.0.1:-1", "no_tls": True, "compress": True, "origin": "https://a.b",
                                   "handshake_timeout": "2s", "headers": {"Strict-Transport-Security": "max-age=1"}},
                                  "f.conf")
    assert settings is not None
    assert (settings.host, settings.port, settings.compression, settings.allowed_origins, settings.handshake_timeout,
            settings.headers) == ("127.0.0.1", 0, True, ("https://a.b",), 2.0,
                                  (("Strict-Transport-Security", "max-age=1"),))
    assert websocket_settings({"port": 0}, "f.conf") is None  # nats-server: port 0 is no websocket port


# -- cookies, the handshake timeout, X-Forwarded-For ---------------------------------------------------

AUTH_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "user/pass cookies": ({"user": "alice", "password": "s3cret"}, {"user_cookie": "u", "pass_cookie": "p"}),
    "token cookie": ({"token": "t0ken"}, {"token_cookie": "tk"}),
}
COOKIES = {"user/pass cookies": ["u=alice; p=s3cret", "u=alice; p=wrong", "other=1"],
           "token cookie": ["tk=t0ken", "tk=nope", ""]}


def _connect_with_cookie(port: int, cookie: str, connect: bytes = b"{}") -> tuple[str | None, str]:
    """The INFO's client_ip, and the answer to CONNECT (without credentials) + PING."""
    headers = {"Cookie": cookie, "X-Forwarded-For": "10.1.2.3"} if cookie else {"X-Forwarded-For": "10.1.2.3"}
    session = Session.open(port, headers)
    try:
        info, _ = session.messages_until(b"\r\n")
        session.send(frame(2, b"CONNECT " + connect + b"\r\nPING\r\n"))
        try:
            stream, _ = session.messages_until(b"PONG\r\n")
            answer = "PONG"
        except EOFError as closed:
            answer = str(closed)
        return json.loads(info[5:].split(b"\r\n")[0]).get("client_ip"), answer
    finally:
        session.close()


@pytest.mark.parametrize("case", list(AUTH_CASES))
def test_cookies_stand_in_for_credentials(tmp_path: Path, case: str) -> None:
    """nats-server's user_cookie/pass_cookie/token_cookie: the upgrade's cookies fill CONNECT's missing
    credentials. X-Forwarded-For only prefixes nats-server's log lines: INFO's client_ip stays the peer's;
    a silent upgrade request is closed after handshake_timeout."""
    authorization, ws = AUTH_CASES[case]
    results: dict[str, list[Any]] = {}
    for kind in KINDS:
        port = free_port()
        path = tmp_path / f"{kind}.json"
        path.write_text(json.dumps({"authorization": authorization, "websocket": {
            "host": "127.0.0.1", "port": port, "no_tls": True, "handshake_timeout": "300ms", **ws}}))
        with launch(kind, jetstream=False, extra_args=["-c", str(path)]):
            results[kind] = [_connect_with_cookie(port, cookie) for cookie in COOKIES[case]]
            results[kind].append(wsclient.exchange(port, b"GET / HTTP/1.1\r\n", timeout=5))  # then silence
    assert _same(results)[0] == ("127.0.0.1", "PONG")
    assert results[JSBROKER][1][1].startswith("closed") and results[JSBROKER][-1] == b""


# -- the frame reader alone ----------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 3, 7, 4096])
def test_frames_cut_anywhere_read_the_same(chunk: int) -> None:
    """The reader's output does not depend on where TCP cut the stream: headers, masking keys, control
    frames and compressed fragments split at every size give the same NATS bytes and control frames."""
    from jsbroker.websocket import FrameReader

    big = os.urandom(70000)  # a 64-bit length
    stream = (frame(2, b"PUB a 3\r\nabc\r\n") + frame(1, b"PUB b 200", final=False) + frame(9, b"ping")
              + frame(0, b"\r\n" + b"x" * 200 + b"\r\n") + frame(2, big) + frame(2, b"", final=False)
              + frame(0, b"PING\r\n"))
    compressed = deflate(b"PUB z 5\r\nhello\r\n" * 50)
    stream += frame(2, compressed[:10], final=False, rsv1=True) + frame(10, b"") + frame(0, compressed[10:])

    def read(size: int) -> tuple[bytes, list[tuple[int, bytes]]]:
        reader = FrameReader(compressed=True, masked=True, max_payload=1 << 20)
        data, controls = b"", []
        for start in range(0, len(stream), size):
            out, ctl = reader.feed(stream[start:start + size])
            data += b"".join(out)
            controls += ctl
        return data, controls

    data, controls = read(chunk)
    assert (data, controls) == read(len(stream))
    assert data == (b"PUB a 3\r\nabc\r\nPUB b 200\r\n" + b"x" * 200 + b"\r\n" + big + b"PING\r\n"
                    + b"PUB z 5\r\nhello\r\n" * 50)
    assert controls == [(9, b"ping"), (10, b"")]


def test_inflating_past_max_payload_is_refused() -> None:
    from jsbroker.websocket import FrameReader, WebSocketError

    reader = FrameReader(compressed=True, masked=True, max_payload=1000)
    with pytest.raises(WebSocketError, match="Read Error"):
        reader.feed(frame(2, deflate(b"x" * 5000), rsv1=True))  # 5000 bytes from a few dozen


def test_wss_certificates_reload_on_sighup(tmp_path: Path) -> None:
    """As the client port's (test_tls.py): SIGHUP re-reads the websocket block's certificate files, for
    new connections (nats-server does so on a config reload); jsbroker alone."""
    import signal
    import ssl

    from cryptography import x509

    from tests.broker.certs import Authority

    authority = Authority(tmp_path / "ca")
    first, second = authority.issue("server", server=True), authority.issue("server2", server=True)
    cert, key = tmp_path / "ws.pem", tmp_path / "ws.key"
    cert.write_bytes(first.cert.read_bytes())
    key.write_bytes(first.key.read_bytes())
    context = ssl.create_default_context(cafile=str(authority.ca))

    def serial(port: int) -> int:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
                return int(x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number)

    port = free_port()
    path = _config_file({"tls": {"cert_file": str(cert), "key_file": str(key)}}, port)
    try:
        with launch(JSBROKER, jetstream=False, extra_args=["-c", path]) as handle:
            before = serial(port)
            cert.write_bytes(second.cert.read_bytes())
            key.write_bytes(second.key.read_bytes())
            os.kill(handle.pid, signal.SIGHUP)
            poll(lambda: "TLS certificates reloaded" in handle.log_tail(), timeout=10, what="the reload")
            assert (before, serial(port)) == (first.serial, second.serial)
    finally:
        os.unlink(path)


async def test_stopping_drops_sockets_still_in_the_upgrade() -> None:
    """A socket that never finished its upgrade (no handshake_timeout) is closed by a stop, not left open
    (and Python 3.12's Server.wait_closed would wait for it forever)."""
    from jsbroker.config import WebSocketSettings
    from jsbroker.server import Broker

    broker = Broker(port=0, jetstream=False, websocket=WebSocketSettings(port=0, host="127.0.0.1", no_tls=True))
    await broker.start()
    assert broker.ws_port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.ws_port)
    writer.write(b"GET / HTTP/1.1\r\n")  # and nothing more
    await writer.drain()
    await poll_async(lambda: broker.ws_handshakes, timeout=5, what="the server to see the socket")
    await asyncio.wait_for(broker.stop(), 10)
    try:
        assert await asyncio.wait_for(reader.read(), 5) == b""
    except ConnectionResetError:
        pass  # aborted: as good as closed
    writer.close()
