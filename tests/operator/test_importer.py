"""`jsoperator import`'s reverse mapping (importer.py): server config -> spec, minimal and without drift.

- Pure: every StreamSpec / ConsumerSpec field of test_mapping's cases, and every KeyValueSpec /
  ObjectStoreSpec field, round-trips spec -> wire -> spec; resource names; what is skipped (ephemeral
  consumers), imported as a Stream (a bucket stream no bucket spec can say) and refused (fields no spec
  can hold).
- Against nats-server and jsbroker: each case (and buckets made by nats-py) is created on the server,
  imported from what the server reports, and the imported spec sent back as an update leaves the
  server's config byte for byte the same (after JSON normalisation): it says exactly what the server
  has, and no more than the case said.
The command itself (flags, files, errors) and the apply-and-adopt round trip are in test_e2e_import.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

import nats
import pytest
import yaml

from jsoperator import buckets, cli, crdgen, importer, mapping
from jsoperator.models import ConnectionSpec, ConsumerSpec, KeyValueSpec, ObjectStoreSpec, StreamSpec
from tests import servers
from tests.operator.test_mapping import (  # noqa: F401  (server, nc: fixtures)
    CONSUMER_CASES,
    SEALED_CASE,
    STREAM_CASES,
    _consumer_subjects,
    _stream_spec,
    ensure_origins,
    nc,
    ok,
    server,
)

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
POLICIES = {"adoptionPolicy", "deletionPolicy"}
POLICY_VALUES = {"adoptionPolicy": "adopt", "deletionPolicy": "retain"}


def _nonzero(config: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in config.items() if not importer._is_zero(value)}


# -- spec -> wire -> spec -----------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "expected"), STREAM_CASES + [SEALED_CASE])
def test_every_stream_field_round_trips(spec: dict[str, Any], expected: dict[str, Any]) -> None:
    wire = mapping.stream_config(StreamSpec.model_validate(spec), "meta-name")
    back = importer.spec_fields(StreamSpec, wire)
    assert mapping.stream_config(StreamSpec.model_validate(back), "meta-name") == _nonzero(wire)
    assert set(back) == {key for key in spec if not importer._is_zero(wire[mapping.wire_name(_snake(key))])} | {"name"}


@pytest.mark.parametrize(("spec", "expected"), CONSUMER_CASES)
def test_every_consumer_field_round_trips(spec: dict[str, Any], expected: dict[str, Any]) -> None:
    wire = mapping.consumer_config(ConsumerSpec.model_validate({"streamName": "S", **spec}), "meta-name")
    back = importer.spec_fields(ConsumerSpec, wire)
    assert mapping.consumer_config(ConsumerSpec.model_validate({"streamName": "S", **back}), "x") == _nonzero(wire)
    assert set(back) == {key for key in spec if not importer._is_zero(wire[mapping.wire_name(_snake(key))])} | {
        "durableName"}


# Every bucket spec field, at a value other than its default (the import leaves defaults out).
KV_CASES: list[dict[str, Any]] = [
    {},
    {"bucket": "Orders_1", "description": "d", "history": 5, "ttl": "30s", "maxValueSize": "1Ki", "maxBytes": "1Mi",
     "storage": "memory", "compression": True, "metadata": {"team": "a"},
     "republish": {"src": ">", "dest": "repub.>", "headersOnly": True}},
    {"ttl": "1h", "allowMsgTtl": True},
    {"limitMarkerTtl": "5m"},
    {"sources": [{"name": "origin"}, {"name": "KV_KV_odd"}, {"name": "ORIGIN", "subjectTransforms": [
        {"src": "origin.>", "dest": "$KV.case4.origin.>"}]}]},
    {"mirror": {"name": "origin", "filterSubject": "$KV.origin.a.>"}},
    {"replicas": 3, "placement": {"cluster": "east", "tags": ["ssd"]}},  # pure only: one server has no cluster
]
OBJ_CASES: list[dict[str, Any]] = [
    {},
    {"bucket": "Files_1", "description": "d", "ttl": "2h", "maxBytes": "1Mi", "storage": "memory",
     "compression": True, "metadata": {"team": "a"}},
    {"sealed": True},
    {"replicas": 3, "placement": {"cluster": "east"}},
]
BUCKET_CASES = [("KeyValue", KeyValueSpec, case) for case in KV_CASES] + [
    ("ObjectStore", ObjectStoreSpec, case) for case in OBJ_CASES]


def _as_reported(kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """A bucket stream config as the server reports it: the duplicate window it derives filled in."""
    window = min(config.get("max_age") or 120 * 10**9, 120 * 10**9)
    return {"duplicate_window": window, **config} if kind == "ObjectStore" else config


@pytest.mark.parametrize(("kind", "model", "case"), BUCKET_CASES)
def test_every_bucket_field_round_trips(kind: str, model: Any, case: dict[str, Any]) -> None:
    spec = model.model_validate(case)
    name = f"case{BUCKET_CASES.index((kind, model, case))}"
    to_config = buckets.key_value_config if kind == "KeyValue" else buckets.object_store_config
    wire = _as_reported(kind, to_config(spec, name))
    manifest = importer.BUILDERS[kind](wire, name, importer.Options())
    back = {key: value for key, value in manifest["spec"].items() if key not in POLICIES}
    assert manifest["kind"] == kind and manifest["metadata"] == {"name": name}
    assert set(back) == set(case)  # all of it, and no more
    assert model.model_validate(back) == spec


def test_the_bucket_cases_set_every_bucket_field() -> None:
    for model, cases in ((KeyValueSpec, KV_CASES), (ObjectStoreSpec, OBJ_CASES)):
        fields = {info.alias for field, info in model.model_fields.items() if field not in mapping.OPERATOR_FIELDS}
        assert fields == {key for case in cases for key in case}, model


def test_values_are_written_as_users_write_them() -> None:
    wire = {"durable_name": "d", "ack_wait": 90 * 10**9, "backoff": [10**9, 1_500_000_000], "max_bytes": 1024,
            "deliver_policy": "by_start_sequence", "opt_start_seq": 3, "priority_policy": "pinned_client",
            "pause_until": "2099-01-01T00:00:00Z"}
    assert importer.spec_fields(ConsumerSpec, wire) == {
        "durableName": "d", "deliverPolicy": "byStartSequence", "optStartSeq": 3, "ackWait": "1m30s",
        "backoff": ["1s", "1.5s"], "maxBytes": 1024, "pauseUntil": "2099-01-01T00:00:00Z",
        "priorityPolicy": "pinnedClient"}


def test_durations_are_exact_or_refused() -> None:
    assert importer.spec_fields(StreamSpec, {"name": "S", "max_age": 3600 * 10**9 + 1}) == {
        "name": "S", "maxAge": "1h0.000000001s"}
    with pytest.raises(importer.Unrepresentable, match="the duration -5ns cannot be written as a spec duration"):
        importer.spec_fields(StreamSpec, {"name": "S", "max_age": -5})


def test_server_metadata_is_not_imported_and_an_empty_value_is() -> None:
    fields = importer.spec_fields(StreamSpec, {"name": "S", "metadata": {"_nats.ver": "2.15.1", "team": ""}})
    assert fields == {"name": "S", "metadata": {"team": ""}}
    assert importer.spec_fields(StreamSpec, {"name": "S", "metadata": {"_nats.level": "1"}}) == {"name": "S"}


def test_ownership_marks_are_not_imported() -> None:
    """The imported resource writes its own marks when it adopts the object: another's are no spec metadata."""
    marks = {"jsoperator.io/cluster": "east", "jsoperator.io/uid": "u1", "jsoperator.io/name": "orders"}
    fields = importer.spec_fields(StreamSpec, {"name": "S", "metadata": {**marks, "team": "a"}})
    assert fields == {"name": "S", "metadata": {"team": "a"}}
    assert importer.spec_fields(ConsumerSpec, {"durable_name": "C", "metadata": marks}) == {"durableName": "C"}
    owner = {**marks, "jsoperator.io/kind": "Stream", "jsoperator.io/namespace": "shop"}
    out = importer.import_server({"S": _stream("S", metadata={**owner, "team": "a"})}, {}, importer.Options(), NOW)
    assert out.notes == ["stream S belongs to Stream shop/orders (uid u1) of cluster east: the imported resource "
                         "(adoptionPolicy: adopt) takes it over once applied and that one stops changing it; delete "
                         "that resource with deletionPolicy: retain first to hand it over cleanly"]
    assert out.manifests[0]["spec"]["metadata"] == {"team": "a"}


def test_a_server_field_no_spec_can_hold_is_refused_not_dropped() -> None:
    with pytest.raises(importer.Unrepresentable, match=r"the server sets allow_future_thing=true, which"):
        importer.spec_fields(StreamSpec, {"name": "S", "allow_future_thing": True, "new_zero": 0})
    with pytest.raises(importer.Unrepresentable, match=r"domain=\"hub\""):
        importer.spec_fields(StreamSpec, {"name": "S", "mirror": {"name": "O", "domain": "hub"}})


def test_only_the_consumer_limits_go_unchecked_when_unset() -> None:
    """The importer leaves a field out when its absence shows no drift; the drift check must therefore
    compare every unset consumer field except the two the importer handles itself (importer.py)."""
    full = {"durable_name": "d", "ack_policy": "explicit"}

    def probe(key: str) -> Any:  # equal to no value: a compared key shows up in the drift
        return "2999-01-01T00:00:00Z" if key == "pause_until" else object()

    unchecked = {key for key in map(mapping.wire_name, ConsumerSpec.model_fields) if key not in mapping.OPERATOR_FIELDS
                 and key not in mapping.consumer_diff(full, {**full, key: probe(key)})}
    assert unchecked == {"max_ack_pending", "inactive_threshold"}
    stream_unchecked = {key for key in map(mapping.wire_name, StreamSpec.model_fields)
                        if key not in mapping.OPERATOR_FIELDS
                        and key not in mapping.stream_diff({"name": "S"}, {"name": "S", key: probe(key)})}
    assert stream_unchecked == set()


def test_api_version_is_the_crds() -> None:
    assert importer.API_VERSION == f"{crdgen.GROUP}/{crdgen.VERSION}"


def _snake(alias: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in alias)


# -- names --------------------------------------------------------------------------------------------

LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@pytest.mark.parametrize(("server_name", "expected"), [
    ("orders", "orders"),
    ("ORDERS", "orders"),
    ("Orders_2024-v2", "orders-2024-v2"),
    ("__Orders__", "orders"),
    ("a-", "a"),
])
def test_resource_names_are_dns_labels_from_server_names(server_name: str, expected: str) -> None:
    assert importer.resource_names({server_name: server_name}, "stream") == {server_name: expected}


def test_a_name_that_cannot_be_a_resource_name_gets_a_hashed_one() -> None:
    names = importer.resource_names({n: n for n in ("___", "Ωμέγα", "x" * 255, "orders", "ORDERS", "Orders")},
                                    "stream")
    assert all(LABEL.match(name) for name in names.values()), names
    assert len(set(names.values())) == len(names)
    assert names["orders"] == "orders"  # the name that is exactly the label keeps it
    assert names["ORDERS"].startswith("orders-") and names["Orders"].startswith("orders-")
    assert names["___"].startswith("stream-") and names["Ωμέγα"].startswith("stream-")
    assert names["x" * 255].startswith("x" * 50) and len(names["x" * 255]) == 63
    assert importer.resource_names({n: n for n in ("___", "Ωμέγα")}, "stream") == {
        n: names[n] for n in ("___", "Ωμέγα")}  # stable: the hash is of the name only


# -- a whole server, pure -------------------------------------------------------------------------------


def _stream(name: str, **config: Any) -> dict[str, Any]:
    return {"config": {"name": name, "subjects": [name], "retention": "limits", "storage": "file",
                       "num_replicas": 1, "duplicate_window": 120 * 10**9, **config}}


def _consumer(**config: Any) -> dict[str, Any]:
    return {"config": {"deliver_policy": "all", "ack_policy": "none", "max_deliver": -1, "replay_policy": "instant",
                       "max_waiting": 512, "num_replicas": 0, **config}}


def test_buckets_are_bucket_resources_and_ephemeral_consumers_are_skipped() -> None:
    kv = buckets.key_value_config(KeyValueSpec(), "config")
    streams = {"KV_config": {"config": kv}, "ORDERS": _stream("ORDERS"), "OBJ_my.files": {"config": _as_reported(
        "ObjectStore", buckets.object_store_config(ObjectStoreSpec(bucket="my_files"), "x"))}}
    consumers = {"ORDERS": {"eph": _consumer(inactive_threshold=5 * 10**9), "work": _consumer(durable_name="work")},
                 "KV_config": {"w": _consumer(durable_name="w")}}
    out = importer.import_server(streams, consumers, importer.Options(), NOW)
    assert out.notes == [
        "consumer eph of stream ORDERS skipped: it is ephemeral (no durable name), the server removes it once idle"]
    assert out.failed == 0
    assert [(m["kind"], m["metadata"]["name"]) for m in out.manifests] == [
        ("KeyValue", "config"), ("Consumer", "kv-config-w"), ("ObjectStore", "my-files"), ("Stream", "orders"),
        ("Consumer", "orders-work")]
    assert out.manifests[0] == {
        "apiVersion": "jsoperator.io/v1alpha1", "kind": "KeyValue", "metadata": {"name": "config"},
        "spec": {"adoptionPolicy": "adopt", "deletionPolicy": "retain"}}
    assert out.manifests[1]["spec"] == {"streamName": "KV_config", "durableName": "w", "adoptionPolicy": "adopt",
                                        "deletionPolicy": "retain"}
    assert out.manifests[2]["spec"] == {"bucket": "my_files", "adoptionPolicy": "adopt", "deletionPolicy": "retain"}
    assert out.manifests[3] == {
        "apiVersion": "jsoperator.io/v1alpha1", "kind": "Stream", "metadata": {"name": "orders"},
        "spec": {"name": "ORDERS", "adoptionPolicy": "adopt", "deletionPolicy": "retain"}}
    assert out.manifests[4]["spec"] == {"streamName": "ORDERS", "durableName": "work", "adoptionPolicy": "adopt",
                                        "deletionPolicy": "retain"}


# Bucket streams no bucket spec can say: (what the server has beyond the bucket's stream, the note's reason).
NOT_BUCKETS = [
    ({"allow_direct": False, "allow_msg_ttl": True},  # nats-py's create_key_value
     "it would change allowDirect (server: false, KeyValue: true)"),
    ({"max_msgs_per_subject": -1}, "spec.history: Input should be greater than or equal to 1"),
    ({"subjects": ["$KV.b.>", "more.>"]}, 'it would change subjects (server: ["$KV.b.>", "more.>"], '
                                          'KeyValue: ["$KV.b.>"])'),
    ({"max_msgs": 10, "discard_new_per_subject": True},
     "it would change maxMsgs (server: 10, KeyValue: -1), discardNewPerSubject (server: true, KeyValue: false)"),
    ({"mirror": {"name": "ORDERS"}, "mirror_direct": True, "subjects": None},
     'it would change mirror (server: {"name": "ORDERS"}, KeyValue: {"name": "KV_ORDERS"})'),
    ({"sources": [{"name": "KV_a"}]}, "it would change sources"),
]


@pytest.mark.parametrize(("server", "reason"), NOT_BUCKETS)
def test_a_bucket_no_bucket_spec_can_say_is_a_stream_with_a_note(server: dict[str, Any], reason: str) -> None:
    config = {**buckets.key_value_config(KeyValueSpec(), "b"), **server}
    config = {key: value for key, value in config.items() if value is not None}
    out = importer.import_server({"KV_b": {"config": config}}, {"KV_b": {"w": _consumer(durable_name="w")}},
                                 importer.Options(), NOW)
    assert [(m["kind"], m["metadata"]["name"]) for m in out.manifests] == [("Stream", "kv-b"), ("Consumer", "kv-b-w")]
    assert out.failed == 0 and len(out.notes) == 1
    assert out.notes[0].startswith("bucket b imported as the Stream kv-b, which adopts it with no change: as a "
                                   f"KeyValue, {reason}"), out.notes[0]
    spec = out.manifests[0]["spec"]
    assert spec["name"] == "KV_b"
    assert mapping.stream_drift(mapping.stream_config(StreamSpec.model_validate(spec), "kv-b"), config) == []


def test_a_bucket_no_spec_can_say_is_one_failure_note() -> None:
    config = {**buckets.object_store_config(ObjectStoreSpec(), "f"), "future_limit": 3}
    out = importer.import_server({"OBJ_f": {"config": config}}, {}, importer.Options(), NOW)
    assert (out.manifests, out.failed) == ([], 1)
    assert out.notes == ["stream OBJ_f not imported: the server sets future_limit=3, which this jsoperator version "
                         "has no spec field for"]


def test_options_reach_every_manifest() -> None:
    connection = ConnectionSpec.model_validate({"servers": ["nats://nats:4222"],
                                                "credentialsSecretRef": {"name": "nats", "key": "creds"}})
    options = importer.Options("prod", connection, "delete")
    out = importer.import_server({"orders": _stream("orders")}, {"orders": {"w": _consumer(durable_name="w")}},
                                 options, NOW)
    for manifest in out.manifests:
        assert manifest["metadata"]["namespace"] == "prod"
        assert manifest["spec"]["deletionPolicy"] == "delete"
        assert manifest["spec"]["connection"] == {"servers": ["nats://nats:4222"],
                                                  "credentialsSecretRef": {"name": "nats", "key": "creds"}}
    assert "name" not in out.manifests[0]["spec"]  # the resource name is the stream name


def test_consumer_limits_are_left_out_only_at_what_the_server_picks() -> None:
    limited = _stream("S", consumer_limits={"max_ack_pending": 50, "inactive_threshold": 60 * 10**9})
    consumers = {"a": _consumer(durable_name="a", ack_policy="explicit", ack_wait=30 * 10**9, max_ack_pending=50,
                                inactive_threshold=60 * 10**9),
                 "b": _consumer(durable_name="b", ack_policy="explicit", ack_wait=30 * 10**9, max_ack_pending=20,
                                inactive_threshold=10 * 10**9)}
    out = importer.import_server({"S": limited}, {"S": consumers}, importer.Options(), NOW)
    specs = {m["metadata"]["name"]: m["spec"] for m in out.manifests if m["kind"] == "Consumer"}
    assert "maxAckPending" not in specs["s-a"] and "inactiveThreshold" not in specs["s-a"]
    assert (specs["s-b"]["maxAckPending"], specs["s-b"]["inactiveThreshold"]) == (20, "10s")
    plain = {"c": _consumer(durable_name="c", ack_policy="explicit", ack_wait=30 * 10**9, max_ack_pending=1000)}
    out = importer.import_server({"T": _stream("T")}, {"T": plain}, importer.Options(), NOW)
    assert out.manifests[1]["spec"] == {"streamName": "T", "durableName": "c", "ackPolicy": "explicit",
                                        "adoptionPolicy": "adopt", "deletionPolicy": "retain"}


def test_an_object_the_spec_cannot_express_is_reported_and_the_rest_imported() -> None:
    streams = {"A": _stream("A", future_limit=3), "B": _stream("B")}
    out = importer.import_server(streams, {}, importer.Options(), NOW)
    assert out.failed == 1
    assert out.notes == ["stream A not imported: the server sets future_limit=3, which this jsoperator version has "
                         "no spec field for"]
    assert [m["metadata"]["name"] for m in out.manifests] == ["b"]


def test_yaml_quotes_what_would_read_back_as_another_type() -> None:
    manifest = importer._manifest("Consumer", "c", {"streamName": "S", "pauseUntil": "2099-01-01T00:00:00Z",
                                                    "description": "yes"}, importer.Options())
    text = importer.render([manifest])
    assert "pauseUntil: '2099-01-01T00:00:00Z'" in text and "description: 'yes'" in text


# -- against the servers: import, send back, nothing changes ----------------------------------------


def _normal(config: dict[str, Any]) -> str:
    """JSON with sorted keys; an empty object counts as absent (``placement: {}`` sent with no tags comes back
    as ``{}`` and means no placement, as no ``placement`` does)."""
    return json.dumps({key: value for key, value in config.items() if value != {}}, sort_keys=True)


def _minimal_keys(imported: dict[str, Any], case: dict[str, Any], *identity: str) -> set[str]:
    """Fields the import wrote that the case did not set (must be none)."""
    return set(imported) - set(case) - POLICIES - set(identity)


@pytest.mark.parametrize("index", range(len(STREAM_CASES)))
async def test_imported_stream_says_what_the_server_has(nc: nats.NATS, index: int) -> None:
    await ensure_origins(nc)
    case, _ = STREAM_CASES[index]
    config = mapping.stream_config(_stream_spec(index, case), f"case{index}")
    name = config["name"]
    await ok(nc, f"STREAM.CREATE.{name}", config)
    try:
        before = (await ok(nc, f"STREAM.INFO.{name}"))["config"]
        resource = importer.resource_names({name: name}, "stream")[name]
        spec = importer.stream_manifest(before, resource, importer.Options())["spec"]
        resent = mapping.stream_config(StreamSpec.model_validate(spec), resource)
        after = (await ok(nc, f"STREAM.UPDATE.{name}", resent))["config"]
        assert _normal(after) == _normal(before)
        assert _minimal_keys(spec, _stream_spec(index, case).model_dump(by_alias=True, exclude_none=True),
                             "name") == set()
    finally:
        await ok(nc, f"STREAM.DELETE.{name}")


async def test_imported_sealed_stream_says_what_the_server_has(nc: nats.NATS) -> None:
    case, _ = SEALED_CASE
    config = mapping.stream_config(_stream_spec(900, case), "sealed")
    await ok(nc, "STREAM.CREATE.sealed", {k: v for k, v in config.items() if k != "sealed"})
    try:
        before = (await ok(nc, "STREAM.UPDATE.sealed", config))["config"]
        spec = importer.stream_manifest(before, "sealed", importer.Options())["spec"]
        assert spec == {"subjects": ["case900.>"], "sealed": True, "adoptionPolicy": "adopt",
                        "deletionPolicy": "retain"}  # what sealing forced is the server's to set
        resent = mapping.stream_config(StreamSpec.model_validate(spec), "sealed")
        assert mapping.stream_drift(resent, before) == []
    finally:
        await ok(nc, "STREAM.DELETE.sealed")


ORIGIN_BUCKETS = ("KV_origin", "KV_KV_odd")


async def _bucket_origins(nc: nats.NATS) -> None:
    """What the bucket cases mirror and source: the buckets origin and KV_odd, the stream ORIGIN."""
    await ensure_origins(nc)
    for stream in ORIGIN_BUCKETS:
        config = buckets.key_value_config(KeyValueSpec(), stream.removeprefix("KV_"))
        await ok(nc, f"STREAM.CREATE.{stream}", config)


async def _import_one(nc: nats.NATS, stream: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(the server's config, the manifest importing it, the notes), after checking that the manifest sent
    back changes nothing: no drift, and (unless sealed: the server takes no update then) an update
    leaves the config byte for byte the same."""
    before = (await ok(nc, f"STREAM.INFO.{stream}"))["config"]
    out = importer.import_server({stream: {"config": before}}, {}, importer.Options(), NOW)
    [manifest] = out.manifests
    _, resent = buckets.desired(manifest["kind"], manifest["spec"], manifest["metadata"]["name"])
    assert mapping.stream_drift(resent, before) == []
    if not before.get("sealed"):
        after = (await ok(nc, f"STREAM.UPDATE.{stream}", resent))["config"]
        assert _normal(after) == _normal(before)
    return before, manifest, out.notes


SERVER_BUCKET_CASES = [i for i, (_, _, case) in enumerate(BUCKET_CASES) if "replicas" not in case]


async def create_bucket_case(nc: nats.NATS, index: int) -> str:
    """BUCKET_CASES[index] made on the server as its resource would (sealed after the create); its stream."""
    kind, _, case = BUCKET_CASES[index]
    _, config = buckets.desired(kind, case, f"case{index}")
    sealed = config.pop("sealed", False)
    await ok(nc, f"STREAM.CREATE.{config['name']}", config)
    if sealed:
        await ok(nc, f"STREAM.UPDATE.{config['name']}", {**config, "sealed": True})
    return str(config["name"])


@pytest.mark.parametrize("index", SERVER_BUCKET_CASES)
async def test_imported_bucket_says_what_the_server_has(nc: nats.NATS, index: int) -> None:
    await _bucket_origins(nc)
    kind, model, case = BUCKET_CASES[index]
    stream = await create_bucket_case(nc, index)
    try:
        _, manifest, notes = await _import_one(nc, stream)
        assert (manifest["kind"], notes) == (kind, [])
        assert model.model_validate(manifest["spec"]) == model.model_validate({**case, **{
            key: value for key, value in manifest["spec"].items() if key in POLICIES}})
    finally:
        for name in (stream, *ORIGIN_BUCKETS):  # the other tests of this server see no buckets
            await ok(nc, f"STREAM.DELETE.{name}")


async def test_buckets_nats_py_made_are_imported_with_no_change(nc: nats.NATS) -> None:
    """nats-py's KeyValue has allow_direct off unless asked (a KeyValue resource would turn it on): a Stream;
    with direct=True, and its object stores, they are bucket resources (allowMsgTtl: nats-py always sets it)."""
    js = nc.jetstream()
    await js.create_key_value(bucket="pykv", history=3, ttl=60, description="py")
    await js.create_key_value(bucket="pydirect", direct=True, max_value_size=1024)
    await js.create_object_store("pyobj", description="files", max_bytes=1 << 20)
    try:
        _, manifest, notes = await _import_one(nc, "KV_pykv")
        assert manifest["kind"] == "Stream" and manifest["spec"]["name"] == "KV_pykv"
        assert notes == ["bucket pykv imported as the Stream kv-pykv, which adopts it with no change: as a KeyValue, "
                         "it would change allowDirect (server: false, KeyValue: true)"]
        _, manifest, notes = await _import_one(nc, "KV_pydirect")
        assert (manifest["kind"], notes) == ("KeyValue", [])
        assert manifest["spec"] == {"maxValueSize": 1024, "allowMsgTtl": True, **POLICY_VALUES}
        _, manifest, notes = await _import_one(nc, "OBJ_pyobj")
        assert (manifest["kind"], notes) == ("ObjectStore", [])
        assert manifest["spec"] == {"description": "files", "maxBytes": 1 << 20, **POLICY_VALUES}
    finally:
        for stream in ("KV_pykv", "KV_pydirect", "OBJ_pyobj"):
            await ok(nc, f"STREAM.DELETE.{stream}")


@pytest.mark.parametrize("index", range(len(CONSUMER_CASES)))
async def test_imported_consumer_says_what_the_server_has(nc: nats.NATS, index: int) -> None:
    case, _ = CONSUMER_CASES[index]
    stream = f"ISTREAM{index}"
    subjects = [f"c{index}.things.>", f"c{index}.x"]
    created = await ok(nc, f"STREAM.CREATE.{stream}", {"name": stream, "subjects": subjects})
    try:
        case = _consumer_subjects(case, index)
        config = mapping.consumer_config(ConsumerSpec.model_validate({"streamName": stream, **case}), f"c{index}")
        durable = config["durable_name"]
        await ok(nc, f"CONSUMER.CREATE.{stream}.{durable}", {"stream_name": stream, "config": config})
        before = (await ok(nc, f"CONSUMER.INFO.{stream}.{durable}"))["config"]
        resource = importer.resource_names({durable: f"{stream}-{durable}"}, "consumer")[durable]
        now = datetime.now(timezone.utc)
        spec = importer.consumer_manifest(before, stream, created["config"], resource, importer.Options(), now)["spec"]
        resent = mapping.consumer_config(ConsumerSpec.model_validate(spec), resource)
        assert mapping.consumer_drift(resent, before, now=now) == []
        body = {"stream_name": stream, "config": resent, "action": "update"}
        after = (await ok(nc, f"CONSUMER.CREATE.{stream}.{durable}", body))["config"]
        assert _normal(after) == _normal(before)
        assert _minimal_keys(spec, {"streamName": stream, **case}, "durableName") == set()
    finally:
        await ok(nc, f"STREAM.DELETE.{stream}")


# -- the command ------------------------------------------------------------------------------------


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jsoperator", "import", *args], capture_output=True, text=True,
                          timeout=60)


def test_an_unreachable_server_is_one_line_naming_it() -> None:
    url = f"nats://127.0.0.1:{servers.free_port()}"
    done = _command("--servers", url)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"jsoperator import: cannot connect to {url}: ")


@pytest.mark.parametrize(("flags", "message"), [
    (["--connection-creds-secret", "a", "--connection-token-secret", "b"],
     "the --connection-* flags make no valid spec.connection: set at most one of credentialsSecretRef, "
     "tokenSecretRef, userSecretRef"),
    (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
    (["--creds", "/nonexistent/user.creds"], "cannot use /nonexistent/user.creds: No such file or directory"),
])
def test_bad_flags_are_one_line_saying_what_to_fix(flags: list[str], message: str) -> None:
    done = _command("--servers", "nats://127.0.0.1:1", *flags)
    assert done.returncode in (1, 2) and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


async def test_a_stream_name_that_cannot_be_a_resource_name(nc: nats.NATS, server: Any, tmp_path: Any) -> None:
    for name in ("__", "Ωmega_1"):
        await ok(nc, f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"odd{len(name)}.>"]})
    try:
        done = _command("--servers", server.url, "-o", str(tmp_path / "all.yaml"))
        assert done.returncode == 0 and done.stdout == "", done.stderr
        docs = {d["spec"].get("name"): d for d in yaml.safe_load_all((tmp_path / "all.yaml").read_text())}
        assert docs["__"]["metadata"]["name"].startswith("stream-") and LABEL.match(docs["__"]["metadata"]["name"])
        assert docs["Ωmega_1"]["metadata"]["name"] == "mega-1"
        assert "the manifests have no spec.connection: the operator must reach this server" in done.stderr
        unwritable = _command("--servers", server.url, "-o", "/nonexistent/dir/all.yaml")
        assert unwritable.returncode == 1 and unwritable.stderr.endswith(
            "jsoperator import: cannot use /nonexistent/dir/all.yaml: No such file or directory\n")
        stdout = _command("--servers", server.url, "--deletion-policy", "delete")
        assert [d["spec"].get("name") for d in yaml.safe_load_all(stdout.stdout)] == list(docs)
        assert {d["spec"]["deletionPolicy"] for d in yaml.safe_load_all(stdout.stdout)} == {"delete"}
    finally:
        for name in ("__", "Ωmega_1"):
            await ok(nc, f"STREAM.DELETE.{name}")



def test_notes_on_a_connection_that_may_not_reach_what_was_read() -> None:
    own = ConnectionSpec.model_validate({"servers": ["nats://nats:4222"]})
    assert cli._connection_notes(None, None, True)[0].startswith("the manifests have no spec.connection")
    assert cli._connection_notes(None, None, False) == []
    assert cli._connection_notes(own, "hub", True) == [
        "read through JetStream domain hub, but the manifests' spec.connection names none: add "
        "--connection-js-domain hub if the operator needs it too"]
    assert cli._connection_notes(own.model_copy(update={"js_domain": "hub"}), "hub", True) == []


@pytest.mark.parametrize("kind", [servers.NATS_SERVER, servers.JSBROKER])
def test_the_nats_flags_are_runs_user_and_password_from_the_environment(kind: str) -> None:
    """--user with JSOPERATOR_PASSWORD, as `jsoperator run` takes them; a wrong password is one line."""
    with servers.launch(kind, extra_args=["--user", "app", "--pass", "s3cret"]) as server:
        url = f"nats://127.0.0.1:{server.port}"

        def run(password: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "jsoperator", "import", "--servers", url, "--user", "app"],
                                  capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "JSOPERATOR_PASSWORD": password})

        wrong = run("wrong")
        assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1
        assert wrong.stderr.startswith(f"jsoperator import: cannot connect to {url}: ")
        assert "authorization violation" in wrong.stderr.lower()
        right = run("s3cret")
        assert right.returncode == 0 and right.stdout == "", right.stderr  # an empty server: no manifests
        assert f"0 Stream, 0 KeyValue, 0 ObjectStore and 0 Consumer manifests from {url} written to stdout" in right.stderr
