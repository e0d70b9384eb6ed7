"""The broker's token Secret, created at its first start instead of by Helm: the init container's script
(charts/jetstream-kopf/files/ensure-token.py), taken from a `helm template` render, runs as the broker's
ServiceAccount with the chart's own Role and RoleBinding on a real kube-apiserver. It creates the Secret
once, keeps it on every later start, refuses a Secret without the key, and may read no other Secret."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import kubernetes.utils
import pytest
from kubernetes.client.rest import ApiException

from tests.chart.test_chart import dry_run_apply, helm_bin, one, render  # noqa: F401  (helm_bin: a fixture)
from tests.kube.fixtures import service_account_kubeconfig

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube]
SECRET = "jk-jetstream-kopf-broker-auth"


@pytest.fixture
def init_container(helm_bin: Path, envtest: Any, kube_namespace: str) -> dict[str, Any]:
    """The rendered broker RBAC applied for real in `kube_namespace`; returns the init container."""
    docs = render(helm_bin, [])
    rbac = [d for d in docs if d["kind"] in ("ServiceAccount", "Role", "RoleBinding") and "broker" in d["metadata"]["name"]]
    assert sorted(d["kind"] for d in rbac) == ["Role", "RoleBinding", "ServiceAccount"]
    dry_run_apply(envtest, rbac, default_namespace=kube_namespace)  # validated first, then created
    with envtest.api_client() as client:
        for doc in rbac:
            kubernetes.utils.create_from_dict(client, doc, namespace=kube_namespace)
    [container] = one(docs, "StatefulSet")["spec"]["template"]["spec"]["initContainers"]
    return container


def run_init(container: dict[str, Any], kubeconfig: Path, namespace: str) -> subprocess.CompletedProcess[str]:
    """The init container's command with this venv's python (the image's has the same packages)."""
    command = [sys.executable, *container["command"][1:]]
    return subprocess.run(command, env={**os.environ, "KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": namespace},
                          capture_output=True, text=True, timeout=60)


def token(envtest: Any, namespace: str) -> str:
    with envtest.api_client() as client:
        data = kubernetes.client.CoreV1Api(client).read_namespaced_secret(SECRET, namespace).data
    return base64.b64decode(data["token"]).decode()


def test_created_at_the_first_start_and_kept_at_every_later_one(envtest, kube_namespace, init_container, tmp_path):
    kubeconfig = service_account_kubeconfig(envtest, kube_namespace, "jk-jetstream-kopf-broker", tmp_path / "kc")
    first = run_init(init_container, kubeconfig, kube_namespace)
    assert first.returncode == 0 and "created Secret" in first.stdout, first.stderr
    created = token(envtest, kube_namespace)
    assert len(created) == 48 and int(created, 16) >= 0
    with envtest.api_client() as client:
        labels = kubernetes.client.CoreV1Api(client).read_namespaced_secret(SECRET, kube_namespace).metadata.labels
    # No app.kubernetes.io/instance: Argo CD's label tracking would prune a Secret it did not render.
    assert labels == {"app.kubernetes.io/name": "jetstream-kopf", "app.kubernetes.io/component": "broker-auth"}

    again = run_init(init_container, kubeconfig, kube_namespace)
    assert again.returncode == 0 and "kept Secret" in again.stdout, again.stderr
    assert token(envtest, kube_namespace) == created


def test_a_secret_of_the_users_is_kept_and_one_without_the_key_refused(envtest, kube_namespace, init_container,
                                                                        tmp_path):
    kubeconfig = service_account_kubeconfig(envtest, kube_namespace, "jk-jetstream-kopf-broker", tmp_path / "kc")
    with envtest.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespaced_secret(kube_namespace, {"metadata": {"name": SECRET}, "stringData": {"password": "x"}})
    refused = run_init(init_container, kubeconfig, kube_namespace)
    assert refused.returncode == 1
    assert (f"Secret {kube_namespace}/{SECRET} exists without key 'token' (keys: ['password']): add the token under "
            "that key, or set broker.auth.secretKey to the key it has") in refused.stderr

    with envtest.api_client() as client:
        kubernetes.client.CoreV1Api(client).patch_namespaced_secret(
            SECRET, kube_namespace, {"stringData": {"token": "chosen-by-the-user"}})
    kept = run_init(init_container, kubeconfig, kube_namespace)
    assert kept.returncode == 0, kept.stderr
    assert token(envtest, kube_namespace) == "chosen-by-the-user"


def test_the_broker_account_reads_no_other_secret(envtest, kube_namespace, init_container, tmp_path):
    kubeconfig = service_account_kubeconfig(envtest, kube_namespace, "jk-jetstream-kopf-broker", tmp_path / "kc")
    with envtest.api_client() as client:
        kubernetes.client.CoreV1Api(client).create_namespaced_secret(
            kube_namespace, {"metadata": {"name": "other"}, "stringData": {"k": "v"}})
    with kubernetes.config.new_client_from_config(config_file=str(kubeconfig)) as client:  # type: ignore[no-untyped-call]
        with pytest.raises(ApiException) as denied:
            kubernetes.client.CoreV1Api(client).read_namespaced_secret("other", kube_namespace)
    assert denied.value.status == 403
