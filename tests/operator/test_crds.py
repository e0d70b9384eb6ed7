"""crdgen.py and crds/: fresh, structural, no defaults; and on a real kube-apiserver, CEL rules refuse what
the JetStream server would refuse, with our messages."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.rest import ApiException

from jsoperator import crdgen, plan

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION = "jsoperator.io", "v1alpha1"


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{path}.{key}", value
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{path}[{index}]")


def test_committed_crds_are_fresh() -> None:
    for name, text in crdgen.files().items():
        committed = (REPO / "crds" / name).read_text()
        assert committed == text, f"crds/{name} is stale: run `python3 -m jsoperator.crdgen`"
    assert sorted(p.name for p in (REPO / "crds").glob("*.yaml")) == sorted(crdgen.files())


def test_readme_reference_is_fresh() -> None:
    text = (REPO / "operator" / "README.md").read_text()
    assert crdgen.readme_with_fresh_blocks(text) == text, "run `python3 -m jsoperator.crdgen`"


def test_readme_documents_every_field() -> None:
    from jsoperator import models as m

    text = (REPO / "operator" / "README.md").read_text()
    for model in (m.StreamSpec, m.ConsumerSpec, m.KeyValueSpec, m.ObjectStoreSpec, m.StreamStatus, m.ConsumerStatus,
                  m.KeyValueStatus, m.ObjectStoreStatus, m.ClusterConnectionSpec, m.ConnectionRef,
                  m.ConnectionStatus):
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in text, f"{model.__name__}.{name}"


def test_render_is_every_crd() -> None:
    docs = list(yaml.safe_load_all(crdgen.render()))
    assert [d["metadata"]["name"] for d in docs] == [
        "streams.jsoperator.io", "consumers.jsoperator.io", "keyvalues.jsoperator.io", "objectstores.jsoperator.io",
        "jetstreamconnections.jsoperator.io", "clusterjetstreamconnections.jsoperator.io"]
    assert [d["spec"]["scope"] for d in docs] == ["Namespaced"] * 5 + ["Cluster"]


@pytest.mark.parametrize("kind", crdgen.KINDS)
def test_no_default_anywhere(kind: str) -> None:
    assert [path for path, _ in walk(crdgen.crd(kind)) if path.endswith(".default")] == []


@pytest.mark.parametrize("kind", crdgen.KINDS)
def test_schema_is_structural(kind: str) -> None:
    schema = crdgen.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        if not isinstance(node, dict) or path.endswith(".properties") or "x-kubernetes-validations" in path:
            continue
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title", "const"} & set(node), path
        if "properties" in node or "items" in node:
            assert "type" in node, f"{path} has no type"
        if "additionalProperties" in node:
            assert node["additionalProperties"] is not False, path


def test_shape_names_columns() -> None:
    stream, consumer = crdgen.crd("Stream"), crdgen.crd("Consumer")
    assert stream["spec"]["scope"] == consumer["spec"]["scope"] == "Namespaced"
    assert stream["spec"]["names"]["shortNames"] == ["jss", "jsstream"]
    assert consumer["spec"]["names"]["shortNames"] == ["jsc", "jsconsumer"]
    version = stream["spec"]["versions"][0]
    assert (version["name"], version["subresources"]) == ("v1alpha1", {"status": {}})
    cols = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert cols == ["Ready", "Stream", "Messages", "Age"]
    cols = [c["name"] for c in consumer["spec"]["versions"][0]["additionalPrinterColumns"] if not c.get("priority")]
    assert cols == ["Ready", "Stream", "Consumer", "Pending", "Age"]
    kv, obj = crdgen.crd("KeyValue"), crdgen.crd("ObjectStore")
    assert (kv["spec"]["names"]["shortNames"], obj["spec"]["names"]["shortNames"]) == (["jskv", "kv"], ["jsobj", "objstore"])
    cols = [c["name"] for c in kv["spec"]["versions"][0]["additionalPrinterColumns"] if not c.get("priority")]
    assert cols == ["Ready", "Bucket", "Values", "History", "Age"]
    cols = [c["name"] for c in obj["spec"]["versions"][0]["additionalPrinterColumns"] if not c.get("priority")]
    assert cols == ["Ready", "Bucket", "Bytes", "Age"]


def test_every_immutable_field_has_a_cel_rule() -> None:
    from jsoperator import mapping

    for kind, table, name_key in (("Stream", plan.STREAM_IMMUTABLE, "name"),
                                  ("Consumer", plan.CONSUMER_IMMUTABLE, "durable_name")):
        root = crdgen.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        rules = " ".join(r["rule"] for r in root["properties"]["spec"]["x-kubernetes-validations"])
        rules += " ".join(r["rule"] for r in root["x-kubernetes-validations"]).replace("oldSelf.spec.", "oldSelf.")
        for key in table:
            if key != name_key:
                assert f"oldSelf.{mapping.spec_name(key)}" in rules, key
    for kind in ("KeyValue", "ObjectStore"):
        root = crdgen.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        rules = " ".join(r["rule"] for r in root["properties"]["spec"]["x-kubernetes-validations"])
        rules += " ".join(r["rule"] for r in root["x-kubernetes-validations"]).replace("oldSelf.spec.", "oldSelf.")
        for field in crdgen.bucket_immutables(kind):
            if field != "bucket":
                assert f"oldSelf.{field}" in rules, (kind, field)


# -- on a real kube-apiserver -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(envtest: Any) -> Iterator[kubernetes.client.CustomObjectsApi]:
    """Our CRDs installed (created, or replaced with the current version) and Established."""
    with envtest.api_client() as client:
        ext = kubernetes.client.ApiextensionsV1Api(client)
        for body in yaml.safe_load_all(crdgen.render()):
            name = body["metadata"]["name"]
            try:
                ext.create_custom_resource_definition(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise AssertionError(f"CRD {name} refused by the apiserver: {exc.body}") from None
                current = ext.read_custom_resource_definition(name)
                body["metadata"]["resourceVersion"] = current.metadata.resource_version
                ext.replace_custom_resource_definition(name, body)
        deadline = time.monotonic() + 30
        for body in yaml.safe_load_all(crdgen.render()):
            while True:
                conditions = ext.read_custom_resource_definition(body["metadata"]["name"]).status.conditions or []
                if any(c.type == "Established" and c.status == "True" for c in conditions):
                    break
                assert time.monotonic() < deadline, f"{body['metadata']['name']} not Established: {conditions}"
                time.sleep(0.1)  # polling interval
        yield kubernetes.client.CustomObjectsApi(client)


class Objects:
    def __init__(self, api: kubernetes.client.CustomObjectsApi, namespace: str) -> None:
        self.api, self.namespace = api, namespace

    def create(self, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}, "spec": spec}
        return self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, kind.lower() + "s", body)

    def replace_spec(self, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        current = self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, kind.lower() + "s", name)
        current["spec"] = spec
        return self.api.replace_namespaced_custom_object(
            GROUP, VERSION, self.namespace, kind.lower() + "s", name, current)


def refusal(call: Any) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 422, info.value.body
    return str(info.value.body)


@pytest.fixture
def objects(api: kubernetes.client.CustomObjectsApi, kube_namespace: str) -> Objects:
    return Objects(api, kube_namespace)


# (spec before, spec after, refused message fragment or None when the change is allowed)
STREAM_EDITS: list[tuple[dict[str, Any], dict[str, Any], str | None]] = [
    ({"storage": "file"}, {"storage": "memory"}, "spec.storage cannot change: the JetStream server refuses"),
    ({}, {"storage": "memory"}, "spec.storage cannot change"),
    ({}, {"storage": "file"}, None),  # spelling out the server default is not a change
    ({"retention": "limits"}, {"retention": "interest"}, None),
    ({}, {"retention": "workqueue"}, "spec.retention cannot change to or from workqueue"),
    ({"denyDelete": True}, {}, "spec.denyDelete cannot be turned off"),
    ({"sealed": True}, {"sealed": False}, "spec.sealed cannot be turned off"),
    ({}, {"denyPurge": True}, None),
    ({"persistMode": "async"}, {}, "spec.persistMode cannot change"),
    ({"subjects": ["a.>"]}, {"mirror": {"name": "O"}}, "spec.mirror cannot be added or changed"),
    ({"mirror": {"name": "O"}}, {"subjects": ["a.>"]}, None),  # promoting a mirror is allowed
    ({"maxAge": "1h", "maxBytes": "1Gi"}, {"maxAge": "2h", "maxBytes": 1000}, None),
    ({}, {"name": "s"}, None),  # = metadata.name
    ({}, {"name": "other"}, "spec.name cannot change: it names the stream on the server"),
]
CONSUMER_EDITS: list[tuple[dict[str, Any], dict[str, Any], str | None]] = [
    ({}, {"deliverPolicy": "new"}, "spec.deliverPolicy cannot change"),
    ({}, {"deliverPolicy": "all"}, None),
    ({"ackPolicy": "explicit"}, {"ackPolicy": "all"}, "spec.ackPolicy cannot change"),
    ({"deliverPolicy": "byStartSequence", "optStartSeq": 3}, {"deliverPolicy": "byStartSequence", "optStartSeq": 4},
     "spec.optStartSeq cannot change"),
    ({"deliverPolicy": "byStartTime", "optStartTime": "2026-01-01T00:00:00Z"},
     {"deliverPolicy": "byStartTime", "optStartTime": "2026-01-01T01:00:00+01:00"}, None),  # same instant
    ({"deliverPolicy": "byStartTime", "optStartTime": "2026-01-01T00:00:00Z"},
     {"deliverPolicy": "byStartTime", "optStartTime": "2026-01-02T00:00:00Z"}, "spec.optStartTime cannot change"),
    ({}, {"replayPolicy": "original"}, "spec.replayPolicy cannot change"),
    ({"deliverSubject": "p.x", "idleHeartbeat": "5s"}, {"deliverSubject": "p.x", "idleHeartbeat": "5000ms"}, None),
    ({"deliverSubject": "p.x", "idleHeartbeat": "5s"}, {"deliverSubject": "p.x", "idleHeartbeat": "6s"},
     "spec.idleHeartbeat cannot change"),
    ({"deliverSubject": "p.x"}, {}, "spec.deliverSubject cannot switch a consumer between push"),
    ({"deliverSubject": "p.x"}, {"deliverSubject": "p.y"}, None),
    ({}, {"maxWaiting": 512}, None),
    ({}, {"maxWaiting": 10}, "spec.maxWaiting cannot change"),
    ({}, {"memStorage": True}, "spec.memStorage cannot change"),
    ({"deliverSubject": "p.x", "idleHeartbeat": "1s"}, {"deliverSubject": "p.x", "idleHeartbeat": "1s",
                                                        "flowControl": True}, "spec.flowControl cannot change"),
    ({}, {"durableName": "other"}, "spec.durableName cannot change"),
    ({}, {"ackWait": "10s", "maxDeliver": 5, "description": "x"}, None),
]


BUCKET_EDITS: list[tuple[str, dict[str, Any], dict[str, Any], str | None]] = [
    ("KeyValue", {}, {"storage": "memory"}, "spec.storage cannot change: the JetStream server refuses"),
    ("KeyValue", {}, {"storage": "file", "history": 5, "ttl": "1h", "maxValueSize": "1Ki"}, None),
    ("KeyValue", {}, {"bucket": "kv"}, None),  # = metadata.name
    ("KeyValue", {}, {"bucket": "other"}, "spec.bucket cannot change: it names the keyvalue on the server"),
    ("KeyValue", {"allowMsgTtl": True}, {}, "spec.allowMsgTtl cannot be turned off"),
    ("KeyValue", {"limitMarkerTtl": "1m"}, {}, "nor limitMarkerTtl removed"),
    ("KeyValue", {"limitMarkerTtl": "1m"}, {"allowMsgTtl": True}, None),
    ("KeyValue", {}, {"allowMsgTtl": True, "compression": True}, None),
    ("KeyValue", {}, {"mirror": {"name": "origin"}}, "spec.mirror cannot be added or changed"),
    ("ObjectStore", {"storage": "memory"}, {}, "spec.storage cannot change"),
    ("ObjectStore", {}, {"ttl": "1h", "maxBytes": "1Gi", "compression": True}, None),
    ("ObjectStore", {}, {"bucket": "other"}, "spec.bucket cannot change"),
]


def _pairs(edits: list[tuple[dict[str, Any], dict[str, Any], str | None]]) -> list[Any]:
    return [pytest.param(before, after, msg, id=f"{i}") for i, (before, after, msg) in enumerate(edits)]


@pytest.mark.xdist_group("kube")
@pytest.mark.parametrize(("before", "after", "message"), _pairs(STREAM_EDITS))
def test_stream_edits_on_the_apiserver(objects: Objects, before: dict, after: dict, message: str | None) -> None:
    objects.create("Stream", "s", before)
    if message is None:
        assert objects.replace_spec("Stream", "s", after)["spec"] == after
    else:
        assert message in refusal(lambda: objects.replace_spec("Stream", "s", after))


@pytest.mark.xdist_group("kube")
@pytest.mark.parametrize(("before", "after", "message"), _pairs(CONSUMER_EDITS))
def test_consumer_edits_on_the_apiserver(objects: Objects, before: dict, after: dict, message: str | None) -> None:
    objects.create("Consumer", "c", {"streamName": "S", **before})
    if message is None:
        assert objects.replace_spec("Consumer", "c", {"streamName": "S", **after})["spec"]["streamName"] == "S"
    else:
        assert message in refusal(lambda: objects.replace_spec("Consumer", "c", {"streamName": "S", **after}))


@pytest.mark.xdist_group("kube")
@pytest.mark.parametrize(("kind", "before", "after", "message"),
                         [pytest.param(*edit, id=f"{i}") for i, edit in enumerate(BUCKET_EDITS)])
def test_bucket_edits_on_the_apiserver(objects: Objects, kind: str, before: dict, after: dict,
                                       message: str | None) -> None:
    objects.create(kind, "kv", before)
    if message is None:
        assert objects.replace_spec(kind, "kv", after)["spec"] == after
    else:
        assert message in refusal(lambda: objects.replace_spec(kind, "kv", after))


@pytest.mark.xdist_group("kube")
@pytest.mark.parametrize("kind", ["KeyValue", "ObjectStore"])
def test_an_invalid_bucket_name_is_refused(objects: Objects, kind: str) -> None:
    assert "metadata.name is not a valid bucket name" in refusal(lambda: objects.create(kind, "my.bucket", {}))
    assert "spec.bucket" in refusal(lambda: objects.create(kind, "fine", {"bucket": "no.dots"}))
    assert objects.create(kind, "my.bucket", {"bucket": "my_bucket"})["spec"] == {"bucket": "my_bucket"}


@pytest.mark.xdist_group("kube")
def test_consumer_stream_name_cannot_change(objects: Objects) -> None:
    objects.create("Consumer", "c", {"streamName": "S"})
    change = lambda: objects.replace_spec("Consumer", "c", {"streamName": "T"})  # noqa: E731
    assert "spec.streamName cannot change" in refusal(change)


@pytest.mark.xdist_group("kube")
@pytest.mark.parametrize(
    ("kind", "spec", "message"),
    [
        ("Stream", {"maxBytes": "1GB"}, "a size is an integer number of bytes or a quantity"),
        ("Stream", {"maxAge": "1 hour"}, "spec.maxAge"),
        ("Stream", {"retention": "forever"}, "spec.retention"),
        ("Stream", {"metadata": {"_nats.level": "9"}}, "metadata keys starting with _nats. (the server's)"),
        ("Consumer", {"streamName": "S", "metadata": {"_nats.x": "1"}}, "metadata keys starting with _nats."),
        ("Stream", {"mirror": {"name": "O"}, "subjects": ["x"]}, "a mirror stream cannot also set subjects"),
        ("Stream", {"denyPurge": True, "allowRollupHdrs": True}, "allowRollupHdrs needs purges"),
        ("Stream", {"subjectDeleteMarkerTtl": "1m", "denyPurge": True}, "subjectDeleteMarkerTtl needs roll-ups"),
        ("Stream", {"subjectDeleteMarkerTtl": "1m", "allowMsgTtl": False}, "subjectDeleteMarkerTtl needs roll-ups"),
        ("Stream", {"allowMsgSchedules": True, "allowRollupHdrs": False}, "allowMsgSchedules needs roll-ups"),
        ("Consumer", {"streamName": "S", "optStartSeq": 3}, "optStartSeq and deliverPolicy: byStartSequence go"),
        ("Consumer", {"streamName": "S", "filterSubject": "a", "filterSubjects": ["b"]}, "not both"),
        ("Consumer", {}, "spec.streamName: Required value"),
        ("KeyValue", {"history": 65}, "spec.history"),
        ("KeyValue", {"history": 0}, "spec.history"),
        ("KeyValue", {"mirror": {"name": "a"}, "sources": [{"name": "b"}]}, "a mirror cannot also set sources"),
        ("KeyValue", {"limitMarkerTtl": "1m", "allowMsgTtl": False}, "limitMarkerTtl needs per-key TTLs"),
        ("KeyValue", {"ttl": "1 day"}, "spec.ttl"),
        ("Stream", {"metadata": {"jsoperator.io/uid": "u"}}, "(the operator's ownership marks) are reserved"),
        ("Consumer", {"streamName": "S", "metadata": {"_nats.ver": "1"}}, "_nats. (the server's)"),
        ("Stream", {"connection": {"tokenSecretRef": {"name": "t", "key": "k"}, "userSecretRef": {"name": "u"}}},
         "set at most one of credentialsSecretRef, tokenSecretRef, userSecretRef"),
        ("Stream", {"connection": {"servers": ["nats://x:4222"]}, "connectionRef": {"name": "c"}},
         "set spec.connection or spec.connectionRef, not both"),
        ("Consumer", {"streamName": "S", "connection": {}, "connectionRef": {"name": "c"}},
         "set spec.connection or spec.connectionRef, not both"),
        ("Consumer", {"streamName": "S", "connectionRef": {"kind": "Account", "name": "c"}}, "spec.connectionRef.kind"),
        ("JetStreamConnection", {"tokenSecretRef": {"name": "t", "key": "k"}, "userSecretRef": {"name": "u"}},
         "set at most one of credentialsSecretRef, tokenSecretRef, userSecretRef"),
    ],
)
def test_invalid_specs_are_refused_on_create(objects: Objects, kind: str, spec: dict, message: str) -> None:
    assert message in refusal(lambda: objects.create(kind, "bad", spec))


@pytest.mark.xdist_group("kube")
def test_unknown_fields_are_refused_with_strict_field_validation(objects: Objects) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Stream", "metadata": {"name": "typo"},
            "spec": {"maxAg": "1h"}}
    with pytest.raises(ApiException) as info:  # what kubectl apply does by default (--validate=strict)
        objects.api.create_namespaced_custom_object(
            GROUP, VERSION, objects.namespace, "streams", body, field_validation="Strict")
    assert 'unknown field \\"spec.maxAg\\"' in str(info.value.body), info.value.body


@pytest.mark.xdist_group("kube")
@pytest.mark.parametrize(
    "spec",
    [{"subjectDeleteMarkerTtl": "1m"}, {"subjectDeleteMarkerTtl": "0s", "denyPurge": True},
     {"allowMsgSchedules": False, "denyPurge": True}, {"allowMsgSchedules": True, "allowRollupHdrs": True}],
)
def test_valid_rollup_combinations_are_accepted(objects: Objects, spec: dict) -> None:
    assert objects.create("Stream", "fine", spec)["spec"] == spec


@pytest.mark.xdist_group("kube")
def test_sizes_accept_ints_and_quantities(objects: Objects) -> None:
    created = objects.create("Stream", "sizes", {"maxBytes": "512Mi", "maxMsgSize": 1024})
    assert created["spec"] == {"maxBytes": "512Mi", "maxMsgSize": 1024}  # stored as written: no defaults added


def _status_patch(kind: str) -> dict[str, Any]:
    from datetime import datetime, timezone

    from jsoperator import status

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    if kind != "Consumer":
        name = {"Stream": "orders", "KeyValue": "KV_orders", "ObjectStore": "OBJ_orders"}[kind]
        sources = [{"name": "east", "lag": 4, "active": 5},
                   {"name": "west", "lag": 0, "active": -1, "error": {"description": "stream not found"}}]
        observed = status.observed_stream(kind, {"config": {"name": name, "max_msgs_per_subject": 3}, "state": {
            "messages": 5, "bytes": 500, "first_seq": 1, "last_seq": 5, "consumer_count": 1},
            "sources": sources if kind == "Stream" else []})
        return status.build(None, generation=1, outcome=status.synced("stream matches the spec"), now=now,
                            observed=observed)
    observed = status.consumer_state({"stream_name": "orders", "name": "billing", "num_pending": 7,
                                      "num_ack_pending": 2, "delivered": {"consumer_seq": 3, "stream_seq": 3}})
    patch = status.build(None, generation=1, outcome=status.api_error(400, 10065, "subjects overlap"), now=now,
                         observed=observed)
    patch["lastReset"] = status.last_reset("reset-to-sequence=3", succeeded=True, now=now, reset_seq=3)
    return patch


@pytest.mark.xdist_group("kube")
@pytest.mark.parametrize("kind", ["Stream", "Consumer"])
def test_status_patches_are_stored_unpruned_and_shown_in_columns(
    api: kubernetes.client.CustomObjectsApi, objects: Objects, kind: str
) -> None:
    plural = kind.lower() + "s"
    objects.create(kind, "x", {"streamName": "orders"} if kind == "Consumer" else {})
    patch = _status_patch(kind)
    stored = api.patch_namespaced_custom_object_status(
        GROUP, VERSION, objects.namespace, plural, "x", {"status": patch})
    # every field the operator writes fits the schema: nothing pruned (a null removes a field)
    assert stored["status"] == {k: v for k, v in patch.items() if v is not None}
    client = api.api_client
    response = client.call_api(
        "GET", f"{client.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/{objects.namespace}/{plural}/x",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    response.read()
    table = json.loads(response.data)
    columns = [c["name"] for c in table["columnDefinitions"]]
    row = dict(zip(columns, table["rows"][0]["cells"]))
    if kind == "Stream":
        assert {k: row[k] for k in ("Ready", "Stream", "Messages", "Bytes", "Lag", "Reason")} == {
            "Ready": "True", "Stream": "orders", "Messages": 5, "Bytes": 500, "Lag": 4, "Reason": "Synced"}
    elif kind == "KeyValue":
        assert {k: row[k] for k in ("Ready", "Bucket", "Values", "History", "Bytes", "Reason")} == {
            "Ready": "True", "Bucket": "orders", "Values": 5, "History": 3, "Bytes": 500, "Reason": "Synced"}
    elif kind == "ObjectStore":
        assert {k: row[k] for k in ("Ready", "Bucket", "Bytes", "Reason")} == {
            "Ready": "True", "Bucket": "orders", "Bytes": 500, "Reason": "Synced"}
    else:
        assert {k: row[k] for k in ("Ready", "Stream", "Consumer", "Pending", "Ack Pending", "Reason")} == {
            "Ready": "False", "Stream": "orders", "Consumer": "billing", "Pending": 7, "Ack Pending": 2,
            "Reason": "JetStreamError"}
