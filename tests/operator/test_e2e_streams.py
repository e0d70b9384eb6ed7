"""End to end: a `jsoperator run` process, the envtest apiserver, real brokers; driven only through
the Kubernetes API. Streams: create, update, adopt, immutability refusal, drift repair, delete."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from tests.operator.conftest import condition, has_condition, on_broker, poll, publish, server_stream

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]


def stream_spec(broker, subjects, **extra):
    return {"subjects": subjects, "storage": "memory", "connection": {"servers": [broker.url]}, **extra}


def test_create_update_delete(kube, broker):
    kube.create("Stream", "orders", stream_spec(broker, ["orders.>"], maxMsgs=100))
    obj = kube.wait_condition("Stream", "orders", "Ready")
    info = server_stream(broker.url, "orders")
    assert info.config.subjects == ["orders.>"] and info.config.max_msgs == 100
    assert obj["status"]["streamName"] == "orders"
    assert has_condition(obj, "Reconciling", "False") and has_condition(obj, "Stalled", "False")

    kube.patch("Stream", "orders", {"spec": {"maxMsgs": 200, "subjects": ["orders.>", "returns.>"]}})
    kube.wait("Stream", "orders", lambda o: o["status"].get("observedGeneration") == 2
              and has_condition(o, "Ready"), what="generation 2 Ready")
    info = server_stream(broker.url, "orders")
    assert info.config.max_msgs == 200 and sorted(info.config.subjects) == ["orders.>", "returns.>"]
    kube.wait_events("orders", "Created")
    kube.wait_events("orders", "Updated")

    kube.delete("Stream", "orders")
    kube.wait_gone("Stream", "orders")
    assert server_stream(broker.url, "orders") is None


def test_spec_name_and_adoption_of_an_existing_stream(kube, broker):
    async def precreate(js):
        await js.add_stream(name="LEGACY", subjects=["legacy.>"], storage="memory", max_msgs=5)

    on_broker(broker.url, precreate)
    kube.create("Stream", "legacy", stream_spec(broker, ["legacy.>"], name="LEGACY", maxMsgs=50))
    obj = kube.wait_condition("Stream", "legacy", "Ready")
    assert obj["status"]["streamName"] == "LEGACY"
    assert server_stream(broker.url, "LEGACY").config.max_msgs == 50  # adopted = updated, not an error
    kube.wait_events("legacy", "Adopted")


def test_immutable_change_is_refused_by_the_apiserver(kube, broker):
    kube.create("Stream", "imm", stream_spec(broker, ["imm.>"]))
    kube.wait_condition("Stream", "imm", "Ready")
    with pytest.raises(ApiException) as err:
        kube.patch("Stream", "imm", {"spec": {"storage": "file"}})
    assert err.value.status == 422 and "storage" in err.value.body
    with pytest.raises(ApiException) as err:
        kube.patch("Stream", "imm", {"spec": {"name": "OTHER"}})
    assert err.value.status == 422


def test_drift_is_repaired(drift_kube, broker):
    kube = drift_kube  # detected by the drift timer
    kube.create("Stream", "drifty", stream_spec(broker, ["drifty.>"], maxMsgs=10))
    kube.wait_condition("Stream", "drifty", "Ready")

    async def tamper(js):
        await js.update_stream(name="drifty", subjects=["drifty.>"], storage="memory", max_msgs=999)

    on_broker(broker.url, tamper)
    poll(lambda: server_stream(broker.url, "drifty").config.max_msgs == 10, timeout=20,
         what="maxMsgs put back to 10")

    async def remove(js):
        await js.delete_stream("drifty")

    on_broker(broker.url, remove)
    poll(lambda: server_stream(broker.url, "drifty") is not None, timeout=20, what="deleted stream recreated")
    kube.wait_events("drifty", "DriftRepaired")


def test_invalid_server_config_reports_the_server_error(kube, broker):
    async def precreate(js):  # by hand, not a resource: no Conflict, the server's own refusal
        await js.add_stream(name="FIRST", subjects=["clash.>"], storage="memory")

    on_broker(broker.url, precreate)
    kube.create("Stream", "second", stream_spec(broker, ["clash.x"]))
    obj = kube.wait_condition("Stream", "second", "Ready", "False", "JetStreamError")
    assert "10065" in condition(obj, "Ready")["message"]
    assert has_condition(obj, "Stalled", "True")


def test_adopting_a_stream_that_differs_in_an_immutable_field_is_stalled(kube, broker):
    async def precreate(js):
        await js.add_stream(name="MEMO", subjects=["memo.>"], storage="memory")

    on_broker(broker.url, precreate)
    kube.create("Stream", "memo", {"name": "MEMO", "subjects": ["memo.>"], "storage": "file",
                                   "connection": {"servers": [broker.url]}})
    obj = kube.wait_condition("Stream", "memo", "Stalled", "True", "ImmutableFieldChange")
    assert "storage" in condition(obj, "Ready")["message"]
    assert server_stream(broker.url, "MEMO").config.storage == "memory"  # nothing sent


def test_consumer_immutable_change_is_refused_by_the_apiserver(kube, broker):
    kube.create("Stream", "cim", stream_spec(broker, ["cim.>"]))
    kube.create("Consumer", "cimc", {"streamName": "cim", "ackPolicy": "explicit",
                                     "connection": {"servers": [broker.url]}})
    kube.wait_condition("Consumer", "cimc", "Ready")
    with pytest.raises(ApiException) as err:
        kube.patch("Consumer", "cimc", {"spec": {"ackPolicy": "all"}})
    assert err.value.status == 422 and "ackPolicy" in err.value.body


def test_durable_source_through_a_consumer_resource(kube, broker):
    """2.14's durable sourcing with both ends as resources: the origin's Consumer (ackPolicy flowControl)
    and a Stream whose source names it. Until the consumer exists the link is inactive; then the copies
    come and the status shows the link caught up."""
    kube.create("Stream", "region", stream_spec(broker, ["region.>"], name="REGION"))
    kube.create("Stream", "central", {"storage": "memory", "connection": {"servers": [broker.url]}, "name": "CENTRAL",
                                      "sources": [{"name": "REGION", "consumer": {"name": "TO_CENTRAL",
                                                                                  "deliverSubject": "central.in"}}]})
    kube.wait_condition("Stream", "region", "Ready")
    kube.wait_condition("Stream", "central", "Ready")
    assert publish(broker.url, "region.a", 2) == [1, 2]
    kube.create("Consumer", "to-central", {"streamName": "REGION", "durableName": "TO_CENTRAL",
                                           "deliverSubject": "central.in", "ackPolicy": "flowControl",
                                           "connection": {"servers": [broker.url]}})
    kube.wait_condition("Consumer", "to-central", "Ready")
    central = kube.wait("Stream", "central", lambda o: o["status"].get("messages") == 2 and o["status"].get("sources")
                        == [{"name": "REGION", "lag": 0, "active": True}], timeout=60, what="the copies and the link")
    assert central["status"]["lastSeq"] == 2
    # the consumer's ack floor follows the flow control answers (a heartbeat later at the latest)
    kube.wait("Consumer", "to-central", lambda o: (o["status"].get("ackFloor") or {}).get("streamSeq") == 2,
              timeout=30, what="acked by the sourcing stream")
    assert has_condition(kube.get("Consumer", "to-central"), "Ready")


def test_source_status_shows_a_missing_origin_then_the_link(kube, broker):
    """A source whose origin does not exist yet: the Stream is Ready (the server took it) and its status
    says why nothing is copied; once the origin exists the error goes and the link is active."""
    kube.create("Stream", "collector", {"storage": "memory", "connection": {"servers": [broker.url]},
                                        "sources": [{"name": "LATER"}]})
    kube.wait_condition("Stream", "collector", "Ready")
    missing = kube.wait("Stream", "collector", lambda o: "error" in ((o["status"].get("sources") or [{}])[0]),
                        timeout=60, what="the missing origin in status.sources")
    assert missing["status"]["sources"] == [{"name": "LATER", "lag": 0, "active": False, "error": "stream not found"}]
    kube.create("Stream", "later", stream_spec(broker, ["later.>"], name="LATER"))
    kube.wait_condition("Stream", "later", "Ready")
    publish(broker.url, "later.x", 1)
    linked = kube.wait("Stream", "collector", lambda o: o["status"].get("sources") == [
        {"name": "LATER", "lag": 0, "active": True}] and o["status"].get("messages") == 1, timeout=60,
        what="the link active, its error gone")
    assert linked["status"]["lag"] == 0
