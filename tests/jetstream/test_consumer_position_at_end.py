"""Where a consumer stands after a delivery pass that found nothing, as nats-server 2.15.1 (the fuzzer's
`stream_seq_floor_differs`): its stores answer the search with the stream's last sequence, so a pass that
finds no message for the consumer's filters moves its start past the end, over other subjects' messages.
CONSUMER.INFO shows the stored position (a file consumer store always has one; a memory one once a
delivered position was stored), which only a delivery, an ack or a write of the whole state (a purge,
even one that removes nothing) changes; a restart forgets the move. A purge does not run a pass.

A pass runs for a pull request that finds something pending, for an active push consumer when it is
created, at a restart, when a message for it arrives and when its interest comes back; messages on other
subjects do not wake a consumer."""

from __future__ import annotations

from typing import Any

import nats
import pytest
from nats.js.api import ConsumerConfig

from tests.differential import normalise
from tests.polling import poll_async

NEVER = 3600.0  # ack wait: nothing is redelivered during a test


def position(info: Any) -> tuple[int, int, int, int, int]:
    return (info.delivered.consumer_seq, info.delivered.stream_seq, info.ack_floor.consumer_seq,
            info.ack_floor.stream_seq, info.num_pending)


async def _pull(nc: Any, name: str, storage: str) -> list[Any]:
    """A filtered pull consumer: a fetch delivers its message and meets the end; the purge that removes
    nothing then stores the moved start; messages on other subjects after it are not pending."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], storage=storage)
    await js.add_consumer(name, ConsumerConfig(durable_name="C", filter_subject=f"{name}.c", ack_wait=NEVER))
    for subject in ("c", "a", "a"):
        await js.publish(f"{name}.{subject}", b"x")
    sub = await js.pull_subscribe_bind("C", name)
    out: list[Any] = []
    try:
        msgs = await sub.fetch(5, timeout=1)
        out.append([m.metadata.sequence.stream for m in msgs])
        out.append(position(await js.consumer_info(name, "C")))  # stored: what was delivered
        await js.purge_stream(name, keep=10)
        out.append(position(await js.consumer_info(name, "C")))  # the pass's move, now stored
        await msgs[0].ack_sync()
        await js.publish(f"{name}.a", b"x")
        out.append(position(await js.consumer_info(name, "C")))
        await js.purge_stream(name, keep=10)  # no pass ran since the last message: it stays
        out.append(position(await js.consumer_info(name, "C")))
        await js.publish(f"{name}.c", b"x")
        out.append([m.metadata.sequence.stream for m in await sub.fetch(5, timeout=1)])
        out.append(position(await js.consumer_info(name, "C")))
    finally:
        await js.delete_stream(name)
    return out


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_a_pull_pass_that_meets_the_end_moves_the_start(on_both, storage):
    ours, theirs = await on_both(lambda nc, name: _pull(nc, name, storage), "P")
    assert ours == theirs
    assert ours[:3] == [[1], (1, 1, 0, 0, 0), (1, 3, 0, 0, 0)]


async def _push(nc: Any, name: str, storage: str) -> list[Any]:
    """A filtered push consumer created on a stream holding only other subjects: the pass at its creation
    moves it past them; INFO shows that at once only without a stored position (a memory store with the
    start at 1), and after a purge on both."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], storage=storage)
    await js.publish(f"{name}.a", b"x")
    got: list[int] = []

    async def received(msg: Any) -> None:
        got.append(msg.metadata.sequence.stream)

    sub = await nc.subscribe(f"deliver.{name}", cb=received)
    out: list[Any] = []
    try:
        for durable, policy in (("ALL", "all"), ("NEW", "new")):
            await js.add_consumer(name, ConsumerConfig(durable_name=durable, deliver_subject=f"deliver.{name}",
                                                       filter_subject=f"{name}.c", deliver_policy=policy,
                                                       ack_wait=NEVER))
        await js.publish(f"{name}.a", b"x")

        async def positions() -> list[Any]:
            return [position(await js.consumer_info(name, c)) for c in ("ALL", "NEW")]

        out.append(await positions())
        await js.purge_stream(name, keep=10)  # a purge that removes nothing still stores
        out.append(await positions())
        await js.publish(f"{name}.c", b"x")
        await poll_async(lambda: len(got) == 2, timeout=2, what="two deliveries")
        out.append(sorted(got))
        out.append(await positions())
    finally:
        await sub.unsubscribe()
        await js.delete_stream(name)
    return out


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_a_push_pass_that_meets_the_end_moves_the_start(on_both, storage):
    ours, theirs = await on_both(lambda nc, name: _push(nc, name, storage), "Q")
    assert ours == theirs
    assert ours[1] == [(0, 1, 0, 1, 0), (0, 1, 0, 1, 0)]  # both moved past message 1 at creation


async def _restarted(handle, how: str) -> list[Any]:
    """A filtered push consumer, messages on another subject, a restart: the pass at the restart moves it
    past them, and the next purge (removing nothing) stores that."""
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    await js.add_stream(name="R", subjects=["R.>"])
    await js.publish("R.a", b"x")
    await js.add_consumer("R", ConsumerConfig(durable_name="C", deliver_subject="deliver.R", filter_subject="R.c",
                                              deliver_policy="new", ack_wait=NEVER))
    for _ in range(2):
        await js.publish("R.a", b"x")
    await nc.close()
    handle.kill() if how == "kill" else handle.stop()
    handle.start()
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    got: list[int] = []

    async def received(msg: Any) -> None:
        got.append(msg.metadata.sequence.stream)

    try:
        await nc.subscribe("deliver.R", cb=received)
        await poll_async(lambda: _bound(js), timeout=5, what="the push consumer bound")
        out = [position(await js.consumer_info("R", "C"))]
        await js.purge_stream("R", keep=5)
        out.append(position(await js.consumer_info("R", "C")))
        await js.publish("R.c", b"x")
        await poll_async(lambda: len(got) == 1, timeout=2, what="the delivery")
        out.append((got, position(await js.consumer_info("R", "C"))))
        return normalise(out)
    finally:
        await nc.close()


async def _bound(js: Any) -> bool:
    return bool((await js.consumer_info("R", "C")).push_bound)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["term", "kill"])
async def test_a_restart_runs_a_pass_that_a_purge_then_stores(server_factory, how):
    theirs = await _restarted(server_factory("nats-server"), "term")
    ours = await _restarted(server_factory("jsbroker"), how)
    assert ours == theirs
    assert ours[:2] == [(0, 1, 0, 1, 0), (0, 3, 0, 3, 0)]


async def _purged_pending(nc: Any, name: str, storage: str, ack: str) -> list[Any]:
    """A purge taking pending messages: each is acked in the consumer store (an ack-all consumer's stored
    floor moves up to it, over unacked ones below), and the whole state written after is refused when its
    ack floor is below the stored one, so INFO shows the store's floors (fuzzer seeds 1020639, 7191)."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], storage=storage)
    await js.add_consumer(name, ConsumerConfig(durable_name="C", ack_policy=ack, ack_wait=NEVER))
    for subject in ("a", "c", "a", "c", "a"):
        await js.publish(f"{name}.{subject}", b"x")
    sub = await js.pull_subscribe_bind("C", name)
    out: list[Any] = []
    try:
        msgs = await sub.fetch(5, timeout=1)
        await js.purge_stream(name, subject=f"{name}.c")  # takes pending 2 and 4; the stream still starts at 1
        info = await js.consumer_info(name, "C")
        out.append((position(info), info.num_ack_pending))
        await msgs[0].ack_sync()
        info = await js.consumer_info(name, "C")
        out.append((position(info), info.num_ack_pending))
    finally:
        await js.delete_stream(name)
    return out


@pytest.mark.parametrize("storage", ["file", "memory"])
@pytest.mark.parametrize("ack", ["explicit", "all"])
async def test_a_purge_acks_the_pending_messages_it_takes_in_the_store(on_both, storage, ack):
    ours, theirs = await on_both(lambda nc, name: _purged_pending(nc, name, storage, ack), "U")
    assert ours == theirs
