"""The operator's Kubernetes API calls outside kopf's handlers, through the kubernetes client (in a thread):
Secrets for `spec.connection`, status patches and Events of scheduled reconciliations, the namespace
phase, and listing resources and removing finalizers for `jsoperator release`."""

from __future__ import annotations

import asyncio
import functools
from datetime import datetime, timezone
from typing import Any

import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

from . import events

GROUP, VERSION = "jsoperator.io", "v1alpha1"
PLURALS = {"Stream": "streams", "Consumer": "consumers", "KeyValue": "keyvalues", "ObjectStore": "objectstores",
           "JetStreamConnection": "jetstreamconnections", "ClusterJetStreamConnection": "clusterjetstreamconnections"}

__all__ = ["ApiException", "GROUP", "VERSION", "PLURALS"]


@functools.cache
def _client() -> kubernetes.client.ApiClient:
    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return kubernetes.client.ApiClient()


def core() -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(_client())


def custom() -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(_client())


async def secret_data(namespace: str, name: str) -> dict[str, str]:
    """The Secret's data (base64 text per key); ApiException when it cannot be read."""
    secret = await asyncio.to_thread(core().read_namespaced_secret, name, namespace)
    return {key: str(value) for key, value in (secret.data or {}).items()}


async def get_resource(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """One of our objects (namespace "" for a cluster-scoped kind), or None when it does not exist."""
    api = custom()
    try:
        if namespace:
            found = await asyncio.to_thread(api.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURALS[kind],
                                            name)
        else:
            found = await asyncio.to_thread(api.get_cluster_custom_object, GROUP, VERSION, PLURALS[kind], name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    body: dict[str, Any] = found  # type: ignore[assignment]  # the client types it as object
    return body


async def patch_status(kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
    """Merge-patch `status` of one of our resources (namespace "": cluster-scoped); gone meanwhile is no error."""
    api = custom()
    try:
        if namespace:
            await asyncio.to_thread(
                api.patch_namespaced_custom_object_status, GROUP, VERSION, namespace, PLURALS[kind], name,
                {"status": status},
            )
        else:
            await asyncio.to_thread(api.patch_cluster_custom_object_status, GROUP, VERSION, PLURALS[kind], name,
                                    {"status": status})
    except ApiException as exc:
        if exc.status != 404:
            raise


async def post_event(kind: str, meta: dict[str, Any], event: events.Event) -> None:
    """A core/v1 Event on one of our resources (what kopf.event posts from inside a handler)."""
    now = datetime.now(timezone.utc)
    body = kubernetes.client.CoreV1Event(
        metadata=kubernetes.client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
        involved_object=kubernetes.client.V1ObjectReference(
            api_version=f"{GROUP}/{VERSION}", kind=kind, name=meta["name"], namespace=meta["namespace"],
            uid=meta.get("uid"),
        ),
        reason=event.reason, message=event.message[:1024], type=event.type,
        source=kubernetes.client.V1EventSource(component="jsoperator"),
        first_timestamp=now, last_timestamp=now, count=1,
    )
    await asyncio.to_thread(core().create_namespaced_event, meta["namespace"], body)


async def namespace_terminating(namespace: str) -> bool:
    try:
        ns = await asyncio.to_thread(core().read_namespace, namespace)
    except ApiException:
        return False
    deleting = ns.metadata is not None and ns.metadata.deletion_timestamp is not None
    return deleting or (ns.status is not None and ns.status.phase == "Terminating")


async def cluster_uid() -> str:
    """The uid of the kube-system namespace: a name for this Kubernetes cluster that no other cluster has."""
    ns = await asyncio.to_thread(core().read_namespace, "kube-system")
    assert ns.metadata is not None and ns.metadata.uid, "the apiserver sends every namespace's uid"
    return str(ns.metadata.uid)


async def list_resources(kind: str, namespace: str | None) -> list[dict[str, Any]]:
    """Every object of `kind` in `namespace` (None: all namespaces, or a cluster-scoped kind)."""
    api = custom()
    if namespace is None:
        found = await asyncio.to_thread(api.list_cluster_custom_object, GROUP, VERSION, PLURALS[kind])
    else:
        found = await asyncio.to_thread(api.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURALS[kind])
    items: list[dict[str, Any]] = found["items"]  # type: ignore[index]  # the client types it as object
    return items


async def remove_finalizer(kind: str, body: dict[str, Any], finalizer: str) -> None:
    """Drop `finalizer` from the object (a JSON patch guarded by its resourceVersion: a concurrent change
    makes it fail instead of losing other finalizers)."""
    meta = body["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if finalizer not in finalizers:
        return
    patch = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
        {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in finalizers if f != finalizer]},
    ]
    api = custom()
    try:
        if meta.get("namespace"):
            await asyncio.to_thread(
                api.patch_namespaced_custom_object, GROUP, VERSION, meta["namespace"], PLURALS[kind], meta["name"],
                patch, _content_type="application/json-patch+json",
            )
        else:
            await asyncio.to_thread(api.patch_cluster_custom_object, GROUP, VERSION, PLURALS[kind], meta["name"],
                                    patch, _content_type="application/json-patch+json")
    except ApiException as exc:
        if exc.status != 404:
            raise


async def scale_to_zero(namespace: str, name: str, timeout: float) -> bool:
    """Scale Deployment `name` to 0 replicas and wait until no pod of it is left, terminating ones included
    (a kopf pod still stopping would put a released finalizer back); False on timeout."""
    apps = kubernetes.client.AppsV1Api(_client())
    core = kubernetes.client.CoreV1Api(_client())
    await asyncio.to_thread(apps.patch_namespaced_deployment_scale, name, namespace, {"spec": {"replicas": 0}})
    deployment = await asyncio.to_thread(apps.read_namespaced_deployment, name, namespace)
    labels = deployment.spec.selector.match_labels or {}
    selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        pods = await asyncio.to_thread(core.list_namespaced_pod, namespace, label_selector=selector)
        if not pods.items:
            return True
        await asyncio.sleep(1.0)
    return False


def coordination() -> kubernetes.client.CoordinationV1Api:
    return kubernetes.client.CoordinationV1Api(_client())


async def list_foreign(group: str, version: str, plural: str, namespace: str | None) -> list[dict[str, Any]] | None:
    """Every object of another group's kind (`jsoperator import --from-nack`); None when the apiserver does
    not serve it (its CRD is not installed)."""
    api = custom()
    try:
        if namespace is None:
            found = await asyncio.to_thread(api.list_cluster_custom_object, group, version, plural)
        else:
            found = await asyncio.to_thread(api.list_namespaced_custom_object, group, version, namespace, plural)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    items: list[dict[str, Any]] = found["items"]  # type: ignore[index]  # the client types it as object
    return items


async def secret_keys(namespace: str, name: str) -> set[str] | None:
    """The keys of a Secret, None when it does not exist."""
    try:
        return set(await secret_data(namespace, name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
