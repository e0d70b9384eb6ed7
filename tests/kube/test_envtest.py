"""The envtest harness runs a real kube-apiserver: CRDs with CEL rules, status subresource, Events."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from tests.kube import assets
from jsoperator.localcluster import binaries
from jsoperator.localcluster.envtest import EnvTest, EnvTestError

pytestmark = [pytest.mark.kube, pytest.mark.xdist_group("kube")]

GROUP = "envtest.example.com"
VERSION = "v1"
PLURAL = "widgets"
IMMUTABLE_MESSAGE = "spec.storage is immutable"

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{
            "name": VERSION,
            "served": True,
            "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "properties": {
                        "storage": {
                            "type": "string",
                            "x-kubernetes-validations": [
                                {"rule": "self == oldSelf", "message": IMMUTABLE_MESSAGE},
                            ],
                        },
                        "replicas": {"type": "integer"},
                    }},
                    "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
                },
            }},
        }],
    },
}


def _poll(check, timeout: float = 30.0, interval: float = 0.2):
    """Return the first truthy result of `check()`, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"condition not met within {timeout} s"
        time.sleep(interval)


@pytest.fixture
def api(envtest: EnvTest) -> Iterator[kubernetes.client.ApiClient]:
    with envtest.api_client() as client:
        yield client


@pytest.fixture(scope="module")
def widget_crd(envtest: EnvTest) -> str:
    with envtest.api_client() as client:
        extensions = kubernetes.client.ApiextensionsV1Api(client)
        name = WIDGET_CRD["metadata"]["name"]
        extensions.create_custom_resource_definition(WIDGET_CRD)

        def established() -> bool:
            crd = extensions.read_custom_resource_definition(name)
            conditions = (crd.status and crd.status.conditions) or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        _poll(established)
        return name


def _widget(name: str, storage: str = "file", **extra) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": name},
            "spec": {"storage": storage, "replicas": 1}, **extra}


def test_version_matches_the_built_binaries(envtest: EnvTest, api: kubernetes.client.ApiClient) -> None:
    info = kubernetes.client.VersionApi(api).get_code()
    assert info.major == "1"
    if not os.environ.get("KUBEBUILDER_ASSETS"):
        # The cache folder is named after the version build.sh stamped into the binary.
        assert info.git_version == assets.find().name


def test_kubeconfig_user_is_a_cluster_admin(envtest: EnvTest, api: kubernetes.client.ApiClient) -> None:
    review = kubernetes.client.AuthenticationV1Api(api).create_self_subject_review(
        kubernetes.client.V1SelfSubjectReview()
    )
    assert review.status.user_info.username == "envtest-admin"
    assert "system:masters" in review.status.user_info.groups
    assert envtest.server.startswith("https://127.0.0.1:")


def test_cel_rule_refuses_an_immutable_field_change(
    widget_crd: str, kube_namespace: str, api: kubernetes.client.ApiClient
) -> None:
    objects = kubernetes.client.CustomObjectsApi(api)
    objects.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, _widget("w1"))

    with pytest.raises(ApiException) as refused:
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, kube_namespace, PLURAL, "w1", {"spec": {"storage": "memory"}}
        )
    assert refused.value.status == 422
    assert IMMUTABLE_MESSAGE in json.loads(refused.value.body)["message"]

    changed = objects.patch_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, "w1", {"spec": {"replicas": 3}}
    )
    assert changed["spec"] == {"storage": "file", "replicas": 3}
    assert changed["metadata"]["generation"] == 2


def test_status_subresource_is_separate_from_spec(
    widget_crd: str, kube_namespace: str, api: kubernetes.client.ApiClient
) -> None:
    objects = kubernetes.client.CustomObjectsApi(api)
    created = objects.create_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, _widget("w2", status={"ready": True})
    )
    assert "status" not in created  # the main resource ignores status

    patched = objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, kube_namespace, PLURAL, "w2", {"status": {"ready": True}}
    )
    assert patched["status"] == {"ready": True}
    assert patched["metadata"]["generation"] == created["metadata"]["generation"] == 1

    ignored = objects.patch_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, "w2", {"status": {"ready": False}}
    )
    assert ignored["status"] == {"ready": True}


def test_events_can_be_recorded_and_listed(
    widget_crd: str, kube_namespace: str, api: kubernetes.client.ApiClient
) -> None:
    objects = kubernetes.client.CustomObjectsApi(api)
    widget = objects.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, _widget("w3"))
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_event(kube_namespace, kubernetes.client.CoreV1Event(
        metadata=kubernetes.client.V1ObjectMeta(generate_name="w3-"),
        involved_object=kubernetes.client.V1ObjectReference(
            api_version=f"{GROUP}/{VERSION}", kind="Widget", name="w3", namespace=kube_namespace,
            uid=widget["metadata"]["uid"],
        ),
        reason="Created", message="widget w3 created", type="Normal",
    ))

    events = core.list_namespaced_event(kube_namespace, field_selector="involvedObject.name=w3").items
    assert [(e.reason, e.message, e.involved_object.uid) for e in events] == [
        ("Created", "widget w3 created", widget["metadata"]["uid"])
    ]


def test_start_failure_reports_the_log_and_cleans_up(envtest: EnvTest) -> None:
    # Depends on `envtest` only so it skips/fails exactly like the other envtest tests.
    broken = EnvTest(assets.find(), apiserver_flags=["--no-such-flag"])
    with pytest.raises(EnvTestError) as failed:
        broken.start()
    message = str(failed.value)
    assert "kube-apiserver exited with code" in message
    assert "unknown flag: --no-such-flag" in message
    assert len(broken.processes) == 2
    assert all(process.poll() is not None for process in broken.processes)
    assert broken.workdir is None


def test_kubebuilder_assets_must_hold_the_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    with pytest.raises(assets.AssetsError, match="has no executable kube-apiserver"):
        assets.find()

    for binary in binaries.NAMES:
        (tmp_path / binary).write_text("#!/bin/sh\n")
        (tmp_path / binary).chmod(0o755)
    assert assets.find() == tmp_path
