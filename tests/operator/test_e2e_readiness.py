"""The operator's readiness on a real kube-apiserver: `/readyz` is 503 and names what it cannot list while
its ServiceAccount lacks the RBAC to list Streams, Consumers and connections (the issue-24 kustomize overlay: a
ClusterRoleBinding naming another namespace's account), and turns 200 once the chart's rules are bound;
liveness `/healthz` answers throughout (a restart would not grant permissions)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from jsoperator.localcluster.envtest import free_port
from tests.kube.fixtures import service_account_kubeconfig
from tests.operator.conftest import poll

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(120)]

# The chart's namespaced rules (charts/jetstream-kopf/templates/operator-rbac.yaml).
PLURALS = ["streams", "consumers", "keyvalues", "objectstores", "jetstreamconnections"]
RULES = [
    {"apiGroups": ["jsoperator.io"], "resources": PLURALS, "verbs": ["get", "list", "watch", "patch", "update"]},
    {"apiGroups": ["jsoperator.io"], "resources": [f"{p}/status" for p in PLURALS], "verbs": ["get", "patch", "update"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]
# The chart's ClusterRole rules for the cluster-scoped connections (in every mode).
CLUSTER_RULES = [
    {"apiGroups": ["jsoperator.io"], "resources": ["clusterjetstreamconnections"],
     "verbs": ["get", "list", "watch", "patch", "update"]},
    {"apiGroups": ["jsoperator.io"], "resources": ["clusterjetstreamconnections/status"],
     "verbs": ["get", "patch", "update"]},
]


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


@pytest.fixture
def run_operator(envtest: Any, tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(kubeconfig: Path, *namespaces: str) -> int:
        port = free_port()
        log = (tmp_path / f"operator-{port}.log").open("wb")
        started.append(subprocess.Popen(
            [sys.executable, "-m", "jsoperator", "run", "--servers", "nats://127.0.0.1:1", "--metrics-port", "0",
             "--health-port", str(port), "--log-format", "plain", *(f"--namespace={ns}" for ns in namespaces)],
            env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        poll(lambda: _answers(port), timeout=60, what="jsoperator's health port")
        return port

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=30)


def _answers(port: int) -> bool:
    try:
        return get(port, "/healthz")[0] == 200
    except OSError:
        return False


def test_not_ready_while_it_cannot_list_its_resources_in_its_namespace(envtest, crds, kube_namespace, run_operator,
                                                                        tmp_path):
    kubeconfig = service_account_kubeconfig(envtest, kube_namespace, "jsoperator", tmp_path / "sa.kubeconfig")
    port = run_operator(kubeconfig, kube_namespace)

    status, body = get(port, "/readyz")
    assert status == 503 and body["ready"] is False, body
    assert body["problems"] == [
        *(f"cannot list {plural}.jsoperator.io in namespace {kube_namespace}: 403 Forbidden" for plural in PLURALS),
        "cannot list clusterjetstreamconnections.jsoperator.io at the cluster scope: 403 Forbidden"], body
    assert get(port, "/healthz")[0] == 200  # alive: a restart would not grant permissions

    with envtest.api_client() as client:
        rbac = kubernetes.client.RbacAuthorizationV1Api(client)
        rbac.create_namespaced_role(kube_namespace, {"metadata": {"name": "jsoperator"}, "rules": RULES})
        rbac.create_namespaced_role_binding(kube_namespace, {
            "metadata": {"name": "jsoperator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jsoperator"},
            "subjects": [{"kind": "ServiceAccount", "name": "jsoperator", "namespace": kube_namespace}]})
        poll(lambda: get(port, "/readyz")[1]["problems"] == [
            "cannot list clusterjetstreamconnections.jsoperator.io at the cluster scope: 403 Forbidden"], timeout=30,
            what="only the cluster-scoped connections left once the Role is bound")
        name = f"{kube_namespace}-connections"
        rbac.create_cluster_role({"metadata": {"name": name}, "rules": CLUSTER_RULES})
        rbac.create_cluster_role_binding({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "jsoperator", "namespace": kube_namespace}]})
    poll(lambda: get(port, "/readyz") == (200, {"ready": True, "problems": []}), timeout=30,
         what="/readyz 200 once the Role and the ClusterRole are bound")


def test_cluster_wide_not_ready_with_a_binding_to_another_namespaces_account(envtest, crds, kube_namespace, run_operator,
                                                                              tmp_path):
    kubeconfig = service_account_kubeconfig(envtest, kube_namespace, "jsoperator", tmp_path / "sa.kubeconfig")
    with envtest.api_client() as client:  # what the issue's overlay got: the subject left in the base's namespace
        rbac = kubernetes.client.RbacAuthorizationV1Api(client)
        name = f"{kube_namespace}-elsewhere"
        rbac.create_cluster_role(
            {"metadata": {"name": name}, "rules": [*RULES, {"apiGroups": ["apiextensions.k8s.io"],
                                                            "resources": ["customresourcedefinitions"],
                                                            "verbs": ["get", "list", "watch"]}]})
        rbac.create_cluster_role_binding({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "jsoperator", "namespace": "jetstream-kopf"}]})
    port = run_operator(kubeconfig)
    status, body = get(port, "/readyz")
    assert (status, body["problems"]) == (503, [
        *(f"cannot list {plural}.jsoperator.io at the cluster scope: 403 Forbidden" for plural in PLURALS),
        "cannot list clusterjetstreamconnections.jsoperator.io at the cluster scope: 403 Forbidden"]), body
