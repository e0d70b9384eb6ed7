"""End to end: spec.connection credentials from Secrets (token, user/password) against a nats-server
that requires them; a missing Secret is reported and picked up once it exists."""

from __future__ import annotations

import kubernetes.client
import pytest

from tests import servers
from tests.operator.conftest import condition

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(120)]


@pytest.fixture
def secured():
    """nats-server requiring user/password (flags: --user/--pass)."""
    with servers.launch("nats-server", extra_args=["--user", "app", "--pass", "s3cret"]) as handle:
        yield handle


def make_secret(kube, name, data):
    kube.core.create_namespaced_secret(kube.namespace, kubernetes.client.V1Secret(
        metadata=kubernetes.client.V1ObjectMeta(name=name), string_data=data))


def test_user_password_from_a_secret(kube, secured):
    url = secured.url
    conn = {"servers": [url], "userSecretRef": {"name": "nats-user"}}
    kube.create("Stream", "guarded", {"subjects": ["guarded.>"], "storage": "memory", "connection": conn})
    obj = kube.wait_condition("Stream", "guarded", "Ready", "False", "CredentialsNotFound")
    assert "Secret" in condition(obj, "Ready")["message"] and "nats-user" in condition(obj, "Ready")["message"]

    make_secret(kube, "nats-user", {"user": "app", "password": "wrong"})
    obj = kube.wait_condition("Stream", "guarded", "Ready", "False", "BrokerUnavailable", timeout=40)
    assert "authorization" in condition(obj, "Ready")["message"].lower()

    kube.core.patch_namespaced_secret("nats-user", kube.namespace, {"stringData": {"password": "s3cret"}})
    kube.wait_condition("Stream", "guarded", "Ready", timeout=40)
