"""Accounts and JetStream as monitoring shows them, side by side with nats-server 2.15.1: HTTP /accountz (the list,
`?acc=` details with exports, imports and JetStream), /accstatz (`?unused`), /jsz's options, and the same views
on the system account (`$SYS.REQ.SERVER.PING.ACCOUNTZ`, `.JSZ` with options, `$SYS.REQ.ACCOUNT.PING.STATZ`);
the client actions `$SYS.REQ.SERVER.<id>.KICK` and `.LDM`, and `.RELOAD` (refused by jsbroker, which reads its
config once); /connz's, /subsz's, /healthz's and the cluster endpoints' query options; the Go `nats` CLI's
`server request` commands. Bad input (unknown accounts, clients and assets, bad query values and option types)
answers as nats-server's does. One pair of servers (streams and consumers in two JetStream accounts) serves the
file."""

from __future__ import annotations

import asyncio
import json
import random
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from nats.errors import TimeoutError as NatsTimeout

from tests.broker.test_system_account import _connect, _server_id  # the same users: <name>/<name>-pw
from tests.differential import normalise
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, launch

CONFIG = """
accounts {
  SYS: { users: [{user: sys, password: sys-pw}] }
  A: {
    users: [{user: a, password: a-pw}]
    exports: [{service: "svc.>"}, {stream: "st.>", accounts: [B]}]
    jetstream: enabled
  }
  B: {
    users: [{user: b, password: b-pw}]
    imports: [{stream: {account: A, subject: "st.>"}, prefix: pre}, {service: {account: A, subject: "svc.x"}, to: "local.x"}]
  }
  C: { users: [{user: c, password: c-pw}], jetstream: enabled }
}
system_account: SYS
"""




async def _fill(port: int) -> None:
    """A stream with two messages and two consumers in A, a file and a memory stream in C."""
    for user, stream in (("a", "ORDERS"), ("c", "LOGS")):
        nc = await _connect(port, user)
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
        if user == "a":
            for i in range(2):
                await js.publish("orders.new", f"o{i}".encode())
            await js.add_consumer("ORDERS", durable_name="ship", ack_policy="explicit")
            await js.add_consumer("ORDERS", durable_name="bill", ack_policy="explicit")
        else:
            await js.add_stream(name="CACHE", subjects=["cache.>"], storage="memory")
        await nc.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerHandle]]:
    directory = tmp_path_factory.mktemp("accmon")
    handles: dict[str, ServerHandle] = {}
    try:
        for kind in KINDS:
            config = directory / f"{kind}.conf"
            config.write_text(CONFIG)
            handles[kind] = launch(kind, http=True, extra_args=["-c", str(config)])
            asyncio.run(_fill(handles[kind].port))
        yield handles
    finally:
        for handle in handles.values():
            handle.close()


def _get(server: ServerHandle, path: str) -> tuple[int, Any]:
    """An HTTP GET: the status and the JSON body (an error's text, unless it is JSON)."""
    try:
        with urllib.request.urlopen(f"{server.http_url}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, json.loads(text) if text.startswith("{") else text


def _both(servers: dict[str, ServerHandle], path: str) -> dict[str, tuple[int, Any]]:
    return {kind: _get(servers[kind], path) for kind in KINDS}


def _keys(obj: Any) -> Any:
    """The shape of a JSON value: dicts' keys (recursively), a list's first item, scalars' types (ints and floats
    alike: Go writes 0.0 as 0)."""
    if isinstance(obj, dict):
        return {k: _keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_keys(obj[0])] if obj else []
    return "number" if isinstance(obj, (int, float)) and not isinstance(obj, bool) else type(obj).__name__


async def _ask(port: int, user: str, subject: str, body: bytes = b"", timeout: float = 1.0) -> Any:
    """The first answer to a request, as JSON (None when nobody answers in time)."""
    nc = await _connect(port, user)
    try:
        return json.loads((await nc.request(subject, body, timeout=timeout)).data)
    except NatsTimeout:
        return None
    finally:
        await nc.close()


def _ask_both(servers: dict[str, ServerHandle], subject: str, body: bytes = b"", timeout: float = 1.0) -> dict[str, Any]:
    async def both() -> list[Any]:
        return await asyncio.gather(*(_ask(servers[k].port, "sys", subject, body, timeout) for k in KINDS))
    return dict(zip(KINDS, asyncio.run(both())))


def _sorted_imports(detail: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(detail.get("imports", []), key=lambda i: (i["local_subject"], i["subject"]))


def _imports_sorted(accountz: dict[str, Any]) -> dict[str, Any]:
    """/accountz with its account's imports sorted (nats-server lists them in its map's order, each time anew)."""
    detail = accountz.get("account_detail")
    return {**accountz, "account_detail": {**detail, "imports": _sorted_imports(detail)}} if detail else accountz


# -- /accountz ------------------------------------------------------------------------------------------------

def test_accountz_lists_every_account(servers):
    got = _both(servers, "/accountz")
    (js_status, js), (ns_status, ns) = got[JSBROKER], got[NATS_SERVER]
    assert js_status == ns_status == 200
    assert set(js) == set(ns) == {"server_id", "now", "system_account", "accounts"}
    assert js["system_account"] == ns["system_account"] == "SYS"
    assert sorted(js["accounts"]) == sorted(ns["accounts"]) == ["$G", "A", "B", "C", "SYS"]


@pytest.mark.parametrize("account", ["A", "B", "C", "$G"])
def test_accountz_details_an_account_as_nats_server_does(servers, account):
    got = _both(servers, f"/accountz?acc={account.replace('$', '%24')}")
    js, ns = got[JSBROKER][1]["account_detail"], got[NATS_SERVER][1]["account_detail"]
    assert _keys({**js, "imports": None}) == _keys({**ns, "imports": None})  # the imports are compared below
    for key in ("account_name", "name_tag", "expired", "complete", "jetstream_enabled", "leafnode_connections",
                "client_connections"):
        assert js[key] == ns[key], key
    assert js.get("exports") == ns.get("exports")
    assert _sorted_imports(js) == _sorted_imports(ns)


def test_accountz_details_the_system_account(servers):
    got = _both(servers, "/accountz?acc=SYS")
    js, ns = got[JSBROKER][1]["account_detail"], got[NATS_SERVER][1]["account_detail"]
    assert set(js) == set(ns) and js["is_system"] is ns["is_system"] is True
    assert _sorted_imports(js) == _sorted_imports(ns)
    # nats-server's $SYS.DEBUG.SUBSCRIBERS is a service jsbroker does not have: not listed
    assert [e for e in ns["exports"] if e not in js["exports"]] == \
        [{"subject": "$SYS.DEBUG.SUBSCRIBERS", "type": "service", "response_type": "Singleton"}]


def test_accountz_of_an_unknown_account_is_a_400(servers):
    got = _both(servers, "/accountz?acc=NOPE")
    assert got[JSBROKER] == got[NATS_SERVER] == (400, "Account NOPE does not exist")


@pytest.mark.parametrize(("body", "path"), [(b"", "/accountz"), (b'{"account": "B"}', "/accountz?acc=B")])
def test_accountz_requests_answer_as_the_http_endpoint(servers, body, path):
    answers = _ask_both(servers, "$SYS.REQ.SERVER.PING.ACCOUNTZ", body)
    for kind in KINDS:
        data, (_, http) = answers[kind]["data"], _get(servers[kind], path)
        assert normalise(_imports_sorted(data)) == normalise(_imports_sorted(http)), kind
    js, ns = answers[JSBROKER], answers[NATS_SERVER]
    if "account_detail" in ns["data"]:  # its imports are in nats-server's map order: compared sorted
        assert _sorted_imports(js["data"]["account_detail"]) == _sorted_imports(ns["data"]["account_detail"])
        for answer in (js, ns):
            answer["data"]["account_detail"]["imports"] = None
    assert _keys(js) == _keys(ns)


@pytest.mark.parametrize("body", [b'{"account": "NOPE"}', b'{"account": 5}'])
def test_accountz_requests_refuse_like_nats_server(servers, body):
    got = _ask_both(servers, "$SYS.REQ.SERVER.PING.ACCOUNTZ", body)
    js, ns = got[JSBROKER], got[NATS_SERVER]
    assert set(js) == set(ns) and js["error"] == ns["error"]


# -- /accstatz ------------------------------------------------------------------------------------------------

def _statz_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    return normalise(body["account_statz"], volatile=("num_subscriptions",))


def test_accstatz_counts_the_accounts_in_use(servers):
    async def scenario(server: ServerHandle) -> dict[str, Any]:
        nc = await _connect(server.port, "b")
        try:
            for i in range(3):
                await nc.publish("anything", b"x" * i)
            await nc.flush()
            return await asyncio.to_thread(_get, server, "/accstatz")
        finally:
            await nc.close()

    got = {kind: asyncio.run(scenario(servers[kind])) for kind in KINDS}
    (js_status, js), (ns_status, ns) = got[JSBROKER], got[NATS_SERVER]
    assert js_status == ns_status == 200 and set(js) == set(ns)
    assert _statz_of(js) == _statz_of(ns) and [s["acc"] for s in js["account_statz"]] == ["B"]
    assert js["account_statz"][0]["received"]["msgs"] == 3


@pytest.mark.parametrize("query", ["?unused=1", "?unused=true", "?unused=T"])
def test_accstatz_unused_lists_every_account(servers, query):
    got = _both(servers, f"/accstatz{query}")
    js, ns = got[JSBROKER][1], got[NATS_SERVER][1]
    assert sorted(s["acc"] for s in js["account_statz"]) == sorted(s["acc"] for s in ns["account_statz"])
    assert _keys(js) == _keys(ns)


@pytest.mark.parametrize("path", ["/accstatz?unused=maybe", "/jsz?accounts=yes", "/jsz?streams=2",
                                  "/jsz?offset=x", "/jsz?limit=1.5", "/jsz?consumers=on", "/jsz?raft=-",
                                  "/jsz?leader-only=y", "/jsz?config=%22", "/jsz?leader-only=y&offset=x",
                                  "/jsz?raft=x&limit=y&config=1", "/jsz?stream-leader-only=x&direct-consumers=y"])
def test_a_bad_query_value_is_a_400_naming_it(servers, path):
    got = _both(servers, path)
    assert got[JSBROKER] == got[NATS_SERVER]  # with several bad ones, the same one named
    names = [pair.split("=")[0] for pair in path.split("?")[1].split("&")]
    assert got[JSBROKER][0] == 400 and any(f"'{name}'" in got[JSBROKER][1] for name in names)


@pytest.mark.parametrize("body", [b'{"accounts": ["A", "B", "NOPE"], "include_unused": true}',
                                  b'{"accounts": "A"}', b'{"include_unused": 1}', b'{"accounts": [1]}'])
def test_account_statz_requests_answer_alike(servers, body):
    got = _ask_both(servers, "$SYS.REQ.ACCOUNT.PING.STATZ", body)
    js, ns = got[JSBROKER], got[NATS_SERVER]
    assert set(js) == set(ns)
    if "error" in ns:
        assert js["error"] == ns["error"]
    else:
        assert [s["acc"] for s in js["data"]["account_statz"]] == [s["acc"] for s in ns["data"]["account_statz"]]


# -- /connz's options --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/connz?offset=x", "/connz?limit=1e3", "/connz?cid=-1", "/connz?cid=x",
                                  "/connz?state=weird", "/connz?auth=2", "/connz?subs=maybe", "/connz?sort=bogus",
                                  "/connz?sort=stop", "/connz?sort=reason", "/connz?state=weird&auth=x",
                                  "/connz?cid=x&offset=y", "/connz?sort=bogus&state=no", "/connz?limit=q&subs=r"])
def test_connz_refuses_a_bad_query_value_as_nats_server(servers, path):
    got = _both(servers, path)
    assert got[JSBROKER] == got[NATS_SERVER] and got[JSBROKER][0] == 400


@pytest.mark.parametrize("query", ["?acc=NOPE", "?acc=B&subs=1", "?cid=99999", "?sort=subs&limit=2", "?state=open",
                                   "?auth=TRUE&acc=SYS&offset=-1", "?user=b&subs=1", "?user=a&acc=B", "?mqtt_client=x",
                                   "?user=nobody", "?subs=detail&acc=B", "?subs=DETAIL&user=b"])
def test_connz_takes_the_query_options_nats_server_does(servers, query):
    async def scenario(server: ServerHandle) -> tuple[int, Any]:
        nc = await _connect(server.port, "b")
        try:
            await nc.subscribe("b.one")
            await nc.flush()
            return await asyncio.to_thread(_get, server, f"/connz{query}")
        finally:
            await nc.close()

    got = {kind: asyncio.run(scenario(servers[kind])) for kind in KINDS}
    js, ns = got[JSBROKER][1], got[NATS_SERVER][1]
    assert got[JSBROKER][0] == got[NATS_SERVER][0] == 200
    assert {k: js[k] for k in ("num_connections", "total", "offset", "limit")} == \
        {k: ns[k] for k in ("num_connections", "total", "offset", "limit")}
    assert (js["server_id"] == "") is (ns["server_id"] == "") and (js["connections"] is None) is (ns["connections"] is None)
    for key in ("subscriptions_list", "subscriptions_list_detail"):
        assert [normalise(c.get(key)) for c in js["connections"] or ()] == \
            [normalise(c.get(key)) for c in ns["connections"] or ()]


@pytest.mark.parametrize("body", [b'{"acc": "B", "filter_subject": "b.*"}', b'{"acc": "B", "filter_subject": "c.>"}',
                                  b'{"filter_subject": "b.one"}', b'{"filter_subject": ">"}', b'{"user": "b"}'])
def test_connz_requests_filter_as_nats_server(servers, body):
    async def scenario(server: ServerHandle) -> Any:
        nc = await _connect(server.port, "b")
        try:
            await nc.subscribe("b.one")
            await nc.flush()
            answer = await _ask(server.port, "sys", "$SYS.REQ.SERVER.PING.CONNZ", body)
            data = answer.get("data") or {}
            return answer.get("error"), data.get("num_connections"), data.get("total")
        finally:
            await nc.close()

    got = {kind: asyncio.run(scenario(servers[kind])) for kind in KINDS}
    assert got[JSBROKER] == got[NATS_SERVER]


def test_connz_lists_a_connection_with_nats_servers_fields(servers):
    async def scenario(server: ServerHandle) -> dict[str, Any]:
        nc = await _connect(server.port, "b", name="fields")
        try:
            sub = await nc.subscribe("b.one")
            await nc.publish("b.one", b"x")
            await sub.next_msg(timeout=2)  # the subscription is in place
            _, body = await asyncio.to_thread(_get, server, "/connz?subs=detail&auth=1&acc=B")
            return next(c for c in body["connections"] if c.get("name") == "fields")
        finally:
            await nc.close()

    got = {kind: asyncio.run(scenario(servers[kind])) for kind in KINDS}
    js, ns = got[JSBROKER], got[NATS_SERVER]
    assert set(ns) - set(js) == {"idle", "last_activity"}  # jsbroker does not track a connection's activity
    assert set(js) <= set(ns)
    for key in ("account", "authorized_user", "name_tag", "name", "kind", "type", "subscriptions"):
        assert js[key] == ns[key], key
    assert re.fullmatch(r"[0-9.]+(ns|µs|ms|s)", js["rtt"]), js["rtt"]  # a Go duration, as nats-server's


@pytest.mark.parametrize("sort", ["uptime", "rtt", "start"])
def test_connz_sorts_as_nats_server(servers, sort):
    async def scenario(server: ServerHandle) -> list[str]:
        first = await _connect(server.port, "b", name="first")
        second = await _connect(server.port, "b", name="second")
        try:
            _, body = await asyncio.to_thread(_get, server, f"/connz?acc=B&sort={sort}")
            return [c["name"] for c in body["connections"]]
        finally:
            await first.close()
            await second.close()

    got = {kind: asyncio.run(scenario(servers[kind])) for kind in KINDS}
    if sort == "rtt":  # each client's measured round trip decides
        assert sorted(got[JSBROKER]) == sorted(got[NATS_SERVER]) == ["first", "second"]
    else:
        assert got[JSBROKER] == got[NATS_SERVER] == (["second", "first"] if sort == "uptime" else ["first", "second"])


@pytest.mark.parametrize(("query", "option"), [("?sort=last", "sort by last"), ("?sort=idle", "sort by idle"),
                                               ("?state=closed", "state"), ("?state=any", "state")])
def test_connz_refuses_what_it_has_no_view_for_by_name(servers, query, option):
    status, text = _get(servers[JSBROKER], f"/connz{query}")
    assert status == 400 and text.startswith(f"{option}: jsbroker")


# -- /subsz ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["", "?subs=1", "?subs=1&acc=B", "?subs=1&test=b.one", "?subs=1&test=b.two",
                                   "?subs=true&acc=B&test=b.one&offset=1", "?subs=1&test=b.one&limit=1",
                                   "?acc=NOPE&subs=1"])
def test_subsz_lists_the_clients_subscriptions_as_nats_server(servers, query):
    async def scenario(server: ServerHandle) -> tuple[int, Any]:
        nc = await _connect(server.port, "b")
        try:
            await nc.subscribe("b.one")
            await nc.subscribe("b.*", queue="workers")
            await nc.flush()
            return await asyncio.to_thread(_get, server, f"/subsz{query}")
        finally:
            await nc.close()

    got = {kind: asyncio.run(scenario(servers[kind])) for kind in KINDS}
    (js_status, js), (ns_status, ns) = got[JSBROKER], got[NATS_SERVER]
    assert js_status == ns_status == 200
    assert {k: js[k] for k in ("offset", "limit")} == {k: ns[k] for k in ("offset", "limit")}

    def listed(body: dict[str, Any]) -> list[Any]:  # the client's (nats-server lists its internal ones too)
        return sorted((s["account"], s["subject"], s.get("qgroup"), s["sid"])
                      for s in body.get("subscriptions_list", []) if s["subject"].startswith("b."))
    if "offset" in query or "limit" in query:  # a page: which of the two comes first is each server's order
        assert (len(listed(js)), js["total"]) == (len(listed(ns)), ns["total"]) == (1, 2)
    else:
        assert listed(js) == listed(ns)
        assert js["total"] == (len(listed(js)) if "subs" in query else 0)


def test_subscriptionsz_is_subsz_and_counted_as_it(servers):
    got = {}
    for kind in KINDS:
        before = _get(servers[kind], "/varz")[1]["http_req_stats"].get("/subsz", 0)
        status, body = _get(servers[kind], "/subscriptionsz?subs=1&test=b.one")
        after = _get(servers[kind], "/varz")[1]["http_req_stats"]
        got[kind] = (status, sorted(body), after.get("/subsz", 0) - before, "/subscriptionsz" in after)
    assert got[JSBROKER] == got[NATS_SERVER]
    assert got[JSBROKER][0] == 200 and got[JSBROKER][2] == 1


@pytest.mark.parametrize("path", ["/subsz?test=b.*", "/subsz?subs=1&test=b..x", "/subsz?subs=maybe",
                                  "/subsz?offset=one"])
def test_subsz_refuses_a_bad_query_as_nats_server(servers, path):
    got = _both(servers, path)
    assert got[JSBROKER] == got[NATS_SERVER] and got[JSBROKER][0] == 400


@pytest.mark.parametrize(("subject", "body"), [
    ("$SYS.REQ.SERVER.PING.SUBSZ", b'{"subscriptions": true, "account": "B", "test": "b.one"}'),
    ("$SYS.REQ.SERVER.PING.SUBSZ", b'{"test": "b.>"}'), ("$SYS.REQ.SERVER.PING.SUBSZ", b'{"limit": "x"}'),
    ("$SYS.REQ.ACCOUNT.B.SUBSZ", b'{"test": "b.one", "offset": 1}'), ("$SYS.REQ.ACCOUNT.B.SUBSZ", b'{"test": 1}')])
def test_subsz_requests_answer_alike(servers, subject, body):
    got = _ask_both(servers, subject, body)
    js, ns = got[JSBROKER], got[NATS_SERVER]
    assert set(js) == set(ns)
    if "error" in ns:
        assert js["error"] == ns["error"]
    else:
        assert {k: js["data"][k] for k in ("offset", "limit")} == {k: ns["data"][k] for k in ("offset", "limit")}
        assert set(js["data"]) == set(ns["data"])


# -- /healthz -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("query", [
    "?account=A", "?account=B", "?account=NOPE", "?account=A&stream=ORDERS", "?account=A&stream=NOPE",
    "?account=C&stream=CACHE", "?account=A&stream=ORDERS&consumer=ship", "?account=A&stream=ORDERS&consumer=NOPE",
    "?stream=ORDERS", "?consumer=ship&account=A", "?account=NOPE&details=true", "?account=A&stream=NOPE&details=1",
    "?stream=ORDERS&details=1", "?details=1", "?account=NOPE&js-server-only=1", "?account=NOPE&js-enabled-only=1",
    "?account=NOPE&js-enabled=1", "?js-meta-only=1&account=A&stream=ORDERS", "?js-enabled-only=maybe",
    "?details=2"])
def test_healthz_checks_the_jetstream_assets_as_nats_server(servers, query):
    got = _both(servers, f"/healthz{query}")
    assert got[JSBROKER] == got[NATS_SERVER]


@pytest.mark.parametrize("body", [b'{"account": "NOPE"}', b'{"account": "A", "stream": "ORDERS", "details": true}',
                                  b'{"stream": "ORDERS"}', b'{"details": "yes"}'])
def test_healthz_requests_take_the_same_options(servers, body):
    got = _ask_both(servers, "$SYS.REQ.SERVER.PING.HEALTHZ", body)
    js, ns = got[JSBROKER], got[NATS_SERVER]
    assert set(js) == set(ns)
    assert js.get("data") == ns.get("data") and js.get("error") == ns.get("error")


# -- /routez, /gatewayz, /leafz, /raftz: one server has none ----------------------------------------------------

@pytest.mark.parametrize("path", ["/routez", "/routez?subs=detail", "/routez?subs=x", "/gatewayz?accs=1&gw_name=G",
                                  "/gatewayz?accs=x", "/leafz?subs=1&acc=A", "/leafz?subs=x", "/leafz?subs=detail",
                                  "/gatewayz?subs=detail&accs=y", "/raftz"])
def test_the_cluster_endpoints_answer_as_a_lone_nats_server(servers, path):
    got = _both(servers, path)
    (js_status, js), (ns_status, ns) = got[JSBROKER], got[NATS_SERVER]
    assert js_status == ns_status
    assert (normalise(js) if isinstance(js, dict) else js) == (normalise(ns) if isinstance(ns, dict) else ns)


# -- /jsz's options ---------------------------------------------------------------------------------------------

def _jsz_shape(body: dict[str, Any]) -> Any:
    """What /jsz's options decide: which accounts, streams and consumers are detailed, with which parts."""
    details = []
    for account in body.get("account_details", []):
        streams = []
        for stream in account.get("stream_detail", []):
            consumers = [(c["name"], "config" in c) for c in stream.get("consumer_detail", [])]
            streams.append((stream["name"], "config" in stream, sorted(consumers)))
        details.append((account["name"], sorted(streams)))  # nats-server's order is its map's
    top = {k: v for k, v in body.items() if k in ("streams", "consumers", "messages", "streams_leader",
                                                   "consumers_leader", "total", "disabled")}
    return sorted(details), top, sorted(body)


@pytest.mark.parametrize("query", [
    "", "?accounts=true", "?accounts=1&offset=1", "?accounts=1&limit=1", "?accounts=1&offset=5", "?streams=true",
    "?consumers=true", "?consumers=true&config=true", "?streams=1&config=1", "?acc=A", "?acc=A&streams=1",
    "?acc=C&consumers=1", "?acc=NOPE", "?acc=NOPE&accounts=1", "?acc=B&accounts=1", "?raft=true",
    "?leader-only=true&accounts=1", "?stream-leader-only=1&streams=1", "?direct-consumers=1&consumers=1",
    "?accounts=1&offset=-3&limit=0"])
def test_jsz_options_as_nats_server(servers, query):
    got = _both(servers, f"/jsz{query}")
    (js_status, js), (ns_status, ns) = got[JSBROKER], got[NATS_SERVER]
    assert js_status == ns_status == 200
    assert _jsz_shape(js) == _jsz_shape(ns)


def _random_jsz_queries(count: int, seed: int = 31) -> list[str]:
    """/jsz queries drawn from every option's values, good and bad (a seeded draw: the same each run)."""
    rng = random.Random(seed)
    values = {"acc": ["A", "C", "B", "NOPE"], "accounts": ["1", "false", "T", "x"], "streams": ["true", "0", "2"],
              "consumers": ["1", "F"], "direct-consumers": ["1"], "config": ["TRUE", "f", "?"],
              "offset": ["0", "1", "2", "-1", "z"], "limit": ["1", "0", "5", "1.0"], "leader-only": ["1", "no"],
              "raft": ["1", "0"], "stream-leader-only": ["true"]}
    queries = []
    for _ in range(count):
        chosen = rng.sample(sorted(values), rng.randint(1, 5))
        queries.append("?" + "&".join(f"{k}={rng.choice(values[k])}" for k in chosen))
    return queries


def test_random_jsz_queries_answer_as_nats_server(servers):
    for query in _random_jsz_queries(40):
        got = _both(servers, f"/jsz{query}")
        (js_status, js), (ns_status, ns) = got[JSBROKER], got[NATS_SERVER]
        assert js_status == ns_status, query
        assert (_jsz_shape(js) if js_status == 200 else js) == (_jsz_shape(ns) if ns_status == 200 else ns), query


@pytest.mark.parametrize("body", [b'{"accounts": true, "streams": true}', b'{"account": "A", "consumer": true}',
                                  b'{"accounts": true, "offset": 1, "limit": 1}', b'{"raft": true}'])
def test_jsz_requests_take_the_same_options(servers, body):
    got = _ask_both(servers, "$SYS.REQ.SERVER.PING.JSZ", body)
    assert _jsz_shape(got[JSBROKER]["data"]) == _jsz_shape(got[NATS_SERVER]["data"])


@pytest.mark.parametrize("body", [b'{"consumer": true}', b'{"streams": true, "consumer": true}',
                                  b'{"streams": true, "config": true}', b'{"streams": true, "accounts": true}'])
def test_account_jsz_requests_take_the_options_as_given(servers, body):
    got = _ask_both(servers, "$SYS.REQ.ACCOUNT.A.JSZ", body)
    assert _jsz_shape({"account_details": [got[JSBROKER]["data"]]}) == \
        _jsz_shape({"account_details": [got[NATS_SERVER]["data"]]})


@pytest.mark.parametrize(("subject", "body"), [(s, b) for s in ("$SYS.REQ.SERVER.PING.JSZ", "$SYS.REQ.ACCOUNT.B.JSZ")
                                               for b in (b'{"limit": "x"}', b'{"accounts": 1}', b'{"account": true}')])
def test_jsz_requests_refuse_bad_options_alike(servers, subject, body):
    got = _ask_both(servers, subject, body)
    js, ns = got[JSBROKER], got[NATS_SERVER]
    assert set(js) == set(ns) == {"server", "error"} and js["error"] == ns["error"]


# -- KICK, LDM, RELOAD ------------------------------------------------------------------------------------------

async def _kick_and_ldm(port: int) -> dict[str, Any]:
    """A client of B told it is in lame duck mode, then kicked; the answers and what the client and the system
    account's DISCONNECT event saw."""
    sid = await _server_id(port)
    ldm = asyncio.Event()
    closed = asyncio.Event()

    async def on_ldm() -> None:
        ldm.set()

    async def on_closed() -> None:
        closed.set()

    client = await _connect(port, "b", lame_duck_mode_cb=on_ldm, closed_cb=on_closed)
    await client.flush()
    sys_nc = await _connect(port, "sys")
    events = await sys_nc.subscribe("$SYS.ACCOUNT.B.DISCONNECT")
    await sys_nc.flush()
    cid = client._client_id
    out: dict[str, Any] = {}
    try:
        for kind in ("LDM", "KICK"):
            answer = await sys_nc.request(f"$SYS.REQ.SERVER.{sid}.{kind}", json.dumps({"cid": cid}).encode(), timeout=1)
            out[kind] = sorted(json.loads(answer.data))
            if kind == "LDM":
                await asyncio.wait_for(ldm.wait(), 2)
        await asyncio.wait_for(closed.wait(), 2)
        event = json.loads((await events.next_msg(timeout=2)).data)
        out["reason"] = event["reason"]
    finally:
        await sys_nc.close()
        await client.close()
    return out


def test_kick_and_ldm_reach_the_client_as_nats_servers_do(servers):
    got = {kind: asyncio.run(_kick_and_ldm(servers[kind].port)) for kind in KINDS}
    assert got[JSBROKER] == got[NATS_SERVER] == {"LDM": ["server"], "KICK": ["server"], "reason": "Kicked"}


@pytest.mark.parametrize(("kind", "body"), [
    ("KICK", b'{"cid": 99999}'), ("LDM", b'{"cid": 99999}'), ("KICK", b"{}"),
    ("KICK", b""), ("KICK", b'{"cid": "x"}'), ("LDM", b"[1]"), ("KICK", b'{"cid": -1}'),
    ("KICK", b'{"cid": 1, "server_name": "elsewhere"}'),
])
def test_kick_and_ldm_refuse_like_nats_server(servers, kind, body):
    ids = {k: asyncio.run(_server_id(servers[k].port)) for k in KINDS}

    async def ask_both() -> list[Any]:
        return await asyncio.gather(*(_ask(servers[k].port, "sys", f"$SYS.REQ.SERVER.{ids[k]}.{kind}", body, 0.5)
                                      for k in KINDS))
    js, ns = asyncio.run(ask_both())
    if ns is None:  # no answer: a body nats-server cannot decode, a filter naming another server
        assert js is None
    else:
        assert set(js) == set(ns) and js["error"] == ns["error"]


def test_reload_is_refused_with_an_error_naming_why(servers):
    sid = asyncio.run(_server_id(servers[JSBROKER].port))
    answer = asyncio.run(_ask(servers[JSBROKER].port, "sys", f"$SYS.REQ.SERVER.{sid}.RELOAD"))
    assert set(answer) == {"server", "error"}  # as nats-server's answer to a reload that fails
    assert answer["error"]["code"] == 500 and "restart" in answer["error"]["description"]
    # nothing else changed: clients still connect and get answers
    assert asyncio.run(_ask(servers[JSBROKER].port, "sys", "$SYS.REQ.SERVER.PING.IDZ"))["id"] == sid


# -- the nats CLI ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("server", "request", "kick", "99999", "<id>"),
    ("server", "request", "jetstream-health", "--account", "A", "--stream", "NOPE"),
    ("server", "request", "jetstream", "--account", "A", "--streams", "--consumer"),
    ("server", "request", "accounts", "--account", "NOPE"),
    ("server", "request", "subscriptions", "--filter-account", "B"),
])
def test_nats_cli_requests_read_both_alike(servers, tmp_path, args):
    """The Go `nats` CLI's `server request` commands, their JSON compared after normalising ids, times and counts."""
    from tests.broker.test_system_account import _cli, _plain_cli

    ids = {kind: asyncio.run(_server_id(servers[kind].port)) for kind in KINDS}
    got = {kind: _plain_cli(_cli(servers[kind], tmp_path, "sys", *(a.replace("<id>", ids[kind]) for a in args)))
           for kind in KINDS}
    assert got[JSBROKER] == got[NATS_SERVER]
    assert got[JSBROKER][0] == "rc=0" and len(got[JSBROKER]) > 1


# -- request bodies, drawn at random -------------------------------------------------------------------------

_BODY_KEYS = {  # each kind's option keys (nats-server's JSON names) and their Go types
    "$SYS.REQ.SERVER.PING.JSZ": {"account": "s", "accounts": "b", "streams": "b", "consumer": "b", "config": "b",
                                  "offset": "i", "limit": "i", "leader_only": "b", "raft": "b"},
    "$SYS.REQ.SERVER.PING.SUBSZ": {"offset": "i", "limit": "i", "subscriptions": "b", "account": "s", "test": "s"},
    "$SYS.REQ.SERVER.PING.HEALTHZ": {"js-enabled-only": "b", "js-server-only": "b", "details": "b", "account": "s"},
    "$SYS.REQ.SERVER.PING.CONNZ": {"sort": "s", "auth": "b", "subscriptions": "b", "offset": "i", "limit": "i",
                                    "cid": "u", "acc": "s"},
    "$SYS.REQ.SERVER.PING.ACCOUNTZ": {"account": "s"},
    "$SYS.REQ.ACCOUNT.PING.STATZ": {"accounts": "l", "include_unused": "b"},
    "$SYS.REQ.ACCOUNT.A.JSZ": {"streams": "b", "consumer": "b", "config": "b", "limit": "i"},
    "$SYS.REQ.ACCOUNT.B.SUBSZ": {"test": "s", "offset": "i", "subscriptions": "b"},
    "$SYS.REQ.ACCOUNT.B.CONNZ": {"sort": "s", "cid": "u", "subscriptions": "b"},
    "$SYS.REQ.ACCOUNT.C.STATZ": {"accounts": "l", "include_unused": "b"},
    "$SYS.REQ.ACCOUNT.NOPE.INFO": {"account": "s"},
}
_VALUES = {"b": [True, False, None, 1, "x", {}], "i": [0, 3, -1, 1.5, "7", True, 2**64, [1]],
           "u": [0, 99999, -1, 2.5, "1", 2**64], "s": ["A", "", 5, None, ["a"], "subs", "bogus", "b.one", "b.*", "rtt"],
           "l": [["A", "B"], "A", [1], None, [], ["NOPE"], [None]]}


def _random_bodies(count: int, seed: int = 7) -> list[tuple[str, bytes]]:
    """Request bodies with each kind's options at good and bad values of every JSON type (a seeded draw)."""
    rng = random.Random(seed)
    bodies = []
    for _ in range(count):
        subject = rng.choice(sorted(_BODY_KEYS))
        keys = rng.sample(sorted(_BODY_KEYS[subject]), rng.randint(1, min(3, len(_BODY_KEYS[subject]))))
        bodies.append((subject, json.dumps({k: rng.choice(_VALUES[_BODY_KEYS[subject][k]]) for k in keys}).encode()))
    return bodies


def test_random_request_bodies_are_decoded_as_nats_server_decodes_them(servers):
    async def ask_all(port: int) -> list[Any]:
        nc = await _connect(port, "sys")
        try:
            answers = []
            for subject, body in _random_bodies(60):
                try:
                    answers.append(json.loads((await nc.request(subject, body, timeout=0.5)).data))
                except NatsTimeout:
                    answers.append(None)
            return answers
        finally:
            await nc.close()

    got = {kind: asyncio.run(ask_all(servers[kind].port)) for kind in KINDS}
    for (subject, body), js, ns in zip(_random_bodies(60), got[JSBROKER], got[NATS_SERVER]):
        assert (js is None) is (ns is None), (subject, body)
        if ns is not None:
            assert set(js) == set(ns) and js.get("error") == ns.get("error"), (subject, body, js.get("error"))


_QUERY_KEYS = {
    "/connz": ["subs", "auth", "offset", "limit", "cid", "sort", "acc", "user", "mqtt_client"],
    "/subsz": ["subs", "offset", "limit", "acc", "test"], "/accstatz": ["unused"], "/accountz": ["acc"],
    "/healthz": ["js-enabled", "js-enabled-only", "js-server-only", "js-meta-only", "details", "account", "stream",
                 "consumer"],
    "/routez": ["subs"], "/gatewayz": ["subs", "accs", "gw_name"], "/leafz": ["subs", "acc"],
}
_QUERY_VALUES = ["1", "0", "true", "x", "-1", "detail", "A", "B", "NOPE", "b.one", "b.*", "ORDERS", "ship", "cid",
                 "rtt", "", "99999", "1.5", "%24G"]


def test_random_queries_answer_as_nats_server(servers):
    """A seeded draw of queries over the endpoints' options, good and bad: the same status, the same error text
    (or JSON), the same keys of an answer."""
    rng = random.Random(5)
    for _ in range(80):
        path = rng.choice(sorted(_QUERY_KEYS))
        keys = rng.sample(_QUERY_KEYS[path], rng.randint(1, min(3, len(_QUERY_KEYS[path]))))
        query = f"{path}?" + "&".join(f"{k}={rng.choice(_QUERY_VALUES)}" for k in keys)
        got = _both(servers, query)
        (js_status, js), (ns_status, ns) = got[JSBROKER], got[NATS_SERVER]
        assert js_status == ns_status, query
        if js_status == 200:  # nats-server's /subsz lists its internal subscriptions too
            assert set(js) - {"subscriptions_list"} == set(ns) - {"subscriptions_list"}, query
        else:
            assert js == ns, query
