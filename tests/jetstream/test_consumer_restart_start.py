"""A restart never moves a consumer's start position (issue 21).

A consumer created on an empty stream has nothing to resolve its deliver policy against; nats-server fixes
its position at creation (stream sequence 1) and stores it, so after a restart it still delivers every
message published since. This test builds the whole matrix in one server run — every deliver policy, pull
and push, filtered and not, created on an empty and on a non-empty stream, with nothing delivered / some
delivered / some acked / one nak'ed / after a RESET / while paused, on limits, interest and work-queue
streams — then restarts the server and compares, consumer by consumer, CONSUMER.INFO before and after the
restart and what the next fetch delivers, jsbroker against nats-server.

nats-server is restarted with SIGTERM. jsbroker is restarted with SIGTERM and, in a second run, with
SIGKILL: every state here was confirmed (acks with `ack_sync`, creates and resets answered) before the
kill, and jsbroker promises that confirmed state survives a kill -9, so it must equal nats-server's
state after a clean stop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import nats
import pytest

from tests.jetstream.test_consumer_support import differences
from tests.servers import JSBROKER, NATS_SERVER, ServerHandle, launch

POLICIES = ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject")
STATES = ("nothing", "delivered", "acked", "naked", "reset", "paused")
PUSH_STATES = ("nothing", "delivered", "reset", "paused")  # a push consumer delivers what it can at once
RETENTIONS = ("limits", "interest", "workqueue")
EARLY, LATE = 5, 20  # messages published before the consumers are created (non-empty streams) and after
ACK_WAIT_NS = 3600 * 10**9  # nothing is redelivered during the test: positions alone are compared
FAR_FUTURE = "2099-01-01T00:00:00Z"


@dataclass(frozen=True)
class Case:
    retention: str
    empty: bool
    policy: str
    push: bool
    filtered: bool
    state: str

    @property
    def name(self) -> str:
        return "_".join([self.policy.replace("_", ""), "push" if self.push else "pull",
                         "f" if self.filtered else "all", self.state])

    @property
    def stream(self) -> str:
        base = f"{self.retention[:3].upper()}{'E' if self.empty else 'N'}"
        return f"{base}_{self.name}" if self.retention == "workqueue" else base


def cases() -> Iterator[Case]:
    for retention in RETENTIONS:
        for empty in (True, False):
            policies = ("all",) if retention == "workqueue" else POLICIES  # work queues deliver all only
            for policy in policies:
                for push in (False, True):
                    for filtered in (False, True):
                        for state in PUSH_STATES if push else STATES:
                            yield Case(retention, empty, policy, push, filtered, state)


CASES = list(cases())


async def api(nc: Any, subject: str, body: Any = None) -> dict[str, Any]:
    data = b"" if body is None else json.dumps(body).encode()
    msg = await nc.request(subject, data, timeout=5)
    return json.loads(msg.data)


async def publish(nc: Any, stream: str, n: int) -> None:
    for i in range(n):
        reply = await api(nc, f"{stream}.{'ab'[i % 2]}", {"i": i})
        assert "error" not in reply, reply


def consumer_config(case: Case, start_time: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {"durable_name": case.name, "deliver_policy": case.policy,
                           "ack_policy": "explicit", "ack_wait": ACK_WAIT_NS}
    if case.filtered:
        cfg["filter_subject"] = f"{case.stream}.a"
    elif case.policy == "last_per_subject":  # it needs a filter: one that covers the whole stream
        cfg["filter_subject"] = f"{case.stream}.*"
    if case.policy == "by_start_sequence":
        cfg["opt_start_seq"] = 3
    if case.policy == "by_start_time":
        cfg["opt_start_time"] = start_time
    if case.push:
        cfg["deliver_subject"] = f"push.{case.stream}.{case.name}"
        cfg["max_ack_pending"] = 3  # a push consumer stops after three deliveries it has not seen acked
    return cfg


async def next_msgs(nc: Any, case: Case, info: dict[str, Any], n: int = 5) -> list[int]:
    """Up to `n` stream sequences the consumer delivers next. Pull: one no-wait request (it ends with a status
    when fewer are there). Push: a subscription on its deliver subject, waiting for as many as the consumer's
    INFO says it can deliver (a push consumer has no end-of-batch status)."""
    got: list[int] = []
    done = asyncio.Event()
    inbox = nc.new_inbox()
    if case.push:
        n = min(n, info.get("num_pending", 0), 3 - info.get("num_ack_pending", 0))

    async def on_msg(msg: Any) -> None:
        if msg.headers and msg.headers.get("Status"):
            done.set()
            return
        got.append(msg.metadata.sequence.stream)
        if len(got) >= n:
            done.set()

    if n <= 0:
        return got
    subject = f"push.{case.stream}.{case.name}" if case.push else inbox
    sub = await nc.subscribe(subject, cb=on_msg)
    if not case.push:
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{case.stream}.{case.name}",
                         json.dumps({"batch": n, "no_wait": True}).encode(), reply=inbox)
    try:
        await asyncio.wait_for(done.wait(), 5)
    except asyncio.TimeoutError:
        pass
    await sub.unsubscribe()
    return got


async def until_ack_pending(nc: Any, case: Case, want: int) -> None:
    """A push delivery has no reply to wait for: poll INFO until the consumer shows it."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        info = await api(nc, f"$JS.API.CONSUMER.INFO.{case.stream}.{case.name}")
        if info.get("num_ack_pending") == want:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{case.name}: num_ack_pending never became {want}")


async def deliver_three(nc: Any, case: Case) -> list[Any]:
    """Three deliveries, kept as messages so the caller can ack or nak them."""
    msgs: list[Any] = []
    if case.push:
        sub = await nc.subscribe(f"push.{case.stream}.{case.name}")
        for _ in range(3):
            msgs.append(await sub.next_msg(timeout=5))
        await sub.unsubscribe()
        await until_ack_pending(nc, case, 3)
        return msgs
    sub = await nc.subscribe(inbox := nc.new_inbox())
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{case.stream}.{case.name}",
                     json.dumps({"batch": 3, "no_wait": True}).encode(), reply=inbox)
    while len(msgs) < 3:
        msg = await sub.next_msg(timeout=5)
        if msg.headers and msg.headers.get("Status"):
            break
        msgs.append(msg)
    await sub.unsubscribe()
    return msgs


async def apply_state(nc: Any, case: Case) -> list[Any]:
    """Bring the consumer into `case.state`; returns what the step answered (compared too)."""
    out: list[Any] = []
    if case.state == "nothing":
        return out
    if case.state == "paused":
        reply = await api(nc, f"$JS.API.CONSUMER.PAUSE.{case.stream}.{case.name}", {"pause_until": FAR_FUTURE})
        return [reply.get("paused"), reply.get("error")]
    msgs = await deliver_three(nc, case)
    out.append([m.metadata.sequence.stream for m in msgs])
    if case.state == "acked":
        for m in msgs:
            await m.ack_sync()
    elif case.state == "naked" and msgs:
        await msgs[0].ack_sync()
        await msgs[1].nak(delay=3600)  # due long after the test: the nak'ed position is what is compared
        await nc.flush()
    elif case.state == "reset":
        reply = await api(nc, f"$JS.API.CONSUMER.RESET.{case.stream}.{case.name}", {"seq": 12})
        out.append(reply.get("reset_seq", reply.get("error")))
    return out


def position(info: dict[str, Any]) -> Any:
    if "error" in info:
        return {"error": info["error"]}
    keep = ("num_pending", "num_ack_pending", "num_redelivered", "paused")
    return ({k: info.get(k) for k in keep}, info["delivered"]["stream_seq"], info["delivered"]["consumer_seq"],
            info["ack_floor"]["stream_seq"], info["ack_floor"]["consumer_seq"])


async def build(url: str) -> dict[str, Any]:
    """Create every case's stream and consumer, publish, bring each into its state; returns the answers."""
    nc = await nats.connect(url)
    out: dict[str, Any] = {}
    try:
        streams = sorted({(c.stream, c.retention, c.empty) for c in CASES})
        for stream, retention, empty in streams:
            reply = await api(nc, f"$JS.API.STREAM.CREATE.{stream}",
                              {"name": stream, "subjects": [f"{stream}.*"], "retention": retention,
                               "storage": "file"})
            assert "error" not in reply, reply
            if retention == "interest":  # an interest stream stores nothing nobody is interested in
                reply = await api(nc, f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.ANCHOR",
                                  {"stream_name": stream, "config": {"durable_name": "ANCHOR", "ack_policy": "explicit"}})
                assert "error" not in reply, reply
            if not empty:
                await publish(nc, stream, EARLY)
        for stream, _, empty in streams:
            msg3 = await api(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": 3}) if not empty else None
            start_time = msg3["message"]["time"] if msg3 else "2001-01-01T00:00:00Z"
            for case in (c for c in CASES if c.stream == stream):
                reply = await api(nc, f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{case.name}",
                                  {"stream_name": stream, "config": consumer_config(case, start_time)})
                out[f"create {stream}/{case.name}"] = position(reply)
        for stream, _, _ in streams:
            await publish(nc, stream, LATE)
        for case in CASES:
            if "error" in out[f"create {case.stream}/{case.name}"]:
                continue
            out[f"state {case.stream}/{case.name}"] = await apply_state(nc, case)
            out[f"before {case.stream}/{case.name}"] = position(
                await api(nc, f"$JS.API.CONSUMER.INFO.{case.stream}.{case.name}"))
    finally:
        await nc.close()
    return out


async def after_restart(url: str) -> dict[str, Any]:
    nc = await nats.connect(url)
    out: dict[str, Any] = {}
    try:
        for case in CASES:
            key = f"{case.stream}/{case.name}"
            info = await api(nc, f"$JS.API.CONSUMER.INFO.{case.stream}.{case.name}")
            out[f"after {key}"] = position(info)
            if "error" in info:
                continue
            if case.state == "paused":
                await api(nc, f"$JS.API.CONSUMER.PAUSE.{case.stream}.{case.name}", {})
            out[f"next {key}"] = await next_msgs(nc, case, info)
    finally:
        await nc.close()
    return out


async def transcript(handle: ServerHandle, crash: bool) -> dict[str, Any]:
    before = await build(handle.url)
    if crash:
        handle.kill()
        handle.start()
    else:
        handle.restart()
    return before | await after_restart(handle.url)


def lost_resets(transcript_: dict[str, Any]) -> list[str]:
    """The RESET cases whose delivered position a restart moved back. nats-server 2.15.1 sometimes does this
    across its own SIGTERM on a loaded machine (a fresh-clone CI run here: a work-queue consumer reset to 12
    came back at its three deliveries before the RESET); jsbroker never may."""
    return [key for key, after in transcript_.items()
            if key.startswith("after ") and key.endswith("_reset") and isinstance(after, tuple)
            and after[1] != transcript_[f"before {key.removeprefix('after ')}"][1]]


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """nats-server's transcript; run again (at most twice) when it lost a RESET (see lost_resets)."""
    for _ in range(3):
        with launch(NATS_SERVER) as handle:
            theirs = asyncio.run(transcript(handle, crash=False))
        if not lost_resets(theirs):
            return theirs
    pytest.fail(f"nats-server lost a RESET at every restart: {lost_resets(theirs)}")


@pytest.mark.slow
@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill-9"])
def test_a_restart_keeps_every_consumer_position_like_nats_server(reference: dict[str, Any], crash: bool) -> None:
    with launch(JSBROKER) as handle:
        ours = asyncio.run(transcript(handle, crash))
    assert lost_resets(ours) == []
    assert differences(ours, reference) == []


def test_the_matrix_covers_the_issue_rows(reference: dict[str, Any]) -> None:
    """The issue's table, read off nats-server's run: consumers created on an empty stream with nothing
    delivered start at the first message after a restart, whatever their deliver policy."""
    for policy in ("new", "last", "last_per_subject"):
        name = Case("limits", True, policy, False, False, "nothing").name
        assert reference[f"next LIME/{name}"] == [1, 2, 3, 4, 5]
        # nats-server counts num_pending of last_per_subject as the last message of each subject after a
        # restart (2 subjects), although it delivers every message from sequence 1
        want = 2 if policy == "last_per_subject" else LATE
        assert reference[f"after LIME/{name}"][0]["num_pending"] == want
