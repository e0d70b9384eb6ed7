"""End to end: two operator replicas with --leader-election on one Lease: one reconciles, the other waits
(answering its probes); when the leader stops (SIGTERM: it releases the Lease) or dies (SIGKILL: the Lease
expires), the other takes over; they never both reconcile."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from tests.operator.conftest import DRIFT_INTERVAL, Kube, Operator, poll

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(240)]

PREFIX = "jsoplead-"
LEASE = "default/jsoperator-test-leader"


def replica(envtest, tmp_path, name):
    op = Operator(envtest, tmp_path / f"{name}.log", DRIFT_INTERVAL, PREFIX, ("--leader-election", LEASE))
    poll(op.healthy, timeout=60, what=f"{name} /healthz")
    return op


def leads(op, times=1):
    """`op` took the lead at least `times` times (its log is kept across restarts)."""
    return op.log.read_text(errors="replace").count("this replica leads") >= times


def reconciled(op, stream):
    return f"created stream {stream}" in op.log.read_text(errors="replace")


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_one_leader_and_failover(envtest, crds, broker, tmp_path):
    a = replica(envtest, tmp_path, "a")
    poll(lambda: leads(a), timeout=30, what="a leads")
    b = replica(envtest, tmp_path, "b")
    assert b.http(b.health_port, "/healthz") and b.http(b.health_port, "/readyz")  # the standby answers its probes
    try:
        a.wait_serving()
        with envtest.api_client() as client:
            kube = Kube(client, f"{PREFIX}{uuid.uuid4().hex[:10]}", a)
            kube.create_namespace()
            spec = {"subjects": ["one.>"], "storage": "memory", "connection": {"servers": [broker.url]}}
            kube.create("Stream", "one", spec)
            kube.wait_condition("Stream", "one", "Ready")
            assert reconciled(a, "one") and not reconciled(b, "one") and not leads(b)

            a.proc.send_signal(signal.SIGTERM)  # a rollout or a drain: the leader releases the Lease
            stopped = time.monotonic()
            a.proc.wait(timeout=20)
            poll(lambda: leads(b), timeout=15, what="b leads after a released the Lease")
            took = time.monotonic() - stopped
            kube.operator = b
            kube.create("Stream", "two", {**spec, "subjects": ["two.>"]})
            kube.wait_condition("Stream", "two", "Ready", timeout=30)
            assert reconciled(b, "two") and not reconciled(a, "two")
            print(f"failover after SIGTERM: {took:.1f}s until the standby led")

            a.start_standby()
            b.proc.send_signal(signal.SIGKILL)  # the leader dies holding the Lease: it expires
            killed = time.monotonic()
            poll(lambda: leads(a, 2), timeout=40, what="a leads again after b died")
            print(f"failover after SIGKILL: {time.monotonic() - killed:.1f}s until the standby led")
            kube.operator = a
            kube.create("Stream", "three", {**spec, "subjects": ["three.>"]})
            kube.wait_condition("Stream", "three", "Ready", timeout=30)
            kube.release_all()
    finally:
        a.stop()
        b.stop()
