"""Shared helpers for the consumer differential tests (no tests here).

A *transcript* is what a client saw, made comparable across servers: each message becomes
`("msg", subject, ack tokens without the timestamp, payload)` or `("status", code, description,
pending headers)`. `scenario_pair(fn)` runs the same async scenario against jsbroker and nats-server
concurrently and returns both results; `settled_pair(state)` reads a state from both once they agree.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable

import nats
from nats.aio.msg import Msg

from tests.differential import normalise
from tests.polling import poll_async


def ack_tokens(reply: str | None) -> tuple[str, ...] | None:
    """`$JS.ACK.<s>.<c>.<dc>.<sseq>.<dseq>.<ts>.<pending>` without the stream/consumer names and ts."""
    if not reply:
        return None
    toks = reply.split(".")
    if len(toks) != 9:
        return tuple(toks)
    return (toks[4], toks[5], toks[6], toks[8])


def entry(msg: Msg) -> tuple[Any, ...]:
    hdrs = msg.headers or {}
    status = hdrs.get("Status")
    if status:
        pending = tuple((k, v) for k, v in sorted(hdrs.items()) if k.startswith("Nats-"))
        return ("status", status, hdrs.get("Description", ""), pending)
    return ("msg", msg.subject, ack_tokens(msg.reply), msg.data)


def without_pending(entries: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Drop the ack subject's pending token from message entries: nats-server counts new messages into it
    from its consumer goroutine, after the pub ack, so right after a publish it races (ours never lags)."""
    return [e[:2] + (e[2][:3],) + e[3:] if e[0] == "msg" else e for e in entries]


async def pull(nc: Any, stream: str, consumer: str, body: Any, *, wait: float, stop_on_status: bool = True,
               count: int = 0) -> list[tuple[Any, ...]]:
    """Send one MSG.NEXT and record what arrives on its inbox for up to `wait` seconds (or until a
    status that ends the request, or `count` entries)."""
    inbox = nc.new_inbox()
    got: list[tuple[Any, ...]] = []
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        e = entry(msg)
        got.append(e)
        if (stop_on_status and e[0] == "status" and e[1] != "100") or (count and len(got) >= count):
            done.set()

    sub = await nc.subscribe(inbox, cb=on_msg)
    data = json.dumps(body).encode() if isinstance(body, (dict, int)) else body
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", data, reply=inbox)
    try:
        await asyncio.wait_for(done.wait(), wait)
    except asyncio.TimeoutError:
        pass
    await sub.unsubscribe()
    return got


async def api(nc: Any, subject: str, body: Any = b"") -> Any:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    msg = await nc.request(subject, data, timeout=2)
    return json.loads(msg.data)


async def until_info(nc: Any, stream: str, consumer: str, check: Callable[[dict[str, Any]], bool],
                     what: str, timeout: float = 3.0) -> dict[str, Any]:
    """Poll ConsumerInfo until `check(info)` holds and return that info; AssertionError naming `what` at
    the timeout. For state with no event of its own: a pull request queued, acks applied (nats-server
    applies them on the consumer's goroutine, after the client sent them)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check(info := await api(nc, f"$JS.API.CONSUMER.INFO.{stream}.{consumer}")):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{stream}/{consumer}: no {what} within {timeout}s; last info {info}")
        await asyncio.sleep(0.01)  # poll interval
    return info


async def until_waiting(nc: Any, stream: str, consumer: str, n: int) -> None:
    """Until `n` pull requests are queued (a request sent from another task says nothing when it is)."""
    await until_info(nc, stream, consumer, lambda info: info.get("num_waiting", 0) >= n, f"{n} queued pull(s)")


def info_view(info: dict[str, Any]) -> dict[str, Any]:
    """The counters of a ConsumerInfo that must match exactly."""
    return {k: normalise(info.get(k)) for k in ("delivered", "ack_floor", "num_ack_pending", "num_redelivered",
                                                "num_waiting", "num_pending")}


async def scenario_pair(urls: dict[str, str], fn: Callable[[Any, str], Awaitable[Any]], name: str) -> dict[str, Any]:
    """Run `fn(nc, stream_name)` against each server concurrently; returns {kind: result}."""

    async def one(url: str) -> Any:
        nc = await nats.connect(url)
        try:
            return await fn(nc, name)
        finally:
            await nc.close()

    kinds = list(urls)
    results = await asyncio.gather(*(one(urls[k]) for k in kinds))
    return dict(zip(kinds, results))


async def settled_pair(state: Callable[[Any], Awaitable[Any]], ours: Any, theirs: Any, timeout: float = 2.0
                       ) -> tuple[Any, Any]:
    """`state(nc)` read from both servers (jsbroker's client first) once the two agree, or as they are after
    `timeout`: nats-server finishes some work after it answered (removals of acked messages from interest and
    work-queue streams), so only a difference that lasts counts."""
    last: list[tuple[Any, Any]] = []

    async def same() -> bool:
        last[:] = [(await state(ours), await state(theirs))]
        return last[0][0] == last[0][1]

    try:
        await poll_async(same, timeout=timeout, interval=0.1, what="equal states")
    except AssertionError:
        pass
    return last[0]


async def next_seqs(nc: Any, stream: str, consumer: str, n: int) -> list[int]:
    """The stream seqs a no-wait pull of up to `n` messages gets (no waiting for messages that do not come)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
                         json.dumps({"batch": n, "no_wait": True}).encode(), reply=inbox)
        seqs: list[int] = []
        while len(seqs) < n:
            msg = await sub.next_msg(timeout=2)
            if msg.headers and msg.headers.get("Status"):
                break
            seqs.append(msg.metadata.sequence.stream)
        return seqs
    finally:
        await sub.unsubscribe()


async def fetch(nc: Any, stream: str, consumer: str, n: int, timeout: float = 2.0) -> list[Msg]:
    """nats-py's fetch of up to `n` messages from a durable pull consumer (none at the timeout)."""
    sub = await nc.jetstream().pull_subscribe_bind(consumer, stream)
    try:
        return await sub.fetch(n, timeout=timeout)
    except nats.errors.TimeoutError:
        return []
    finally:
        await sub.unsubscribe()


def differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """Each key of nats-server's transcript whose value jsbroker's differs from, as a readable line."""
    return [f"{key}: jsbroker {ours.get(key)!r} != nats-server {theirs.get(key)!r}"
            for key in sorted(theirs.keys() | ours.keys()) if ours.get(key) != theirs.get(key)]
