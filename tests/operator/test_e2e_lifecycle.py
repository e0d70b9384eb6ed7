"""End to end: consumers, pause / unmanaged annotations, preventDelete, Stream deletion waiting for its
Consumers, and a broker outage with recovery, all driven through the Kubernetes API."""

from __future__ import annotations

import json

import pytest

from tests.operator.conftest import (PROMPT, condition, has_condition, on_broker, publish, server_consumer,
                                    server_stream)

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]

PAUSE, MANAGED = "jsoperator.io/pause-reconciliation", "jsoperator.io/managed"


def conn(broker):
    return {"servers": [broker.url]}


def make_stream(kube, broker, name, storage="memory", **extra):
    kube.create("Stream", name, {"subjects": [f"{name}.>"], "storage": storage, "connection": conn(broker), **extra})
    return kube.wait_condition("Stream", name, "Ready")


def test_consumer_create_update_status_delete(kube, broker):
    make_stream(kube, broker, "cs")
    publish(broker.url, "cs.a", 3)
    kube.create("Consumer", "worker", {"streamName": "cs", "ackPolicy": "explicit", "maxDeliver": 5,
                                       "connection": conn(broker)})
    obj = kube.wait_condition("Consumer", "worker", "Ready")
    assert obj["status"]["numPending"] == 3 and obj["status"]["consumerName"] == "worker"
    assert server_consumer(broker.url, "cs", "worker").config.max_deliver == 5

    kube.patch("Consumer", "worker", {"spec": {"maxDeliver": 9}})
    kube.wait("Consumer", "worker", lambda o: o["status"].get("observedGeneration") == 2 and has_condition(o, "Ready"))
    assert server_consumer(broker.url, "cs", "worker").config.max_deliver == 9

    kube.delete("Consumer", "worker")
    kube.wait_gone("Consumer", "worker")
    assert server_consumer(broker.url, "cs", "worker") is None


def test_consumer_waits_for_its_stream(kube, broker):
    kube.create("Consumer", "early", {"streamName": "late", "connection": conn(broker)})
    obj = kube.wait_condition("Consumer", "early", "Ready", "False", "WaitingForStream")
    assert "stream late does not exist" in condition(obj, "Ready")["message"]
    make_stream(kube, broker, "late")
    kube.wait_condition("Consumer", "early", "Ready", timeout=40)


def test_stream_deletion_waits_for_consumer_resources(kube, broker):
    make_stream(kube, broker, "parent")
    kube.create("Consumer", "child", {"streamName": "parent", "connection": conn(broker)})
    kube.wait_condition("Consumer", "child", "Ready")
    kube.delete("Stream", "parent")
    obj = kube.wait_condition("Stream", "parent", "Ready", "False", "DeletionBlocked")
    assert "child" in condition(obj, "Ready")["message"]
    assert server_stream(broker.url, "parent") is not None
    kube.delete("Consumer", "child")
    kube.wait_gone("Stream", "parent", timeout=40)
    assert server_stream(broker.url, "parent") is None


def test_pause_changes_nothing_until_lifted(kube, broker):
    make_stream(kube, broker, "paused", maxMsgs=10)
    kube.annotate("Stream", "paused", {PAUSE: "true"})
    kube.wait_condition("Stream", "paused", "ReconciliationPaused", timeout=PROMPT)
    kube.patch("Stream", "paused", {"spec": {"maxMsgs": 20}})
    obj = kube.wait("Stream", "paused", lambda o: o["metadata"]["generation"] == 2
                    and has_condition(o, "ReconciliationPaused"))
    assert obj["status"]["observedGeneration"] == 1  # the new spec was not applied
    assert server_stream(broker.url, "paused").config.max_msgs == 10

    kube.annotate("Stream", "paused", {PAUSE: None})
    kube.wait_condition("Stream", "paused", "Ready", timeout=PROMPT)
    assert server_stream(broker.url, "paused").config.max_msgs == 20
    assert condition(kube.get("Stream", "paused"), "ReconciliationPaused") is None


def unmanaged_and_tampered(kube, broker, name):
    """A Ready stream (maxMsgs 10) annotated managed=false, then changed on the server to maxMsgs 77."""
    make_stream(kube, broker, name, maxMsgs=10)
    kube.annotate("Stream", name, {MANAGED: "false"})
    kube.wait_condition("Stream", name, "Unmanaged", timeout=PROMPT)

    async def tamper(js):
        await js.update_stream(name=name, subjects=[f"{name}.>"], storage="memory", max_msgs=77)

    on_broker(broker.url, tamper)


def test_unmanaged_is_never_touched_and_survives_deletion(kube, broker):
    unmanaged_and_tampered(kube, broker, "hands-off")
    kube.patch("Stream", "hands-off", {"spec": {"maxMsgs": 11}})
    kube.wait("Stream", "hands-off", lambda o: o["status"].get("observedGeneration") == 2,
              what="generation 2 observed")
    assert server_stream(broker.url, "hands-off").config.max_msgs == 77
    kube.delete("Stream", "hands-off")
    kube.wait_gone("Stream", "hands-off")
    assert server_stream(broker.url, "hands-off").config.max_msgs == 77


def test_managed_false_and_back_takes_effect_at_once(kube, broker):
    unmanaged_and_tampered(kube, broker, "handback")
    kube.annotate("Stream", "handback", {MANAGED: None})  # managed again: the spec wins over the tampering
    kube.wait("Stream", "handback", lambda o: condition(o, "Unmanaged") is None and has_condition(o, "Ready"),
              timeout=PROMPT, what="managed and Ready again")
    assert server_stream(broker.url, "handback").config.max_msgs == 10


def test_prevent_delete_keeps_the_server_objects(kube, broker):
    make_stream(kube, broker, "keep", preventDelete=True)
    kube.create("Consumer", "keeper", {"streamName": "keep", "preventDelete": True, "connection": conn(broker)})
    kube.wait_condition("Consumer", "keeper", "Ready")
    kube.delete("Consumer", "keeper")
    kube.wait_gone("Consumer", "keeper")
    kube.delete("Stream", "keep")
    kube.wait_gone("Stream", "keep")
    assert server_stream(broker.url, "keep") is not None
    assert server_consumer(broker.url, "keep", "keeper") is not None
    kube.wait_events("keep", "LeftOnServer")


def test_broker_outage_and_recovery(drift_kube, broker):
    kube = drift_kube  # detected by the drift timer
    make_stream(kube, broker, "durable", storage="file")
    kube.create("Consumer", "durable-c", {"streamName": "durable", "ackPolicy": "explicit", "connection": conn(broker)})
    kube.wait_condition("Consumer", "durable-c", "Ready")
    broker.kill()
    for kind, name in (("Stream", "durable"), ("Consumer", "durable-c")):
        obj = kube.wait_condition(kind, name, "Ready", "False", "BrokerUnavailable")
        assert has_condition(obj, "Reconciling", "True")
    assert kube.get("Stream", "durable")["metadata"].get("deletionTimestamp") is None
    broker.restart()
    kube.wait_condition("Stream", "durable", "Ready", timeout=40)
    kube.wait_condition("Consumer", "durable-c", "Ready", timeout=40)
    assert server_consumer(broker.url, "durable", "durable-c") is not None
    kube.wait_events("durable", "Created")  # the Events of before the outage are kept


def test_pause_until_pauses_and_resumes_the_consumer(kube, broker):
    make_stream(kube, broker, "ps")
    kube.create("Consumer", "sleeper", {"streamName": "ps", "connection": conn(broker)})
    kube.wait_condition("Consumer", "sleeper", "Ready")

    def paused() -> bool:
        return bool(server_consumer(broker.url, "ps", "sleeper").paused)

    kube.patch("Consumer", "sleeper", {"spec": {"pauseUntil": "2100-01-01T00:00:00Z"}})
    kube.wait("Consumer", "sleeper", lambda o: o["status"].get("observedGeneration") == 2 and has_condition(o, "Ready"))
    assert paused() is True
    kube.patch("Consumer", "sleeper", {"spec": {"pauseUntil": None}})
    kube.wait("Consumer", "sleeper", lambda o: o["status"].get("observedGeneration") == 3 and has_condition(o, "Ready"))
    assert paused() is False


def test_outage_warns_once_not_per_retry(drift_kube, broker):
    kube = drift_kube  # detected by the drift timer
    make_stream(kube, broker, "quiet")
    broker.kill()
    kube.wait_condition("Stream", "quiet", "Ready", "False", "BrokerUnavailable")
    kube.patch("Stream", "quiet", {"spec": {"maxMsgs": 5}})  # a change handler now retries with backoff

    def retries(obj: dict) -> int:
        progress = obj["metadata"].get("annotations", {}).get("state.jsoperator.io/update")
        return json.loads(progress).get("retries", 0) if progress else 0

    kube.wait("Stream", "quiet", lambda o: retries(o) >= 2, timeout=30, what="update handler retried twice")
    kube.wait_events("quiet", "ReconcileFailed")
    warnings = [e for e in kube.events("quiet") if e.reason == "ReconcileFailed"]
    assert len(warnings) == 1 and "cannot reach JetStream" in warnings[0].message


def test_delete_during_an_outage_waits_for_the_broker(drift_kube, broker):
    kube = drift_kube  # detected by the drift timer
    make_stream(kube, broker, "pending-delete", storage="file")
    broker.kill()
    kube.delete("Stream", "pending-delete")
    obj = kube.wait_condition("Stream", "pending-delete", "Ready", "False", "BrokerUnavailable")
    assert obj["metadata"]["finalizers"] == ["jsoperator.io/finalizer"]  # held until the broker answers
    broker.restart()
    kube.wait_gone("Stream", "pending-delete", timeout=60)
    assert server_stream(broker.url, "pending-delete") is None
