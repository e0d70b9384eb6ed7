"""Fixtures for the envtest harness's own tests."""

from tests.kube.fixtures import envtest, kube_namespace  # noqa: F401
