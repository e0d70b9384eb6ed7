"""Deliver policies, filters and the numbers ConsumerInfo reports, differential: for each starting
position the first deliveries (with ack tokens) and delivered / ack_floor / num_pending must match."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jsbroker.subjects import subject_matches
from tests.jetstream.test_consumer_support import (api, info_view, pull, scenario_pair, until_info, until_waiting,
                                                   without_pending)


@pytest.fixture
def urls(nats_server, jsbroker_server) -> dict[str, str]:
    return {"jsbroker": jsbroker_server.url, "nats-server": nats_server.url}


SUBJECTS = ["a", "b", "a", "c.x", "b", "a", "c.y", "b"]

POLICIES = {
    "all": {},
    "last": {"deliver_policy": "last"},
    "last_filtered": {"deliver_policy": "last", "filter_subject": "{S}.b"},
    "new": {"deliver_policy": "new"},
    "by_start_sequence": {"deliver_policy": "by_start_sequence", "opt_start_seq": 3},
    "by_start_sequence_past_end": {"deliver_policy": "by_start_sequence", "opt_start_seq": 20},
    "last_per_subject": {"deliver_policy": "last_per_subject", "filter_subject": "{S}.>"},
    "last_per_subject_multi": {"deliver_policy": "last_per_subject", "filter_subjects": ["{S}.a", "{S}.c.*"]},
    "filter_wildcard": {"filter_subject": "{S}.c.*"},
    "filter_multi": {"filter_subjects": ["{S}.b", "{S}.c.y"]},
    "filter_none_match": {"filter_subject": "{S}.zzz"},
    "ack_all_start_seq": {"ack_policy": "all", "deliver_policy": "by_start_sequence", "opt_start_seq": 5},
}


async def pending_reaches(nc: Any, s: str, name: str, want: int) -> None:
    for _ in range(100):
        if (await api(nc, f"$JS.API.CONSUMER.INFO.{s}.{name}"))["num_pending"] >= want:
            return
        await asyncio.sleep(0.02)  # poll ConsumerInfo: there is no event for "the consumer saw it"


def fill(cfg: dict[str, Any], s: str) -> dict[str, Any]:
    out = {}
    for k, v in cfg.items():
        if isinstance(v, str):
            v = v.replace("{S}", s)
        elif isinstance(v, list):
            v = [x.replace("{S}", s) for x in v]
        out[k] = v
    return out


@pytest.mark.parametrize("policy", sorted(POLICIES))
async def test_start_positions(urls, unique, policy) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        for i, subj in enumerate(SUBJECTS):
            await nc.request(f"{s}.{subj}", str(i).encode(), timeout=2)
        cfg = {"durable_name": "C", "ack_policy": "explicit", **fill(POLICIES[policy], s)}
        created = await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.C", {"stream_name": s, "config": cfg})
        t = [info_view(created)]
        t.append(await pull(nc, s, "C", {"batch": 3, "no_wait": True}, wait=1))
        before = await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C")
        t.append(info_view(before))
        await nc.request(f"{s}.b", b"late", timeout=2)
        # nats-server counts a new message on its consumer's goroutine, after the pub ack: a no_wait pull
        # sent at once can miss it (404). Wait until the consumer has seen it when its filter takes it.
        filters = cfg.get("filter_subjects") or [cfg.get("filter_subject") or ">"]
        if any(subject_matches(f, f"{s}.b") for f in filters):
            await pending_reaches(nc, s, "C", before["num_pending"] + 1)
        t.append(without_pending(await pull(nc, s, "C", {"batch": 20, "no_wait": True}, wait=1)))
        t.append(info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C")))
        return t

    out = await scenario_pair(urls, fn, unique("Q"))
    assert out["jsbroker"] == out["nats-server"]


async def test_pause_holds_delivery(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        from jsbroker.jetstream.times import now_ns, rfc3339

        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        await nc.request(f"{s}.a", b"x", timeout=2)
        await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.C", {"stream_name": s, "config": {"durable_name": "C"}})
        r = await api(nc, f"$JS.API.CONSUMER.PAUSE.{s}.C", {"pause_until": rfc3339(now_ns() + 600_000_000)})
        during = await pull(nc, s, "C", {"batch": 1, "expires": 300_000_000}, wait=1)
        info = await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C")
        after = await pull(nc, s, "C", {"batch": 1, "expires": 1_500_000_000}, wait=2, count=1)
        return [r["paused"], during, info.get("paused"), after]

    out = await scenario_pair(urls, fn, unique("Q"))
    assert out["jsbroker"] == out["nats-server"]
    assert out["jsbroker"][1][0][1] == "408" and out["jsbroker"][3][0][0] == "msg"


async def test_ephemeral_pull_removed_when_inactive(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.E",
                  {"stream_name": s, "config": {"name": "E", "inactive_threshold": 400_000_000}})
        await pull(nc, s, "E", {"batch": 1, "expires": 600_000_000}, wait=1)  # keeps it alive meanwhile
        alive = "error" not in await api(nc, f"$JS.API.CONSUMER.INFO.{s}.E")
        await asyncio.sleep(1.8)  # threshold plus nats-server's up-to-1s jitter
        gone = (await api(nc, f"$JS.API.CONSUMER.INFO.{s}.E")).get("error", {}).get("err_code")
        return [alive, gone]

    out = await scenario_pair(urls, fn, unique("Q"))
    assert out["jsbroker"] == out["nats-server"] == [True, 10014]


async def test_purge_moves_consumers(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        for i, subj in enumerate(SUBJECTS):
            await nc.request(f"{s}.{subj}", str(i).encode(), timeout=2)
        for name, cfg in (("E", {"ack_policy": "explicit"}), ("N", {"ack_policy": "none"}),
                          ("F", {"ack_policy": "explicit", "filter_subject": f"{s}.b"})):
            await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.{name}",
                      {"stream_name": s, "config": {"durable_name": name, **cfg}})
            await pull(nc, s, name, {"batch": 2, "no_wait": True}, wait=1)
        t = []
        for body in ({"filter": f"{s}.a"}, {"seq": 5}, {}):
            await api(nc, f"$JS.API.STREAM.PURGE.{s}", body)
            t.append([info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.{n}")) for n in "ENF"])
        await nc.request(f"{s}.b", b"after", timeout=2)
        for n in "ENF":  # nats-server tells its consumers of a new message asynchronously (a CI run saw E miss it)
            await until_info(nc, s, n, lambda info: info["num_pending"] == 1, "the new message pending")
        t.append([await pull(nc, s, n, {"batch": 5, "no_wait": True}, wait=1) for n in "ENF"])
        return t

    out = await scenario_pair(urls, fn, unique("Q"))
    assert out["jsbroker"] == out["nats-server"]


async def test_stream_delete_releases_pulls(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.C", {"stream_name": s, "config": {"durable_name": "C"}})
        waiting = asyncio.create_task(pull(nc, s, "C", {"batch": 1, "expires": 1_500_000_000}, wait=2))
        await until_waiting(nc, s, "C", 1)
        await api(nc, f"$JS.API.STREAM.DELETE.{s}")
        return await waiting

    out = await scenario_pair(urls, fn, unique("Q"))
    assert out["jsbroker"] == out["nats-server"]
