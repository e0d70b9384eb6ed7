"""Server-wide max_memory: stream max_bytes reservations (10028) and publishes once the memory is used up
(10023), on jsbroker as on nats-server."""

import json

import nats
import pytest

from tests.jetstream.conftest import request
from tests.servers import JSBROKER, NATS_SERVER


async def limits_transcript(handle) -> list:
    nc = await nats.connect(handle.url)
    try:
        out = [await request(nc, "$JS.API.STREAM.CREATE.A", json.dumps({"name": "A", "storage": "memory",
                                                                         "max_bytes": 20000}))]
        out.append(await request(nc, "$JS.API.STREAM.CREATE.B", json.dumps({"name": "B", "storage": "memory"})))
        out.extend([await request(nc, "B", "x" * 1000) for _ in range(12)])
        out.append(await request(nc, "$JS.API.STREAM.CREATE.C", json.dumps({"name": "C", "storage": "memory",
                                                                            "max_bytes": 6000})))
        out.append(await request(nc, "$JS.API.STREAM.CREATE.D", json.dumps({"name": "D", "storage": "memory",
                                                                            "max_bytes": 6000})))
        out.append(await request(nc, "$JS.API.STREAM.UPDATE.C", json.dumps({"name": "C", "storage": "memory",
                                                                            "max_bytes": 20000})))
        out.append(await request(nc, "$JS.API.STREAM.PURGE.B", ""))
        out.append(await request(nc, "B", "x"))
        info = await request(nc, "$JS.API.INFO", "")
        out.append({k: info[k] for k in ("memory", "storage", "streams", "limits")})
        return out
    finally:
        await nc.close()


@pytest.mark.slow
async def test_memory_limit_matches_nats_server(server_factory, tmp_path):
    ours_cfg = tmp_path / "jsbroker.toml"
    ours_cfg.write_text("[jetstream]\nmax_memory = 10000\n")
    theirs_cfg = tmp_path / "nats-server.conf"
    theirs_cfg.write_text("jetstream { max_memory_store: 10000 }\n")
    theirs = await limits_transcript(server_factory(NATS_SERVER, extra_args=["-c", str(theirs_cfg)]))
    ours = await limits_transcript(server_factory(JSBROKER, extra_args=["-c", str(ours_cfg)]))
    assert ours == theirs
    assert ours[0]["error"]["err_code"] == 10028 and ours[13]["error"]["err_code"] == 10023


async def _thousand_and_one_consumers(nc, name: str) -> list:
    """A stream with no max_consumers (and an account without a limit) takes 1000 consumers, not 1001; one that
    sets its own limit past 1000 takes more; either way STREAM.INFO still says what the config said."""
    out = []
    for stream, limit in ((name, None), (f"{name}_own", 1001)):
        config = {"name": stream, "subjects": [f"{stream}.>"], **({"max_consumers": limit} if limit else {})}
        await request(nc, f"$JS.API.STREAM.CREATE.{stream}", json.dumps(config))
        answers = [await request(nc, f"$JS.API.CONSUMER.CREATE.{stream}.c{i}", json.dumps(
            {"stream_name": stream, "config": {"durable_name": f"c{i}", "mem_storage": True}})) for i in range(1001)]
        refused = [(i, a["error"]) for i, a in enumerate(answers) if "error" in a]
        info = await request(nc, f"$JS.API.STREAM.INFO.{stream}", "")
        out.append((refused, info["config"]["max_consumers"], info["state"]["consumer_count"]))
        await request(nc, f"$JS.API.STREAM.DELETE.{stream}", "")
    return out


@pytest.mark.slow
async def test_a_stream_takes_a_thousand_consumers_by_default(on_both):
    ours, theirs = await on_both(_thousand_and_one_consumers, "MC")
    assert ours == theirs
    error = {"code": 400, "err_code": 10026, "description": "maximum consumers limit reached"}
    assert ours == [([(1000, error)], -1, 1000), ([], 1001, 1001)]
