"""The kubectl/GitOps manifests: deploy/base is the chart's default install (kept equal to a fresh
render), the overlays do what they say, and every object kustomize builds is accepted by a real
kube-apiserver (server-side apply, dry run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.dynamic
import pytest
import yaml

from tests.chart import go_tools, manifests
from tests.chart.test_chart import dry_run_apply, env, one, tool

ROOT = Path(__file__).resolve().parents[2]
BUILDS = ["deploy/base", "deploy/overlays/external-nats", "deploy/overlays/namespaced", "deploy/overlays/other-namespace"]


@pytest.fixture(scope="module")
def kustomize_bin() -> Path:
    return tool(go_tools.KUSTOMIZE)


def build_text(kustomize: Path, folder: str | Path) -> str:
    done = subprocess.run([str(kustomize), "build", str(ROOT / folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def build(kustomize: Path, folder: str | Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(build_text(kustomize, folder)) if doc]


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
    assert cluster == {"customresourcedefinitions", "namespaces", "clusterjetstreamconnections",
                       "clusterjetstreamconnections/status"}
    assert one(docs, "Role", "jetstream-kopf-operator")["metadata"]["namespace"] == "team-a"
    [operator] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert env(operator)["JSOPERATOR_NAMESPACES"] == "team-a"


CLUSTER_SCOPED = ("Namespace", "ClusterRole", "ClusterRoleBinding")


def test_the_other_namespace_overlay_moves_everything(kustomize_bin):
    text = build_text(kustomize_bin, "deploy/overlays/other-namespace")
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] not in CLUSTER_SCOPED} == {"team-x"}
    assert one(docs, "Namespace")["metadata"]["name"] == "team-x"
    assert one(docs, "ClusterRoleBinding")["subjects"] == [
        {"kind": "ServiceAccount", "name": "jetstream-kopf-operator", "namespace": "team-x"}]
    assert "jetstream-kopf.svc" not in text and "namespace: jetstream-kopf\n" not in text
    [operator] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    variables = env(operator)
    assert variables["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert variables["JSOPERATOR_SERVERS"] == "nats://jetstream-kopf-broker.$(POD_NAMESPACE).svc:4222"
    # The broker's RoleBinding: its subject is in the binding's own namespace (kustomize also writes it).
    [subject] = one(docs, "RoleBinding", "jetstream-kopf-broker-auth")["subjects"]
    assert (subject["name"], subject.get("namespace", "team-x")) == ("jetstream-kopf-broker", "team-x")


def test_namespace_alone_leaves_the_cluster_role_binding_subject(kustomize_bin, tmp_path):
    """Why the overlay carries its replacements block: kustomize rewrites only subjects named `default`."""
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "namespace": "team-y", "resources": [os.path.relpath(ROOT / "deploy" / "base", tmp_path)]}))
    docs = build(kustomize_bin, tmp_path)
    assert one(docs, "Deployment")["metadata"]["namespace"] == "team-y"
    assert one(docs, "ClusterRoleBinding")["subjects"][0]["namespace"] == "jetstream-kopf"


@pytest.mark.xdist_group("kube")
@pytest.mark.kube
@pytest.mark.parametrize("folder", BUILDS)
def test_every_built_object_is_accepted_by_the_apiserver(kustomize_bin, envtest, folder):
    dry_run_apply(envtest, build(kustomize_bin, folder), default_namespace="jetstream-kopf")


def _allowed(client: Any, user: str, verb: str, resource: str, group: str = "", namespace: str | None = None,
             name: str | None = None) -> bool:
    review = kubernetes.client.AuthorizationV1Api(client).create_subject_access_review({"spec": {
        "user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}"],
        "resourceAttributes": {"verb": verb, "resource": resource, "group": group, "namespace": namespace,
                               "name": name}}})
    return bool(review.status.allowed)


@pytest.mark.xdist_group("kube")
@pytest.mark.kube
def test_the_other_namespace_overlay_grants_the_accounts_in_its_namespace(kustomize_bin, envtest):
    """The overlay's RBAC applied for real: the operator's account in team-x may list Streams cluster-wide
    and the broker's may create its token Secret there (asked of the apiserver's RBAC authorizer)."""
    rbac = [d for d in build(kustomize_bin, "deploy/overlays/other-namespace")
            if d["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
    with envtest.api_client() as client:
        dyn = kubernetes.dynamic.DynamicClient(client)
        for doc in rbac:
            api = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            api.server_side_apply(body=doc, name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"),
                                  field_manager="manifest-test", force_conflicts=True)
        operator, broker = ("system:serviceaccount:team-x:jetstream-kopf-" + n for n in ("operator", "broker"))
        assert _allowed(client, operator, "list", "streams", "jsoperator.io")
        assert _allowed(client, operator, "watch", "consumers", "jsoperator.io")
        for plural in ("keyvalues", "objectstores"):
            assert _allowed(client, operator, "watch", plural, "jsoperator.io")
            assert _allowed(client, operator, "patch", f"{plural}/status", "jsoperator.io")
        assert not _allowed(client, "system:serviceaccount:jetstream-kopf:jetstream-kopf-operator", "list", "streams",
                            "jsoperator.io")
        assert _allowed(client, broker, "get", "secrets", namespace="team-x", name="jetstream-kopf-broker-auth")
        assert _allowed(client, broker, "create", "secrets", namespace="team-x")
        assert not _allowed(client, broker, "get", "secrets", namespace="team-x", name="other")
