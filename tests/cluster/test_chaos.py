"""The chaos run on the local one-node cluster, short: one round of every fault kind and every resource
action (reset, pause, hold, apply) from a fixed seed (tests/cluster/chaos.py; bench/chaos.py runs it for as
long as you ask)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster import chaos
from tests.cluster.cluster import NODE_IP, Cluster
from tests.cluster.e2e import Target, diagnosed

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("image"), pytest.mark.timeout(1800)]

SEED = 35


def test_the_orders_pipeline_survives_a_round_of_every_fault(cluster: Cluster, e2e_image: str, helm: Path,
                                                             tmp_path: Path) -> None:
    target = Target(cluster.kubeconfig, cluster.load_docker_image, NODE_IP)
    with diagnosed(target, chaos.NAMESPACE):
        report = chaos.run(target, cluster.crictl, e2e_image, helm, tmp_path, SEED, faults=len(chaos.FAULTS),
                           gap=(2.0, 5.0), rate=2.0)
    print(report.text())
    assert sorted(done.step.fault for done in report.steps) == sorted(chaos.FAULTS)
    assert sorted(d.step.action for d in report.steps if d.step.action) == sorted(chaos.ACTIONS)  # pause among them
    assert (report.lost, report.twice) == (0, 0) and report.orders > 0
