"""End to end: the operator process itself — /healthz, Prometheus metrics, and kopf state kept under
its own state.jsoperator.io prefix (no kopf.zalando.org annotations or finalizers on our resources)."""

from __future__ import annotations

import re

import pytest

from tests.operator.conftest import has_condition, on_broker, poll, server_stream

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(120)]


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if m and ",".join(sorted((m.group(1) or "").split(","))) == want:
            return float(m.group(2))
    return 0.0


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_health_metrics_and_own_prefix(kube, broker, operator):
    assert operator.http(operator.health_port, "/healthz")  # liveness answers
    kube.create("Stream", "metered", {"subjects": ["metered.>"], "storage": "memory",
                                      "connection": {"servers": [broker.url]}})
    obj = kube.wait_condition("Stream", "metered", "Ready")

    def managed_metrics() -> str | None:
        text = operator.metrics()
        return text if metric(text, "jsoperator_resources_managed", kind="Stream") >= 1 else None

    text = poll(managed_metrics, timeout=10, what="resources_managed metric")
    assert metric(text, "jsoperator_reconciliations_total", kind="Stream", trigger="create") >= 1
    assert metric(text, "jsoperator_reconcile_duration_seconds_count", kind="Stream") >= 1

    meta = obj["metadata"]
    assert meta["finalizers"] == ["jsoperator.io/finalizer"]
    assert not [k for k in meta.get("annotations", {}) if "kopf.zalando.org" in k]
    assert "state.jsoperator.io/last-handled-configuration" in meta["annotations"]
    assert not [k for k in meta["annotations"] if k.startswith("jsoperator.io/")]  # the users' namespace


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_changes_made_while_the_operator_is_down_are_applied_on_resume(kube, broker, operator):
    kube.create("Stream", "resumed", {"subjects": ["resumed.>"], "storage": "memory", "maxMsgs": 1,
                                      "connection": {"servers": [broker.url]}})
    kube.wait_condition("Stream", "resumed", "Ready")
    operator.stop()
    try:
        kube.patch("Stream", "resumed", {"spec": {"maxMsgs": 2}})

        async def tamper(js):
            await js.update_stream(name="resumed", subjects=["resumed.>"], storage="memory", max_msgs=1,
                                   max_bytes=1234)

        on_broker(broker.url, tamper)
    finally:
        operator.start()
    kube.wait("Stream", "resumed", lambda o: o["status"].get("observedGeneration") == 2 and has_condition(o, "Ready"))
    config = server_stream(broker.url, "resumed").config
    assert (config.max_msgs, config.max_bytes) == (2, -1)  # the spec change and the drift both applied
