"""pytest fixtures for tests that need a real kube-apiserver; import them into a conftest:

    from tests.kube.fixtures import envtest, kube_namespace  # noqa: F401

- ``envtest`` (session): a started ``EnvTest`` (``.kubeconfig``, ``.server``, ``.api_client()``).
  Skips when the binaries are not built, unless ``JSOPERATOR_REQUIRE_ENVTEST`` is set (CI): then
  it fails. A start failure is always an error.
- ``kube_namespace`` (function): the name of a fresh namespace (namespaces are never cleaned up:
  nothing finishes deleting them without a controller-manager).
- ``service_account_kubeconfig()``: a kubeconfig acting as a ServiceAccount (RBAC applies, as in a pod).

Under pytest-xdist each worker would start its own control plane (~0.5 GB RAM, ~10-60 s of CPU).
Mark every envtest-using test ``@pytest.mark.xdist_group("kube")`` (the suite runs with
``--dist loadgroup``) so they all land on one worker and share one apiserver.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest
import yaml

from tests.kube import assets
from jsoperator.localcluster.envtest import EnvTest


@pytest.fixture(scope="session")
def envtest() -> Iterator[EnvTest]:
    folder = assets.find()
    if folder is None:
        reason = (
            "kube-apiserver/etcd are not built: run `python3 -m tests.kube.assets ensure` "
            "(needs Go >= 1.25) or set KUBEBUILDER_ASSETS"
        )
        if assets.required():
            pytest.fail(f"{reason} ({assets.REQUIRE_ENV} is set)")
        pytest.skip(reason)
    with EnvTest(folder) as env:
        yield env


@pytest.fixture
def kube_namespace(envtest: EnvTest) -> str:
    name = f"test-{uuid.uuid4().hex[:12]}"
    with envtest.api_client() as client:
        kubernetes.client.CoreV1Api(client).create_namespace(
            kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=name))
        )
    return name


def service_account_kubeconfig(env: EnvTest, namespace: str, name: str, path: Path) -> Path:
    """Write to `path` a kubeconfig that authenticates as ServiceAccount `namespace/name` (created when
    missing) with a fresh token: the API access a pod running as that account has, RBAC included."""
    with env.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        try:
            core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
        except kubernetes.client.ApiException as exc:
            assert exc.status == 409, exc
        token = core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
    config = yaml.safe_load(env.kubeconfig.read_text())
    config["users"] = [{"name": f"{namespace}-{name}", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = f"{namespace}-{name}"
    path.write_text(yaml.safe_dump(config))
    return path
