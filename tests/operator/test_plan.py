"""plan.py: create / update / none, and immutable changes detected exactly where nats-server refuses them."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

import nats
import pytest

from jsoperator import mapping, plan
from jsoperator.models import ConsumerSpec, StreamSpec
from tests.operator.test_mapping import api, is_jsbroker, jsbroker_refused_field, nc, ok, server  # noqa: F401

NS = 1_000_000_000


def stream(spec: dict[str, Any], name: str = "S") -> dict[str, Any]:
    return mapping.stream_config(StreamSpec.model_validate({"subjects": [f"{name.lower()}.>"], **spec}), name)


def consumer(spec: dict[str, Any], name: str = "C", stream_name: str = "S") -> dict[str, Any]:
    return mapping.consumer_config(ConsumerSpec.model_validate({"streamName": stream_name, **spec}), name)


def server_view(config: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """What the server would echo for a plain stream config (its derived duplicate window added)."""
    return {**config, "duplicate_window": 120 * NS, **changes}


def test_missing_object_is_created() -> None:
    result = plan.plan_stream(stream({"maxAge": "1h"}), None)
    assert (result.action, result.followup, result.blocked) == ("create", False, False)
    assert result.config["max_age"] == 3600 * NS
    assert plan.plan_consumer(consumer({}), None).action == "create"


def test_sealed_stream_is_created_unsealed_then_sealed_by_an_update() -> None:
    desired = stream({"sealed": True})
    created = plan.plan_stream(desired, None)
    assert created.followup and "sealed" not in created.config
    observed = server_view(created.config, sealed=False)
    again = plan.plan_stream(desired, observed)
    assert (again.action, again.drift, again.blocked) == ("update", ("sealed",), False)


def test_matching_object_needs_nothing() -> None:
    desired = stream({"maxMsgs": 5})
    result = plan.plan_stream(desired, server_view(desired, max_bytes=-1))
    assert (result.action, result.drift) == ("none", ())
    assert result.message("stream") == "stream matches the spec"


def test_drift_is_an_update_with_readable_values() -> None:
    desired = stream({"maxAge": "1h"})
    result = plan.plan_stream(desired, server_view(desired, max_age=30 * 60 * NS))
    assert (result.action, result.drift, result.blocked) == ("update", ("maxAge",), False)
    assert "maxAge (server: 30m, spec: 1h)" in result.message("stream")


def test_immutable_change_blocks_with_a_clear_message() -> None:
    desired = stream({"storage": "memory"})
    result = plan.plan_stream(desired, {**desired, "storage": "file"})
    assert result.blocked and [c.field for c in result.immutable] == ["storage"]
    assert result.message("stream").startswith(
        'the server cannot apply this stream change: storage cannot change (server: "file", spec: "memory").'
    )


def test_unset_field_means_the_server_default_for_immutables() -> None:
    # A stream adopted by name has memory storage; the spec leaves storage unset (= file).
    desired = stream({})
    result = plan.plan_stream(desired, {**desired, "storage": "memory"})
    assert [c.describe() for c in result.immutable] == ['storage cannot change (server: "memory", spec: "file")']


def test_removing_a_mirror_promotes_the_stream() -> None:
    desired = mapping.stream_config(StreamSpec.model_validate({"subjects": ["m.>"]}), "M")
    result = plan.plan_stream(desired, {"name": "M", "mirror": {"name": "O"}, "subjects": []})
    assert result.action == "update" and not result.blocked and "mirror" in result.drift


def test_spelling_out_a_default_is_not_drift() -> None:
    desired = consumer({"maxWaiting": 512, "ackPolicy": "none", "deliverPolicy": "all"})
    observed = {"durable_name": "C", "deliver_policy": "all", "ack_policy": "none", "max_waiting": 512}
    assert plan.plan_consumer(desired, observed).action == "none"


FUTURE, PAST = "2099-01-01T00:00:00Z", "2020-01-01T00:00:00Z"


def test_pause_changes_go_through_the_pause_api() -> None:
    base = {"durable_name": "C", "deliver_policy": "all", "ack_policy": "none", "max_waiting": 512}
    pausing = plan.plan_consumer({**base, "pause_until": FUTURE}, base)
    assert (pausing.action, pausing.pause, pausing.blocked) == ("update", {"pause_until": FUTURE}, False)
    resuming = plan.plan_consumer(base, {**base, "pause_until": FUTURE})
    assert (resuming.action, resuming.pause) == ("update", {})


def test_a_pause_that_has_passed_counts_as_unset() -> None:
    base = {"durable_name": "C", "deliver_policy": "all", "ack_policy": "none", "max_waiting": 512}
    assert plan.plan_consumer({**base, "pause_until": PAST}, base).action == "none"
    assert plan.plan_consumer(base, {**base, "pause_until": PAST}).action == "none"
    later = datetime(2099, 6, 1, tzinfo=timezone.utc)
    assert plan.plan_consumer(base, {**base, "pause_until": FUTURE}, now=later).action == "none"


async def test_pause_and_resume_on_the_server(nc: Any) -> None:
    await ok(nc, "STREAM.CREATE.PAUSING", {"name": "PAUSING", "subjects": ["pausing"]})
    try:
        running = consumer({}, "p", "PAUSING")
        created = await ok(nc, "CONSUMER.CREATE.PAUSING.p", {"stream_name": "PAUSING", "config": running})
        for spec in ({"pauseUntil": FUTURE}, {}):
            desired = consumer(spec, "p", "PAUSING")
            step = plan.plan_consumer(desired, created["config"])
            assert step.pause is not None
            await ok(nc, "CONSUMER.PAUSE.PAUSING.p", step.pause)
            created = await ok(nc, "CONSUMER.INFO.PAUSING.p")
            assert created.get("paused", False) is bool(spec)
            assert plan.plan_consumer(desired, created["config"]).action == "none"
    finally:
        await api(nc, "STREAM.DELETE.PAUSING")


def test_retention_limits_to_interest_is_allowed() -> None:
    desired = stream({"retention": "interest"})
    assert not plan.plan_stream(desired, {**desired, "retention": "limits"}).blocked


# -- the same decisions, checked against nats-server and jsbroker ------------------------------------------------

# (spec on the server, new spec, blocked?)
STREAM_CHANGES: list[tuple[dict[str, Any], dict[str, Any], bool]] = [
    ({"storage": "file"}, {"storage": "memory"}, True),
    ({}, {"storage": "memory"}, True),
    ({"retention": "limits"}, {"retention": "workqueue"}, True),
    ({"retention": "workqueue"}, {"retention": "interest"}, True),
    ({"retention": "limits"}, {"retention": "interest"}, False),
    ({"denyDelete": True}, {"denyDelete": False}, True),
    ({"denyDelete": True}, {}, True),
    ({"denyPurge": True}, {}, True),
    ({}, {"denyPurge": True}, False),
    ({"allowMsgTtl": True}, {}, True),
    ({"allowMsgSchedules": True, "allowRollupHdrs": True}, {"allowRollupHdrs": True}, True),
    ({}, {"allowMsgCounter": True}, True),
    ({"persistMode": "async"}, {}, True),
    ({"maxAge": "1h", "maxMsgs": 10}, {"maxAge": "2h", "maxMsgs": 20, "description": "x"}, False),
]
CONSUMER_CHANGES: list[tuple[dict[str, Any], dict[str, Any], bool]] = [
    ({"deliverPolicy": "all"}, {"deliverPolicy": "new"}, True),
    ({}, {"deliverPolicy": "last"}, True),
    (
        {"deliverPolicy": "byStartSequence", "optStartSeq": 1},
        {"deliverPolicy": "byStartSequence", "optStartSeq": 2},
        True,
    ),
    (
        {"deliverPolicy": "byStartTime", "optStartTime": "2026-01-01T00:00:00Z"},
        {"deliverPolicy": "byStartTime", "optStartTime": "2026-01-02T00:00:00Z"},
        True,
    ),
    ({"ackPolicy": "explicit"}, {"ackPolicy": "all"}, True),
    ({}, {"ackPolicy": "explicit"}, True),
    ({"replayPolicy": "instant"}, {"replayPolicy": "original"}, True),
    ({"memStorage": True}, {}, True),
    ({"maxWaiting": 10}, {"maxWaiting": 20}, True),
    ({}, {"deliverSubject": "push.x"}, True),
    ({"deliverSubject": "push.x"}, {}, True),
    ({"deliverSubject": "push.hb", "idleHeartbeat": "5s"}, {"deliverSubject": "push.hb", "idleHeartbeat": "10s"}, True),
    (
        {"deliverSubject": "push.fc", "idleHeartbeat": "5s"},
        {"deliverSubject": "push.fc", "idleHeartbeat": "5s", "flowControl": True},
        True,
    ),
    ({"deliverSubject": "push.a"}, {"deliverSubject": "push.b"}, False),
    (
        {"ackPolicy": "explicit", "ackWait": "10s", "maxDeliver": 3},
        {"ackPolicy": "explicit", "ackWait": "20s", "maxDeliver": 5, "maxAckPending": 7, "description": "x"},
        False,
    ),
]


@pytest.mark.parametrize(("before", "after", "blocked"), STREAM_CHANGES)
async def test_stream_plan_agrees_with_the_server(
    nc: nats.NATS, before: dict[str, Any], after: dict[str, Any], blocked: bool
) -> None:
    name = f"P{abs(hash(json.dumps([before, after]))) % 10**8}"
    first = await ok(nc, f"STREAM.CREATE.{name}", stream(before, name))
    try:
        result = plan.plan_stream(stream(after, name), first["config"])
        assert result.action == "update"
        assert result.blocked is blocked, result.message("stream")
        answer = await api(nc, f"STREAM.UPDATE.{name}", result.config)
        assert ("error" in answer) is blocked, answer
        if not blocked:
            assert plan.plan_stream(stream(after, name), answer["config"]).action == "none"
    finally:
        await api(nc, f"STREAM.DELETE.{name}")


@pytest.mark.parametrize(("before", "after", "blocked"), CONSUMER_CHANGES)
async def test_consumer_plan_agrees_with_the_server(
    nc: nats.NATS, before: dict[str, Any], after: dict[str, Any], blocked: bool
) -> None:
    name = f"Q{abs(hash(json.dumps([before, after]))) % 10**8}"
    await ok(nc, f"STREAM.CREATE.{name}", stream({}, name))
    try:
        create = {"stream_name": name, "config": consumer(before, "c", name)}
        first = await ok(nc, f"CONSUMER.CREATE.{name}.c", create)
        result = plan.plan_consumer(consumer(after, "c", name), first["config"])
        assert result.action == "update"
        assert result.blocked is blocked, result.message("consumer")
        answer = await api(nc, f"CONSUMER.CREATE.{name}.c", {"stream_name": name, "config": result.config})
        assert ("error" in answer) is blocked, answer
        if not blocked:
            assert plan.plan_consumer(consumer(after, "c", name), answer["config"]).action == "none"
    finally:
        await api(nc, f"STREAM.DELETE.{name}")


# -- many fields at once: create, then change every mutable field ------------------------------------

STREAM_SINK = {
    "description": "all at once", "subjects": ["sink.a.>", "sink.b"], "retention": "interest",
    "maxConsumers": 10, "maxMsgs": 1000, "maxBytes": "1Mi", "maxAge": "1h", "maxMsgsPerSubject": 10,
    "maxMsgSize": "1Ki", "discard": "new", "discardNewPerSubject": True, "storage": "memory", "replicas": 1,
    "noAck": False, "duplicateWindow": "1m", "firstSeq": 5,
    "subjectTransform": {"src": "sink.a.>", "dest": "sink.a.t.>"},
    "republish": {"src": "sink.b", "dest": "sink.out.b"}, "allowDirect": True, "allowRollupHdrs": True,
    "consumerLimits": {"inactiveThreshold": "1h", "maxAckPending": 100}, "allowMsgTtl": True,
    "subjectDeleteMarkerTtl": "10m", "metadata": {"a": "1"},
}
STREAM_SINK_CHANGED = {
    **STREAM_SINK, "description": "changed", "subjects": ["sink.a.>", "sink.b", "sink.c"], "retention": "limits",
    "maxConsumers": 20, "maxMsgs": 2000, "maxBytes": "2Mi", "maxAge": "2h", "maxMsgsPerSubject": 20,
    "maxMsgSize": "2Ki", "discard": "old", "discardNewPerSubject": False, "duplicateWindow": "2m",
    "republish": {"src": "sink.c", "dest": "sink.out.c", "headersOnly": True}, "allowDirect": False,
    "consumerLimits": {"inactiveThreshold": "2h", "maxAckPending": 200}, "subjectDeleteMarkerTtl": "20m",
    "metadata": {"b": "2"}, "denyDelete": True,
}
CONSUMER_SINK = {
    "description": "all at once", "deliverPolicy": "byStartSequence", "optStartSeq": 1, "ackPolicy": "explicit",
    "ackWait": "10s", "maxDeliver": 5, "backoff": ["10s", "20s"], "filterSubjects": ["csink.a", "csink.b"],
    "replayPolicy": "instant", "sampleFreq": "100%", "maxWaiting": 100, "maxAckPending": 50, "headersOnly": True,
    "maxBatch": 10, "maxExpires": "10s", "maxBytes": "1Ki", "inactiveThreshold": "1h", "memStorage": True,
    "metadata": {"a": "1"}, "pauseUntil": "2099-01-01T00:00:00Z",
}
CONSUMER_SINK_CHANGED = {
    **CONSUMER_SINK, "description": "changed", "ackWait": "20s", "maxDeliver": 6, "backoff": ["20s"],
    "filterSubjects": ["csink.c"], "sampleFreq": "50%", "maxAckPending": 60, "headersOnly": False, "maxBatch": 20,
    "maxExpires": "20s", "maxBytes": "2Ki", "inactiveThreshold": "2h", "metadata": {"b": "2"},
}
del CONSUMER_SINK_CHANGED["pauseUntil"]
PUSH_SINK = {"deliverSubject": "push.sink", "deliverGroup": "g1", "idleHeartbeat": "5s", "flowControl": True,
             "rateLimitBps": 1000, "ackPolicy": "explicit"}
PUSH_SINK_CHANGED = {**PUSH_SINK, "deliverSubject": "push.sink2", "deliverGroup": "g2", "rateLimitBps": 2000}


def supported(nc: Any, spec: dict[str, Any], kind: str = "stream") -> dict[str, Any]:
    """On jsbroker, the spec without the fields it refuses (tests/operator/test_mapping.py checks the refusals),
    so that every other field is still exercised."""
    spec = dict(spec)
    while is_jsbroker(nc):
        wire = stream(spec, "X") if kind == "stream" else {"config": consumer(spec)}
        refused = jsbroker_refused_field(wire)
        if refused is None:
            break
        del spec[re.sub(r"_([a-z])", lambda m: m.group(1).upper(), refused)]  # the spec's camelCase name
    return spec


async def test_stream_with_many_fields_created_and_changed(nc: Any) -> None:
    first = stream(supported(nc, STREAM_SINK), "SINK")
    created = await ok(nc, "STREAM.CREATE.SINK", plan.plan_stream(first, None).config)
    try:
        again = plan.plan_stream(first, created["config"])
        assert again.action == "none", again.message("stream")
        changed = stream(supported(nc, STREAM_SINK_CHANGED), "SINK")
        result = plan.plan_stream(changed, created["config"])
        assert result.action == "update" and not result.blocked, result.message("stream")
        expected = {"description", "maxMsgs", "maxAge", "republish", "metadata", "denyDelete"}
        assert set(result.drift) >= expected & set(supported(nc, STREAM_SINK_CHANGED))
        updated = await ok(nc, "STREAM.UPDATE.SINK", result.config)
        settled = plan.plan_stream(changed, updated["config"])
        assert settled.action == "none", settled.message("stream")
    finally:
        await api(nc, "STREAM.DELETE.SINK")


@pytest.mark.parametrize(("before", "after"), [(CONSUMER_SINK, CONSUMER_SINK_CHANGED), (PUSH_SINK, PUSH_SINK_CHANGED)])
async def test_consumer_with_many_fields_created_and_changed(
    nc: Any, before: dict[str, Any], after: dict[str, Any]
) -> None:
    await ok(nc, "STREAM.CREATE.CSINK", {"name": "CSINK", "subjects": ["csink.>"]})
    try:
        before, after = supported(nc, before, "consumer"), supported(nc, after, "consumer")
        first = consumer(before, "sink", "CSINK")
        body = {"stream_name": "CSINK", "config": plan.plan_consumer(first, None).config}
        created = await ok(nc, "CONSUMER.CREATE.CSINK.sink", body)
        assert plan.plan_consumer(first, created["config"]).action == "none"
        changed = consumer(after, "sink", "CSINK")
        result = plan.plan_consumer(changed, created["config"])
        assert result.action == "update" and not result.blocked, result.message("consumer")
        updated = await ok(nc, "CONSUMER.CREATE.CSINK.sink", {"stream_name": "CSINK", "config": result.config})
        if result.pause is not None:
            await ok(nc, "CONSUMER.PAUSE.CSINK.sink", result.pause)
            updated = await ok(nc, "CONSUMER.INFO.CSINK.sink")
        settled = plan.plan_consumer(changed, updated["config"])
        assert (settled.action, settled.pause) == ("none", None), settled.message("consumer")
    finally:
        await api(nc, "STREAM.DELETE.CSINK")


async def test_removing_the_mirror_promotes_it_on_the_server(nc: Any) -> None:
    await ok(nc, "STREAM.CREATE.MORIGIN", {"name": "MORIGIN", "subjects": ["morigin.>"]})
    try:
        mirror = mapping.stream_config(StreamSpec.model_validate({"mirror": {"name": "MORIGIN"}}), "MCOPY")
        created = await ok(nc, "STREAM.CREATE.MCOPY", plan.plan_stream(mirror, None).config)
        assert plan.plan_stream(mirror, created["config"]).action == "none"
        promoted = mapping.stream_config(StreamSpec.model_validate({"subjects": ["mcopy.>"]}), "MCOPY")
        step = plan.plan_stream(promoted, created["config"])
        assert (step.action, step.blocked) == ("update", False) and "mirror" in step.drift
        updated = await ok(nc, "STREAM.UPDATE.MCOPY", step.config)
        assert plan.plan_stream(promoted, updated["config"]).action == "none"
        moved = mapping.stream_config(StreamSpec.model_validate({"mirror": {"name": "OTHER"}}), "MCOPY")
        refused = plan.plan_stream(moved, updated["config"])
        assert refused.blocked and "mirror cannot be added or changed" in refused.message("stream")
        assert "error" in await api(nc, "STREAM.UPDATE.MCOPY", moved)
    finally:
        await api(nc, "STREAM.DELETE.MCOPY")
        await api(nc, "STREAM.DELETE.MORIGIN")


# -- random mutable changes converge in one update ---------------------------------------------------

ABSENT = object()
STREAM_VARIANTS: dict[str, list[Any]] = {
    "description": ["one", "two"],
    "subjects": [["rnd.>"], ["rnd.>", "other.rnd"]],
    "retention": ["limits", "interest"],
    "maxConsumers": [5, -1],
    "maxMsgs": [100, 0, -1],
    "maxBytes": ["1Mi", 5000, -1],
    "maxAge": ["1h", "2h", "0s"],
    "maxMsgsPerSubject": [1, 10, -1],
    "maxMsgSize": ["1Ki", -1],
    "discard": ["old", "new"],
    "replicas": [1],
    "duplicateWindow": ["30s", "10m"],
    "compression": ["none", "s2"],
    "subjectTransform": [{"src": "rnd.a.>", "dest": "rnd.t.>"}],
    "republish": [{"src": "rnd.>", "dest": "out.rnd.>"}, {"dest": "out2.rnd.>", "headersOnly": True}],
    "allowDirect": [True, False],
    "allowRollupHdrs": [True, False],
    "consumerLimits": [{"inactiveThreshold": "1h"}, {"maxAckPending": 50}],
    "metadata": [{"a": "1"}, {"a": "2", "b": "3"}],
}
CONSUMER_VARIANTS: dict[str, list[Any]] = {
    "description": ["one", "two"],
    "ackWait": ["10s", "30s"],
    "maxDeliver": [5, -1],
    "backoff": [["1s", "2s"], ["3s"]],
    "filterSubjects": [["rnd.a"], ["rnd.a", "rnd.b"]],
    "sampleFreq": ["100%", "10%"],
    "maxAckPending": [10, 100, -1],
    "headersOnly": [True, False],
    "maxBatch": [10, 20],
    "maxExpires": ["10s", "1m"],
    "maxBytes": ["1Ki", 4096],
    "inactiveThreshold": ["1h", "2h"],
    "metadata": [{"a": "1"}, {"b": "2"}],
}


def _random_spec(rng: Any, variants: dict[str, list[Any]]) -> dict[str, Any]:
    picked = {key: rng.choice([*values, ABSENT]) for key, values in variants.items()}
    return {key: value for key, value in picked.items() if value is not ABSENT}


@pytest.mark.parametrize("seed", range(12))
async def test_random_stream_changes_converge_in_one_update(nc: Any, unique: Any, seed: int) -> None:
    import random

    rng = random.Random(seed)
    name = unique(f"RND{seed}")  # never a name (or a store directory) another run left behind
    before, after = (stream(_random_spec(rng, STREAM_VARIANTS), name) for _ in range(2))
    created = await ok(nc, f"STREAM.CREATE.{name}", plan.plan_stream(before, None).config)
    try:
        assert plan.plan_stream(before, created["config"]).action == "none", (before, created["config"])
        step = plan.plan_stream(after, created["config"])
        assert not step.blocked, step.message("stream")
        if step.action == "update":
            created = await ok(nc, f"STREAM.UPDATE.{name}", step.config)
        settled = plan.plan_stream(after, created["config"])
        assert settled.action == "none", f"{before} -> {after}: {settled.message('stream')}"
    finally:
        await api(nc, f"STREAM.DELETE.{name}")


@pytest.mark.parametrize("seed", range(12))
async def test_random_consumer_changes_converge_in_one_update(nc: Any, unique: Any, seed: int) -> None:
    import random

    rng = random.Random(1000 + seed)
    stream_name = unique(f"CRND{seed}")
    await ok(nc, f"STREAM.CREATE.{stream_name}", {"name": stream_name, "subjects": ["rnd.>"]})
    try:
        before, after = (
            consumer({"ackPolicy": "explicit", **_random_spec(rng, CONSUMER_VARIANTS)}, "c", stream_name)
            for _ in range(2)
        )
        body = {"stream_name": stream_name, "config": before}
        created = await ok(nc, f"CONSUMER.CREATE.{stream_name}.c", body)
        assert plan.plan_consumer(before, created["config"]).action == "none", (before, created["config"])
        step = plan.plan_consumer(after, created["config"])
        assert not step.blocked, step.message("consumer")
        if step.action == "update":
            body = {"stream_name": stream_name, "config": step.config}
            created = await ok(nc, f"CONSUMER.CREATE.{stream_name}.c", body)
        settled = plan.plan_consumer(after, created["config"])
        assert settled.action == "none", f"{before} -> {after}: {settled.message('consumer')}"
    finally:
        await api(nc, f"STREAM.DELETE.{stream_name}")


async def test_a_sealed_stream_can_still_take_an_update(nc: nats.NATS) -> None:
    """Sealing forces deny_delete, deny_purge, ...: a later update (a description) repeats them, or the
    server refuses it as "cancelling" them."""
    first = await ok(nc, "STREAM.CREATE.SEALEDUP", stream({"maxAge": "1h"}, "SEALEDUP"))
    try:
        sealing = plan.plan_stream(stream({"maxAge": "1h", "sealed": True}, "SEALEDUP"), first["config"])
        sealed = await ok(nc, "STREAM.UPDATE.SEALEDUP", sealing.config)
        desired = stream({"maxAge": "1h", "sealed": True, "description": "archived"}, "SEALEDUP")
        result = plan.plan_stream(desired, sealed["config"])
        assert (result.action, result.drift, result.config["deny_delete"]) == ("update", ("description",), True)
        updated = await ok(nc, "STREAM.UPDATE.SEALEDUP", result.config)
        assert plan.plan_stream(desired, updated["config"]).action == "none"
    finally:
        await ok(nc, "STREAM.DELETE.SEALEDUP")
