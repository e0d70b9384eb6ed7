"""The Helm chart end to end on a real cluster (issue 13): the body is tests/cluster/e2e.py, run here on
the local one-node cluster, or on kind by scripts/e2e-kind.sh (which sets JSOPERATOR_E2E_*)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import e2e
from tests.servers import ServerHandle, start_nats_server

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("image"), pytest.mark.timeout(900)]


@pytest.fixture
def nats_server_for_pods(e2e_target: e2e.Target) -> Iterator[ServerHandle]:
    """A real nats-server on this machine, listening where pods reach it."""
    with start_nats_server(address=e2e_target.host_address) as server:
        yield server


def test_chart_with_its_broker(e2e_target: e2e.Target, e2e_image: str, helm: Path, tmp_path: Path) -> None:
    with e2e.diagnosed(e2e_target, e2e.BROKER_NAMESPACE):
        e2e.with_broker(e2e_target, e2e_image, helm, tmp_path)


def test_chart_with_an_external_nats_server(e2e_target: e2e.Target, e2e_image: str, helm: Path, tmp_path: Path,
                                            nats_server_for_pods: ServerHandle) -> None:
    with e2e.diagnosed(e2e_target, e2e.EXTERNAL_NAMESPACE):
        e2e.with_external_nats(e2e_target, e2e_image, helm, tmp_path, nats_server_for_pods)


def test_chart_with_its_broker_over_mutual_tls(e2e_target: e2e.Target, e2e_image: str, helm: Path,
                                               tmp_path: Path) -> None:
    with e2e.diagnosed(e2e_target, e2e.TLS_NAMESPACE):
        e2e.with_broker_tls(e2e_target, e2e_image, helm, tmp_path)


def test_kustomize_base_in_another_namespace(e2e_target: e2e.Target, e2e_image: str, kustomize: Path,
                                            tmp_path: Path) -> None:
    with e2e.diagnosed(e2e_target, e2e.OVERLAY_NAMESPACE):
        e2e.with_kustomize_overlay(e2e_target, e2e_image, kustomize, tmp_path)


def test_chart_rendered_by_helm_template_at_every_sync(e2e_target: e2e.Target, e2e_image: str, helm: Path,
                                                     tmp_path: Path) -> None:
    with e2e.diagnosed(e2e_target, e2e.ARGO_NAMESPACE):
        e2e.with_helm_template_syncs(e2e_target, e2e_image, helm, tmp_path)


def test_two_namespaces_on_two_accounts_of_the_chart_broker(e2e_target: e2e.Target, e2e_image: str, helm: Path,
                                                            tmp_path: Path) -> None:
    with e2e.diagnosed(e2e_target, e2e.ACCOUNTS_NAMESPACE):
        e2e.with_two_accounts(e2e_target, e2e_image, helm, tmp_path)
