"""End to end, recreateOnImmutableChange against nats-server and jsbroker: refused by the CRD without
acceptDataLoss; with both, a storage change deletes the stream and creates it again, saying what was lost
in status and a Warning Event, and the Consumer resource of that stream puts its consumer back."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from tests.operator.conftest import condition, on_broker, publish, server_consumer, server_stream

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]


def test_recreate_on_immutable_change(kube, broker):
    conn = {"connection": {"servers": [broker.url]}}
    kube.create("Stream", "recreated", {"name": "RECREATED", "subjects": ["rec.>"], **conn})
    kube.create("Consumer", "reader", {"streamName": "RECREATED", "ackPolicy": "explicit", **conn})
    kube.wait_condition("Stream", "recreated", "Ready", reason="Synced")
    kube.wait_condition("Consumer", "reader", "Ready", reason="Synced")
    publish(broker.url, "rec.a", 3)

    for extra, refusal in (({}, "set recreateOnImmutableChange and acceptDataLoss"),
                           ({"recreateOnImmutableChange": True}, "needs acceptDataLoss: true")):
        with pytest.raises(ApiException) as err:
            kube.patch("Stream", "recreated", {"spec": {"storage": "memory", **extra}})
        assert err.value.status == 422 and refusal in err.value.body
    assert server_stream(broker.url, "RECREATED").state.messages == 3

    # Another file stream keeps the account's streams directory: nats-server refuses a create (10049) that
    # races its removal of that directory after the last file stream is deleted (a known nats-server race).
    on_broker(broker.url, lambda js: js.add_stream(name="KEEPS_THE_DIRECTORY", subjects=["keep.>"]))
    kube.patch("Stream", "recreated", {"spec": {"storage": "memory", "recreateOnImmutableChange": True,
                                                "acceptDataLoss": True}})
    # The Event is the durable record of the loss: the Ready message that states it is replaced by the next
    # reconcile's ("matches the spec"), which against nats-server can come before a poll sees it.
    def recreated(obj: dict) -> bool:
        info = server_stream(broker.url, "RECREATED")  # None while it is gone between the delete and the create
        return condition(obj, "Ready")["status"] == "True" and info is not None and info.config.storage == "memory"

    kube.wait("Stream", "recreated", recreated, what="recreated in memory")
    info = server_stream(broker.url, "RECREATED")
    assert info.config.storage == "memory" and info.state.messages == 0
    event = kube.wait_events("recreated", "Recreated")[0]
    assert event.type == "Warning" and "storage cannot change" in event.message and "3 messages" in event.message
    # The stream's deletion took its consumer along; the Consumer resource puts it back.
    kube.wait("Consumer", "reader", lambda o: server_consumer(broker.url, "RECREATED", "reader") is not None,
              what="the consumer back on the server")
