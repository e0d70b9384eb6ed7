"""End to end, `jsoperator run --read-only` against nats-server and jsbroker: it observes and reports drift in
status, and creates, changes and deletes nothing on the server, nor runs a reset annotation."""

from __future__ import annotations

import pytest

from tests.operator.conftest import condition, on_broker, server_consumer, server_stream

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]


def test_read_only_reports_and_changes_nothing(read_only_kube, broker):
    kube, conn = read_only_kube, {"connection": {"servers": [broker.url]}}

    async def existing(js):
        await js.add_stream(name="KEPT", subjects=["kept.>"], max_msgs=10)
        await js.add_consumer("KEPT", durable_name="worker", ack_policy="explicit")

    on_broker(broker.url, existing)
    kube.create("Stream", "kept", {"name": "KEPT", "subjects": ["kept.>"], "maxMsgs": 10, **conn})
    kube.create("Stream", "missing", {"name": "MISSING", **conn})
    kube.create("Consumer", "worker", {"streamName": "KEPT", "ackPolicy": "explicit", **conn},
                annotations={"jsoperator.io/reset-to-sequence": "1"})

    kube.wait_condition("Stream", "kept", "Ready", reason="Synced")
    worker = kube.wait_condition("Consumer", "worker", "Ready", reason="Synced")
    assert "lastReset" not in worker["status"], "a reset annotation must not run in read-only mode"
    missing = kube.wait_condition("Stream", "missing", "Stalled", reason="ReadOnly")
    assert "stream MISSING does not exist on the server" in condition(missing, "Ready")["message"]
    assert "read-only" in condition(missing, "Ready")["message"]
    assert server_stream(broker.url, "MISSING") is None

    # Drift made on the server is reported, not repaired, by the drift timer.
    on_broker(broker.url, lambda js: js.update_stream(name="KEPT", subjects=["kept.>"], max_msgs=30))
    kept = kube.wait_condition("Stream", "kept", "Stalled", reason="ReadOnly")
    assert "maxMsgs (server: 30, spec: 10)" in condition(kept, "Ready")["message"]
    events = kube.wait_events("kept", "ReconcileFailed")
    assert "maxMsgs (server: 30, spec: 10)" in events[-1].message
    assert server_stream(broker.url, "KEPT").config.max_msgs == 30

    # Deleting the resources leaves the server objects.
    kube.delete("Consumer", "worker")
    kube.delete("Stream", "kept")
    kube.wait_gone("Consumer", "worker")
    kube.wait_gone("Stream", "kept")
    assert server_stream(broker.url, "KEPT") is not None
    assert server_consumer(broker.url, "KEPT", "worker") is not None
    left = kube.wait_events("kept", "LeftOnServer")
    assert "read-only" in left[-1].message
