"""Crash test: a durable pull consumer is drained with ack_sync while the jsbroker process is SIGKILLed
and restarted several times. Every message must be received (none lost), and a message whose ack_sync
was confirmed must never be delivered again (at-least-once allows redelivery only of unconfirmed ones).
Durable state (delivered, ack floor, pending) must come back after each restart."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from tests.polling import poll_async
from tests.servers import JSBROKER

N = 300
KILLS = 3


@pytest.mark.slow
async def test_ack_sync_survives_sigkill(server_factory, unique) -> None:
    handle = server_factory(JSBROKER)
    s = unique("CR")
    nc = await nats.connect(handle.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    js = nc.jetstream(timeout=2)
    await js.add_stream(StreamConfig(name=s, subjects=[f"{s}.x"]))
    for i in range(N):
        await js.publish(f"{s}.x", str(i).encode())
    cfg = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=2)
    sub = await js.pull_subscribe(f"{s}.x", durable="C", stream=s, config=cfg)

    confirmed: set[int] = set()
    violations: list[int] = []
    deliveries = 0
    kills = 0
    deadline = time.monotonic() + 120
    while len(confirmed) < N and time.monotonic() < deadline:
        if kills < KILLS and len(confirmed) >= (kills + 1) * N // (KILLS + 1):
            handle.kill()
            handle.start()
            kills += 1
        try:
            msgs = await sub.fetch(10, timeout=1)
        except Exception:  # noqa: BLE001 - outages surface as timeouts/no-responders; retry after a lookup
            await _reattach(js, s)
            continue
        for msg in msgs:
            seq = msg.metadata.sequence.stream
            deliveries += 1
            if seq in confirmed:
                violations.append(seq)
            try:
                await msg.ack_sync(timeout=1)
            except Exception:  # noqa: BLE001 - unconfirmed: may legitimately be redelivered
                continue
            confirmed.add(seq)
    info = await js.consumer_info(s, "C")
    await nc.close()
    assert kills == KILLS
    assert violations == []
    assert confirmed == set(range(1, N + 1))
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending) == (N, 0, 0)
    assert deliveries >= N


async def _reattach(js: Any, stream: str) -> None:
    try:
        await js.consumer_info(stream, "C")
    except Exception:  # noqa: BLE001 - the server may still be coming back
        await asyncio.sleep(0.1)  # back off while the server restarts


@pytest.mark.slow
async def test_push_consumer_resumes_after_sigkill(server_factory, unique) -> None:
    """A push subscriber that only reconnects (no API call) gets the rest after a crash and restart."""
    handle = server_factory(JSBROKER)
    s = unique("CP")
    nc = await nats.connect(handle.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    js = nc.jetstream(timeout=2)
    await js.add_stream(StreamConfig(name=s, subjects=[f"{s}.x"]))
    for i in range(20):
        await js.publish(f"{s}.x", str(i).encode())
    seen: set[int] = set()
    # An ack sent just before the kill may have been applied with its confirmation lost: the server then
    # rightly never redelivers it. Such seqs count once the consumer's ack floor covers them (checked below).
    unconfirmed: set[int] = set()
    half, done = asyncio.Event(), asyncio.Event()

    async def cb(msg: Any) -> None:
        seq = msg.metadata.sequence.stream
        try:
            await msg.ack_sync()
        except Exception:  # noqa: BLE001 - caught by the crash: redelivered after ack_wait, or applied
            unconfirmed.add(seq)
            return
        seen.add(seq)
        if len(seen) >= 10:
            half.set()
        if seen | unconfirmed >= set(range(1, 31)):
            done.set()

    await js.subscribe(f"{s}.x", durable="P", stream=s, cb=cb, manual_ack=True,
                       config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=1, ack_wait=1))
    await asyncio.wait_for(half.wait(), 10)
    handle.kill()
    handle.start()
    published: list[int] = []
    for i in range(20, 30):  # publishes retried until the restarted server answers
        for _ in range(100):
            try:
                published.append((await js.publish(f"{s}.x", str(i).encode())).seq)
                break
            except Exception:  # noqa: BLE001 - reconnecting
                await asyncio.sleep(0.1)  # wait for the reconnect
    try:  # a bound, not a sleep: done as soon as all 30 are confirmed
        await asyncio.wait_for(done.wait(), 60)
    except asyncio.TimeoutError:  # one CI run got here (not reproduced in 88 loaded runs): say where it stuck
        state = {"seen": sorted(seen), "unconfirmed": sorted(unconfirmed), "published": published}
        for what, call in (("stream", js.stream_info(s)), ("consumer", js.consumer_info(s, "P"))):
            try:
                state[what] = (await call).as_dict()
            except Exception as exc:  # noqa: BLE001 - the state is what we are after, not this error
                state[what] = repr(exc)
        raise AssertionError(f"not all 30 confirmed: {state}\n{handle.log_tail()}") from None
    async def settled() -> Any:
        i = await js.consumer_info(s, "P")
        return i if (i.ack_floor.stream_seq, i.num_ack_pending) == (30, 0) else None

    info = await poll_async(settled, timeout=30, what="the consumer's ack floor at 30")
    await nc.close()
    assert set(range(1, 31)) - seen <= unconfirmed - seen  # every seq confirmed, or acked with its reply lost
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending) == (30, 0, 0)
