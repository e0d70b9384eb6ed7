"""The first_seq of a stream that never stored anything, as nats-server 2.15.1 reports it (the fuzzer's
`unused_stream_first_seq`): 0 after the create, 1 once a purge of everything (no filter or `>`, keep 0)
or a `first_seq: 1` config set it, on file and memory streams; filtered, keep and seq-1 purges leave it 0.
A file stream keeps it across SIGTERM and kill -9 restarts (nats-server after SIGTERM: jsbroker keeps what
it confirmed through a crash, while nats-server may lose that purge on kill -9)."""

from __future__ import annotations

import json
from typing import Any

import nats
import pytest

from tests.jetstream.conftest import request

C = "$JS.API.STREAM.CREATE.{S}"
I = "$JS.API.STREAM.INFO.{S}"  # noqa: E741
P = "$JS.API.STREAM.PURGE.{S}"
D = "$JS.API.STREAM.DELETE.{S}"
CONSUMER = {"stream_name": "{S}", "config": {"durable_name": "C", "ack_policy": "explicit", "deliver_policy": "all"}}


def cfg(storage: str, **kw: Any) -> dict[str, Any]:
    return {"name": "{S}", "subjects": ["{S}.>"], "storage": storage, **kw}


def unused(storage: str, purge: Any, **kw: Any) -> list[tuple[Any, ...]]:
    """Create, purge, then what depends on first_seq: INFO, a consumer's start, the first publish."""
    return [(C, cfg(storage, **kw)), (I, ""), *([(P, purge), (I, "")] if purge is not None else []),
            ("$JS.API.CONSUMER.CREATE.{S}.C", CONSUMER), ("{S}.a", "x"), (I, ""),
            ("$JS.API.CONSUMER.INFO.{S}.C", ""), (D, "")]


PURGES = {"all": "", "keep_0": {"keep": 0}, "filter_all": {"filter": ">"}, "filter": {"filter": "{S}.a"},
          "keep_3": {"keep": 3}, "seq_1": {"seq": 1}, "seq_5": {"seq": 5}, "none": None}


@pytest.mark.parametrize("storage", ["file", "memory"])
@pytest.mark.parametrize("purge", sorted(PURGES))
async def test_purge_of_a_never_used_stream(differential, storage, purge):
    ours, theirs = await differential(unused(storage, PURGES[purge]))
    assert ours == theirs
    first = {"all": 1, "keep_0": 1, "filter_all": 1, "seq_5": 5}.get(purge, 0)
    if PURGES[purge] is not None:
        assert ours[3]["state"]["first_seq"] == first


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_config_first_seq_1_is_reported_at_once(differential, storage):
    ours, theirs = await differential(unused(storage, None, first_seq=1))
    assert ours == theirs
    assert ours[1]["state"]["first_seq"] == 1


async def _restarted(handle, how: str) -> list[Any]:
    """File streams: never used, purged once unused, created with first_seq 1; INFO after the restart."""
    nc = await nats.connect(handle.url)
    try:
        for name, extra in (("NEVER", {}), ("PURGED", {}), ("FIRST1", {"first_seq": 1})):
            body = json.dumps({"name": name, "subjects": [f"{name}.>"], "storage": "file", **extra})
            await request(nc, f"$JS.API.STREAM.CREATE.{name}", body)
        assert (await request(nc, "$JS.API.STREAM.PURGE.PURGED"))["success"]
    finally:
        await nc.close()
    handle.kill() if how == "kill" else handle.stop()
    handle.start()
    nc = await nats.connect(handle.url)
    try:
        return [(await request(nc, f"$JS.API.STREAM.INFO.{name}"))["state"] for name in ("NEVER", "PURGED", "FIRST1")]
    finally:
        await nc.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["term", "kill"])
async def test_first_seq_of_unused_file_streams_survives_a_restart(server_factory, how):
    theirs = await _restarted(server_factory("nats-server"), "term")
    ours = await _restarted(server_factory("jsbroker"), how)
    assert ours == theirs
    assert [state["first_seq"] for state in ours] == [0, 1, 1]
