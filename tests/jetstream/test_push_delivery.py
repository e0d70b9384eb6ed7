"""Push consumers, differential: delivery only while the deliver subject has interest, push_bound,
deliver groups, headers_only, idle heartbeats, flow control, replay original, and nats-py's push and
ordered subscriptions."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from jsbroker.jetstream.times import parse_rfc3339
from tests.jetstream.test_consumer_support import (api, entry, info_view, scenario_pair, until_info,
                                                  without_pending)


@pytest.fixture
def urls(nats_server, jsbroker_server) -> dict[str, str]:
    return {"jsbroker": jsbroker_server.url, "nats-server": nats_server.url}


async def same(urls: dict[str, str], unique: Any, fn: Any) -> Any:
    out = await scenario_pair(urls, fn, unique("U"))
    assert out["jsbroker"] == out["nats-server"]
    return out["nats-server"]


async def setup(nc: Any, s: str, n: int, size: int = 1) -> None:
    await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
    for i in range(n):
        await nc.request(f"{s}.x", f"{i}".encode().ljust(size, b"."), timeout=2)


async def create(nc: Any, s: str, name: str, **cfg: Any) -> dict[str, Any]:
    return await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.{name}",
                     {"stream_name": s, "config": {"durable_name": name, **cfg}})


async def collect(nc: Any, subject: str, *, count: int = 0, wait: float, queue: str = "",
                  on_entry: Any = None) -> list[Any]:
    got: list[Any] = []
    done = asyncio.Event()

    async def cb(msg: Any) -> None:
        got.append(entry(msg))
        if on_entry is not None:
            await on_entry(msg)
        if count and len([e for e in got if e[0] == "msg"]) >= count:
            done.set()

    sub = await nc.subscribe(subject, queue=queue, cb=cb)
    try:
        await asyncio.wait_for(done.wait(), wait)
    except asyncio.TimeoutError:
        pass
    await sub.unsubscribe()
    return got


async def test_delivery_waits_for_interest(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 3)
        await create(nc, s, "C", deliver_subject=f"{s}-d", ack_policy="explicit")
        await asyncio.sleep(0.2)  # nothing may be delivered without a subscriber
        before = info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C"))
        sub = await nc.subscribe(f"{s}-d")
        got = [entry(await sub.next_msg(timeout=2)) for _ in range(3)]
        bound = (await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C")).get("push_bound")
        await sub.unsubscribe()
        return [before, got, bound]

    t = await same(urls, unique, fn)
    assert t[0]["num_pending"] == 3 and len(t[1]) == 3 and t[2] is True


async def test_headers_only_and_idle_heartbeat(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 2, size=10)
        await create(nc, s, "C", deliver_subject=f"{s}-d", headers_only=True, idle_heartbeat=250_000_000,
                     filter_subject=f"{s}.x")
        got = await collect(nc, f"{s}-d", wait=0.9)
        msgs = [e for e in got if e[0] == "msg"]
        beats = [e for e in got if e[0] == "status"]
        return [msgs, beats[:2]]

    t = await same(urls, unique, fn)
    assert [e[3] for e in t[0]] == [b"", b""]
    assert t[1][0] == ("status", "100", "Idle Heartbeat", (("Nats-Last-Consumer", "2"), ("Nats-Last-Stream", "2")))


async def test_headers_only_keeps_original_headers(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        await nc.request(f"{s}.x", b"12345", headers={"A": "b"}, timeout=2)
        await create(nc, s, "C", deliver_subject=f"{s}-d", headers_only=True)
        sub = await nc.subscribe(f"{s}-d")
        msg = await sub.next_msg(timeout=2)
        await sub.unsubscribe()
        return [msg.headers, msg.data]

    assert await same(urls, unique, fn) == [{"A": "b", "Nats-Msg-Size": "5"}, b""]


async def test_flow_control_stalls_until_answered(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 40, size=64 * 1024)
        await create(nc, s, "C", deliver_subject=f"{s}-d", flow_control=True, idle_heartbeat=1_000_000_000,
                     ack_policy="none")
        first = await collect(nc, f"{s}-d", wait=0.6)
        summary = [e[0] if e[0] == "msg" else e[2] for e in first]
        fc_at = summary.index("FlowControl Request") if "FlowControl Request" in summary else -1

        async def answer(msg: Any) -> None:
            if msg.reply and msg.reply.startswith("$JS.FC."):
                await nc.publish(msg.reply, b"")

        rest = await collect(nc, f"{s}-d", wait=2, on_entry=answer, count=40)
        return [fc_at, summary.count("msg"), len([e for e in rest if e[0] == "msg"]) > 0]

    t = await same(urls, unique, fn)
    assert t[0] > 0


async def test_ack_policy_flow_control_acks_by_the_flow_control_answer(urls, unique) -> None:
    """ack_policy flow_control (what durable sourcing reads through): no $JS.ACK subscription (an ack gets
    no responders), a flow control request once max_ack_pending is out, and the answer's
    Nats-Last-Stream / Nats-Last-Consumer ack up to them."""
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 5)
        await create(nc, s, "C", deliver_subject=f"{s}-d", ack_policy="flow_control", flow_control=True,
                     idle_heartbeat=1_000_000_000, max_ack_pending=3)
        seen: list[Any] = []
        requests: list[int] = []

        async def answer(msg: Any) -> None:
            if msg.reply and msg.reply.startswith("$JS.FC."):
                last = [e for e in seen if e[0] == "msg"]
                requests.append(len(last))
                hdrs = {"Nats-Last-Consumer": str(len(last)), "Nats-Last-Stream": str(len(last))}
                await nc.publish(msg.reply, b"", headers=hdrs)
            elif msg.reply and len(requests) == 0 and not seen:
                try:
                    await nc.request(msg.reply, b"", timeout=0.5)
                    seen.append(("acked",))
                except Exception as exc:  # no responders: the consumer listens for no acks
                    seen.append(("ack", type(exc).__name__))

        async def on_entry(msg: Any) -> None:
            await answer(msg)
            seen.append(entry(msg))

        # the last two are acked by the flow control request a heartbeat sends (1 s)
        collecting = asyncio.ensure_future(collect(nc, f"{s}-d", wait=4, on_entry=on_entry))
        info = await until_info(nc, s, "C", lambda i: i["ack_floor"]["stream_seq"] == 5, "all acked", timeout=4)
        await collecting
        floor = {k: v for k, v in info["ack_floor"].items() if k != "last_active"}
        return [seen[0], requests[0], floor, info["num_ack_pending"], len([e for e in seen if e[0] == "msg"])]

    t = await same(urls, unique, fn)
    assert t[0] == ("ack", "NoRespondersError")
    assert t[1] == 3 and t[2] == {"consumer_seq": 5, "stream_seq": 5} and t[3] == 0 and t[4] == 5


async def test_deliver_group_splits_messages(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 0)
        await create(nc, s, "C", deliver_subject=f"{s}-d", deliver_group="G", ack_policy="none")
        a = asyncio.create_task(collect(nc, f"{s}-d", queue="G", wait=1.5))
        b = asyncio.create_task(collect(nc, f"{s}-d", queue="G", wait=1.5))
        await asyncio.sleep(0.2)  # both members subscribed before publishing
        for i in range(20):
            await nc.request(f"{s}.x", str(i).encode(), timeout=2)
        got = await a + await b
        return sorted(int(e[3]) for e in got if e[0] == "msg")

    assert await same(urls, unique, fn) == list(range(20))


async def test_replay_original_keeps_spacing(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"]})
        for i in range(3):
            await nc.request(f"{s}.x", str(i).encode(), timeout=2)
            await asyncio.sleep(0.5)  # the spacing replay_policy original must reproduce
        stamps: list[float] = []

        async def mark(msg: Any) -> None:
            stamps.append(time.monotonic())

        stored = [(await api(nc, f"$JS.API.STREAM.MSG.GET.{s}", {"seq": i}))["message"]["time"] for i in (1, 2, 3)]
        want = [(parse_rfc3339(b) - parse_rfc3339(a)) / 1e9 for a, b in zip(stored, stored[1:])]
        if not all(0.45 < w < 3 for w in want):
            return "wall clock jumped"  # replay follows stored timestamps; a clock step makes them useless
        await create(nc, s, "C", deliver_subject=f"{s}-d", replay_policy="original", ack_policy="none")
        await collect(nc, f"{s}-d", count=3, wait=10, on_entry=mark)
        got = [b - a for a, b in zip(stamps, stamps[1:])]
        return [len(stamps), all(abs(g - w) < 0.3 for g, w in zip(got, want))]  # a loaded machine lags

    result = await same(urls, unique, fn)
    if result == "wall clock jumped":
        pytest.skip("the wall clock stepped while publishing")
    assert result == [3, True]


async def test_nats_py_push_durable_and_ordered(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        js = nc.jetstream()
        await setup(nc, s, 30)
        seen: list[int] = []
        done = asyncio.Event()

        async def cb(msg: Any) -> None:
            seen.append(int(msg.data))
            if len(seen) == 30:
                done.set()

        sub = await js.subscribe(f"{s}.x", durable="PD", cb=cb, stream=s)
        await asyncio.wait_for(done.wait(), 5)
        # auto-acks are published after each callback
        ci = await until_info(nc, s, "PD", lambda i: i["num_ack_pending"] == 0, "auto-acks applied", timeout=2)
        await sub.unsubscribe()
        osub = await js.subscribe(f"{s}.x", ordered_consumer=True, stream=s,
                                  config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
        ordered = [int((await osub.next_msg(timeout=2)).data) for _ in range(30)]
        await osub.unsubscribe()
        return [seen, (ci["ack_floor"]["stream_seq"], ci["num_ack_pending"], ci["num_pending"]), ordered]

    t = await same(urls, unique, fn)
    assert t == [list(range(30)), (30, 0, 0), list(range(30))]


async def test_ephemeral_push_goes_after_interest_lost(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 1)
        info = await api(nc, f"$JS.API.CONSUMER.CREATE.{s}", {"stream_name": s, "config": {
            "deliver_subject": f"{s}-d", "inactive_threshold": 300_000_000}})
        name = info["name"]
        got = await collect(nc, f"{s}-d", count=1, wait=2)
        present = [(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.{name}")).get("error")]
        await asyncio.sleep(1.0)  # past inactive_threshold (+ jitter) without interest
        present.append((await api(nc, f"$JS.API.CONSUMER.INFO.{s}.{name}")).get("error", {}).get("err_code"))
        return [len(got), present]

    assert await same(urls, unique, fn) == [1, [None, 10014]]


async def test_push_backlog_with_max_ack_pending(urls, unique) -> None:
    """A backlog long enough for jsbroker's run delivery: max_ack_pending cuts it, acks let the rest
    through in order, and the counters match."""

    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 60)
        await create(nc, s, "C", deliver_subject=f"{s}-d", ack_policy="explicit", max_ack_pending=25)
        first = await collect(nc, f"{s}-d", count=25, wait=2)
        await asyncio.sleep(0.2)  # nothing more may come while 25 are pending
        held = info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C"))
        sub = await nc.subscribe(f"{s}-d")  # takes over delivery; then ack the first 25 in one write
        for e in first:
            await nc.publish(f"$JS.ACK.{s}.C.{e[2][0]}.{e[2][1]}.{e[2][2]}.0.{e[2][3]}", b"")
        rest = [entry(await sub.next_msg(timeout=2)) for _ in range(25)]
        await sub.unsubscribe()
        return [without_pending(first), held, without_pending(rest)]

    t = await same(urls, unique, fn)
    assert len(t[0]) == 25 and t[1]["num_ack_pending"] == 25
    assert [e[3] for e in t[2]][:2] == [b"25", b"26"]
