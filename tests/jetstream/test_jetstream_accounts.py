"""JetStream per account, against nats-server: several accounts with JetStream in one config file, each with its
own streams, consumers, API and limits, the server's max_memory / max_storage shared among them (the same
requests, the same answers: isolation, every limit's error, $JS.API.INFO), their data kept by a restart and a
kill -9, a stream shared with another account through JS API and delivery-subject imports, and jsbroker's
own upgrade of a store written before per-account JetStream."""

from __future__ import annotations

import json
import shutil
import sys
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from jsbroker.config import ConfigError, load_file
from tests.broker.test_natsconf import nats_server_accepts
from tests.polling import poll_async
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, launch

pytestmark = pytest.mark.asyncio

CONFIG = """
jetstream { max_memory_store: 1MB, max_file_store: 10MB }
accounts {
  A: { users: [{user: a, password: a}],
       jetstream: { max_mem: 600K, max_file: 4MB, max_streams: 3, max_consumers: 1, max_ack_pending: 50 } }
  B: { users: [{user: b, password: b}], jetstream: enabled }
  C: { users: [{user: c, password: c}] }
  R: { users: [{user: r, password: r}], jetstream: { max_bytes_required: true, memory_max_stream_bytes: 1000,
                                                     store_max_stream_bytes: 2000 } }
}
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerHandle]]:
    config = tmp_path_factory.mktemp("jsaccounts") / "accounts.conf"
    config.write_text(CONFIG)
    handles = {kind: launch(kind, http=True, extra_args=["-c", str(config)]) for kind in KINDS}
    yield handles
    for handle in handles.values():
        handle.close()


async def _connect(url: str, user: str) -> nats.NATS:
    return await nats.connect(url, user=user, password=user)


async def _api(nc: nats.NATS, subject: str, body: Any = None) -> dict[str, Any]:
    raw = json.dumps(body).encode() if body is not None else b""
    return json.loads((await nc.request("$JS.API." + subject, raw, timeout=5)).data)


def _outcome(answer: dict[str, Any]) -> Any:
    """An answer without its times and ids: the error, or what was made (state, usage, limits)."""
    if "error" in answer:
        return answer["error"]
    out = {k: answer[k] for k in ("did_create", "state", "reserved_memory", "reserved_storage", "memory", "storage",
                                  "streams", "consumers", "limits", "api", "num_pending", "num_ack_pending")
           if k in answer}
    if "state" in out:
        out["state"] = {k: v for k, v in out["state"].items() if not k.endswith("_ts")}
    return out


def _stream(name: str, subject: str, storage: str = "file", max_bytes: int | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {"name": name, "subjects": [subject], "storage": storage}
    if max_bytes is not None:
        cfg["max_bytes"] = max_bytes
    return cfg


async def _isolation_and_limits(url: str) -> list[Any]:
    a, b, c, r = [await _connect(url, u) for u in "abcr"]
    out: list[Any] = [_outcome(await _api(nc, "INFO")) for nc in (a, b, c, r)]
    # one stream name in two accounts: two streams, each seeing only its own account's publishes
    out.append(_outcome(await _api(a, "STREAM.CREATE.S", _stream("S", "orders.>"))))
    out.append(_outcome(await _api(b, "STREAM.CREATE.S", _stream("S", "orders.>"))))
    for nc, n in ((a, 3), (b, 1)):
        for i in range(n):
            out.append(json.loads((await nc.request("orders.x", b"%d" % i, timeout=5)).data))
    out += [_outcome(await _api(nc, "STREAM.INFO.S")) for nc in (a, b, c)]
    out += [(await _api(nc, "STREAM.NAMES")).get("streams") for nc in (a, b)]
    # the server's 1MB of memory, reserved by both accounts; A's own 600K
    out.append(_outcome(await _api(b, "STREAM.CREATE.M", _stream("M", "m", "memory", 500_000))))
    out.append(_outcome(await _api(a, "STREAM.CREATE.M", _stream("M", "m", "memory", 700_000))))  # A's limit
    out.append(_outcome(await _api(a, "STREAM.CREATE.M", _stream("M", "m", "memory", 500_000))))
    out.append(_outcome(await _api(b, "STREAM.CREATE.M2", _stream("M2", "m2", "memory", 100_000))))  # the server's
    # the server's 10MB of file storage: B reserves 8MB, so A's 3MB does not fit although A's own 4MB would
    out.append(_outcome(await _api(b, "STREAM.CREATE.F", _stream("F", "f", max_bytes=7_000_000))))
    out.append(_outcome(await _api(b, "STREAM.CREATE.G", _stream("G", "g", max_bytes=1_000_000))))
    out.append(_outcome(await _api(a, "STREAM.CREATE.F", _stream("F", "f", max_bytes=3_000_000))))
    out.append(_outcome(await _api(a, "STREAM.CREATE.F", _stream("F", "f", max_bytes=5_000_000))))  # A's 4MB
    out.append(_outcome(await _api(a, "STREAM.CREATE.F", _stream("F", "f"))))
    out.append(_outcome(await _api(a, "STREAM.CREATE.X", _stream("X", "x"))))  # a fourth stream
    out.append(_outcome(await _api(b, "STREAM.UPDATE.G", _stream("G", "g", max_bytes=3_000_000))))
    # consumers: A's one per stream and its max_ack_pending
    for name, extra in (("C1", {"max_ack_pending": 100}), ("C1", {}), ("C2", {})):
        out.append(_outcome(await _api(a, f"CONSUMER.CREATE.S.{name}",
                                       {"stream_name": "S", "config": {"durable_name": name, **extra}})))
    out.append(_outcome(await _api(b, "CONSUMER.CREATE.S.C2", {"stream_name": "S", "config": {"durable_name": "C2"}})))
    # R: max_bytes required, and each storage's largest stream
    out.append(_outcome(await _api(r, "STREAM.CREATE.R", _stream("R", "r"))))
    out.append(_outcome(await _api(r, "STREAM.CREATE.R", _stream("R", "r", "memory", 1001))))
    out.append(_outcome(await _api(r, "STREAM.CREATE.R", _stream("R", "r", "file", 2001))))
    out.append(_outcome(await _api(r, "STREAM.CREATE.R", _stream("R", "r", "file", 2000))))
    out += [_outcome(await _api(nc, "INFO")) for nc in (a, b, r)]
    for nc in (a, b, c, r):
        await nc.close()
    return out


async def test_each_account_has_its_own_jetstream_and_limits_as_in_nats_server(servers: dict[str, ServerHandle]):
    got = {kind: await _isolation_and_limits(servers[kind].url) for kind in KINDS}
    assert got[JSBROKER] == got[NATS_SERVER]
    errors = [x["err_code"] for x in got[NATS_SERVER] if isinstance(x, dict) and "err_code" in x]
    assert errors == [10039, 10039, 10028, 10028, 10047, 10047, 10027, 10121, 10026, 10113, 10122, 10122]
    jsz = {kind: _jsz(servers[kind]) for kind in KINDS}
    assert jsz[JSBROKER] == jsz[NATS_SERVER]
    assert [a["name"] for a in jsz[NATS_SERVER]["account_details"]] == ["A", "B", "R"]
    stats = {kind: _get(servers[kind], "/varz")["jetstream"]["stats"] for kind in KINDS}
    assert stats[JSBROKER] == stats[NATS_SERVER]
    assert stats[JSBROKER]["accounts"] == 3 and stats[JSBROKER]["reserved_storage"] == 10_002_000


def _get(handle: ServerHandle, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{handle.http_url}{path}", timeout=5) as reply:
        return json.loads(reply.read())  # type: ignore[no-any-return]


def _jsz(handle: ServerHandle) -> dict[str, Any]:
    """/jsz with each account's details and streams, without what differs between two servers by nature (ids,
    times, the store directory) or is nats-server's only (its config and limits)."""
    body = _get(handle, "/jsz?accounts=true&streams=true")
    for key in ("server_id", "now", "config", "limits"):
        body.pop(key)
    for account in body["account_details"]:
        for stream in account.get("stream_detail", ()):
            stream.pop("created"), stream.pop("cluster")
            stream["state"] = {k: v for k, v in stream["state"].items() if not k.endswith("_ts")}
        account.get("stream_detail", []).sort(key=lambda stream: stream["name"])  # nats-server's in map order
    return body


# -- restart and kill -9: every account's streams, consumers and positions ---------------------------------

TWO = """
jetstream: enabled
accounts {
  A: { users: [{user: a, password: a}], jetstream: enabled }
  B: { users: [{user: b, password: b}], jetstream: { max_streams: 2 } }
}
"""


async def _fill(url: str) -> None:
    """One stream name in both accounts, different messages, a durable consumer with some acknowledged."""
    for user, n in (("a", 5), ("b", 3)):
        nc = await _connect(url, user)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(n):
            await js.publish(f"s.{user}", f"{user}{i}".encode())
        sub = await js.pull_subscribe("s.>", durable="D", stream="S")
        for msg in await sub.fetch(2, timeout=5):
            await msg.ack_sync()
        await nc.close()


async def _positions(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for user in "ab":
        nc = await _connect(url, user)
        info = await _api(nc, "STREAM.INFO.S")
        consumer = await _api(nc, "CONSUMER.INFO.S.D")
        sub = await nc.jetstream().pull_subscribe("s.>", durable="D", stream="S")
        next_msg = (await sub.fetch(1, timeout=5))[0]
        out[user] = {"messages": info["state"]["messages"], "last_seq": info["state"]["last_seq"],
                     "ack_floor": consumer["ack_floor"]["stream_seq"], "pending": consumer["num_pending"],
                     "next": next_msg.data.decode(), "limits": (await _api(nc, "INFO"))["limits"]["max_streams"]}
        await nc.close()
    return out


@pytest.mark.parametrize("stop", ["restart", "kill"])
async def test_a_restart_and_a_kill_keep_every_accounts_streams_and_positions(tmp_path: Path, stop: str):
    config = tmp_path / "two.conf"
    config.write_text(TWO)
    got = {}
    for kind in KINDS:
        with launch(kind, store_dir=tmp_path / kind, extra_args=["-c", str(config)]) as handle:
            await _fill(handle.url)
            if stop == "kill":
                handle.kill()
                handle.start()
            else:
                handle.restart()
            got[kind] = await _positions(handle.url)
            assert sorted(p.name for p in (tmp_path / kind / "jetstream").iterdir() if p.is_dir()) == ["A", "B"]
            assert (tmp_path / kind / "jetstream" / "B" / "streams" / "S").is_dir()
    assert got[JSBROKER]["a"] == {"messages": 5, "last_seq": 5, "ack_floor": 2, "pending": 3, "next": "a2",
                                  "limits": -1}
    assert got[JSBROKER]["b"] == {"messages": 3, "last_seq": 3, "ack_floor": 2, "pending": 1, "next": "b2",
                                  "limits": 2}
    if stop == "kill":  # nats-server writes a consumer's state to disk later than jsbroker: a kill can lose it
        for kind, user in ((k, u) for k in KINDS for u in "ab"):
            for key in ("ack_floor", "pending", "next"):
                got[kind][user].pop(key)
    assert got[JSBROKER] == got[NATS_SERVER]


# -- a store written by jsbroker before per-account JetStream ---------------------------------------------

def _as_written_before(store: Path, account: str) -> None:
    """The layout of jsbroker before per-account JetStream: the one account's `streams/` right under
    `jetstream/` (the files in it are unchanged), and a restore an interruption left behind."""
    jetstream = store / "jetstream"
    (jetstream / account / "streams").rename(jetstream / "streams")
    shutil.rmtree(jetstream / account)
    (jetstream / "restores" / "T.x").mkdir(parents=True)


async def test_a_store_written_before_per_account_jetstream_moves_under_its_account(tmp_path: Path):
    config = tmp_path / "one.conf"
    config.write_text("jetstream: enabled\naccounts { A: { users: [{user: a, password: a}], jetstream: enabled } }\n")
    store = tmp_path / "store"
    with launch(JSBROKER, store_dir=store, extra_args=["-c", str(config)]) as handle:
        nc = await _connect(handle.url, "a")
        await nc.jetstream().add_stream(name="S", subjects=["s.>"])
        for i in range(3):
            await nc.jetstream().publish("s.x", b"%d" % i)
        await nc.close()
        handle.stop()
        _as_written_before(store, "A")
        handle.start()
        nc = await _connect(handle.url, "a")
        assert (await _api(nc, "STREAM.INFO.S"))["state"]["messages"] == 3
        await nc.close()
    assert sorted(p.name for p in (store / "jetstream").iterdir()) == ["A"]
    assert (store / "jetstream" / "A" / "streams" / "S" / "meta.json").is_file()


def test_a_store_written_before_with_several_jetstream_accounts_is_refused_with_what_to_do(tmp_path: Path):
    config = tmp_path / "two.conf"
    config.write_text(TWO)
    store = tmp_path / "store"
    (store / "jetstream" / "streams" / "S").mkdir(parents=True)
    (store / "jetstream" / "streams" / "S" / "meta.json").write_text("{}")
    done = subprocess.run([sys.executable, "-m", "jsbroker", "-p", "-1", "-js", "-sd", str(store), "-c", str(config)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert (f"{store}/jetstream/streams holds one account's streams (written by jsbroker before per-account "
            f"JetStream) and accounts A, B have JetStream: move it to {store}/jetstream/<account>/streams") in done.stderr
    assert (store / "jetstream" / "streams" / "S" / "meta.json").is_file()  # nothing moved, nothing lost
    (store / "jetstream" / "streams" / "S" / "meta.json").unlink()
    (store / "jetstream" / "streams" / "S").rmdir()  # no stream in it: nothing to move, the start goes on
    with launch(JSBROKER, store_dir=store, extra_args=["-c", str(config)]):
        assert sorted(p.name for p in (store / "jetstream").iterdir()) == ["A", "B"]


# -- a stream shared with another account: JS API and delivery subjects imported ---------------------------

SHARED = """
jetstream: enabled
accounts {
  A: {
    users: [{user: a, password: a}]
    jetstream: enabled
    exports: [
      {service: "$JS.API.CONSUMER.INFO.ORDERS.*"}
      {service: "$JS.API.CONSUMER.MSG.NEXT.ORDERS.PULL"}
      {service: "$JS.ACK.ORDERS.>"}
      {stream: "deliver.b.>", accounts: [B]}
    ]
  }
  B: {
    users: [{user: b, password: b}]
    imports: [
      {service: {account: A, subject: "$JS.API.CONSUMER.INFO.ORDERS.*"}, to: "a.info.*"}
      {service: {account: A, subject: "$JS.API.CONSUMER.MSG.NEXT.ORDERS.PULL"}, to: "a.next"}
      {service: {account: A, subject: "$JS.ACK.ORDERS.>"}}
      {stream: {account: A, subject: "deliver.b.>"}}
    ]
  }
}
"""


async def _shared(url: str) -> dict[str, Any]:
    a, b = await _connect(url, "a"), await _connect(url, "b")
    js = a.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    for i in range(4):
        await js.publish("orders.new", b"o%d" % i)
    out: dict[str, Any] = {}
    pushed = await b.subscribe("deliver.b.orders")  # literal: nats-server's push interest (a wildcard is none)
    await b.flush()
    await _api(a, "CONSUMER.CREATE.ORDERS.PUSH", {"stream_name": "ORDERS", "config": {
        "durable_name": "PUSH", "ack_policy": "explicit", "deliver_subject": "deliver.b.orders"}})
    got = []
    for _ in range(4):
        msg = await pushed.next_msg(timeout=5)
        got.append((msg.subject, msg.data.decode()))
        if msg.data != b"o3":
            await msg.ack()  # through B's import of $JS.ACK.ORDERS.>
    out["pushed"] = got
    await _api(a, "CONSUMER.CREATE.ORDERS.PULL", {"stream_name": "ORDERS", "config": {
        "durable_name": "PULL", "ack_policy": "explicit"}})
    inbox = b.new_inbox()
    pulled = await b.subscribe(inbox)
    msgs = []
    for _ in range(2):  # the import's response is a singleton: the first message of each batch
        await b.publish("a.next", json.dumps({"batch": 2, "expires": 2_000_000_000}).encode(), reply=inbox)
        msgs.append(await pulled.next_msg(timeout=5))
    out["pulled"] = [(m.subject, m.data.decode(), m.reply.split(".")[:4]) for m in msgs]
    for m in msgs[:1]:
        await b.publish(m.reply, b"+ACK")  # through B's import of $JS.ACK.ORDERS.>

    async def info(name: str) -> dict[str, Any]:
        answer = json.loads((await b.request(f"a.info.{name}", b"", timeout=5)).data)
        return {"num_ack_pending": answer.get("num_ack_pending"), "error": answer.get("error"),
                "ack_floor": answer.get("ack_floor", {}).get("stream_seq")}

    async def acks_applied() -> bool:  # nats-server applies acks after the request that follows them
        return (await info("PUSH"))["ack_floor"] == 3 and (await info("PULL"))["ack_floor"] == 1

    await poll_async(acks_applied, timeout=5, what="the acks B sent through its import")
    out["info from B"] = {name: await info(name) for name in ("PUSH", "PULL", "NONE")}
    out["B's own JetStream"] = (await _api(b, "INFO")).get("error")
    await a.close()
    await b.close()
    return out


async def test_a_stream_shared_through_imports_is_consumed_from_another_account(tmp_path: Path):
    config = tmp_path / "shared.conf"
    config.write_text(SHARED)
    got = {}
    for kind in KINDS:
        with launch(kind, extra_args=["-c", str(config)]) as handle:
            got[kind] = await _shared(handle.url)
    assert got[JSBROKER] == got[NATS_SERVER]
    assert got[NATS_SERVER]["pushed"] == [("orders.new", f"o{i}") for i in range(4)]
    assert got[NATS_SERVER]["info from B"]["PUSH"] == {"num_ack_pending": 1, "error": None, "ack_floor": 3}
    assert got[NATS_SERVER]["pulled"] == [("orders.new", f"o{i}", ["$JS", "ACK", "ORDERS", "PULL"]) for i in (0, 2)]


IMPORTED = """
jetstream: enabled
accounts {
  A: { users: [{user: a, password: a}], exports: [{stream: "ev.>"}] }
  B: { users: [{user: b, password: b}], jetstream: enabled,
       imports: [{stream: {account: A, subject: "ev.>"}, prefix: fromA}, {stream: {account: A, subject: "ev.one"}}] }
}
"""


async def test_a_stream_stores_what_another_account_exports_to_it(tmp_path: Path):
    """A stream on an imported subject stores the exporter's messages under the local subject, as nats-server's."""
    config = tmp_path / "imported.conf"
    config.write_text(IMPORTED)
    got = {}
    for kind in KINDS:
        with launch(kind, extra_args=["-c", str(config)]) as handle:
            a, b = await _connect(handle.url, "a"), await _connect(handle.url, "b")
            js = b.jetstream()
            await js.add_stream(name="IMP", subjects=["fromA.ev.>", "ev.one"])
            for subject in ("ev.x", "ev.one", "other"):
                await a.publish(subject, subject.encode())
            await a.flush()
            await poll_async(lambda: js.stream_info("IMP"), timeout=5, what="the stream")

            async def stored() -> list[tuple[str, bytes]] | None:
                if (await js.stream_info("IMP")).state.messages < 3:
                    return None
                return [((m := await js.get_msg("IMP", seq)).subject, m.data) for seq in (1, 2, 3)]

            got[kind] = await poll_async(stored, timeout=5, what="three imported messages")
            await a.close()
            await b.close()
    # one publish reaching the stream through two imports is stored twice, in an order neither server promises
    assert sorted(got[JSBROKER]) == sorted(got[NATS_SERVER])
    assert sorted(got[NATS_SERVER]) == [("ev.one", b"ev.one"), ("fromA.ev.one", b"ev.one"), ("fromA.ev.x", b"ev.x")]


# -- bad input: limits nats-server reads in its own way, unknown keys ---------------------------------------

@pytest.mark.parametrize("limits", [
    "max_mem: -5, max_file: -7, max_streams: -3, max_consumers: -2, max_ack_pending: -7, memory_max_stream_bytes: -9",
    "max_mem: 0, max_file: 0, max_streams: 0, max_consumers: 0, max_ack_pending: 0",
])
async def test_negative_and_zero_limits_are_read_as_nats_server_reads_them(tmp_path: Path, limits: str):
    config = tmp_path / "limits.conf"
    config.write_text("jetstream: enabled\naccounts { A: { users: [{user: a, password: a}], jetstream: { %s } } }\n"
                      % limits)
    got = {}
    for kind in KINDS:
        with launch(kind, extra_args=["-c", str(config)]) as handle:
            nc = await _connect(handle.url, "a")
            got[kind] = [_outcome(await _api(nc, "INFO")),
                         _outcome(await _api(nc, "STREAM.CREATE.M", _stream("M", "m", "memory"))),
                         _outcome(await _api(nc, "STREAM.CREATE.F", _stream("F", "f", "file", 1000))),
                         _outcome(await _api(nc, "CONSUMER.CREATE.F.C", {"stream_name": "F", "config": {
                             "durable_name": "C", "max_ack_pending": 10}}))]
            await nc.close()
    assert got[JSBROKER] == got[NATS_SERVER]


def test_an_unknown_account_limit_is_refused_with_its_file_and_line(tmp_path: Path):
    path = tmp_path / "bad.conf"
    path.write_text("jetstream: enabled\naccounts {\n  A: { jetstream: { max_mem: 1MB, bogus: 3 } }\n}\n")
    assert not nats_server_accepts(path)[0]
    with pytest.raises(ConfigError, match=f"{path}:3:.*bogus"):
        load_file(path, env={})


def test_global_limits_with_accounts_are_refused(tmp_path: Path):
    path = tmp_path / "js.conf"
    path.write_text("jetstream { account { max_streams: 2 } }\naccounts { A: { jetstream: enabled } }\n")
    with pytest.raises(ConfigError, match="jetstream.account gives the global account's JetStream limits: with "
                                          "accounts, give each account's in its accounts"):
        load_file(path, env={})
