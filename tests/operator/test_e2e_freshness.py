"""End to end: status and drift repair driven by the servers, not by the drift timer. The operator serving
these tests checks drift once an hour, so everything here comes from JetStream advisories, the
connection's reconnect, or the per-server listing every --status-interval (2 s)."""

from __future__ import annotations

import time

import pytest

from tests.operator.conftest import PROMPT, condition, fetch, on_broker, poll, publish, server_consumer, server_stream

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]


def conn(broker):
    return {"servers": [broker.url]}


def make_stream(kube, broker, resource, **extra):
    spec = {"subjects": [f"{resource}.>"], "storage": "memory", "connection": conn(broker), **extra}
    kube.create("Stream", resource, spec)
    return kube.wait_condition("Stream", resource, "Ready")


def seconds_until(check, what):
    start = time.monotonic()
    poll(check, timeout=PROMPT, what=what)
    return time.monotonic() - start


def test_printer_columns_follow_publishes_and_acks(kube, broker):
    make_stream(kube, broker, "busy")
    kube.create("Consumer", "reader", {"streamName": "busy", "ackPolicy": "explicit", "connection": conn(broker)})
    kube.wait_condition("Consumer", "reader", "Ready")
    publish(broker.url, "busy.x", 100)
    took = seconds_until(lambda: kube.get("Stream", "busy")["status"]["messages"] == 100, "messages = 100")
    seconds_until(lambda: kube.get("Consumer", "reader")["status"]["numPending"] == 100, "numPending = 100")
    fetch(broker.url, "busy", "reader", 10)
    seconds_until(lambda: kube.get("Consumer", "reader")["status"]["ackFloor"]["streamSeq"] == 10, "ack floor 10")
    print(f"{broker.kind}: status.messages fresh {took:.2f}s after 100 publishes")


def test_a_stream_deleted_by_hand_is_recreated_within_seconds(kube, broker):
    make_stream(kube, broker, "fragile", maxMsgs=42)
    kube.create("Consumer", "fragile-c", {"streamName": "fragile", "connection": conn(broker)})
    kube.wait_condition("Consumer", "fragile-c", "Ready")

    async def drop(js):
        await js.delete_stream("fragile")

    on_broker(broker.url, drop)
    took = seconds_until(lambda: server_stream(broker.url, "fragile") is not None, "stream recreated")
    assert server_stream(broker.url, "fragile").config.max_msgs == 42
    seconds_until(lambda: server_consumer(broker.url, "fragile", "fragile-c") is not None, "consumer recreated")
    kube.wait_events("fragile", "DriftRepaired")
    print(f"{broker.kind}: stream recreated {took:.2f}s after a delete by hand")


def test_a_changed_limit_is_put_back_at_once(kube, broker):
    make_stream(kube, broker, "strict", maxMsgs=10)

    async def tamper(js):
        await js.update_stream(name="strict", subjects=["strict.>"], storage="memory", max_msgs=1000)

    on_broker(broker.url, tamper)
    seconds_until(lambda: server_stream(broker.url, "strict").config.max_msgs == 10, "maxMsgs put back")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_a_restarted_memory_server_gets_its_streams_back(kube, broker):
    make_stream(kube, broker, "volatile")
    kube.create("Consumer", "volatile-c", {"streamName": "volatile", "connection": conn(broker)})
    kube.wait_condition("Consumer", "volatile-c", "Ready")
    broker.kill()
    broker.restart()  # memory streams are gone; the operator's connection reconnects
    start = time.monotonic()
    poll(lambda: server_stream(broker.url, "volatile") is not None, timeout=20, what="stream back after restart")
    poll(lambda: server_consumer(broker.url, "volatile", "volatile-c") is not None, timeout=20,
         what="consumer back after restart")
    print(f"memory stream back {time.monotonic() - start:.2f}s after the restarted server answered")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_a_conflicting_stream_takes_over_when_the_first_is_deleted(kube, broker):
    make_stream(kube, broker, "owner", name="BATON", subjects=["baton.>"])
    kube.create("Stream", "heir", {"name": "BATON", "subjects": ["baton.>"], "storage": "memory", "maxMsgs": 3,
                                   "connection": conn(broker)})
    obj = kube.wait_condition("Stream", "heir", "Stalled", "True", "Conflict")
    assert "owner" in condition(obj, "Ready")["message"]
    kube.delete("Stream", "owner")  # deletes BATON on the server: the advisory wakes the heir
    kube.wait_condition("Stream", "heir", "Ready", timeout=PROMPT)
    assert server_stream(broker.url, "BATON").config.max_msgs == 3
