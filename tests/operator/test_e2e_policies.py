"""End to end: lifecycle policies and finalizers that never strand a resource — deletionPolicy (and the
deprecated preventDelete), `jsoperator release` after the operator is gone, an operator without
finalizers, and resources in a namespace being deleted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from kubernetes.client.rest import ApiException

from tests.operator.conftest import PROMPT, on_broker, poll, server_consumer, server_stream

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]

FINALIZER = "jsoperator.io/finalizer"


def conn(broker):
    return {"servers": [broker.url]}


def make_stream(kube, broker, name, **extra):
    kube.create("Stream", name, {"subjects": [f"{name}.>"], "storage": "memory", "connection": conn(broker), **extra})
    return kube.wait_condition("Stream", name, "Ready")


def make_consumer(kube, broker, stream, name, **extra):
    kube.create("Consumer", name, {"streamName": stream, "connection": conn(broker), **extra})
    return kube.wait_condition("Consumer", name, "Ready")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_deletion_policy_retain_keeps_and_delete_deletes(kube, broker):
    make_stream(kube, broker, "kept", deletionPolicy="retain")
    make_consumer(kube, broker, "kept", "kept-c", deletionPolicy="retain")
    make_stream(kube, broker, "dropped", deletionPolicy="delete")
    for kind, name in (("Consumer", "kept-c"), ("Stream", "kept"), ("Stream", "dropped")):
        kube.delete(kind, name)
        kube.wait_gone(kind, name)
    assert server_stream(broker.url, "kept") is not None
    assert server_consumer(broker.url, "kept", "kept-c") is not None
    assert server_stream(broker.url, "dropped") is None
    assert "deletionPolicy is retain" in kube.wait_events("kept", "LeftOnServer")[0].message


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_prevent_delete_still_works_with_a_deprecation_warning(kube, broker):
    make_stream(kube, broker, "legacy", preventDelete=True)
    warning = kube.wait_events("legacy", "Deprecated")[0]
    assert warning.type == "Warning" and "deletionPolicy: retain" in warning.message
    kube.delete("Stream", "legacy")
    kube.wait_gone("Stream", "legacy")
    assert server_stream(broker.url, "legacy") is not None


def test_prevent_delete_contradicting_deletion_policy_is_refused(kube):
    with pytest.raises(ApiException) as err:
        kube.create("Stream", "both", {"preventDelete": True, "deletionPolicy": "delete"})
    assert err.value.status == 422 and "remove preventDelete" in err.value.body


def release(envtest, *args):
    env = dict(os.environ, KUBECONFIG=str(envtest.kubeconfig))
    return subprocess.run([sys.executable, "-m", "jsoperator", "release", *args], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_release_lets_go_of_everything_when_the_operator_is_gone(envtest, kube, broker, operator):
    make_stream(kube, broker, "doomed")
    make_consumer(kube, broker, "doomed", "doomed-c")
    make_stream(kube, broker, "saved", deletionPolicy="retain")
    make_stream(kube, broker, "staying")
    kube.create("KeyValue", "doomed-kv", {"storage": "memory", "connection": conn(broker)})
    kube.create("ObjectStore", "saved-obj", {"storage": "memory", "deletionPolicy": "retain", "connection": conn(broker)})
    kube.wait_condition("KeyValue", "doomed-kv", "Ready")
    kube.wait_condition("ObjectStore", "saved-obj", "Ready")
    gone = (("Consumer", "doomed-c"), ("Stream", "doomed"), ("Stream", "saved"), ("KeyValue", "doomed-kv"),
            ("ObjectStore", "saved-obj"))
    operator.stop()
    try:
        for kind, name in gone:
            kube.delete(kind, name)  # stuck on the finalizer: nobody is there to remove it
        assert kube.get("Stream", "doomed")["metadata"]["finalizers"] == [FINALIZER]
        proc = release(envtest, "--namespace", kube.namespace)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"Stream {kube.namespace}/staying: released (server object kept, resource kept)" in proc.stdout
        for kind, name in gone:
            kube.wait_gone(kind, name, timeout=PROMPT)
        assert server_stream(broker.url, "doomed") is None  # its policy: delete
        assert server_stream(broker.url, "saved") is not None  # its policy: retain
        assert server_stream(broker.url, "KV_doomed-kv") is None and server_stream(broker.url, "OBJ_saved-obj")
        staying = kube.get("Stream", "staying")
        assert not staying["metadata"].get("finalizers") and server_stream(broker.url, "staying") is not None
    finally:
        operator.start()
    kube.wait("Stream", "staying", lambda o: o["metadata"].get("finalizers") == [FINALIZER], timeout=PROMPT,
              what="finalizer back once the operator runs")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_release_keeps_what_it_cannot_delete_unless_forced(envtest, kube, broker, operator):
    make_stream(kube, broker, "unreachable", storage="file")
    operator.stop()
    try:
        kube.delete("Stream", "unreachable")
        broker.kill()
        proc = release(envtest, "--namespace", kube.namespace, "--request-timeout", "1")
        assert proc.returncode == 1 and "kept, cannot delete the stream yet" in proc.stdout, proc.stdout
        assert kube.get("Stream", "unreachable") is not None
        proc = release(envtest, "--namespace", kube.namespace, "--force", "--request-timeout", "1")
        assert proc.returncode == 0, proc.stdout
        kube.wait_gone("Stream", "unreachable", timeout=PROMPT)
        broker.restart()
        assert server_stream(broker.url, "unreachable") is not None  # left on the server, as it said
    finally:
        operator.start()


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_without_finalizers_deletion_and_drift_still_work(nofinalizer_kube, broker):
    kube = nofinalizer_kube
    make_stream(kube, broker, "light")
    make_stream(kube, broker, "light-kept", deletionPolicy="retain")
    assert not kube.get("Stream", "light")["metadata"].get("finalizers")

    async def drop(js):
        await js.delete_stream("light")

    on_broker(broker.url, drop)
    poll(lambda: server_stream(broker.url, "light"), timeout=PROMPT, what="drift repaired without a finalizer")
    kube.delete("Stream", "light")
    kube.delete("Stream", "light-kept")
    kube.wait_gone("Stream", "light", timeout=PROMPT)  # at once: nothing holds it
    poll(lambda: server_stream(broker.url, "light") is None, timeout=PROMPT, what="server stream deleted")
    assert server_stream(broker.url, "light-kept") is not None
    # A bucket, the same way.
    kube.create("KeyValue", "light-kv", {"storage": "memory", "connection": conn(broker)})
    kube.wait_condition("KeyValue", "light-kv", "Ready")
    assert not kube.get("KeyValue", "light-kv")["metadata"].get("finalizers")
    kube.delete("KeyValue", "light-kv")
    kube.wait_gone("KeyValue", "light-kv", timeout=PROMPT)
    poll(lambda: server_stream(broker.url, "KV_light-kv") is None, timeout=PROMPT, what="bucket deleted")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_a_terminating_namespace_lets_go_of_an_unreachable_server(kube, broker):
    make_stream(kube, broker, "orphan", storage="file")
    broker.kill()
    kube.core.delete_namespace(kube.namespace)  # envtest has no namespace controller: delete its content by hand
    kube.delete("Stream", "orphan")
    obj = kube.wait_condition("Stream", "orphan", "Ready", "False", "BrokerUnavailable")
    assert obj["metadata"]["finalizers"] == [FINALIZER]
    kube.wait_gone("Stream", "orphan", timeout=30)  # a few retries, then it lets go
    # No Event: a terminating namespace takes no new objects. The log says it.
    said = f"stream orphan left on the server: namespace {kube.namespace} is being deleted"
    poll(lambda: said in kube.operator.tail(200), timeout=PROMPT, what="the operator log naming what was left")


