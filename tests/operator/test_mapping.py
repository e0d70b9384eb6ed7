"""Spec -> JetStream config for every Stream and Consumer field, checked against the real servers.

Each case is (spec fragment, expected wire fragment). For every case the mapped config is sent to the
real nats-server 2.15.1 (and to jsbroker) and the config it returns must show no drift against ours
(no perpetual drift). jsbroker features it refuses as "not supported by jsbroker" are skipped.
A completeness test fails when a model field has no case here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest
from pydantic import ValidationError

from jsbroker.jetstream import consumer_config
from jsoperator import mapping
from jsoperator.models import ConsumerSpec, StreamSpec
from tests import servers

NS = 1_000_000_000

# (spec fragment, expected fragment of the wire config). Name/subjects are added per case unless set.
STREAM_CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"name": "custom-name"}, {"name": "custom-name"}),
    ({"description": "orders from the shop"}, {"description": "orders from the shop"}),
    ({"subjects": ["subj.a.*", "subj.b.>"]}, {"subjects": ["subj.a.*", "subj.b.>"]}),
    ({"retention": "interest"}, {"retention": "interest"}),
    ({"retention": "workqueue"}, {"retention": "workqueue"}),
    ({"maxConsumers": 10}, {"max_consumers": 10}),
    ({"maxConsumers": -1}, {"max_consumers": -1}),
    ({"maxMsgs": 1000}, {"max_msgs": 1000}),
    ({"maxMsgs": 0}, {"max_msgs": 0}),  # the server stores -1: must not count as drift
    ({"maxBytes": "1Mi"}, {"max_bytes": 1048576}),
    ({"maxBytes": 5000}, {"max_bytes": 5000}),
    ({"maxAge": "1h30m"}, {"max_age": 90 * 60 * NS}),
    ({"maxMsgsPerSubject": 5}, {"max_msgs_per_subject": 5}),
    ({"maxMsgSize": "1Ki"}, {"max_msg_size": 1024}),
    ({"discard": "new"}, {"discard": "new"}),
    (
        {"discard": "new", "discardNewPerSubject": True, "maxMsgsPerSubject": 1},
        {"discard": "new", "discard_new_per_subject": True, "max_msgs_per_subject": 1},
    ),
    ({"storage": "memory"}, {"storage": "memory"}),
    ({"replicas": 1}, {"num_replicas": 1}),
    ({"noAck": True}, {"no_ack": True}),
    ({"noAck": False}, {"no_ack": False}),  # omitted by the server when false
    ({"duplicateWindow": "30s"}, {"duplicate_window": 30 * NS}),
    ({"duplicateWindow": "0s"}, {"duplicate_window": 0}),  # 0 asks for the server default (2m)
    ({"maxAge": "1m"}, {"max_age": 60 * NS}),  # the derived duplicate window (1m) is not drift
    ({"placement": {"tags": []}}, {"placement": {"tags": []}}),
    ({"compression": "s2"}, {"compression": "s2"}),
    ({"firstSeq": 100}, {"first_seq": 100}),
    (
        {"subjectTransform": {"src": "in.>", "dest": "stored.>"}, "subjects": ["in.>"]},
        {"subject_transform": {"src": "in.>", "dest": "stored.>"}},
    ),
    (
        {"republish": {"src": "rp.>", "dest": "out.rp.>", "headersOnly": True}, "subjects": ["rp.>"]},
        {"republish": {"src": "rp.>", "dest": "out.rp.>", "headers_only": True}},
    ),
    (
        {"republish": {"dest": "out.all.>"}, "subjects": ["all.>"]},  # the server fills src ">"
        {"republish": {"dest": "out.all.>"}},
    ),
    ({"allowDirect": True}, {"allow_direct": True}),
    ({"denyDelete": True}, {"deny_delete": True}),
    ({"denyPurge": True}, {"deny_purge": True}),
    ({"allowRollupHdrs": True}, {"allow_rollup_hdrs": True}),
    (
        {"consumerLimits": {"inactiveThreshold": "1m", "maxAckPending": 100}},
        {"consumer_limits": {"inactive_threshold": 60 * NS, "max_ack_pending": 100}},
    ),
    ({"allowMsgTtl": True}, {"allow_msg_ttl": True}),
    (
        {"subjectDeleteMarkerTtl": "5m", "allowMsgTtl": True, "allowRollupHdrs": True},
        {"subject_delete_marker_ttl": 300 * NS},
    ),
    ({"subjectDeleteMarkerTtl": "5m"}, {"subject_delete_marker_ttl": 300 * NS}),  # the server turns on TTLs, roll-ups
    ({"allowMsgCounter": True}, {"allow_msg_counter": True}),
    ({"allowAtomicPublish": True}, {"allow_atomic": True}),
    ({"allowMsgSchedules": True, "allowRollupHdrs": True}, {"allow_msg_schedules": True}),
    ({"allowMsgSchedules": True}, {"allow_msg_schedules": True}),  # the server turns on roll-ups
    ({"allowBatchPublish": True}, {"allow_batched": True}),
    ({"persistMode": "async"}, {"persist_mode": "async"}),
    ({"metadata": {"team": "shop", "tier": "gold"}}, {"metadata": {"team": "shop", "tier": "gold"}}),
    # Mirrors and sources: the origin stream ORIGIN exists on the server (see fixture).
    (
        {"mirror": {"name": "ORIGIN", "optStartSeq": 2, "filterSubject": "origin.a"}, "mirrorDirect": True},
        {"mirror": {"name": "ORIGIN", "opt_start_seq": 2, "filter_subject": "origin.a"}, "mirror_direct": True},
    ),
    (
        {"mirror": {"name": "ORIGIN", "subjectTransforms": [{"src": "origin.>", "dest": "copy.>"}]}},
        {"mirror": {"name": "ORIGIN", "subject_transforms": [{"src": "origin.>", "dest": "copy.>"}]}},
    ),
    (
        {"sources": [{"name": "ORIGIN", "optStartTime": "2026-01-01T01:00:00+01:00"},
                     {"name": "OTHER", "filterSubject": "other.a"}]},
        {"sources": [{"name": "ORIGIN", "opt_start_time": "2026-01-01T00:00:00Z"},
                     {"name": "OTHER", "filter_subject": "other.a"}]},
    ),
    (
        {"sources": [{"name": "OTHER", "external": {"apiPrefix": "$JS.hub.API", "deliverPrefix": "deliver.hub"}}]},
        {"sources": [{"name": "OTHER", "external": {"api": "$JS.hub.API", "deliver": "deliver.hub"}}]},
    ),
    (
        {"sources": [{"name": "ORIGIN", "consumer": {"name": "src-consumer", "deliverSubject": "src.deliver"}}]},
        {"sources": [{"name": "ORIGIN", "consumer": {"name": "src-consumer", "deliver_subject": "src.deliver"}}]},
    ),
]
# Not accepted on create by the server; exercised through an update below.
SEALED_CASE = ({"sealed": True, "maxAge": "1h"}, {"sealed": True, "max_age": 3600 * NS})

CONSUMER_CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"durableName": "custom-durable"}, {"durable_name": "custom-durable"}),
    ({"description": "billing"}, {"description": "billing"}),
    ({"deliverPolicy": "all"}, {"deliver_policy": "all"}),
    ({"deliverPolicy": "last"}, {"deliver_policy": "last"}),
    ({"deliverPolicy": "new"}, {"deliver_policy": "new"}),
    (
        {"deliverPolicy": "byStartSequence", "optStartSeq": 7},
        {"deliver_policy": "by_start_sequence", "opt_start_seq": 7},
    ),
    (
        {"deliverPolicy": "byStartTime", "optStartTime": "2026-03-01T12:00:00+02:00"},
        {"deliver_policy": "by_start_time", "opt_start_time": "2026-03-01T10:00:00Z"},
    ),
    (
        {"deliverPolicy": "lastPerSubject", "filterSubject": "things.>"},
        {"deliver_policy": "last_per_subject", "filter_subject": "things.>"},
    ),
    ({"ackPolicy": "none"}, {"ack_policy": "none"}),
    ({"ackPolicy": "all"}, {"ack_policy": "all"}),
    ({"ackPolicy": "explicit", "ackWait": "45s"}, {"ack_policy": "explicit", "ack_wait": 45 * NS}),
    ({"maxDeliver": 5}, {"max_deliver": 5}),
    ({"maxDeliver": 0}, {"max_deliver": 0}),  # stored as -1: not drift
    (
        {"ackPolicy": "explicit", "backoff": ["1s", "5s", "1m"], "maxDeliver": 4},
        {"backoff": [NS, 5 * NS, 60 * NS], "max_deliver": 4},
    ),
    (
        {"ackPolicy": "explicit", "backoff": ["2s"], "ackWait": "30s", "maxDeliver": 3},
        {"backoff": [2 * NS], "ack_wait": 30 * NS},  # server uses backoff[0]: not drift
    ),
    ({"filterSubject": "things.a"}, {"filter_subject": "things.a"}),
    ({"filterSubjects": ["things.b", "things.a"]}, {"filter_subjects": ["things.b", "things.a"]}),
    ({"filterSubjects": ["things.a"]}, {"filter_subjects": ["things.a"]}),
    ({"inactiveThreshold": "0s"}, {"inactive_threshold": 0}),
    ({"replayPolicy": "original"}, {"replay_policy": "original"}),
    ({"deliverSubject": "push.rl", "rateLimitBps": 1_000_000}, {"rate_limit_bps": 1_000_000}),
    ({"ackPolicy": "explicit", "sampleFreq": "50%"}, {"sample_freq": "50%"}),
    ({"sampleFreq": "50"}, {"sample_freq": "50"}),
    ({"maxWaiting": 64}, {"max_waiting": 64}),
    ({"ackPolicy": "explicit", "maxAckPending": 20}, {"max_ack_pending": 20}),
    ({"ackPolicy": "explicit", "maxAckPending": -1}, {"max_ack_pending": -1}),
    ({"ackPolicy": "explicit", "maxAckPending": 0, "ackWait": "0s"}, {"max_ack_pending": 0, "ack_wait": 0}),
    (
        {"deliverSubject": "push.fc", "flowControl": True, "idleHeartbeat": "5s"},
        {"deliver_subject": "push.fc", "flow_control": True, "idle_heartbeat": 5 * NS},
    ),
    ({"headersOnly": True}, {"headers_only": True}),
    (
        {"maxBatch": 100, "maxExpires": "30s", "maxBytes": "1Mi"},
        {"max_batch": 100, "max_expires": 30 * NS, "max_bytes": 1048576},
    ),
    (  # what a durable source's consumer is: acked by the sourcing stream's flow control answers
        {"deliverSubject": "push.src", "ackPolicy": "flowControl"},
        {"deliver_subject": "push.src", "ack_policy": "flow_control"},
    ),
    (
        {"deliverSubject": "push.group", "deliverGroup": "workers"},
        {"deliver_subject": "push.group", "deliver_group": "workers"},
    ),
    ({"inactiveThreshold": "1h"}, {"inactive_threshold": 3600 * NS}),
    ({"replicas": 1}, {"num_replicas": 1}),
    ({"replicas": 0}, {"num_replicas": 0}),
    ({"memStorage": True}, {"mem_storage": True}),
    ({"metadata": {"owner": "billing"}}, {"metadata": {"owner": "billing"}}),
    ({"pauseUntil": "2099-01-01T00:00:00Z"}, {"pause_until": "2099-01-01T00:00:00Z"}),
    ({"pauseUntil": "2020-01-01T00:00:00+00:00"}, {"pause_until": "2020-01-01T00:00:00Z"}),
    (
        {"priorityGroups": ["jobs"], "priorityPolicy": "pinnedClient", "priorityTimeout": "90s"},
        {"priority_groups": ["jobs"], "priority_policy": "pinned_client", "priority_timeout": 90 * NS},
    ),
    ({"priorityGroups": ["jobs"], "priorityPolicy": "overflow"}, {"priority_policy": "overflow"}),
    ({"priorityGroups": ["jobs"], "priorityPolicy": "prioritized"}, {"priority_policy": "prioritized"}),
]


def _fields(cases: list[tuple[dict[str, Any], dict[str, Any]]]) -> set[str]:
    return {key for spec, _ in cases for key in spec}


def _aliases(model: type) -> set[str]:
    return {info.alias or name for name, info in model.model_fields.items()}  # type: ignore[attr-defined]


OPERATOR_ONLY = {"adoptionPolicy", "deletionPolicy", "preventDelete", "connection", "connectionRef", "streamName",
                 "recreateOnImmutableChange", "acceptDataLoss", "terminalPolicy"}


def test_every_stream_field_has_a_case() -> None:
    missing = _aliases(StreamSpec) - OPERATOR_ONLY - _fields(STREAM_CASES + [SEALED_CASE])
    assert missing == set()


def test_every_consumer_field_has_a_case() -> None:
    assert _aliases(ConsumerSpec) - OPERATOR_ONLY - _fields(CONSUMER_CASES) == set()


@pytest.mark.parametrize(("spec", "expected"), STREAM_CASES + [SEALED_CASE])
def test_stream_field_maps_to_wire(spec: dict[str, Any], expected: dict[str, Any]) -> None:
    config = mapping.stream_config(StreamSpec.model_validate(spec), "meta-name")
    assert {key: config[key] for key in expected} == expected
    assert config["name"] == spec.get("name", "meta-name")
    assert set(config) == {mapping.wire_name(_snake(key)) for key in spec} | {"name"}


@pytest.mark.parametrize(("spec", "expected"), CONSUMER_CASES)
def test_consumer_field_maps_to_wire(spec: dict[str, Any], expected: dict[str, Any]) -> None:
    config = mapping.consumer_config(ConsumerSpec.model_validate({"streamName": "S", **spec}), "meta-name")
    assert {key: config[key] for key in expected} == expected
    assert config["durable_name"] == spec.get("durableName", "meta-name")
    assert "stream_name" not in config


def test_operator_fields_never_reach_the_server() -> None:
    spec = StreamSpec.model_validate({"preventDelete": True, "connection": {"servers": ["nats://x:4222"]}})
    assert mapping.stream_config(spec, "s") == {"name": "s"}
    spec = StreamSpec.model_validate({"connectionRef": {"kind": "ClusterJetStreamConnection", "name": "shared"}})
    assert mapping.stream_config(spec, "s") == {"name": "s"}


def _snake(alias: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in alias)


# -- drift, pure ------------------------------------------------------------------------------------

SERVER_STREAM = {
    "name": "S", "subjects": ["S"], "retention": "limits", "max_consumers": -1, "max_msgs": -1,
    "max_bytes": -1, "max_age": 0, "max_msgs_per_subject": -1, "max_msg_size": -1, "discard": "old",
    "storage": "file", "num_replicas": 1, "duplicate_window": 120 * NS, "compression": "none",
    "allow_direct": False, "mirror_direct": False, "sealed": False, "deny_delete": False, "deny_purge": False,
    "allow_rollup_hdrs": False, "consumer_limits": {}, "allow_msg_ttl": False,
    "metadata": {"_nats.level": "5", "_nats.ver": "2.15.1"},
}


def test_drift_ignores_server_normal_forms() -> None:
    desired = {"name": "S", "subjects": ["a", "b"], "max_msgs": 0, "metadata": {}, "no_ack": False}
    assert mapping.stream_drift(desired, {**SERVER_STREAM, "subjects": ["b", "a"]}) == []


def test_an_object_of_zero_values_equals_an_absent_one() -> None:
    assert mapping.stream_drift({"name": "S", "placement": {"tags": []}}, SERVER_STREAM) == []
    assert mapping.stream_drift({"name": "S"}, {**SERVER_STREAM, "placement": {"cluster": ""}}) == []
    assert mapping.stream_drift({"name": "S"}, {**SERVER_STREAM, "placement": {"cluster": "c1"}}) == ["placement"]


def test_drift_lists_changed_fields_by_spec_name() -> None:
    desired = {"name": "S", "subjects": ["a", "b"], "max_age": 3600 * NS, "num_replicas": 1}
    observed = {**SERVER_STREAM, "subjects": ["a"], "max_age": 60 * NS}
    assert mapping.stream_drift(desired, observed) == ["subjects", "maxAge"]


def test_drift_removed_objects_and_metadata_keys() -> None:
    observed = {**SERVER_STREAM, "sources": [{"name": "O"}], "metadata": {"_nats.ver": "2", "added": "by-hand"}}
    assert mapping.stream_drift({"name": "S"}, observed) == ["sources", "metadata"]
    assert mapping.stream_drift({"name": "S", "metadata": {"added": "by-hand"}}, {**observed, "sources": []}) == []


def test_a_metadata_key_with_an_empty_value_is_metadata() -> None:
    """A map is Go's zero value only when empty (an object of zero fields is one): `{"k": ""}` is not."""
    assert mapping.stream_drift({"name": "S", "metadata": {"k": ""}}, {**SERVER_STREAM, "metadata": None}) == [
        "metadata"]
    assert mapping.stream_drift({"name": "S", "metadata": None}, {**SERVER_STREAM, "metadata": {"k": ""}}) == [
        "metadata"]
    assert mapping.stream_drift({"name": "S", "metadata": {}}, {**SERVER_STREAM, "metadata": None}) == []
    assert mapping.stream_drift({"name": "S", "metadata": {"k": ""}}, {**SERVER_STREAM, "metadata": {"k": ""}}) == []
    observed = {"durable_name": "c", "ack_policy": "explicit", "ack_wait": 30 * NS, "max_waiting": 512,
                "metadata": None}
    assert mapping.consumer_drift({"durable_name": "c", "ack_policy": "explicit", "metadata": {"k": ""}},
                                  observed) == ["metadata"]


def test_drift_notices_changes_to_fields_left_unset() -> None:
    observed = {**SERVER_STREAM, "max_msgs": 50, "deny_delete": True, "allow_batched": True}
    assert sorted(mapping.stream_drift({"name": "S"}, observed)) == ["allowBatchPublish", "denyDelete", "maxMsgs"]


def test_drift_skips_what_sealing_forces() -> None:
    desired = {"name": "S", "sealed": True, "max_age": 3600 * NS}
    observed = {**SERVER_STREAM, "sealed": True, "deny_delete": True, "deny_purge": True, "discard": "new"}
    assert mapping.stream_drift(desired, observed) == []


def test_drift_compares_times_across_zones_and_nested_subsets() -> None:
    desired = {"name": "S", "sources": [{"name": "O", "opt_start_time": "2026-01-01T00:00:00Z"}]}
    gathering = {k: v for k, v in SERVER_STREAM.items() if k not in ("subjects", "duplicate_window")}
    same = {**gathering, "sources": [{"name": "O", "opt_start_time": "2026-01-01T01:00:00+01:00", "x": 1}]}
    later = {**gathering, "sources": [{"name": "O", "opt_start_time": "2026-01-01T00:00:01Z"}]}
    assert mapping.stream_drift(desired, same) == []
    assert mapping.stream_drift(desired, later) == ["sources"]


def test_consumer_drift_on_unset_fixed_defaults() -> None:
    observed = {"durable_name": "c", "deliver_policy": "all", "ack_policy": "explicit", "replay_policy": "instant",
                "max_deliver": -1, "ack_wait": 30 * NS, "max_ack_pending": 1000, "max_waiting": 512}
    assert mapping.consumer_drift({"durable_name": "c"}, observed) == ["ackWait", "ackPolicy"]
    assert mapping.consumer_drift({"durable_name": "c", "ack_policy": "explicit"}, observed) == []


# -- against the real nats-server -------------------------------------------------------------------


@pytest.fixture(scope="module", params=[servers.NATS_SERVER, servers.JSBROKER])
def server(request: pytest.FixtureRequest) -> Iterator[servers.ServerHandle]:
    """The reference nats-server, and jsbroker which must accept the same configs."""
    with servers.launch(request.param) as handle:
        yield handle


@pytest.fixture
async def nc(server: servers.ServerHandle) -> AsyncIterator[nats.NATS]:
    client = await nats.connect(server.url)
    try:
        yield client
    finally:
        await client.close()


async def api(nc: nats.NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    reply = await nc.request(f"$JS.API.{subject}", json.dumps(body).encode() if body is not None else b"", timeout=5)
    return json.loads(reply.data)


def is_jsbroker(nc: nats.NATS) -> bool:
    return "go" not in nc._server_info  # nats-server's INFO names its Go version, jsbroker's does not


def jsbroker_refused_field(body: dict[str, Any] | None) -> str | None:
    """The first field of a consumer request that jsbroker refuses (consumer_config.UNSUPPORTED; it refuses
    no stream field)."""
    unset = (None, False, 0, "", "default", "none", {}, [])
    values = (body or {}).get("config") or {}
    return next((key for key in consumer_config.UNSUPPORTED if values.get(key) not in unset), None)


async def ok(nc: nats.NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """The answer, which must not be an error, except jsbroker's refusal of a field it does not support:
    then that refusal is checked (error code, the field named first) and the case skipped."""
    response = await api(nc, subject, body)
    refused = jsbroker_refused_field(body) if is_jsbroker(nc) else None
    if refused is not None and subject.split(".")[0] in ("STREAM", "CONSUMER"):
        error = response.get("error") or {}
        assert error.get("err_code") == 10012, f"{subject} {body}: jsbroker accepted {refused!r}: {response}"
        assert error["description"].startswith(f"{refused}: ") and "jsbroker" in error["description"], error
        pytest.skip(f"jsbroker refuses it, as expected: {error['description']}")
    assert "error" not in response, f"{subject} {body} -> {response['error']}"
    return response


async def ensure_origins(nc: nats.NATS) -> None:
    for name in ("ORIGIN", "OTHER"):
        await ok(nc, f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name.lower()}.>"], "allow_direct": True})


def _stream_spec(index: int, spec: dict[str, Any]) -> StreamSpec:
    if not {"mirror", "sources", "subjects"} & set(spec):
        spec = {**spec, "subjects": [f"case{index}.>"]}
    return StreamSpec.model_validate(spec)


@pytest.mark.parametrize("index", range(len(STREAM_CASES)))
async def test_stream_case_accepted_by_the_server_without_drift(nc: nats.NATS, index: int) -> None:
    await ensure_origins(nc)
    spec, _ = STREAM_CASES[index]
    config = mapping.stream_config(_stream_spec(index, spec), f"case{index}")
    name = config["name"]
    created = await ok(nc, f"STREAM.CREATE.{name}", config)
    try:
        assert mapping.stream_drift(config, created["config"]) == []
        info = await ok(nc, f"STREAM.INFO.{name}")
        assert mapping.stream_drift(config, info["config"]) == []
        # Re-sending the same config as an update is accepted and still shows no drift.
        updated = await ok(nc, f"STREAM.UPDATE.{name}", config)
        assert mapping.stream_drift(config, updated["config"]) == []
    finally:
        await ok(nc, f"STREAM.DELETE.{name}")


async def test_sealed_stream_via_update_without_drift(nc: nats.NATS) -> None:
    spec, _ = SEALED_CASE
    config = mapping.stream_config(_stream_spec(900, spec), "sealed")
    await ok(nc, "STREAM.CREATE.sealed", {k: v for k, v in config.items() if k != "sealed"})
    try:
        updated = await ok(nc, "STREAM.UPDATE.sealed", config)
        assert updated["config"]["max_age"] == 0  # forced by the server when sealing
        assert mapping.stream_drift(config, updated["config"]) == []
    finally:
        await ok(nc, "STREAM.DELETE.sealed")


async def test_server_side_change_is_reported_as_drift(nc: nats.NATS) -> None:
    config = mapping.stream_config(_stream_spec(901, {"maxAge": "1h", "maxMsgs": 10}), "drifted")
    await ok(nc, "STREAM.CREATE.drifted", config)
    try:
        changed = await ok(nc, "STREAM.UPDATE.drifted", {**config, "max_msgs": 20, "description": "by hand"})
        assert mapping.stream_drift(config, changed["config"]) == ["maxMsgs", "description"]
    finally:
        await ok(nc, "STREAM.DELETE.drifted")


@pytest.mark.parametrize("index", range(len(CONSUMER_CASES)))
async def test_consumer_case_accepted_by_the_server_without_drift(nc: nats.NATS, index: int) -> None:
    spec, _ = CONSUMER_CASES[index]
    stream = f"CSTREAM{index}"
    await ok(nc, f"STREAM.CREATE.{stream}", {"name": stream, "subjects": [f"c{index}.things.>", f"c{index}.x"]})
    try:
        spec = _consumer_subjects(spec, index)
        config = mapping.consumer_config(ConsumerSpec.model_validate({"streamName": stream, **spec}), f"c{index}")
        durable = config["durable_name"]
        created = await ok(nc, f"CONSUMER.CREATE.{stream}.{durable}", {"stream_name": stream, "config": config})
        assert mapping.consumer_drift(config, created["config"]) == []
        info = await ok(nc, f"CONSUMER.INFO.{stream}.{durable}")
        assert mapping.consumer_drift(config, info["config"]) == []
        updated = await ok(nc, f"CONSUMER.CREATE.{stream}.{durable}", {"stream_name": stream, "config": config})
        assert mapping.consumer_drift(config, updated["config"]) == []
    finally:
        await ok(nc, f"STREAM.DELETE.{stream}")


def _consumer_subjects(spec: dict[str, Any], index: int) -> dict[str, Any]:
    """Point the case's filter subjects at its own stream."""
    out = dict(spec)
    if "filterSubject" in out:
        out["filterSubject"] = f"c{index}." + out["filterSubject"]
    if "filterSubjects" in out:
        out["filterSubjects"] = [f"c{index}." + s for s in out["filterSubjects"]]
    return out


# -- validation at the boundary ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"maxAge": "1 hour"}, "invalid duration"),
        ({"maxBytes": "1GB"}, "invalid size"),
        ({"maxAg": "1h"}, "maxAg"),
        ({"retention": "forever"}, "retention"),
        ({"name": "a.b"}, "name"),
        ({"metadata": {"_nats.ver": "1"}}, "reserved"),
        ({"metadata": {"jsoperator.io/uid": "1"}}, "reserved"),
        ({"mirror": {"name": "O"}, "subjects": ["x"]}, "a mirror cannot also set"),
        ({"denyPurge": True, "allowRollupHdrs": True}, "allowRollupHdrs needs purges"),
        ({"subjectDeleteMarkerTtl": "1m", "denyPurge": True}, "subjectDeleteMarkerTtl needs roll-ups"),
        ({"allowMsgSchedules": True, "allowRollupHdrs": False}, "allowMsgSchedules needs roll-ups"),
        ({"subjectDeleteMarkerTtl": "1m", "allowMsgTtl": False}, "needs per-message TTLs"),
    ],
)
def test_stream_spec_refuses_bad_values(spec: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        StreamSpec.model_validate(spec)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({}, "streamName"),
        ({"streamName": "S", "optStartSeq": 3}, "byStartSequence go together"),
        ({"streamName": "S", "deliverPolicy": "byStartTime"}, "byStartTime go together"),
        ({"streamName": "S", "filterSubject": "a", "filterSubjects": ["b"]}, "not both"),
        ({"streamName": "S", "backoff": []}, "at least one"),
        ({"streamName": "S", "optStartTime": "2026-01-01T00:00:00", "deliverPolicy": "byStartTime"}, "timezone"),
    ],
)
def test_consumer_spec_refuses_bad_values(spec: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        ConsumerSpec.model_validate(spec)
