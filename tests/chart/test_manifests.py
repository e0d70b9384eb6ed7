"""The kubectl/GitOps manifests: deploy/base is the chart's default install (kept equal to a fresh
render), the overlays do what they say, and every object kustomize builds is accepted by a real
kube-apiserver (server-side apply, dry run)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import go_tools, manifests
from tests.chart.test_chart import dry_run_apply, env, one, tool

ROOT = Path(__file__).resolve().parents[2]
BUILDS = ["deploy/base", "deploy/overlays/external-nats", "deploy/overlays/namespaced"]


@pytest.fixture(scope="module")
def kustomize_bin() -> Path:
    return tool(go_tools.KUSTOMIZE)


def build(kustomize: Path, folder: str) -> list[dict[str, Any]]:
    done = subprocess.run([str(kustomize), "build", str(ROOT / folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def test_the_base_is_the_charts_default_render():
    assert manifests.BASE.read_text() == manifests.render(tool(go_tools.HELM)), (
        "deploy/base/jetstream-kopf.yaml is stale: run `python3 -m tests.chart.manifests`")


def test_the_base_installs_namespace_operator_and_broker(kustomize_bin):
    docs = build(kustomize_bin, "deploy/base")
    kinds = sorted(d["kind"] for d in docs)
    assert "Namespace" in kinds and "StatefulSet" in kinds and "Deployment" in kinds
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] not in (
        "Namespace", "ClusterRole", "ClusterRoleBinding")} == {"jetstream-kopf"}
    assert one(docs, "Deployment")["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kustomize"


def test_the_external_nats_overlay_has_no_broker(kustomize_bin):
    docs = build(kustomize_bin, "deploy/overlays/external-nats")
    assert not [d for d in docs if "broker" in d["metadata"]["name"]]
    [operator] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    variables = env(operator)
    assert variables["JSOPERATOR_SERVERS"] == "nats://nats.nats.svc:4222" and "JSOPERATOR_TOKEN" not in variables


def test_the_namespaced_overlay_grants_only_its_namespace(kustomize_bin):
    docs = build(kustomize_bin, "deploy/overlays/namespaced")
    cluster = {r for rule in one(docs, "ClusterRole")["rules"] for r in rule["resources"]}
    assert cluster == {"customresourcedefinitions", "namespaces"}
    assert one(docs, "Role")["metadata"]["namespace"] == "team-a"
    [operator] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert env(operator)["JSOPERATOR_NAMESPACES"] == "team-a"


@pytest.mark.xdist_group("kube")
@pytest.mark.kube
@pytest.mark.parametrize("folder", BUILDS)
def test_every_built_object_is_accepted_by_the_apiserver(kustomize_bin, envtest, folder):
    dry_run_apply(envtest, build(kustomize_bin, folder), default_namespace="jetstream-kopf")
