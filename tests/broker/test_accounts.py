"""Accounts, exports and imports: one nats-server config file read by jsbroker and nats-server, the same raw-wire
scenarios against both (isolation, stream imports with a prefix and with `to`, service imports with `to` and
each response type, queue groups across an import, no_auth_user, permissions per user), and bad account configs
refused alike."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jsbroker.config import ConfigError, load_file
from tests.broker.raw import Raw
from tests.broker.test_natsconf import nats_server_accepts
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, launch, nats_server_binary

CONFIG = """
accounts {
  A: {
    users: [{user: a, password: a-pw}, {user: a2, password: a2-pw}]
    exports: [
      {service: "svc.>"}
      {service: "many", response_type: Stream, response_threshold: "2s"}
      {stream: "ev.>"}
      {stream: "private.>", accounts: [C]}
    ]
  }
  B: {
    users: [
      {user: b, password: b-pw}
      {user: b2, password: b2-pw, permissions: {publish: ["asvc.>", "own.>"], subscribe: ["_INBOX.>", "fromA.ev.ok.>"]}}
    ]
    imports: [
      {service: {account: A, subject: "svc.>"}, to: "asvc.>"}
      {service: {account: A, subject: "many"}}
      {stream: {account: A, subject: "ev.>"}, prefix: fromA}
    ]
  }
  C: {
    users: [{user: c, password: c-pw}]
    imports: [
      {stream: {account: A, subject: "private.>"}}
      {stream: {account: A, subject: "ev.*"}, to: "cev.*"}
    ]
  }
}
no_auth_user: a2
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerHandle]]:
    config = tmp_path_factory.mktemp("accounts") / "accounts.conf"
    config.write_text(CONFIG)
    handles = {kind: launch(kind, jetstream=False, extra_args=["-c", str(config)]) for kind in KINDS}
    yield handles
    for handle in handles.values():
        handle.close()


def _login(port: int, user: str | None, protocol: int = 0) -> Raw:
    raw = Raw(port)
    opts: dict[str, Any] = {"verbose": False, "pedantic": False, "headers": True, "protocol": protocol}
    if user is not None:
        opts.update(user=user, **{"pass": f"{user}-pw"})
    raw.send(f"CONNECT {json.dumps(opts)}\r\nPING\r\n".encode())
    assert raw.read_until(b"PONG\r\n") == b"PONG\r\n", user
    return raw


def _roundtrip(raw: Raw, data: bytes = b"") -> bytes:
    """Send `data` and a PING; everything the server answered before the PONG."""
    raw.send(data + b"PING\r\n")
    return raw.read_until(b"PONG\r\n")[:-len(b"PONG\r\n")]


_REPLY = re.compile(rb"_R_\.[A-Za-z0-9]+\.[A-Za-z0-9]+")


_MESSAGE = re.compile(rb"(?=H?MSG )")  # split before each MSG or HMSG line
_RTT = re.compile(rb'"rtt":[0-9]+')
_SIZES = re.compile(rb"^(HMSG .*) [0-9]+ [0-9]+\r$", re.MULTILINE)


def _plain(data: bytes) -> bytes:
    """The generated reply subjects of service imports (`_R_.<random>.<random>`) as one placeholder, and the
    requester's round-trip time in their Nats-Request-Info header (with the HMSG sizes it changes)."""
    return _SIZES.sub(rb"\1 <sizes>\r", _RTT.sub(b'"rtt":<rtt>', _REPLY.sub(b"_R_.*", data)))


def _reply_of(data: bytes) -> bytes:
    m = _REPLY.search(data)
    assert m is not None, data
    return m.group(0)


def _scenario(port: int) -> dict[str, Any]:
    users = ("a", "b", "b2", "c")
    conns = {u: _login(port, u) for u in users}
    a, b, b2, c = (conns[u] for u in users)
    out: dict[str, Any] = {}
    # Isolation: the same subject in three accounts; each publish reaches its own account only.
    for raw in (a, b, c):
        _roundtrip(raw, b"SUB same 1\r\n")
    echo = _roundtrip(b, b"PUB same 2\r\nhi\r\n")
    out["isolation"] = [_roundtrip(a), echo, _roundtrip(c)]
    # Stream imports: with a prefix (B), with `to` (C), and an export C alone may import.
    _roundtrip(b, b"SUB fromA.ev.> 2\r\nSUB > 3\r\nSUB ev.> 4\r\n")
    _roundtrip(c, b"SUB cev.* 2\r\nSUB private.> 3\r\n")
    _roundtrip(a, b"PUB ev.x 1\r\n1\r\nPUB ev.x.y 1\r\n2\r\nPUB private.p 1\r\n3\r\nHPUB ev.h 12 14\r\nNATS/1.0\r\n\r\nhh\r\n")
    out["stream import B"] = sorted(_MESSAGE.split(_roundtrip(b)))
    out["stream import C"] = sorted(_MESSAGE.split(_roundtrip(c)))
    _roundtrip(b, b"UNSUB 2\r\nUNSUB 3\r\nUNSUB 4\r\n")
    # Service import with `to`: request in B, answered in A (singleton: one answer gets through).
    _roundtrip(a, b"SUB svc.> 7\r\nSUB many 8\r\n")
    _roundtrip(b, b"SUB _INBOX.b.* 9\r\nPUB asvc.q _INBOX.b.1 3\r\nreq\r\n")
    request = _roundtrip(a)
    out["service request in A"] = _plain(request)
    reply = _reply_of(request)
    _roundtrip(a, b"PUB %s 3\r\none\r\nPUB %s 3\r\ntwo\r\n" % (reply, reply))
    out["singleton answer in B"] = _roundtrip(b)
    # response_type Stream: every answer within the threshold gets through.
    _roundtrip(b, b"PUB many _INBOX.b.2 3\r\nreq\r\n")
    reply = _reply_of(_roundtrip(a))
    _roundtrip(a, b"PUB %s 3\r\none\r\nPUB %s 3\r\ntwo\r\n" % (reply, reply))
    out["stream answers in B"] = _roundtrip(b)
    # A service subject of A is not B's subject: only the imported name reaches A.
    _roundtrip(b, b"PUB svc.q _INBOX.b.3 3\r\nreq\r\n")
    out["unimported subject"] = _roundtrip(a)
    # Permissions per user inside an account: b2 may publish to the service, not elsewhere.
    out["b2"] = _roundtrip(b2, b"SUB fromA.ev.ok.> 1\r\nSUB fromA.ev.no 2\r\nPUB asvc.p _INBOX.x 1\r\nx\r\n"
                                   b"PUB same 1\r\nx\r\n")
    out["b2 request in A"] = _plain(_roundtrip(a))
    _roundtrip(a, b"PUB ev.ok.1 1\r\n1\r\nPUB ev.no 1\r\n2\r\n")
    out["b2 receives"] = _roundtrip(b2)
    # no_auth_user: a client without credentials is a2, in A.
    anon = _login(port, None)
    _roundtrip(anon, b"SUB same 1\r\n")
    _roundtrip(a, b"PUB same 4\r\nanon\r\n")
    out["no_auth_user"] = _roundtrip(anon)
    out["all connected"] = not any(raw.closed for raw in (*conns.values(), anon))
    for raw in (*conns.values(), anon):
        raw.close()
    return out


def test_accounts_behave_as_in_nats_server(servers):
    got = {kind: _scenario(handle.port) for kind, handle in servers.items()}
    assert got[JSBROKER] == got[NATS_SERVER]
    expected = got[NATS_SERVER]  # what the comparison rests on, spelled out
    assert expected["isolation"] == [b"", b"MSG same 1 2\r\nhi\r\n", b""]
    assert b"MSG fromA.ev.x 2 1\r\n1\r\n" in expected["stream import B"]
    assert expected["singleton answer in B"] == b"MSG _INBOX.b.1 9 3\r\none\r\n"
    assert expected["stream answers in B"] == b"MSG _INBOX.b.2 9 3\r\none\r\nMSG _INBOX.b.2 9 3\r\ntwo\r\n"
    assert expected["no_auth_user"] == b"MSG same 1 4\r\nanon\r\n"


def test_connect_info_names_the_account(servers):
    def account(port: int, user: str) -> str:
        raw = _login(port, user, protocol=1)  # the INFO after the first PONG names the account
        info = raw.read_until(b"\r\n")
        raw.close()
        return json.loads(info[len(b"INFO "):])["remote_account"]

    got = {kind: [account(h.port, u) for u in ("a", "b", "c")] for kind, h in servers.items()}
    assert got[JSBROKER] == got[NATS_SERVER] == ["A", "B", "C"]


def test_queue_group_spans_an_import(servers):
    """A queue subscriber in B on the imported subject and one in A on the exported one are one group."""
    def counts(port: int) -> tuple[int, int]:
        a, b = _login(port, "a"), _login(port, "b")
        _roundtrip(a, b"SUB ev.q g 1\r\n")
        _roundtrip(b, b"SUB fromA.ev.q g 1\r\n")
        got = _roundtrip(a, b"PUB ev.q 1\r\nx\r\n" * 40).count(b"MSG "), _roundtrip(b).count(b"MSG ")
        a.close()
        b.close()
        return got

    got = {kind: counts(h.port) for kind, h in servers.items()}
    for a_count, b_count in got.values():
        assert a_count + b_count == 40 and a_count and b_count, got


CHAIN_CONFIG = """
accounts {
  A: { users: [{user: a, password: a-pw}], exports: [{service: "x.>"}, {stream: "ev.>"}] }
  B: {
    users: [{user: b, password: b-pw}]
    imports: [{service: {account: A, subject: "x.>"}, to: "y.>"}, {stream: {account: A, subject: "ev.>"}, prefix: b}]
    exports: [{service: "y.>"}, {stream: "b.ev.>"}]
  }
  C: {
    users: [{user: c, password: c-pw}]
    imports: [{service: {account: B, subject: "y.>"}}, {stream: {account: B, subject: "b.ev.>"}, to: "c.>"}]
  }
}
"""


def test_imports_of_imports_chain_like_nats_server(tmp_path: Path):
    """C imports from B what B imports from A: requests go through both hops, stream messages do not."""
    config = tmp_path / "chain.conf"
    config.write_text(CHAIN_CONFIG)

    def scenario(port: int) -> dict[str, bytes]:
        a, c = _login(port, "a"), _login(port, "c")
        _roundtrip(a, b"SUB x.> 1\r\n")
        _roundtrip(c, b"SUB _INBOX.c.* 1\r\nSUB c.> 2\r\nPUB y.1 _INBOX.c.1 3\r\nreq\r\n")
        request = _roundtrip(a)
        _roundtrip(a, b"PUB %s 3\r\nans\r\nPUB ev.1 1\r\ne\r\n" % _reply_of(request))
        out = {"request in A": _plain(request), "C receives": _roundtrip(c)}
        a.close()
        c.close()
        return out

    got = {}
    for kind in KINDS:
        with launch(kind, jetstream=False, extra_args=["-c", str(config)]) as handle:
            got[kind] = scenario(handle.port)
    assert got[JSBROKER] == got[NATS_SERVER]
    assert got[NATS_SERVER]["C receives"] == b"MSG _INBOX.c.1 1 3\r\nans\r\n"
    assert b'Nats-Request-Info: {"acc":"C","svc":"B","rtt":<rtt>}' in got[NATS_SERVER]["request in A"]


DEFAULTS_CONFIG = """
accounts {
  A: { users: [{user: a, password: a-pw}, {user: a2, password: a2-pw, permissions: {publish: ["any.>"]}}]
       default_permissions: {publish: ["ok.>"]} }
  B: { users: [{user: b, password: b-pw}] }
}
authorization { default_permissions: {publish: ["gok.>"]}, users: [{user: g, password: g-pw}] }
"""


def test_default_permissions_of_an_account_and_of_authorization(tmp_path: Path):
    """Each block's default_permissions go to its own users that give none (not to other accounts' users)."""
    config = tmp_path / "defaults.conf"
    config.write_text(DEFAULTS_CONFIG)

    def violations(port: int) -> dict[str, bytes]:
        out = {}
        for user in ("a", "a2", "b", "g"):
            raw = _login(port, user)
            out[user] = _roundtrip(raw, b"PUB ok.1 1\r\nx\r\nPUB gok.1 1\r\nx\r\nPUB any.1 1\r\nx\r\nPUB z 1\r\nx\r\n")
            raw.close()
        return out

    got = {}
    for kind in KINDS:
        with launch(kind, jetstream=False, extra_args=["-c", str(config)]) as handle:
            got[kind] = violations(handle.port)
    assert got[JSBROKER] == got[NATS_SERVER]
    assert got[NATS_SERVER]["b"] == b"" and b'"ok.1"' not in got[NATS_SERVER]["a"]


# -- bad account configs, refused alike ----------------------------------------------------------------------

BAD = [
    ("accounts { A: {}, B: { imports: [{service: {account: A, subject: \"svc.>\"}}] } }",
     'Error adding service import "svc.>": service import not authorized'),
    ("accounts { A: { exports: [{stream: \"x.>\", accounts: [C]}] }, B: { imports: [{stream: {account: A, subject: "
     "\"x.>\"}}] }, C: {} }", 'Error adding stream import "x.>": stream import not authorized'),
    ("accounts { A: { exports: [{stream: \"x.>\"}] }, B: { imports: [{service: {account: A, subject: \"x.>\"}}] } }",
     'Error adding service import "x.>": service import not authorized'),
    ("accounts { B: { imports: [{stream: {account: Z, subject: \"x.>\"}}] } }",
     '"Z" account not defined for stream import'),
    ("accounts { A: { exports: [{service: \"x\", accounts: [Q]}] } }", '"Q" account not defined for service export'),
    ("accounts { A: { users: [{user: a, password: a}] }, B: { users: [{user: a, password: b}] } }",
     'Duplicate user "a" detected'),
    ("accounts { A: { users: [{user: a, password: a}] } }\nauthorization { users: [{user: a, password: b}] }",
     'Duplicate user "a" detected'),
    ("accounts { A: { users: [{user: a, password: a}] } }\nno_auth_user: zz",
     'no_auth_user: "zz" not present as user or nkey in authorization block or account configuration'),
    ("accounts { A: { users: [{user: a, password: a}] } }\nauthorization { token: xyz }",
     ("Can not have a token and a users array", "Can not have a token and accounts")),
    ("accounts { A: { exports: [{service: \"x\", response_type: bogus}] } }", 'Unknown response type: "bogus"'),
    ("accounts { A: { exports: [{service: x}], imports: [{service: {account: B, subject: x}}] }, "
     "B: { exports: [{service: x}], imports: [{service: {account: A, subject: x}}] } }",
     'Error adding service import "x": import forms a cycle'),
    ("accounts { A: { exports: [{stream: x}], imports: [{stream: {account: B, subject: x}}] }, "
     "B: { exports: [{stream: x}], imports: [{stream: {account: A, subject: x}}] } }",
     'Error adding stream import "x": import forms a cycle'),
]


def _nats_server_start_error(path: Path) -> str:
    """What nats-server says when it refuses to start with this file (some checks are not in `-t`)."""
    try:
        out = subprocess.run([nats_server_binary(), "-c", str(path)], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "(nats-server started)"
    return out.stderr + out.stdout


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_account_configs_are_refused_alike(tmp_path: Path, text: str, message: str | tuple[str, ...]):
    """`message`: nats-server's words (a tuple: it says one or the other, in the order it meets the settings)."""
    messages = (message,) if isinstance(message, str) else message
    path = tmp_path / "server.conf"
    path.write_text("port: -1\n" + text + "\n")
    reference = _nats_server_start_error(path)
    assert any(m in reference for m in messages), reference
    with pytest.raises(ConfigError) as refused:
        load_file(path, env={})
    assert any(m in str(refused.value) for m in messages) and str(refused.value).startswith(str(path))


def test_an_import_with_prefix_and_to_is_refused(tmp_path: Path):
    """nats-server refuses it only some of the time (it depends on the order it reads the import's keys in)."""
    path = tmp_path / "server.conf"
    path.write_text("accounts { A: { exports: [{stream: \"x.>\"}] }, B: { imports: [{stream: {account: A, "
                    "subject: \"x.*\"}, prefix: p, to: q}] } }\n")
    with pytest.raises(ConfigError, match="Stream import can not have a 'prefix' and a 'to' property"):
        load_file(path, env={})


# -- JetStream: served in the accounts that enable it (several: tests/jetstream/test_jetstream_accounts.py) ------

JS_CONFIG = """
jetstream: enabled
accounts {
  A: { users: [{user: a, password: a-pw}], jetstream: enabled }
  B: { users: [{user: b, password: b-pw}] }
}
authorization { users: [{user: g, password: g-pw}] }
"""
API_REQUESTS = [("$JS.API.INFO", b""), ("$JS.API.STREAM.NAMES", b""), ("$JS.API.CONSUMER.INFO.s.c", b""),
                ("$JS.API.STREAM.CREATE.s", b'{"name":"s","subjects":["orders.>"],"storage":"memory"}')]


async def _jetstream_scenario(url: str) -> dict[str, Any]:
    import nats

    out: dict[str, Any] = {}
    for user in ("b", "g", "a"):  # a (the JetStream account) last: its stream must not exist for the others
        nc = await nats.connect(url, user=user, password=f"{user}-pw")
        try:
            answers = []
            for subject, body in API_REQUESTS:
                answer = json.loads((await nc.request(subject, body, timeout=5)).data)
                answers.append({k: answer[k] for k in ("type", "error") if k in answer})
            out[user] = answers
            ack = await nc.request("orders.1", b"x", timeout=5) if user == "a" else None
            out[f"{user} publishes"] = json.loads(ack.data) if ack is not None else None
        finally:
            await nc.close()
    return out


@pytest.mark.asyncio
async def test_jetstream_answers_in_the_account_that_enables_it(tmp_path: Path):
    config = tmp_path / "js.conf"
    config.write_text(JS_CONFIG)
    got = {}
    for kind in KINDS:
        with launch(kind, extra_args=["-c", str(config)]) as handle:
            got[kind] = await _jetstream_scenario(handle.url)
    assert got[JSBROKER] == got[NATS_SERVER]
    refused = {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}
    assert [answer["error"] for answer in got[NATS_SERVER]["b"]] == [refused] * len(API_REQUESTS)
    assert "error" not in got[NATS_SERVER]["a"][0] and got[NATS_SERVER]["a publishes"] == {"stream": "s", "seq": 1}


@pytest.mark.parametrize("system", ["sys", '"$SYS"'])
def test_jetstream_in_the_system_account_stops_the_start_alike(tmp_path: Path, system: str):
    """nats-server checks it when JetStream starts (not in `-t`): a fatal error, exit 1."""
    path = tmp_path / "server.conf"
    path.write_text(f'port: -1\njetstream {{ store_dir: "{tmp_path}" }}\n'
                    f"accounts {{ {system}: {{ users: [{{user: s, password: p}}], jetstream: enabled }} }}\n"
                    f"system_account: {system}\n")
    got = {}
    for kind, command in ((NATS_SERVER, [nats_server_binary()]), (JSBROKER, [sys.executable, "-m", "jsbroker"])):
        done = subprocess.run([*command, "-c", str(path)], capture_output=True, text=True, timeout=20)
        got[kind] = (done.returncode, "Not allowed to enable JetStream on the system account" in done.stderr + done.stdout)
    assert got[JSBROKER] == got[NATS_SERVER] == (1, True), got


def test_connz_names_the_user_and_its_account(tmp_path: Path):
    config = tmp_path / "connz.conf"
    config.write_text("accounts { A: { users: [{user: a, password: a-pw}] } }\n"
                      "authorization { users: [{user: g, password: g-pw}] }\n")

    def connz(handle: ServerHandle) -> list[dict[str, Any]]:
        clients = [_login(handle.port, user) for user in ("a", "g")]
        with urllib.request.urlopen(f"{handle.http_url}/connz?auth=true", timeout=5) as response:
            conns = json.loads(response.read())["connections"]
        for raw in clients:
            raw.close()
        return [{k: c[k] for k in ("authorized_user", "account") if k in c} for c in conns]

    got = {}
    for kind in KINDS:
        with launch(kind, jetstream=False, http=True, extra_args=["-c", str(config)]) as handle:
            got[kind] = connz(handle)
    assert got[JSBROKER] == got[NATS_SERVER] == [{"authorized_user": "a", "account": "A"}, {"authorized_user": "g"}]


# -- random operation sequences, compared ------------------------------------------------------------------

RANDOM_CONFIG = """
accounts {
  A: { users: [{user: a, password: a-pw}, {user: a2, password: a2-pw}], exports: [{stream: "s.>"}, {stream: "t.*", accounts: [C]}] }
  B: { users: [{user: b, password: b-pw}, {user: b2, password: b2-pw}], imports: [{stream: {account: A, subject: "s.>"}, prefix: pa}] }
  C: {
    users: [{user: c, password: c-pw}, {user: c2, password: c2-pw}]
    imports: [{stream: {account: A, subject: "s.*"}, to: "cs.*"}, {stream: {account: A, subject: "t.*"}}]
  }
}
"""
_TOKENS = (("s", "t", "pa", "cs", "x"), ("s", "a", "b", "*"), ("a", "b", "*", ">"))


def _random_ops(seed: int, users: list[str], n: int) -> list[tuple[str, int, bytes]]:
    """(op, connection, subject) of subscribes, unsubscribes and publishes over subjects the imports map."""
    import random

    rng = random.Random(seed)
    ops: list[tuple[str, int, bytes]] = []
    for i in range(n):
        conn = rng.randrange(len(users))
        parts = [rng.choice(t) for t in _TOKENS[:rng.choice((2, 2, 3))]]
        if parts[-1] != ">" and ">" in parts:
            parts = parts[:parts.index(">") + 1]
        subject = ".".join(parts).encode()
        kind = rng.choice(("sub", "sub", "unsub", "pub", "pub", "pub"))
        if kind == "pub":
            subject = subject.replace(b"*", b"a").replace(b">", b"z")
        ops.append((kind, conn, subject if kind != "unsub" else str(rng.randrange(1, i + 2)).encode()))
    return ops


def _replay(port: int, users: list[str], ops: list[tuple[str, int, bytes]]) -> list[bytes]:
    conns = [_login(port, user) for user in users]
    got = [b""] * len(conns)
    for i, (kind, conn, arg) in enumerate(ops, 1):
        line = {"sub": b"SUB %s %d\r\n" % (arg, i), "unsub": b"UNSUB %s\r\n" % arg,
                "pub": b"PUB %s %d\r\n%d\r\n" % (arg, len(str(i)), i)}[kind]
        got[conn] += _roundtrip(conns[conn], line)
    for n, raw in enumerate(conns):
        got[n] += _roundtrip(raw)
        raw.close()
    return [_by_publish(out) for out in got]


def _by_publish(out: bytes) -> list[bytes]:
    """A connection's frames in publish order; those of one publish (several of its subscriptions matched it)
    sorted, since the order among them is the sublist's and no client can rely on it."""
    frames = [f for f in _MESSAGE.split(out) if f]
    return sorted(frames, key=lambda f: (int(f.split(b"\r\n")[1]), f))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_subscriptions_and_publishes_across_accounts_match_nats_server(tmp_path: Path, seed: int):
    config = tmp_path / "random.conf"
    config.write_text(RANDOM_CONFIG)
    users = ["a", "a2", "b", "b2", "c", "c2"]
    ops = _random_ops(seed, users, 200)
    got = {}
    for kind in KINDS:
        with launch(kind, jetstream=False, extra_args=["-c", str(config)]) as handle:
            got[kind] = _replay(handle.port, users, ops)
    assert got[JSBROKER] == got[NATS_SERVER]
    assert sum(len(out) for out in got[NATS_SERVER]) > 20  # the sequence delivered something
