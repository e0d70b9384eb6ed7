"""The CRD upgrade path the chart README documents, on a real kube-apiserver: Helm creates crds/ at install
time and never touches them again, so the next CRD version is applied with server-side apply
(`kubectl apply --server-side --force-conflicts -f crds/`) over a running install. Checked: the new schema
is served at once, existing resources stay as they were, no last-applied-configuration annotation is
involved, and without --force-conflicts the apply is refused for the fields Helm's create owns.

The CRDs are copies of crds/ in a group of their own, so the shared apiserver's real CRDs (which other
tests use) are never changed."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.dynamic
import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.polling import poll

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(120)]


def crd(kind: str, group: str) -> dict[str, Any]:
    """crds/'s CRD for `kind`, moved to `group`."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "crds" / f"jsoperator.io_{kind.lower()}s.yaml").read_text())
    doc["spec"]["group"] = group
    doc["metadata"]["name"] = f"{doc['spec']['names']['plural']}.{group}"
    doc["spec"]["names"].pop("shortNames", None)  # short names and categories are per cluster, not per group
    doc["spec"]["names"].pop("categories", None)
    return doc


def message(exc: ApiException) -> str:
    return str(json.loads(exc.body)["message"])


def next_version(doc: dict[str, Any]) -> dict[str, Any]:
    """What a next release's CRD looks like: one more optional spec field and one more printer column."""
    nxt = copy.deepcopy(doc)
    [version] = nxt["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["upgradeProbe"] = {"type": "string", "description": "a field only the next version has"}
    version["additionalPrinterColumns"].append({"name": "Probe", "type": "string", "jsonPath": ".spec.upgradeProbe"})
    return nxt


def test_server_side_apply_upgrades_the_crds_helm_created(envtest: Any, kube_namespace: str) -> None:
    group = f"upgrade-{uuid.uuid4().hex[:8]}.jsoperator.io"
    installed = crd("Stream", group)
    with envtest.api_client() as client:
        crds = kubernetes.client.ApiextensionsV1Api(client)
        # `helm install`: a plain create of crds/ by the field manager "helm".
        crds.create_custom_resource_definition(installed, field_manager="helm")
        name = installed["metadata"]["name"]
        poll(lambda: any(c.type == "Established" and c.status == "True"
                         for c in crds.read_custom_resource_definition(name).status.conditions or []),
             timeout=30, what=f"CRD {name} Established")
        custom = kubernetes.client.CustomObjectsApi(client)
        body = {"apiVersion": f"{group}/v1alpha1", "kind": "Stream", "metadata": {"name": "orders"},
                "spec": {"subjects": ["orders.>"]}}
        before = custom.create_namespaced_custom_object(group, "v1alpha1", kube_namespace, "streams", body)
        with pytest.raises(ApiException) as unknown:  # the installed version has no such field
            custom.create_namespaced_custom_object(
                group, "v1alpha1", kube_namespace, "streams",
                {**body, "metadata": {"name": "early"}, "spec": {"subjects": ["early.>"], "upgradeProbe": "x"}},
                field_validation="Strict")
        assert 'unknown field "spec.upgradeProbe"' in message(unknown.value)

        applier = kubernetes.dynamic.DynamicClient(client).resources.get(
            api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
        upgraded = next_version(installed)
        # Without --force-conflicts: refused, naming Helm as the owner of the changed fields.
        with pytest.raises(ApiException) as conflict:
            applier.server_side_apply(body=upgraded, name=name, field_manager="kubectl")
        assert conflict.value.status == 409 and 'conflict with "helm"' in message(conflict.value), message(conflict.value)
        # `kubectl apply --server-side --force-conflicts -f crds/`
        applier.server_side_apply(body=upgraded, name=name, field_manager="kubectl", force_conflicts=True)

        served = crds.read_custom_resource_definition(name)
        assert "kubectl.kubernetes.io/last-applied-configuration" not in (served.metadata.annotations or {})
        [version] = served.spec.versions
        assert "upgradeProbe" in version.schema.open_apiv3_schema.properties["spec"].properties
        assert [c.name for c in version.additional_printer_columns][-1] == "Probe"

        # The running install: the existing resource is untouched, the new field is accepted at once.
        after = custom.get_namespaced_custom_object(group, "v1alpha1", kube_namespace, "streams", "orders")
        assert (after["metadata"]["uid"], after["spec"]) == (before["metadata"]["uid"], before["spec"])
        poll(lambda: _accepts_new_field(custom, group, kube_namespace, body), timeout=30,
             what="a Stream with the next version's field accepted")

        # Applying the same files again changes nothing (a GitOps sync loop is a no-op).
        again = applier.server_side_apply(body=upgraded, name=name, field_manager="kubectl", force_conflicts=True)
        assert again.metadata.resourceVersion == crds.read_custom_resource_definition(name).metadata.resource_version
        assert again.metadata.generation == served.metadata.generation


def _accepts_new_field(custom: kubernetes.client.CustomObjectsApi, group: str, namespace: str,
                       body: dict[str, Any]) -> bool:
    try:
        custom.create_namespaced_custom_object(
            group, "v1alpha1", namespace, "streams",
            {**body, "metadata": {"name": "later"}, "spec": {"subjects": ["later.>"], "upgradeProbe": "x"}},
            field_validation="Strict")
    except ApiException as exc:
        if 'unknown field "spec.upgradeProbe"' in message(exc):
            return False  # the apiserver's CRD handler is not refreshed yet
        raise
    return True
