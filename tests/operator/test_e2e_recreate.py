"""End to end, recreateOnImmutableChange against nats-server and jsbroker: refused by the CRD without
acceptDataLoss; with both, a storage change deletes the stream and creates it again, saying what was lost
in status and a Warning Event, and the Consumer resource of that stream puts its consumer back."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from tests.operator.conftest import condition, publish, server_consumer, server_stream

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

    kube.patch("Stream", "recreated", {"spec": {"storage": "memory", "recreateOnImmutableChange": True,
                                                "acceptDataLoss": True}})
    obj = kube.wait("Stream", "recreated", lambda o: "recreated" in condition(o, "Ready")["message"]
                    and condition(o, "Ready")["status"] == "True")
    assert "its 3 messages" in condition(obj, "Ready")["message"]
    info = server_stream(broker.url, "RECREATED")
    assert info.config.storage == "memory" and info.state.messages == 0
    event = kube.wait_events("recreated", "Recreated")[0]
    assert event.type == "Warning" and "storage cannot change" in event.message and "3 messages" in event.message
    # The stream's deletion took its consumer along; the Consumer resource puts it back.
    kube.wait("Consumer", "reader", lambda o: server_consumer(broker.url, "RECREATED", "reader") is not None,
              what="the consumer back on the server")
