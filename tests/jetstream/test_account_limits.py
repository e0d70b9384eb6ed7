"""Account JetStream limits: jsbroker's [jetstream.account] against nats-server's account `jetstream` block
with the same numbers (streams, consumers per stream, memory and file bytes), same requests, same answers."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nats

from tests.servers import JSBROKER, KINDS, NATS_SERVER, launch

LIMITS = {"max_streams": 3, "max_consumers": 2, "max_mem": 1 << 20, "max_file": 10 << 20}


def _configs(folder: Path) -> dict[str, Path]:
    ours = folder / "jsbroker.toml"
    ours.write_text("[authorization]\nuser = \"a\"\npassword = \"a\"\n\n[jetstream.account]\n"
                    + "".join(f"{k} = {v}\n" for k, v in LIMITS.items()))
    theirs = folder / "nats-server.json"
    theirs.write_text(json.dumps({"accounts": {"A": {"jetstream": LIMITS, "users": [{"user": "a", "password": "a"}]}}}))
    return {JSBROKER: ours, NATS_SERVER: theirs}


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url, user="a", password="a")

    async def api(subject: str, body: Any = None) -> Any:
        reply = await nc.request("$JS.API." + subject, json.dumps(body).encode() if body is not None else b"", timeout=5)
        answer = json.loads(reply.data)
        return answer.get("error", {}).get("err_code", "ok")

    limits = json.loads((await nc.request("$JS.API.INFO", b"", timeout=5)).data)["limits"]
    out: list[Any] = [{k: limits[k] for k in ("max_memory", "max_storage", "max_streams", "max_consumers")}]
    for i in range(2):
        out.append(await api(f"STREAM.CREATE.S{i}", {"name": f"S{i}", "subjects": [f"s{i}.>"]}))
    for stream in ("S0", "S1"):
        out.append([await api(f"CONSUMER.CREATE.{stream}.C{i}", {"stream_name": stream, "config": {"durable_name": f"C{i}"}})
                    for i in range(3)])
    out.append(await api("STREAM.CREATE.M", {"name": "M", "subjects": ["m.>"], "storage": "memory", "max_bytes": 2 << 20}))
    out.append(await api("STREAM.UPDATE.S1", {"name": "S1", "subjects": ["s1.>"], "max_bytes": 20 << 20}))
    out.append(await api("STREAM.CREATE.M", {"name": "M", "subjects": ["m.>"], "storage": "memory"}))
    out.append(await api("STREAM.CREATE.X", {"name": "X", "subjects": ["x.>"]}))  # a fourth stream
    js = nc.jetstream()
    refused = None
    for _ in range(30):  # 100 KB each past the account's 1 MB of memory
        try:
            await js.publish("m.x", bytes(100_000))
        except nats.js.errors.APIError as exc:
            refused = (exc.code, exc.err_code)
            break
    out.append(refused)
    await nc.close()
    return out


def test_account_limits_like_nats_server(tmp_path: Path) -> None:
    configs = _configs(tmp_path)

    def run(kind: str) -> list[Any]:
        with launch(kind, extra_args=["-c", str(configs[kind])]) as handle:
            return asyncio.run(_scenario(handle.url))

    out = {kind: run(kind) for kind in KINDS}
    assert out[JSBROKER] == out[NATS_SERVER] == [
        {"max_memory": 1 << 20, "max_storage": 10 << 20, "max_streams": 3, "max_consumers": 2},
        "ok", "ok", ["ok", "ok", 10026], ["ok", "ok", 10026], 10028, 10047, "ok", 10027, (400, 10002)]


def test_bad_account_limits_fail_at_start(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[jetstream.account]\nmax_streams = \"many\"\n")
    done = subprocess.run([sys.executable, "-m", "jsbroker", "-p", "-1", "-c", str(config)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1 and "jetstream.account.max_streams must be a whole number" in done.stderr, done.stderr


MORE_LIMITS = {"max_ack_pending": 50, "max_bytes_required": True, "memory_max_stream_bytes": 1 << 20,
               "store_max_stream_bytes": 2 << 20}


async def _more_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url, user="a", password="a")

    async def api(subject: str, body: Any = None) -> Any:
        reply = await nc.request("$JS.API." + subject, json.dumps(body).encode() if body is not None else b"", timeout=5)
        answer = json.loads(reply.data)
        if "error" in answer:
            return answer["error"]["err_code"], answer["error"]["description"]
        return answer.get("config", {}).get("max_ack_pending", "ok")

    limits = json.loads((await nc.request("$JS.API.INFO", b"", timeout=5)).data)["limits"]
    out: list[Any] = [limits]
    for cfg in ({"name": "F"}, {"name": "F", "max_bytes": 3 << 20}, {"name": "F", "max_bytes": 2 << 20},
                {"name": "M", "storage": "memory", "max_bytes": 2 << 20},
                {"name": "M", "storage": "memory", "max_bytes": 1 << 20}):
        out.append(await api(f"STREAM.CREATE.{cfg['name']}", {"subjects": [f"{cfg['name']}.>"], **cfg}))
    out.append(await api("STREAM.UPDATE.F", {"name": "F", "subjects": ["F.>"], "max_bytes": 3 << 20}))
    out.append(await api("STREAM.UPDATE.F", {"name": "F", "subjects": ["F.>"]}))
    for name, extra in (("D", {}), ("X", {"max_ack_pending": 60}), ("Y", {"max_ack_pending": 40}),
                        ("N", {"ack_policy": "none"})):
        config = {"durable_name": name, "ack_policy": "explicit", **extra}
        out.append(await api(f"CONSUMER.CREATE.F.{name}", {"stream_name": "F", "config": config}))
    await nc.close()
    return out


def test_more_account_limits_like_nats_server(tmp_path: Path) -> None:
    """max_ack_pending, max_bytes_required and the memory / store max stream bytes of the account; both servers
    read one nats-server config (the account's `jetstream` block: jsbroker serves JetStream in that account)."""
    config = tmp_path / "nats-server.json"
    config.write_text(json.dumps({"accounts": {"A": {"jetstream": MORE_LIMITS, "users": [{"user": "a", "password": "a"}]}}}))

    def run(kind: str) -> list[Any]:
        with launch(kind, extra_args=["-c", str(config)]) as handle:
            return asyncio.run(_more_scenario(handle.url))

    out = {kind: run(kind) for kind in KINDS}
    required = (10113, "account requires a stream config to have max bytes set")
    exceeded = (10122, "stream max bytes exceeds account limit max stream bytes")
    assert out[JSBROKER] == out[NATS_SERVER] == [
        {"max_memory": -1, "max_storage": -1, "max_streams": -1, "max_consumers": -1, "max_ack_pending": 50,
         "memory_max_stream_bytes": 1 << 20, "storage_max_stream_bytes": 2 << 20, "max_bytes_required": True},
        required, exceeded, "ok", exceeded, "ok", exceeded, required,
        50, (10121, "consumer max ack pending exceeds system limit of 50"), 40, "ok"]  # ack none: none shown
