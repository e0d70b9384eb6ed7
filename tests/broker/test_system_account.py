"""The system account side by side with nats-server 2.15.1: one config file (a system account SYS with a user,
an account A, JetStream in A), every `$SYS.REQ.SERVER...` and `$SYS.REQ.ACCOUNT...` request and the system
imports every account has (`$SYS.REQ.USER.INFO`...), compared by their JSON keys and normalised values;
connect/disconnect events and the STATSZ heartbeat seen by a system account subscriber; request bodies with
options and bad ones; a user of another account subscribing to `$SYS.>` (its own account's subjects); and the
Go `nats` CLI's `server` and `account` commands against both, compared after normalising ids, times and counts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
from nats.js.errors import NotFoundError

from jsbroker.config import ConfigError, load_file
from tests.chart import go_tools
from tests.differential import normalise
from tests.polling import poll, poll_async
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, launch, nats_server_binary

CONFIG = """
accounts {
  SYS: { users: [{user: sys, password: sys-pw}] }
  A: {
    users: [{user: a, password: a-pw, permissions: {publish: [">"], subscribe: ["_INBOX.>", "x.>", "$SYS.>"]}}]
    exports: [{service: "svc.>"}]
    jetstream: enabled
  }
  B: { users: [{user: b, password: b-pw}] }
}
system_account: SYS
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerHandle]]:
    directory = tmp_path_factory.mktemp("sysacct")
    handles = {}
    for kind in KINDS:
        config = directory / f"{kind}.conf"
        config.write_text(CONFIG)
        handles[kind] = launch(kind, extra_args=["-c", str(config)])  # JetStream on (-js -sd), for account A
    yield handles
    for handle in handles.values():
        handle.close()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _connect(port: int, user: str, **kw: Any) -> nats.NATS:
    return await nats.connect(f"nats://127.0.0.1:{port}", user=user, password=f"{user}-pw", allow_reconnect=False,
                              **kw)


async def _ask(port: int, user: str, subject: str, body: bytes = b"", timeout: float = 2.0) -> Any:
    """The first answer to a request, as JSON (None when nobody answers in time, "503" with no responders)."""
    nc = await _connect(port, user)
    try:
        msg = await nc.request(subject, body, timeout=timeout)
        return json.loads(msg.data)
    except NoRespondersError:
        return "503"
    except NatsTimeout:
        return None
    finally:
        await nc.close()


def _keys(obj: Any) -> Any:
    """The shape of a JSON value: dicts' keys (recursively), a list's first item, scalars' types."""
    if isinstance(obj, dict):
        return {k: _keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_keys(obj[0])] if obj else []
    return type(obj).__name__ if obj is not None else None


def _both(servers: dict[str, ServerHandle], user: str, subject: str, body: bytes = b"",
          timeout: float = 2.0) -> dict[str, Any]:
    ids = _ids(servers)

    async def ask_both() -> list[Any]:
        return await asyncio.gather(*(_ask(servers[k].port, user, subject.replace("<id>", ids[k]), body,
                                           timeout) for k in KINDS))
    return dict(zip(KINDS, _run(ask_both())))


_SERVER_IDS: dict[str, str] = {}


def _ids(servers: dict[str, ServerHandle]) -> dict[str, str]:
    """Each server's id (from its INFO), for `$SYS.REQ.SERVER.<id>.<KIND>`."""
    if not _SERVER_IDS:
        for kind in KINDS:
            _SERVER_IDS[kind] = _run(_server_id(servers[kind].port))
    return _SERVER_IDS


async def _server_id(port: int) -> str:
    nc = await _connect(port, "sys")
    try:
        return str(nc._server_info["server_id"])
    finally:
        await nc.close()


# -- server requests: the envelope and the data's keys -----------------------------------------------------

# Kinds whose data jsbroker builds in full as nats-server does (the same keys); VARZ, CONNZ and JSZ come
# from the monitoring endpoints, which have keys only the Go server has (git_commit, gomaxprocs, ...).
EXACT_KINDS = ("HEALTHZ", "ROUTEZ", "GATEWAYZ", "LEAFZ", "RAFTZ")
MONITOR_KINDS = ("VARZ", "CONNZ", "JSZ", "SUBSZ")
# what nats-server's answers have that jsbroker's monitoring views do not have yet (omitted, never wrong)
GO_ONLY = {"git_commit", "gomaxprocs", "config_load_time", "config_digest", "tls_timeout", "in_client_msgs",
           "in_client_bytes", "out_client_msgs", "out_client_bytes", "stale_connections", "stalled_clients",
           "stale_connection_stats", "disk_io_wait_stats", "feature_flags", "strict", "default_max_consumers",
           "last_activity", "rtt", "idle"}

JSBROKER_ONLY = {"sync_always"}  # /jsz's and /varz's JetStream config: jsbroker's sync setting


def _missing(ns: Any, js: Any, path: str = "") -> list[str]:
    """Keys nats-server's answer has that jsbroker's lacks, and keys only jsbroker has (prefixed with +)."""
    if isinstance(ns, dict) and isinstance(js, dict):
        out = [f"{path}.{k}" for k in ns if k not in js and k not in GO_ONLY]
        out += [f"+{path}.{k}" for k in js if k not in ns and k not in JSBROKER_ONLY]
        return out + [m for k in ns if k in js for m in _missing(ns[k], js[k], f"{path}.{k}")]
    if isinstance(ns, list) and isinstance(js, list) and ns and js:
        return _missing(ns[0], js[0], f"{path}[]")
    return []


@pytest.mark.parametrize("target", ["PING", "<id>"])
@pytest.mark.parametrize("kind", [*EXACT_KINDS, *MONITOR_KINDS])
def test_server_requests_answer_the_same_envelope_and_data(servers, kind, target):
    got = _both(servers, "sys", f"$SYS.REQ.SERVER.{target}.{kind}")
    ns, js = got[NATS_SERVER], got[JSBROKER]
    assert isinstance(ns, dict) and isinstance(js, dict), got
    assert _keys(js["server"]) == _keys(ns["server"])
    assert set(js) == set(ns) == {"server", "data"}
    if kind in EXACT_KINDS:
        assert _keys(js["data"]) == _keys(ns["data"])
        assert normalise(js["data"]) == normalise(ns["data"])
    else:
        assert _missing(ns["data"], js["data"]) == []


def test_accountz_lists_the_accounts_and_details_one(servers):
    got = _both(servers, "sys", "$SYS.REQ.SERVER.PING.ACCOUNTZ")
    assert sorted(got[JSBROKER]["data"]["accounts"]) == sorted(got[NATS_SERVER]["data"]["accounts"])
    assert got[JSBROKER]["data"]["system_account"] == got[NATS_SERVER]["data"]["system_account"] == "SYS"
    got = _both(servers, "sys", "$SYS.REQ.SERVER.PING.ACCOUNTZ", b'{"account": "A"}')
    detail = {kind: got[kind]["data"]["account_detail"] for kind in KINDS}
    assert set(detail[JSBROKER]) == set(detail[NATS_SERVER])
    assert detail[JSBROKER]["exports"] == detail[NATS_SERVER]["exports"] == [
        {"subject": "svc.>", "type": "service", "response_type": "Singleton"}]
    got = _both(servers, "sys", "$SYS.REQ.SERVER.PING.ACCOUNTZ", b'{"account": "NOPE"}')
    assert got[JSBROKER]["error"] == got[NATS_SERVER]["error"] and got[JSBROKER]["data"] is got[NATS_SERVER]["data"]


@pytest.mark.parametrize("kind", ["EXPVARZ", "IPQUEUESZ"])
def test_the_go_runtimes_kinds_are_an_error(servers, kind):
    """nats-server's Go memory statistics and internal queues: jsbroker has neither and says so."""
    got = _both(servers, "sys", f"$SYS.REQ.SERVER.PING.{kind}")
    assert got[JSBROKER]["data"] is None and got[JSBROKER]["error"]["code"] == 500
    assert kind in got[JSBROKER]["error"]["description"]


def test_statsz_ping_and_idz(servers):
    for subject in ("$SYS.REQ.SERVER.PING", "$SYS.REQ.SERVER.PING.STATSZ", "$SYS.REQ.SERVER.<id>.STATSZ"):
        got = _both(servers, "sys", subject)
        assert set(got[JSBROKER]) == set(got[NATS_SERVER]) == {"server", "statsz"}, subject
        statsz = {kind: got[kind]["statsz"] for kind in KINDS}
        assert set(statsz[JSBROKER]) == set(statsz[NATS_SERVER]) - {"gomaxprocs"}, subject
        assert statsz[JSBROKER]["connections"] == statsz[NATS_SERVER]["connections"] == 1
        assert statsz[JSBROKER]["active_servers"] == statsz[NATS_SERVER]["active_servers"] == 1
    got = _both(servers, "sys", "$SYS.REQ.SERVER.PING.IDZ")
    assert normalise(got[JSBROKER]) == normalise(got[NATS_SERVER])
    assert set(got[JSBROKER]) == {"name", "host", "id"}
    assert got[JSBROKER]["id"] == _ids(servers)[JSBROKER]


def test_the_server_envelope_names_the_server_and_counts_its_messages(servers):
    first = _both(servers, "sys", "$SYS.REQ.SERVER.PING.HEALTHZ")
    second = _both(servers, "sys", "$SYS.REQ.SERVER.PING.HEALTHZ")
    for kind in KINDS:
        server = second[kind]["server"]
        assert server["id"] == _ids(servers)[kind] and server["ver"] == "2.15.1"
        assert server["seq"] > first[kind]["server"]["seq"]
        assert server["jetstream"] is True and server["flags"] == 7  # JetStream is on (in account A)
    assert second[JSBROKER]["server"]["feature_flags"] == second[NATS_SERVER]["server"]["feature_flags"]


def test_connz_options_and_filters(servers):
    async def scenario(port: int, server_name: str) -> dict[str, Any]:
        a = await _connect(port, "a", name="probe")
        await a.subscribe("x.1")
        await a.flush()
        out = {}
        try:
            for label, body in [("subs", {"subscriptions": True, "acc": "A"}), ("auth", {"auth": True, "acc": "A"}),
                                ("limit", {"limit": 1, "offset": 0, "sort": "cid"}),
                                ("no such account", {"acc": "NOPE"})]:
                reply = await _ask(port, "sys", "$SYS.REQ.SERVER.PING.CONNZ", json.dumps(body).encode())
                data = reply["data"]
                out[label] = (data["num_connections"], data["total"], bool(data["server_id"]),
                              [(c.get("name"), c.get("subscriptions_list"), c.get("authorized_user"), c.get("account"))
                               for c in data["connections"] or ()])
            out["named"] = await _ask(port, "sys", "$SYS.REQ.SERVER.PING.CONNZ",
                                      json.dumps({"server_name": server_name}).encode()) is not None
            out["other name"] = await _ask(port, "sys", "$SYS.REQ.SERVER.PING.CONNZ",
                                           json.dumps({"server_name": "elsewhere"}).encode(), timeout=0.5)
            out["exact prefix"] = await _ask(port, "sys", "$SYS.REQ.SERVER.PING.CONNZ", json.dumps(
                {"server_name": server_name[:5], "exact_match": True}).encode(), timeout=0.5)
            out["tags"] = await _ask(port, "sys", "$SYS.REQ.SERVER.PING.VARZ", b'{"tags": ["x"]}', timeout=0.5)
        finally:
            await a.close()
        return out

    ids = _ids(servers)
    got = {kind: _run(scenario(servers[kind].port, ids[kind])) for kind in KINDS}
    assert got[JSBROKER] == got[NATS_SERVER]
    assert got[JSBROKER]["subs"] == (1, 1, True, [("probe", ["x.1"], None, None)])
    assert got[JSBROKER]["no such account"] == (0, 0, False, [])


@pytest.mark.parametrize(("subject", "body"), [
    ("$SYS.REQ.SERVER.PING.VARZ", b"{not json"),
    ("$SYS.REQ.SERVER.PING.CONNZ", b"[1, 2]"),
    ("$SYS.REQ.SERVER.PING.CONNZ", b'{"limit": "ten"}'),
    ("$SYS.REQ.SERVER.PING", b"{not json"),
    ("$SYS.REQ.ACCOUNT.A.INFO", b"{not json"),
    ("$SYS.REQ.ACCOUNT.A.JSZ", b'{"streams": "yes"}'),
    ("$SYS.REQ.ACCOUNT.A.JSZ", b'{"consumer": 1}'),
])
def test_a_malformed_request_body_gets_a_400(servers, subject, body):
    got = _both(servers, "sys", subject, body)
    for kind in KINDS:
        assert set(got[kind]) == {"server", "error"}, (kind, got[kind])
        assert got[kind]["error"]["code"] == 400, (kind, got[kind])


def test_a_body_nested_past_gos_limit_is_refused_as_nats_server_refuses_it(servers):
    got = _both(servers, "sys", "$SYS.REQ.SERVER.PING.CONNZ", b"[" * 10_001)
    assert got[JSBROKER]["error"] == got[NATS_SERVER]["error"] == {"code": 400, "description": "exceeded max depth"}


def test_a_request_jsbroker_fails_on_is_logged_and_answered_and_the_server_goes_on(servers):
    """Options nested 2000 deep (which nats-server decodes; Python's JSON decoder does not, jsbroker's known gap)
    make jsbroker's handlers fail: a CONNZ is answered nats-server's error shape for a request that failed (500,
    a null data), a KICK (no error answer in nats-server when its body does not decode) none; each failure is
    one error line naming the subject, and the server goes on answering."""
    handle, deep = servers[JSBROKER], b'{"x":' * 2000 + b"1" + b"}" * 2000
    kick = f"$SYS.REQ.SERVER.{_ids(servers)[JSBROKER]}.KICK"
    start = handle.log_path.stat().st_size
    failed = _run(_ask(handle.port, "sys", "$SYS.REQ.SERVER.PING.CONNZ", deep))
    assert set(failed) == {"server", "data", "error"} and failed["data"] is None, failed
    assert failed["error"]["code"] == 500 and "RecursionError" in failed["error"]["description"], failed
    assert _run(_ask(handle.port, "sys", kick, deep, timeout=0.5)) is None
    after = _run(_ask(handle.port, "sys", "$SYS.REQ.SERVER.PING.CONNZ"))
    assert after["data"]["num_connections"] == 1

    def errors() -> list[str]:
        return [line for line in handle.log_path.read_text()[start:].splitlines() if "[ERR]" in line]
    lines = poll(lambda: len(errors()) == 2 and errors(), timeout=5, what="two error lines")
    for line, subject in zip(lines, ("$SYS.REQ.SERVER.PING.CONNZ", kick)):
        shape = (rf'\[\d+\] [\d/]+ [\d:.]+ \[ERR\] Error handling system request on "{re.escape(subject)}": '
                 r"RecursionError: maximum recursion depth exceeded .* at system_account\.py:\d+")
        assert re.fullmatch(shape, line), line


@pytest.mark.parametrize("subject", ["$SYS.REQ.SERVER.PING.NOPE", "$SYS.REQ.SERVER.<id>.NOPE",
                                     "$SYS.REQ.ACCOUNT.A.NOPE", "$SYS.REQ.SERVER.PING.STATSZ.MORE"])
def test_an_unknown_kind_has_no_responders(servers, subject):
    assert _both(servers, "sys", subject) == {JSBROKER: "503", NATS_SERVER: "503"}


# -- account requests ------------------------------------------------------------------------------------

def test_account_info_lists_the_system_imports(servers):
    got = _both(servers, "sys", "$SYS.REQ.ACCOUNT.B.INFO")
    ns, js = got[NATS_SERVER]["data"], got[JSBROKER]["data"]
    assert set(js) == set(ns)
    assert js["imports"] == sorted(ns["imports"], key=lambda i: (i["local_subject"], i["subject"]))
    for key in ("account_name", "expired", "complete", "jetstream_enabled", "client_connections"):
        assert js[key] == ns[key], key
    info_a = _both(servers, "sys", "$SYS.REQ.ACCOUNT.A.INFO")
    assert info_a[JSBROKER]["data"]["jetstream_enabled"] == info_a[NATS_SERVER]["data"]["jetstream_enabled"] is True
    assert [e["subject"] for e in info_a[JSBROKER]["data"]["exports"]] == \
        [e["subject"] for e in info_a[NATS_SERVER]["data"]["exports"]]


@pytest.mark.parametrize(("subject", "user"), [
    ("$SYS.REQ.ACCOUNT.NOPE.INFO", "sys"),
    ("$SYS.REQ.ACCOUNT.B.JSZ", "sys"),  # B has no JetStream
    ("$SYS.REQ.ACCOUNT.B.LEAFZ", "sys"),
    ("$SYS.REQ.ACCOUNT.B.CONNZ", "sys"),  # B has no connections: this server's id and an empty list
    ("$SYS.REQ.ACCOUNT.SYS.SUBSZ", "sys"),
])
def test_account_requests_answer_alike(servers, subject, user):
    got = _both(servers, user, subject)
    ns, js = got[NATS_SERVER], got[JSBROKER]
    assert set(js) == set(ns), got
    if "error" in ns:
        assert js["error"] == ns["error"] and js["data"] is ns["data"] is None
    else:
        assert _keys(js["data"]) == _keys(ns["data"])


def test_subsz_of_an_account_the_server_lacks_lists_no_subscriptions(servers):
    """nats-server filters SUBSZ by the account's name: one it does not have has no subscriptions (no error)."""
    got = _both(servers, "sys", "$SYS.REQ.ACCOUNT.NOPE.SUBSZ", b'{"subscriptions": true}')
    for kind in KINDS:
        data = got[kind]["data"]
        assert "error" not in got[kind] and (data["num_subscriptions"], data["total"]) == (0, 0), (kind, got[kind])
        assert "subscriptions_list" not in data, (kind, data)


TWO_JETSTREAM_ACCOUNTS = """
accounts {
  SYS: { users: [{user: sys, password: sys-pw}] }
  A: { users: [{user: a, password: a-pw}], jetstream: enabled }
  C: { users: [{user: c, password: c-pw}], jetstream: {max_mem: 1M, max_file: 10M} }
}
system_account: SYS
"""
JSZ_BODIES = (b"", b'{"streams": true}', b'{"streams": true, "consumer": true, "config": true}')


async def _jsz_of_two_accounts(port: int) -> dict[str, Any]:
    """A: a file stream of three messages, a memory one of one; C (with limits): a file stream of one larger
    message, a consumer and a failed request. Then each account's JSZ (without the envelope's server), plain
    and with options, by "<account> <body>"."""
    a, c = await _connect(port, "a"), await _connect(port, "c")
    try:
        js_a, js_c = a.jetstream(), c.jetstream()
        await js_a.add_stream(name="FILE", subjects=["a.>"])
        for _ in range(3):
            await js_a.publish("a.x", b"hello")
        await js_a.add_stream(name="MEM", subjects=["m.>"], storage="memory")
        await js_a.publish("m.x", b"m")
        await js_c.add_stream(name="ONLY", subjects=["c.>"])
        await js_c.publish("c.x", b"x" * 100)
        await js_c.add_consumer("ONLY", durable_name="dur")
        with pytest.raises(NotFoundError):
            await js_c.stream_info("NOPE")
        answers = {}
        for account in ("A", "C", "SYS", "NOPE"):
            for body in JSZ_BODIES:
                answer = await _ask(port, "sys", f"$SYS.REQ.ACCOUNT.{account}.JSZ", body)
                answer.pop("server")
                if "stream_detail" in (answer["data"] or {}):  # nats-server's: in its map's order
                    answer["data"]["stream_detail"].sort(key=lambda s: s["name"])
                answers[f"{account} {body.decode()}"] = normalise(answer)
        return answers
    finally:
        await a.close()
        await c.close()


def test_account_jsz_is_the_accounts_own_use(tmp_path):
    got = {}
    for kind in KINDS:
        config = tmp_path / f"{kind}.conf"
        config.write_text(TWO_JETSTREAM_ACCOUNTS)
        handle = launch(kind, extra_args=["-c", str(config)])
        try:
            got[kind] = _run(_jsz_of_two_accounts(handle.port))
        finally:
            handle.close()
    for key, ns in got[NATS_SERVER].items():
        assert got[JSBROKER][key] == ns, key
    unlimited = 2**64 - 1
    use = {account: {k: got[JSBROKER][f"{account} "]["data"][k] for k in ("memory", "storage", "reserved_memory",
                                                                        "reserved_storage", "api")}
           for account in ("A", "C")}
    assert use == {
        "A": {"memory": 20, "storage": 114, "reserved_memory": unlimited, "reserved_storage": unlimited,
              "api": {"level": 0, "total": 2, "errors": 0}},
        "C": {"memory": 0, "storage": 133, "reserved_memory": 1_000_000, "reserved_storage": 10_000_000,
              "api": {"level": 0, "total": 3, "errors": 1}},
    }
    full = got[JSBROKER]["C " + JSZ_BODIES[2].decode()]["data"]["stream_detail"]
    assert [(s["name"], s["config"]["subjects"], [c["name"] for c in s["consumer_detail"]]) for s in full] == \
        [("ONLY", ["c.>"], ["dur"])]
    assert [s["name"] for s in got[JSBROKER]['A {"streams": true}']["data"]["stream_detail"]] == ["FILE", "MEM"]
    assert got[JSBROKER]["SYS "]["error"] == {"code": 500, "description": 'account "SYS" not jetstream enabled'}
    assert got[JSBROKER]["NOPE "]["error"] == {"code": 500, "description": 'account "NOPE" not found'}


def test_account_statz_and_connz_through_the_system_imports(servers):
    async def scenario(port: int) -> dict[str, Any]:
        b = await _connect(port, "b", name="bee")
        try:
            statz = await _ask(port, "b", "$SYS.REQ.ACCOUNT.PING.STATZ")
            connz = await _ask(port, "b", "$SYS.REQ.ACCOUNT.PING.CONNZ")
            server_connz = await _ask(port, "b", "$SYS.REQ.SERVER.PING.CONNZ")
            direct = await _ask(port, "sys", "$SYS.REQ.ACCOUNT.B.STATZ")
            unused = await _ask(port, "sys", "$SYS.REQ.ACCOUNT.PING.STATZ",
                                b'{"accounts": ["A"], "include_unused": true}')
            quiet = await _ask(port, "sys", "$SYS.REQ.ACCOUNT.A.STATZ", timeout=0.5)  # no connections: silent
        finally:
            await b.close()
        stat = statz["data"]["account_statz"]
        return {
            "statz": [(s["acc"], s["conns"], s["total_conns"]) for s in stat], "statz keys": _keys(statz),
            "connz": sorted(c.get("name", "") for c in connz["data"]["connections"]),
            "server connz": server_connz["data"]["total"],
            "direct": [(s["acc"], s["conns"]) for s in direct["data"]["account_statz"]],
            "unused": [(s["acc"], s["conns"]) for s in unused["data"]["account_statz"]],
            "quiet": quiet,
        }

    got = {kind: _run(scenario(servers[kind].port)) for kind in KINDS}
    assert got[JSBROKER] == got[NATS_SERVER]
    assert got[JSBROKER]["statz"] == [("B", 2, 2)] and got[JSBROKER]["quiet"] is None


def _sorted_lists(obj: Any) -> Any:
    """Lists sorted (nats-server lists a user's permissions in its map's order, a random one)."""
    if isinstance(obj, dict):
        return {k: _sorted_lists(v) for k, v in obj.items()}
    return sorted(obj) if isinstance(obj, list) else obj


def test_user_info_answers_in_every_account(servers):
    for user in ("a", "b", "sys"):
        got = _both(servers, user, "$SYS.REQ.USER.INFO")
        assert _sorted_lists(got[JSBROKER]["data"]) == _sorted_lists(got[NATS_SERVER]["data"]), user
    assert got[JSBROKER]["data"] == {"user": "sys", "account": "SYS", "account_name": "SYS"}


# -- events ----------------------------------------------------------------------------------------------

async def _events(port: int) -> list[tuple[str, dict[str, Any]]]:
    """What a system account subscriber sees of a client of A connecting, publishing and leaving."""
    sys_nc = await _connect(port, "sys")
    seen: list[tuple[str, dict[str, Any]]] = []

    async def record(msg: Any) -> None:
        seen.append((msg.subject, json.loads(msg.data)))

    await sys_nc.subscribe("$SYS.ACCOUNT.A.>", cb=record)
    await sys_nc.subscribe("$SYS.SERVER.ACCOUNT.A.>", cb=record)
    await sys_nc.flush()
    a = await _connect(port, "a", name="events")
    await a.subscribe("x.1")
    await a.publish("x.1", b"hello")
    await a.flush()
    await a.close()
    await poll_async(lambda: any(s.endswith("DISCONNECT") for s, _ in seen) and len(seen) >= 6, timeout=5,
                     what="the disconnect event and the connection counts")
    await sys_nc.close()
    return seen


def test_connect_and_disconnect_events(servers):
    got = {kind: _run(_events(servers[kind].port)) for kind in KINDS}
    for kind in KINDS:
        got[kind].sort(key=lambda e: (e[0], e[1].get("conns", 0)))
    assert [s for s, _ in got[JSBROKER]] == [s for s, _ in got[NATS_SERVER]] == [
        "$SYS.ACCOUNT.A.CONNECT", "$SYS.ACCOUNT.A.DISCONNECT", "$SYS.ACCOUNT.A.SERVER.CONNS",
        "$SYS.ACCOUNT.A.SERVER.CONNS", "$SYS.SERVER.ACCOUNT.A.CONNS", "$SYS.SERVER.ACCOUNT.A.CONNS"]
    for (subject, js), (_, ns) in zip(got[JSBROKER], got[NATS_SERVER]):
        assert _keys(js) == _keys(ns), subject
        if "client" in ns:
            for key in ("acc", "user", "name", "lang", "kind", "client_type", "name_tag"):
                assert js["client"][key] == ns["client"][key], (subject, key)
            assert js["type"] == ns["type"]
        else:
            assert (js["acc"], js["conns"], js["total_conns"]) == (ns["acc"], ns["conns"], ns["total_conns"])
    disconnect = {kind: dict(got[kind])["$SYS.ACCOUNT.A.DISCONNECT"] for kind in KINDS}
    for key in ("sent", "received", "reason"):
        assert disconnect[JSBROKER][key] == disconnect[NATS_SERVER][key], key
    assert disconnect[JSBROKER]["reason"] == "Client Closed"


def test_statsz_heartbeat(servers):
    async def first_beat(port: int) -> dict[str, Any]:
        nc = await _connect(port, "sys")
        try:
            sub = await nc.subscribe("$SYS.SERVER.*.STATSZ")
            msg = await sub.next_msg(timeout=12)  # at most every 10s once the server has run a while
            return {"subject": msg.subject.split(".")[2], **json.loads(msg.data)}
        finally:
            await nc.close()

    async def both() -> list[dict[str, Any]]:
        return await asyncio.gather(*(first_beat(servers[k].port) for k in KINDS))

    got = dict(zip(KINDS, _run(both())))
    for kind in KINDS:
        assert got[kind]["subject"] == _ids(servers)[kind]
    assert set(got[JSBROKER]) == set(got[NATS_SERVER]) == {"subject", "server", "statsz"}


def test_a_user_of_another_account_subscribing_to_sys_sees_its_own_account_only(servers):
    async def scenario(port: int) -> dict[str, Any]:
        a = await _connect(port, "a")
        seen: list[str] = []

        async def record(msg: Any) -> None:
            seen.append(msg.subject)

        await a.subscribe("$SYS.>", cb=record)
        await a.flush()
        b = await _connect(port, "b")
        await b.close()
        ping = await _ask(port, "b", "$SYS.REQ.SERVER.PING")  # not imported: nobody answers in B
        await a.publish("$SYS.ACCOUNT.A.CONNECT", b"{}")  # A's own subject: only A's subscriber gets it
        await poll_async(lambda: "$SYS.ACCOUNT.A.CONNECT" in seen, timeout=5, what="A's own publish")
        await a.close()
        return {"ping": ping, "seen": sorted(s for s in seen if not s.startswith("$SYS.REQ."))}

    got = {kind: _run(scenario(servers[kind].port)) for kind in KINDS}
    assert got[JSBROKER] == got[NATS_SERVER] == {"ping": "503", "seen": ["$SYS.ACCOUNT.A.CONNECT"]}


@pytest.mark.parametrize("signal_name", ["SIGUSR2", "SIGTERM"])
def test_lame_duck_and_shutdown_events(tmp_path, signal_name):
    """nats-server's `$SYS.SERVER.<id>.LAMEDUCK` (SIGUSR2) and `.SHUTDOWN` (SIGTERM): the server info alone."""
    config = tmp_path / "sys.conf"
    config.write_text(CONFIG)

    async def watch(handle: ServerHandle) -> tuple[str, dict[str, Any]]:
        nc = await _connect(handle.port, "sys")
        sub = await nc.subscribe("$SYS.SERVER.*.*")  # no STATSZ: nobody asks for the heartbeat's subject alone
        # nats-server drops an event sent before its system account's send queue runs, which can be a few ms
        # after "Server is ready" (a SIGUSR2 then lame-ducks it silently): an answered PING says it runs.
        await nc.request("$SYS.REQ.SERVER.PING", b"", timeout=5)
        assert handle.proc is not None
        handle.proc.send_signal(getattr(signal, signal_name))
        while True:
            msg = await sub.next_msg(timeout=5)
            if not msg.subject.endswith(".STATSZ"):
                break
        with contextlib.suppress(Exception):
            await nc.close()
        return msg.subject.split(".", 3)[3], json.loads(msg.data)

    got = {}
    for kind in KINDS:
        with launch(kind, jetstream=False, extra_args=["-c", str(config)]) as handle:
            got[kind] = _run(watch(handle))
            if signal_name == "SIGUSR2":
                handle.kill()  # not the lame duck period's wait
    assert got[JSBROKER][0] == got[NATS_SERVER][0] == ("LAMEDUCK" if signal_name == "SIGUSR2" else "SHUTDOWN")
    assert _keys(got[JSBROKER][1]) == _keys(got[NATS_SERVER][1])
    assert got[JSBROKER][1]["ver"] == "2.15.1" and got[JSBROKER][1]["jetstream"] is False


# -- config ----------------------------------------------------------------------------------------------

def test_the_default_system_account_answers_user_info_in_the_global_account():
    handles = {kind: launch(kind, jetstream=False) for kind in KINDS}
    try:
        got = {kind: _run(_ask_anonymous(handles[kind].port)) for kind in KINDS}
    finally:
        for handle in handles.values():
            handle.close()
    assert got[JSBROKER] == got[NATS_SERVER] == {"user": "", "account": "$G", "account_name": "$G"}


async def _ask_anonymous(port: int) -> Any:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    try:
        reply = json.loads((await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)).data)
        return {"user": reply["data"].get("user", ""), **{k: reply["data"][k] for k in ("account", "account_name")}}
    finally:
        await nc.close()


def test_a_system_account_missing_from_the_accounts_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "missing.conf"
    config.write_text("accounts { A: { users: [{user: a, password: a}] } }\nsystem_account: SYS\n")
    with pytest.raises(ConfigError, match="error resolving system account: account missing"):
        load_file(config)
    done = subprocess.run([nats_server_binary(), "-c", str(config), "-p", "-1"], capture_output=True,
                          text=True, timeout=20)
    assert done.returncode != 0 and "error resolving system account: account missing" in done.stderr + done.stdout


# -- the nats CLI ----------------------------------------------------------------------------------------

# What differs between the two servers and is no behaviour: ids, times, sizes (jsbroker's JetStream memory
# default is unlimited, nats-server's 75% of the RAM), counts (jsbroker has fewer internal subscriptions), the
# store directory, and lines only the Go server has values for.
_VOLATILE = [(re.compile(p), r) for p, r in (
    (r"(Storage Directory:).*", r"\1 <dir>"), (r"N[A-Z2-7]{55}", "<id>"),
    (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S*", "<date>"), (r"127\.0\.0\.1:\d+", "<addr>"),
    (r"[\d.,]+ ?(ns|µs|ms|s|m|h|d|B|KiB|MiB|GiB|TiB|EiB|%)(?=\W|$)", "<v>"), (r"(\d+[dhm])+\d+s", "<v>"),
    (r"\d[\d,.]*", "<n>"), (r"─+", "-"), (r"[ \t]+", " "))]
_GO_ONLY_LINES = ("Git Commit:", "Go Version:", "Configuration Digest:", "GOMAXPROCS:", "Maximum Subscriptions:",
                  "Memory Limit:",
                  "Strict API Parsing:")  # /varz's jetstream.config.strict: jsbroker's /varz does not have it yet


def _plain_cli(text: str) -> list[str]:
    rc, *rest = text.splitlines()
    lines = [rc]  # the exit code as it is
    for line in rest:
        if any(line.strip().startswith(prefix) for prefix in _GO_ONLY_LINES):
            continue
        for pattern, replacement in _VOLATILE:
            line = pattern.sub(replacement, line)
        lines.append(line.strip())
    return lines


def _cli(server: ServerHandle, home: Path, user: str, *args: str) -> str:
    cli = str(go_tools.NATS_CLI.for_test())
    done = subprocess.run([cli, "--server", server.url, "--user", user, "--password", f"{user}-pw", "--timeout",
                           "2s", *args], capture_output=True, text=True, timeout=60, env={"HOME": str(home)})
    return f"rc={done.returncode}\n{done.stdout}{done.stderr}"


@pytest.mark.parametrize(("user", "args"), [
    ("sys", ("server", "ping")),
    ("sys", ("server", "list")),
    ("sys", ("server", "info")),
    ("sys", ("server", "report", "connections")),
    ("sys", ("server", "report", "accounts")),
    ("sys", ("server", "report", "jetstream")),
    ("a", ("account", "info")),
    ("sys", ("account", "info")),
    ("b", ("server", "ping")),  # not the system account: the 503 and the CLI's hint
])
def test_nats_cli_reads_both_alike(servers, tmp_path, user, args):
    got = {kind: _plain_cli(_cli(servers[kind], tmp_path, user, *args)) for kind in KINDS}
    assert got[JSBROKER] == got[NATS_SERVER]
    assert got[JSBROKER][0] == ("rc=1" if user == "b" else "rc=0")
