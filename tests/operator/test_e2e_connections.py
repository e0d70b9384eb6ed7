"""End to end: Streams and Consumers reaching JetStream through a JetStreamConnection or a
ClusterJetStreamConnection (spec.connectionRef): token Secrets, namespace grants, a missing connection,
deletion of a connection still named, and both connection and connectionRef set."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests import servers
from tests.operator.conftest import (GROUP, VERSION, condition, handled, has_condition, poll, server_consumer,
                                     server_stream)

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]

TOKEN = "s3cret-token"
CLUSTER = "clusterjetstreamconnections"


@pytest.fixture(params=["nats-server", "jsbroker"])
def guarded(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A broker requiring an auth token."""
    with servers.launch(request.param, extra_args=["--auth", TOKEN]) as handle:
        yield handle


def token_secret(kube: Any, name: str = "nats-token") -> None:
    kube.core.create_namespaced_secret(kube.namespace, kubernetes.client.V1Secret(
        metadata=kubernetes.client.V1ObjectMeta(name=name), string_data={"token": TOKEN}))


class ClusterConnections:
    """ClusterJetStreamConnections made by one test, deleted (and waited for) at its end."""

    def __init__(self, api: kubernetes.client.CustomObjectsApi) -> None:
        self.api, self.names = api, []

    def create(self, spec: dict[str, Any]) -> str:
        name = f"jsop-{uuid.uuid4().hex[:10]}"
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterJetStreamConnection",
                "metadata": {"name": name}, "spec": spec}
        self.api.create_cluster_custom_object(GROUP, VERSION, CLUSTER, body)
        self.names.append(name)
        return name

    def get(self, name: str) -> dict | None:
        try:
            return self.api.get_cluster_custom_object(GROUP, VERSION, CLUSTER, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        self.api.patch_cluster_custom_object(GROUP, VERSION, CLUSTER, name, {"spec": spec})

    def delete(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.api.delete_cluster_custom_object(GROUP, VERSION, CLUSTER, name)


@pytest.fixture
def clustered(kube: Any) -> Iterator[ClusterConnections]:
    conns = ClusterConnections(kube.api)
    yield conns
    kube.release_all()  # its referrers first: the connections are held while named
    for name in conns.names:
        conns.delete(name)
    for name in conns.names:
        poll(lambda n=name: conns.get(n) is None, timeout=30, what=f"ClusterJetStreamConnection {name} deleted")


def test_stream_via_a_namespaced_connection_with_a_token_secret(kube, guarded):
    token_secret(kube)
    kube.create("JetStreamConnection", "main", {
        "servers": [guarded.url], "tokenSecretRef": {"name": "nats-token", "key": "token"}})
    kube.create("Stream", "orders", {"subjects": ["orders.>"], "storage": "memory", "connectionRef": {"name": "main"}})
    kube.wait_condition("Stream", "orders", "Ready")
    assert server_stream(f"nats://{TOKEN}@127.0.0.1:{guarded.port}", "orders").config.subjects == ["orders.>"]
    conn = kube.wait("JetStreamConnection", "main", lambda o: (o.get("status") or {}).get("referencedBy") == 1)
    assert conn["status"]["referrers"] == [f"Stream {kube.namespace}/orders"]
    assert condition(kube.wait_condition("JetStreamConnection", "main", "Ready"), "Ready")["reason"] == "Synced"


def test_cluster_connection_reads_its_token_from_its_secret_namespace(kube, guarded, clustered):
    secrets = f"jsop-secrets-{uuid.uuid4().hex[:8]}"  # not the resources' namespace
    kube.core.create_namespace(kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=secrets)))
    try:
        kube.core.create_namespaced_secret(secrets, kubernetes.client.V1Secret(
            metadata=kubernetes.client.V1ObjectMeta(name="platform-token"), string_data={"token": TOKEN}))
        shared = clustered.create({"servers": [guarded.url], "secretNamespace": secrets,
                                   "tokenSecretRef": {"name": "platform-token", "key": "token"},
                                   "allowedNamespaces": [kube.namespace]})
        ref = {"kind": "ClusterJetStreamConnection", "name": shared}
        kube.create("Stream", "tasks", {"subjects": ["tasks.>"], "storage": "memory", "connectionRef": ref})
        kube.create("Consumer", "runner", {"streamName": "tasks", "connectionRef": ref})
        kube.wait_condition("Consumer", "runner", "Ready")
        authed = f"nats://{TOKEN}@127.0.0.1:{guarded.port}"
        assert server_consumer(authed, "tasks", "runner").name == "runner"
        # the count and the Ready condition are written by separate patches: wait for both
        poll(lambda: (o := clustered.get(shared)) and (o.get("status") or {}).get("referencedBy") == 2
             and (condition(o, "Ready") or {}).get("status") == "True", timeout=10, what="referencedBy 2 and Ready")
    finally:
        kube.release_all()
        kube.core.delete_namespace(secrets)


def test_missing_connection_stalls_then_recovers_when_created(kube, broker):
    kube.create("Stream", "late", {"subjects": ["late.>"], "storage": "memory", "connectionRef": {"name": "later"}})
    obj = kube.wait_condition("Stream", "late", "Stalled", "True", "ConnectionNotFound")
    message = condition(obj, "Ready")["message"]
    assert f"JetStreamConnection {kube.namespace}/later not found" in message and "Create" in message
    assert server_stream(broker.url, "late") is None  # nothing on the server
    kube.create("JetStreamConnection", "later", {"servers": [broker.url]})
    kube.wait_condition("Stream", "late", "Ready", timeout=15)
    assert server_stream(broker.url, "late") is not None


def test_consumer_via_a_cluster_connection_granted_later(kube, broker, clustered):
    other = clustered.create({"servers": [broker.url], "allowedNamespaces": ["jsop-nothing-here"]})
    kube.create("Stream", "jobs", {"subjects": ["jobs.>"], "storage": "memory",
                                   "connectionRef": {"kind": "ClusterJetStreamConnection", "name": other}})
    obj = kube.wait_condition("Stream", "jobs", "Stalled", "True", "ConnectionNotGranted")
    message = condition(obj, "Ready")["message"]
    assert f"does not grant namespace {kube.namespace}" in message and "allowedNamespaces" in message
    assert server_stream(broker.url, "jobs") is None
    clustered.patch(other, {"allowedNamespaces": ["jsop-nothing-here", kube.namespace]})
    kube.wait_condition("Stream", "jobs", "Ready", timeout=15)

    granted = clustered.create({"servers": [broker.url], "allowedNamespaces": ["jsop-*"]})
    kube.create("Consumer", "worker", {"streamName": "jobs", "ackPolicy": "explicit",
                                       "connectionRef": {"kind": "ClusterJetStreamConnection", "name": granted}})
    kube.wait_condition("Consumer", "worker", "Ready")
    assert server_consumer(broker.url, "jobs", "worker").config.ack_policy == "explicit"

    clustered.patch(other, {"allowedNamespaces": ["elsewhere"]})  # the grant taken away (not one this operator serves)
    obj = kube.wait_condition("Stream", "jobs", "Stalled", "True", "ConnectionNotGranted", timeout=5)
    assert f"does not grant namespace {kube.namespace}" in condition(obj, "Ready")["message"]


def test_deleting_a_named_connection_waits_for_its_referrers(kube, broker):
    kube.create("JetStreamConnection", "held", {"servers": [broker.url]})
    kube.create("Stream", "keep", {"subjects": ["keep.>"], "storage": "memory", "connectionRef": {"name": "held"}})
    kube.wait_condition("Stream", "keep", "Ready")
    kube.wait("JetStreamConnection", "held", lambda o: bool(o["metadata"].get("finalizers")))
    kube.delete("JetStreamConnection", "held")
    obj = kube.wait_condition("JetStreamConnection", "held", "Ready", "False", "DeletionBlocked")
    assert f"Stream {kube.namespace}/keep" in condition(obj, "Ready")["message"]
    [event] = kube.wait_events("held", "DeleteBlocked")
    assert "connectionRef" in event.message
    assert kube.get("JetStreamConnection", "held") is not None
    kube.delete("Stream", "keep")
    kube.wait_gone("Stream", "keep")
    assert server_stream(broker.url, "keep") is None  # the stream's own deletion still used the connection
    kube.wait_gone("JetStreamConnection", "held", timeout=15)


def test_connection_and_connection_ref_together_are_refused(kube):
    with pytest.raises(ApiException) as refused:
        kube.create("Stream", "both", {"connection": {"servers": ["nats://127.0.0.1:1"]},
                                       "connectionRef": {"name": "main"}})
    assert refused.value.status == 422
    assert "set spec.connection or spec.connectionRef, not both" in refused.value.body


def test_cluster_connection_needs_a_secret_namespace_and_grants(kube, clustered):
    with pytest.raises(ApiException) as refused:
        clustered.create({"tokenSecretRef": {"name": "t", "key": "k"}, "allowedNamespaces": ["a"]})
    assert "reads its Secrets from secretNamespace" in refused.value.body
    with pytest.raises(ApiException) as refused:
        clustered.create({"servers": ["nats://127.0.0.1:1"]})
    assert "allowedNamespaces" in refused.value.body


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_release_lets_go_of_connections_after_their_resources(envtest, kube, broker, operator):
    from tests.operator.test_e2e_policies import release

    for name in ("gone", "named"):
        kube.create("JetStreamConnection", name, {"servers": [broker.url]})
    kube.create("Stream", "doomed", {"subjects": ["doomed.>"], "storage": "memory", "connectionRef": {"name": "gone"}})
    kube.create("Stream", "staying", {"subjects": ["staying.>"], "storage": "memory",
                                      "connectionRef": {"name": "named"}})
    for name in ("doomed", "staying"):
        kube.wait_condition("Stream", name, "Ready")
    for name in ("gone", "named"):
        kube.wait("JetStreamConnection", name, lambda o: bool(o["metadata"].get("finalizers")))
    operator.stop()
    try:
        for kind, name in (("Stream", "doomed"), ("JetStreamConnection", "gone"), ("JetStreamConnection", "named")):
            kube.delete(kind, name)  # stuck on the finalizers: nobody is there to remove them
        proc = release(envtest, "--namespace", kube.namespace)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"JetStreamConnection {kube.namespace}/gone: released" in proc.stdout
        assert (f"JetStreamConnection {kube.namespace}/named: kept, being deleted while Stream "
                f"{kube.namespace}/staying still name it") in proc.stdout
        kube.wait_gone("Stream", "doomed", timeout=5)
        assert server_stream(broker.url, "doomed") is None  # deleted through its connection, before it went
        kube.wait_gone("JetStreamConnection", "gone", timeout=5)
        assert kube.get("JetStreamConnection", "named") is not None
        proc = release(envtest, "--namespace", kube.namespace, "--force")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        kube.wait_gone("JetStreamConnection", "named", timeout=5)
    finally:
        operator.start()
    obj = kube.wait_condition("Stream", "staying", "Stalled", "True", "ConnectionNotFound", timeout=15)
    assert server_stream(broker.url, "staying") is not None  # a missing connection changes nothing
    assert "not found" in condition(obj, "Ready")["message"]


def referenced_by(kube: Any, name: str, count: int) -> dict:
    return kube.wait("JetStreamConnection", name, lambda o: (o.get("status") or {}).get("referencedBy") == count,
                     timeout=10, what=f"referencedBy {count}")


@pytest.mark.parametrize("broker", ["jsbroker"], indirect=True)
def test_referenced_by_follows_the_resources(kube, broker):
    for name in ("a", "b"):
        kube.create("JetStreamConnection", name, {"servers": [broker.url]})
    kube.create("Stream", "s1", {"subjects": ["s1.>"], "storage": "memory", "connectionRef": {"name": "a"}})
    kube.create("Consumer", "c1", {"streamName": "s1", "connectionRef": {"name": "a"}})
    kube.wait_condition("Consumer", "c1", "Ready")
    assert referenced_by(kube, "a", 2)["status"]["referrers"] == [
        f"Consumer {kube.namespace}/c1", f"Stream {kube.namespace}/s1"]
    assert referenced_by(kube, "b", 0)["status"]["referrers"] == []
    kube.patch("Consumer", "c1", {"spec": {"connectionRef": {"name": "b"}}})  # the same server: nothing moves
    referenced_by(kube, "a", 1)
    referenced_by(kube, "b", 1)
    kube.wait_condition("Consumer", "c1", "Ready")
    kube.delete("Consumer", "c1")
    kube.wait_gone("Consumer", "c1")
    referenced_by(kube, "b", 0)


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_a_blocked_deletion_survives_an_operator_killed_and_restarted(kube, broker, operator):
    kube.create("JetStreamConnection", "sticky", {"servers": [broker.url]})
    kube.create("Stream", "user", {"subjects": ["user.>"], "storage": "memory", "connectionRef": {"name": "sticky"}})
    kube.wait_condition("Stream", "user", "Ready")
    kube.wait("JetStreamConnection", "sticky", lambda o: bool(o["metadata"].get("finalizers")))
    kube.delete("JetStreamConnection", "sticky")
    kube.wait_condition("JetStreamConnection", "sticky", "Ready", "False", "DeletionBlocked")
    operator.proc.kill()  # kill -9: no cleanup
    operator.proc.wait()
    before = delete_attempts(kube.get("JetStreamConnection", "sticky"))
    operator.start()
    # The restarted operator tried the deletion again (its kopf progress record moved) and still holds it.
    obj = kube.wait("JetStreamConnection", "sticky", lambda o: delete_attempts(o) > before, timeout=15,
                    what="a deletion attempt by the restarted operator")
    assert obj["metadata"]["finalizers"] and f"Stream {kube.namespace}/user" in condition(obj, "Ready")["message"]
    kube.annotate("Stream", "user", {"touch": "1"})  # still served through the connection being deleted
    kube.wait("Stream", "user", lambda o: handled(o, "touch") and has_condition(o, "Ready"), timeout=10)
    kube.delete("Stream", "user")
    kube.wait_gone("Stream", "user")
    assert server_stream(broker.url, "user") is None
    kube.wait_gone("JetStreamConnection", "sticky", timeout=15)


def delete_attempts(obj: dict) -> int:
    """How often kopf has run the connection's delete handler (its progress record under state.jsoperator.io/)."""
    import json

    record = (obj["metadata"].get("annotations") or {}).get("state.jsoperator.io/delete")
    return int(json.loads(record).get("retries") or 0) if record else 0


EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "shared-connection.yaml"


def test_the_shared_connection_example_becomes_ready(kube, guarded, clustered):
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    assert [d["kind"] for d in docs] == ["JetStreamConnection", "Stream", "Consumer", "ClusterJetStreamConnection"]
    token_secret(kube)
    for doc in docs[:3]:  # as written, with the test broker's address
        spec = {**doc["spec"], **({"servers": [guarded.url]} if doc["kind"] == "JetStreamConnection" else {})}
        kube.create(doc["kind"], doc["metadata"]["name"], spec)
    for doc in docs[:3]:
        kube.wait_condition(doc["kind"], doc["metadata"]["name"], "Ready")
    assert server_consumer(f"nats://{TOKEN}@127.0.0.1:{guarded.port}", "audit", "audit-archiver") is not None
    shared = docs[3]["spec"]  # its Secret and grants in this test's namespace
    name = clustered.create({**shared, "servers": [guarded.url], "secretNamespace": kube.namespace,
                             "allowedNamespaces": [kube.namespace]})
    poll(lambda: (o := clustered.get(name)) and has_condition(o, "Ready"), timeout=10, what=f"{name} Ready")


@pytest.mark.parametrize("broker", ["jsbroker"], indirect=True)
def test_deleting_a_named_cluster_connection_waits_too(kube, broker, clustered):
    shared = clustered.create({"servers": [broker.url], "allowedNamespaces": [kube.namespace]})
    kube.create("Stream", "pinned", {"subjects": ["pinned.>"], "storage": "memory",
                                     "connectionRef": {"kind": "ClusterJetStreamConnection", "name": shared}})
    kube.wait_condition("Stream", "pinned", "Ready")
    poll(lambda: (clustered.get(shared) or {}).get("metadata", {}).get("finalizers"), timeout=30, what="finalizer")
    clustered.delete(shared)
    blocked = poll(lambda: (o := clustered.get(shared)) and has_condition(o, "Ready", "False", "DeletionBlocked") and o,
                   timeout=30, what="DeletionBlocked")
    assert f"Stream {kube.namespace}/pinned" in condition(blocked, "Ready")["message"]
    events = poll(lambda: [e for e in kube.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={shared}").items if e.reason == "DeleteBlocked"],
        timeout=30, what="a DeleteBlocked Event in namespace default")
    assert "still named in spec.connectionRef" in events[0].message
    kube.delete("Stream", "pinned")
    kube.wait_gone("Stream", "pinned")
    poll(lambda: clustered.get(shared) is None, timeout=30, what=f"{shared} deleted")


def test_a_resource_that_never_reached_a_server_goes_without_its_connection(kube):
    kube.create("Stream", "stray", {"subjects": ["stray.>"], "connectionRef": {"name": "nowhere"}})
    kube.wait_condition("Stream", "stray", "Stalled", "True", "ConnectionNotFound")
    kube.delete("Stream", "stray")
    kube.wait_gone("Stream", "stray", timeout=5)


def test_buckets_name_a_connection_too(kube, guarded):
    token_secret(kube)
    kube.create("JetStreamConnection", "main", {
        "servers": [guarded.url], "tokenSecretRef": {"name": "nats-token", "key": "token"}})
    kube.create("KeyValue", "settings", {"storage": "memory", "history": 3, "connectionRef": {"name": "main"}})
    kube.create("ObjectStore", "files", {"storage": "memory", "connectionRef": {"name": "main"}})
    for kind, name in (("KeyValue", "settings"), ("ObjectStore", "files")):
        kube.wait_condition(kind, name, "Ready")
    authed = f"nats://{TOKEN}@127.0.0.1:{guarded.port}"
    assert server_stream(authed, "KV_settings").config.max_msgs_per_subject == 3
    assert server_stream(authed, "OBJ_files") is not None
    referenced_by(kube, "main", 2)
    with pytest.raises(ApiException) as refused:
        kube.create("KeyValue", "both", {"connection": {}, "connectionRef": {"name": "main"}})
    assert "set spec.connection or spec.connectionRef, not both" in refused.value.body
