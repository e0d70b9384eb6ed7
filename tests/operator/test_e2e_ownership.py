"""End to end: ownership marks on the server object and several operators in one cluster.

Two operators stand for two Kubernetes clusters (`--cluster-name east` / `west`, each with its own namespaces
and `--instance`) against one JetStream server: the marks a stream, consumer or bucket carries name its owner;
the other cluster's resource of the same server name follows its adoptionPolicy (Stalled, reason OwnedElsewhere,
naming the owner; `adopt` takes it over and the former owner stops); a retained object loses its marks on
deletion (by the operator or `jsoperator release`); a stale mark (its resource gone) is adopted by a resource of
the same cluster. The two operators also each serve the ClusterJetStreamConnections labelled for them, and
neither takes the other's finalizer off (watched, event by event)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import kubernetes.watch
import pytest

from tests.operator.conftest import (
    DRIFT_INTERVAL, GROUP, VERSION, Kube, Operator, _namespace, _serving, condition, poll,
)
from tests.operator.test_e2e_connections import CLUSTER, ClusterConnections
from tests.operator.test_e2e_policies import release

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(240)]

MARKS = ("jsoperator.io/cluster", "jsoperator.io/kind", "jsoperator.io/namespace", "jsoperator.io/name",
         "jsoperator.io/uid")


def _operator(envtest: Any, tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp(f"jsoperator-{name}") / "operator.log"
    yield from _serving(Operator(envtest, log, DRIFT_INTERVAL, f"jsown-{name}-",
                                 ("--cluster-name", name, "--instance", name)))


@pytest.fixture(scope="module")
def east_operator(envtest: Any, crds: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    yield from _operator(envtest, tmp_path_factory, "east")


@pytest.fixture(scope="module")
def west_operator(envtest: Any, crds: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    yield from _operator(envtest, tmp_path_factory, "west")


@pytest.fixture
def east(envtest: Any, east_operator: Operator) -> Iterator[Kube]:
    yield from _namespace(envtest, east_operator)


@pytest.fixture
def west(envtest: Any, west_operator: Operator) -> Iterator[Kube]:
    yield from _namespace(envtest, west_operator)


def server_config(url: str, api: str) -> dict | None:
    """The `config` of `$JS.API.<api>` (STREAM.INFO.S, CONSUMER.INFO.S.C) as the server sends it, None if absent."""
    import nats

    async def main() -> dict | None:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False)
        try:
            reply = json.loads((await nc.request(f"$JS.API.{api}", b"", timeout=3)).data)
        finally:
            await nc.close()
        return None if "error" in reply else reply["config"]

    return asyncio.run(main())


def marks(config: dict | None) -> dict[str, str]:
    return {k: v for k, v in ((config or {}).get("metadata") or {}).items() if k.startswith("jsoperator.io/")}


def user_keys(config: dict | None) -> dict[str, str]:
    return {k: v for k, v in ((config or {}).get("metadata") or {}).items()
            if not k.startswith(("jsoperator.io/", "_nats."))}


def owner_marks(kube: Kube, kind: str, name: str, cluster: str) -> dict[str, str]:
    uid = kube.get(kind, name)["metadata"]["uid"]
    return dict(zip(MARKS, (cluster, kind, kube.namespace, name, uid)))


def stream(broker: Any, name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "subjects": [f"{name.lower()}.>"], "storage": "memory",
            "connection": {"servers": [broker.url]}, **extra}


def message(obj: dict) -> str:
    return (condition(obj, "Ready") or {}).get("message", "")


def test_marks_name_the_owner_and_the_users_metadata_stays(east, broker):
    east.create("Stream", "orders", stream(broker, "ORDERS", metadata={"team": "a"}))
    east.create("Consumer", "worker", {"streamName": "ORDERS", "ackPolicy": "explicit", "metadata": {"app": "w"},
                                       "connection": {"servers": [broker.url]}})
    east.create("KeyValue", "prefs", {"storage": "memory", "connection": {"servers": [broker.url]}})
    for kind, name in (("Stream", "orders"), ("Consumer", "worker"), ("KeyValue", "prefs")):
        obj = east.wait_condition(kind, name, "Ready")
        assert "(updated)" not in message(obj)  # the marks are no drift of the spec
    orders = server_config(broker.url, "STREAM.INFO.ORDERS")
    assert marks(orders) == owner_marks(east, "Stream", "orders", "east")
    assert user_keys(orders) == {"team": "a"}
    worker = server_config(broker.url, "CONSUMER.INFO.ORDERS.worker")
    assert marks(worker) == owner_marks(east, "Consumer", "worker", "east")
    assert user_keys(worker) == {"app": "w"}
    assert marks(server_config(broker.url, "STREAM.INFO.KV_prefs")) == owner_marks(east, "KeyValue", "prefs", "east")
    east.patch("Stream", "orders", {"spec": {"metadata": {"team": "b"}}})  # the user's keys change, ours stay
    east.wait("Stream", "orders", lambda o: o["status"].get("observedGeneration") == 2)
    orders = server_config(broker.url, "STREAM.INFO.ORDERS")
    assert user_keys(orders) == {"team": "b"} and marks(orders) == owner_marks(east, "Stream", "orders", "east")


def test_another_clusters_resource_follows_its_adoption_policy(east, west, broker):
    east.create("Stream", "shared", stream(broker, "SHARED", maxMsgs=10))
    east.wait_condition("Stream", "shared", "Ready")
    west.create("Stream", "shared", stream(broker, "SHARED", maxMsgs=20))  # adoptOrCreate: not someone else's
    obj = west.wait_condition("Stream", "shared", "Stalled", "True", "OwnedElsewhere")
    assert f"stream SHARED belongs to Stream {east.namespace}/shared (uid " in message(obj)
    assert "of cluster east" in message(obj) and "set adoptionPolicy: adopt" in message(obj)
    assert server_config(broker.url, "STREAM.INFO.SHARED")["max_msgs"] == 10  # nothing sent

    west.patch("Stream", "shared", {"spec": {"adoptionPolicy": "adopt"}})  # take it over, deliberately
    west.wait_condition("Stream", "shared", "Ready")
    adopted = west.wait_events("shared", "Adopted")
    assert f"taken over from Stream {east.namespace}/shared" in adopted[-1].message
    config = server_config(broker.url, "STREAM.INFO.SHARED")
    assert config["max_msgs"] == 20 and marks(config) == owner_marks(west, "Stream", "shared", "west")
    obj = east.wait_condition("Stream", "shared", "Stalled", "True", "OwnedElsewhere")  # the former owner yields
    assert f"belongs to Stream {west.namespace}/shared" in message(obj) and "took it over" in message(obj)
    assert server_config(broker.url, "STREAM.INFO.SHARED")["max_msgs"] == 20

    east.delete("Stream", "shared")  # deletionPolicy delete, but the stream is no longer its own
    east.wait_gone("Stream", "shared")
    left = east.wait_events("shared", "LeftOnServer")
    assert f"it belongs to Stream {west.namespace}/shared" in left[-1].message
    assert server_config(broker.url, "STREAM.INFO.SHARED")["max_msgs"] == 20


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_a_consumer_of_another_cluster_is_not_taken(east, west, broker):
    east.create("Stream", "jobs", stream(broker, "JOBS"))
    east.wait_condition("Stream", "jobs", "Ready")
    west.create("Stream", "jobs", stream(broker, "JOBS", adoptionPolicy="adopt"))
    west.wait_condition("Stream", "jobs", "Ready")  # the stream handed over; its consumers are each their own
    spec = {"streamName": "JOBS", "durableName": "d", "ackPolicy": "explicit", "connection": {"servers": [broker.url]}}
    east.create("Consumer", "d", {**spec, "maxDeliver": 3})
    east.wait_condition("Consumer", "d", "Ready")
    west.create("Consumer", "d", {**spec, "maxDeliver": 5, "adoptionPolicy": "never"})
    obj = west.wait_condition("Consumer", "d", "Stalled", "True", "OwnedElsewhere")
    assert f"consumer d belongs to Consumer {east.namespace}/d" in message(obj)
    assert server_config(broker.url, "CONSUMER.INFO.JOBS.d")["max_deliver"] == 3


def test_a_stale_mark_is_adopted_by_its_cluster_only(east, west, broker):
    east.create("Stream", "old", stream(broker, "LEGACY"))
    east.wait_condition("Stream", "old", "Ready")
    gone = owner_marks(east, "Stream", "old", "east")
    east.annotate("Stream", "old", {"jsoperator.io/managed": "false"})  # let go without touching the server
    east.delete("Stream", "old")
    east.wait_gone("Stream", "old")
    assert marks(server_config(broker.url, "STREAM.INFO.LEGACY")) == gone  # a mark whose resource is gone

    west.create("Stream", "legacy", stream(broker, "LEGACY"))  # another cluster cannot tell it is stale
    obj = west.wait_condition("Stream", "legacy", "Stalled", "True", "OwnedElsewhere")
    assert "of cluster east" in message(obj)

    east.create("Stream", "never", stream(broker, "LEGACY", adoptionPolicy="never"))
    east.wait_condition("Stream", "never", "Stalled", "True", "AdoptionRefused")
    east.create("Stream", "new", stream(broker, "LEGACY", maxMsgs=4))  # adoptOrCreate; "never" is older: Conflict
    east.delete("Stream", "never")
    east.wait_condition("Stream", "new", "Ready")
    adopted = east.wait_events("new", "Adopted")
    assert f"its marks named Stream {east.namespace}/old (uid {gone['jsoperator.io/uid']}" in adopted[-1].message
    assert "which no longer exists" in adopted[-1].message
    config = server_config(broker.url, "STREAM.INFO.LEGACY")
    assert config["max_msgs"] == 4 and marks(config) == owner_marks(east, "Stream", "new", "east")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_a_retained_object_loses_its_marks_by_operator_and_by_release(envtest, east, east_operator, broker):
    east.create("Stream", "kept", stream(broker, "KEPT", deletionPolicy="retain", metadata={"team": "a"}))
    east.create("Stream", "released", stream(broker, "RELEASED", deletionPolicy="retain"))
    for name in ("kept", "released"):
        east.wait_condition("Stream", name, "Ready")
    east.delete("Stream", "kept")
    east.wait_gone("Stream", "kept")
    assert "(its ownership marks were removed)" in east.wait_events("kept", "LeftOnServer")[-1].message
    config = server_config(broker.url, "STREAM.INFO.KEPT")
    assert marks(config) == {} and user_keys(config) == {"team": "a"}

    east_operator.stop()
    try:
        east.delete("Stream", "released")  # held by east's finalizer, nobody there to remove it
        proc = release(envtest, "--namespace", east.namespace, "--instance", "east", "--cluster-name", "east")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "(its ownership marks were removed)" in proc.stdout
        east.wait_gone("Stream", "released", timeout=5)
    finally:
        east_operator.start()
    assert marks(server_config(broker.url, "STREAM.INFO.RELEASED")) == {}


class FinalizerWatch:
    """Every finalizer list each ClusterJetStreamConnection had, event by event, from a watch of the kind (on a
    client of its own, closed by stop())."""

    def __init__(self, envtest: Any) -> None:
        self.seen: dict[str, list[list[str]]] = {}
        self._client = envtest.api_client()
        self._watch = kubernetes.watch.Watch()
        self._stopped = threading.Event()
        self.error: BaseException | None = None
        api = kubernetes.client.CustomObjectsApi(self._client)
        self._events = self._watch.stream(api.list_cluster_custom_object, GROUP, VERSION, CLUSTER, timeout_seconds=200)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._events:
                meta = event["object"]["metadata"]
                self.seen.setdefault(meta["name"], []).append(list(meta.get("finalizers") or []))
        except Exception as exc:  # the connection closed by stop(), or a real failure
            if not self._stopped.is_set():
                self.error = exc

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()
        self._client.close()
        self._thread.join(10)
        assert self.error is None, f"the watch failed: {self.error!r}"


def test_two_operators_serve_their_own_cluster_connections_without_fighting(envtest, east, west, broker):
    """Both connections grant every namespace, so both operators may serve both: before --instance, the one whose
    handlers did not match took the other's finalizer off at every event, and that one put it back."""
    conns = ClusterConnections(east.api)
    watch = FinalizerWatch(envtest)
    names = {}
    try:
        for side, kube in (("east", east), ("west", west)):
            name = f"jsown-{side}-{uuid.uuid4().hex[:8]}"
            east.api.create_cluster_custom_object(GROUP, VERSION, CLUSTER, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterJetStreamConnection",
                "metadata": {"name": name, "labels": {"jsoperator.io/instance": side}},
                "spec": {"servers": [broker.url], "allowedNamespaces": ["*"]}})
            conns.names.append(name)
            names[side] = name
            kube.create("Stream", f"via-{side}", {"subjects": [f"{side}.>"], "storage": "memory",
                                                  "connectionRef": {"kind": "ClusterJetStreamConnection",
                                                                    "name": name}})
        for side, kube in (("east", east), ("west", west)):
            kube.wait_condition("Stream", f"via-{side}", "Ready")
            poll(lambda n=names[side], s=side: (conns.get(n) or {}).get("metadata", {}).get("finalizers") == [
                f"jsoperator.io/finalizer.{s}"] and (conns.get(n)["status"] or {}).get("referencedBy") == 1,
                timeout=30, what=f"{side}'s connection held and counted by {side}'s operator")
        for side in names:  # a spec change each: both operators see both events
            conns.patch(names[side], {"allowedNamespaces": ["*", "spare"]})
        for side in names:
            poll(lambda n=names[side]: (conns.get(n).get("status") or {}).get("observedGeneration") == 2,
                 timeout=30, what="the spec change handled")
    finally:
        east.release_all()
        west.release_all()
        for name in conns.names:
            conns.delete(name)
        for name in conns.names:
            poll(lambda n=name: conns.get(n) is None, timeout=30, what=f"ClusterJetStreamConnection {name} deleted")
        watch.stop()
    for side, name in names.items():
        history = watch.seen[name]
        ours = [f"jsoperator.io/finalizer.{side}"]
        held = history.index(ours)  # from the first time it is held ...
        released = len(history) - 1 - history[::-1].index(ours)  # ... to the release at deletion
        assert history[held:released + 1] == [ours] * (released - held + 1), history  # never taken off meanwhile
        assert all(f in ([], ours) for f in history), history  # and never another operator's
