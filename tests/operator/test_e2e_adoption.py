"""End to end: adoptionPolicy (never / adopt / adoptOrCreate) with the Adopted and Synced conditions, and
conflicts — two Streams naming one server stream (across namespaces), two Consumers one durable, Streams
with overlapping subjects: the later one is Stalled with reason Conflict and nothing on the server changes."""

from __future__ import annotations

import uuid

import pytest

from tests.operator.conftest import Kube, condition, on_broker, server_consumer, server_stream

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]


def conn(broker):
    return {"servers": [broker.url]}


def stream_spec(broker, subjects, **extra):
    return {"subjects": subjects, "storage": "memory", "connection": conn(broker), **extra}


def add_stream_by_hand(broker, name, max_msgs=-1):
    async def add(js):
        await js.add_stream(name=name, subjects=[f"{name}.>"], storage="memory", max_msgs=max_msgs)

    on_broker(broker.url, add)


def reason_and_status(obj, type_):
    cond = condition(obj, type_) or {}
    return cond.get("status"), cond.get("reason")


@pytest.fixture
def other_kube(envtest, operator):
    """A second namespace served by the same operator."""
    with envtest.api_client() as client:
        k = Kube(client, f"{operator.namespace_prefix}{uuid.uuid4().hex[:10]}", operator)
        k.create_namespace()
        yield k
        k.release_all()


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_never_refuses_an_existing_object_and_changes_nothing(kube, broker):
    add_stream_by_hand(broker, "theirs", max_msgs=7)
    kube.create("Stream", "theirs", stream_spec(broker, ["theirs.>"], maxMsgs=100, adoptionPolicy="never"))
    obj = kube.wait_condition("Stream", "theirs", "Stalled", "True", "AdoptionRefused")
    assert "already exists on the server and this resource did not create it" in condition(obj, "Ready")["message"]
    assert server_stream(broker.url, "theirs").config.max_msgs == 7
    kube.delete("Stream", "theirs")
    kube.wait_gone("Stream", "theirs")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_never_creates_and_then_owns_its_object(kube, broker):
    kube.create("Stream", "mine", stream_spec(broker, ["mine.>"], adoptionPolicy="never"))
    obj = kube.wait_condition("Stream", "mine", "Ready")
    assert reason_and_status(obj, "Adopted") == ("False", "Created")
    assert reason_and_status(obj, "Synced") == ("True", "Synced")
    kube.patch("Stream", "mine", {"spec": {"maxMsgs": 5}})  # its own object: updates go on
    kube.wait("Stream", "mine", lambda o: o["status"].get("observedGeneration") == 2 and
              reason_and_status(o, "Ready") == ("True", "Synced"))
    assert server_stream(broker.url, "mine").config.max_msgs == 5


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_adopt_waits_for_the_object_and_never_creates_it(kube, broker):
    kube.create("Stream", "later", stream_spec(broker, ["later.>"], adoptionPolicy="adopt"))
    obj = kube.wait_condition("Stream", "later", "Ready", "False", "NotFoundOnServer")
    assert reason_and_status(obj, "Reconciling") == ("True", "NotFoundOnServer")
    assert server_stream(broker.url, "later") is None
    add_stream_by_hand(broker, "later")
    obj = kube.wait_condition("Stream", "later", "Ready", timeout=40)  # the retry with backoff finds it
    assert reason_and_status(obj, "Adopted") == ("True", "Adopted")
    kube.wait_events("later", "Adopted")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_adopt_or_create_is_the_default_and_says_which(kube, broker):
    add_stream_by_hand(broker, "found")
    kube.create("Stream", "found", stream_spec(broker, ["found.>"]))
    kube.create("Stream", "made", stream_spec(broker, ["made.>"]))
    assert reason_and_status(kube.wait_condition("Stream", "found", "Ready"), "Adopted") == ("True", "Adopted")
    assert reason_and_status(kube.wait_condition("Stream", "made", "Ready"), "Adopted") == ("False", "Created")
    kube.create("Consumer", "dur", {"streamName": "made", "connection": conn(broker), "adoptionPolicy": "never"})
    assert reason_and_status(kube.wait_condition("Consumer", "dur", "Ready"), "Adopted") == ("False", "Created")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_two_streams_naming_one_server_stream_across_namespaces(kube, other_kube, broker):
    kube.create("Stream", "owner", stream_spec(broker, ["shared.>"], name="SHARED", maxMsgs=10))
    kube.wait_condition("Stream", "owner", "Ready")
    other_kube.create("Stream", "intruder", stream_spec(broker, ["shared.>"], name="SHARED", maxMsgs=99))
    obj = other_kube.wait_condition("Stream", "intruder", "Stalled", "True", "Conflict")
    message = condition(obj, "Ready")["message"]
    assert f"Stream {kube.namespace}/owner (first) already manages stream SHARED on the same server" in message
    assert server_stream(broker.url, "SHARED").config.max_msgs == 10  # nothing changed on the server
    other_kube.delete("Stream", "intruder")  # deleting the later one leaves the older one's stream alone
    other_kube.wait_gone("Stream", "intruder")
    assert server_stream(broker.url, "SHARED") is not None
    kube.wait_condition("Stream", "owner", "Ready")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_two_consumers_one_durable_and_overlapping_subjects(kube, broker):
    kube.create("Stream", "orders", stream_spec(broker, ["orders.>"]))
    kube.wait_condition("Stream", "orders", "Ready")
    kube.create("Stream", "audit", stream_spec(broker, ["orders.paid", "audit.>"]))
    obj = kube.wait_condition("Stream", "audit", "Stalled", "True", "Conflict")
    assert (f"subject orders.paid overlaps orders.> of stream orders, managed by Stream {kube.namespace}/orders"
            in condition(obj, "Ready")["message"])
    assert server_stream(broker.url, "audit") is None

    kube.create("Consumer", "a", {"streamName": "orders", "durableName": "worker", "maxDeliver": 3,
                                  "connection": conn(broker)})
    kube.wait_condition("Consumer", "a", "Ready")
    kube.create("Consumer", "b", {"streamName": "orders", "durableName": "worker", "maxDeliver": 9,
                                  "connection": conn(broker)})
    obj = kube.wait_condition("Consumer", "b", "Stalled", "True", "Conflict")
    assert f"Consumer {kube.namespace}/a (first) already manages consumer worker of stream orders" in (
        condition(obj, "Ready")["message"])
    assert server_consumer(broker.url, "orders", "worker").config.max_deliver == 3
    kube.delete("Consumer", "b")
    kube.wait_gone("Consumer", "b")
    assert server_consumer(broker.url, "orders", "worker") is not None
