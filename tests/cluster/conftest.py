"""Fixtures for tests on a real cluster: the local one-node cluster, or any cluster given by
kubeconfig (kind, from scripts/e2e-kind.sh), seen by the end-to-end body as an `e2e.Target`.

- ``cluster`` (session): a started local `Cluster`; skips when it cannot run here, unless
  JSOPERATOR_REQUIRE_CLUSTER is set (CI): then it fails.
- ``e2e_target`` (session): $JSOPERATOR_E2E_KUBECONFIG (with $JSOPERATOR_E2E_LOAD_IMAGE, a command
  the image tag is appended to, and $JSOPERATOR_E2E_HOST_ADDRESS) or else the local cluster.
- ``e2e_image`` (session): $JSOPERATOR_E2E_IMAGE, or the image tests/image builds.
- ``helm``, ``kustomize``: the Go-built tools (tests/chart/go_tools).

Mark tests ``pytest.mark.cluster`` and ``pytest.mark.xdist_group("image")``: the image build and the
cluster both happen once, on the worker that also runs tests/image.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chart import go_tools
from tests.cluster import assets
from tests.cluster.cluster import NODE_IP, Cluster
from tests.cluster.e2e import Target
from tests.kube import assets as envtest_assets


def _unavailable(reason: str, what: str = f"{assets.REQUIRE_ENV} is set") -> None:
    if assets.required():
        pytest.fail(f"{reason} ({what})")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    reason = assets.unavailable()
    if reason is not None:
        _unavailable(reason)
    binaries, envtest_binaries = assets.find(), envtest_assets.find()
    assert binaries is not None and envtest_binaries is not None
    with Cluster(binaries, envtest_binaries) as started:
        yield started


@pytest.fixture(scope="session")
def e2e_target(request: pytest.FixtureRequest) -> Target:
    kubeconfig = os.environ.get("JSOPERATOR_E2E_KUBECONFIG")
    if kubeconfig:
        load = shlex.split(os.environ["JSOPERATOR_E2E_LOAD_IMAGE"])
        return Target(Path(kubeconfig), lambda tag: subprocess.run([*load, tag], check=True, timeout=600),
                      os.environ["JSOPERATOR_E2E_HOST_ADDRESS"])
    local: Cluster = request.getfixturevalue("cluster")
    return Target(local.kubeconfig, local.load_docker_image, NODE_IP)


@pytest.fixture(scope="session")
def e2e_image(request: pytest.FixtureRequest) -> str:
    given = os.environ.get("JSOPERATOR_E2E_IMAGE")
    image: str = given or request.getfixturevalue("image")
    return image


def _go_tool(tool: go_tools.Tool) -> Path:
    found = tool.find()
    if found is None:
        _unavailable(f"{tool.name} is not built: run `python3 -m tests.chart.go_tools ensure`")
    assert found is not None
    return found


@pytest.fixture(scope="session")
def helm() -> Path:
    return _go_tool(go_tools.HELM)


@pytest.fixture(scope="session")
def kustomize() -> Path:
    return _go_tool(go_tools.KUSTOMIZE)
