"""JetStream per account, against nats-server: several accounts with JetStream in one config file, each with its
own streams, consumers, API and limits, the server's max_memory / max_storage shared among them (the same
requests, the same answers: isolation, every limit's error, $JS.API.INFO), their data kept by a restart and a
kill -9, a stream shared with another account through JS API and delivery-subject imports, and jsbroker's
own upgrade of a store written before per-account JetStream."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from jsbroker.config import ConfigError, load_file
from tests.broker.test_natsconf import nats_server_accepts
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


def _jsz(handle: ServerHandle) -> dict[str, Any]:
    with urllib.request.urlopen(f"{handle.http_url}/jsz?accounts=true", timeout=5) as reply:
        return json.loads(reply.read())
