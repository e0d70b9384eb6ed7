"""plan.py: create / update / none, and immutable changes detected exactly where nats-server refuses them."""

from __future__ import annotations

import json
from typing import Any

import nats
import pytest

from jsoperator import mapping, plan
from jsoperator.models import ConsumerSpec, StreamSpec
from tests.operator.test_mapping import api, nc, ok, server  # noqa: F401  (fixtures: real servers)

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
