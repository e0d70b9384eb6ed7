"""The broker's volume full on the local one-node cluster while the ORDERS clients run
(tests/cluster/full_disk.py): publishes refused with 10023, reads and acks served, Stream orders'
StorageAvailable condition set by the operator and cleared when space is back, nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster import full_disk
from tests.cluster.cluster import NODE_IP, Cluster
from tests.cluster.e2e import Target, diagnosed

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("image"), pytest.mark.timeout(900)]


def test_a_full_broker_volume_refuses_publishes_is_reported_and_recovers(cluster: Cluster, e2e_image: str,
                                                                         helm: Path, tmp_path: Path) -> None:
    target = Target(cluster.kubeconfig, cluster.load_docker_image, NODE_IP)
    with diagnosed(target, full_disk.NAMESPACE):
        report = full_disk.run(target, e2e_image, helm, tmp_path)
    print(report.text())
    assert report.refused.get(10023, 0) > 0 and set(report.refused) == {10023}
    assert report.acked_while_full > 0 and report.orders > report.acked_before
