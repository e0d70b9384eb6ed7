"""Liveness and readiness on the health port.

`/healthz` (liveness) answers while the operator's event loop runs and reports the pooled broker
connections; an unreachable broker never fails it (restarting the pod would not bring the broker back).

`/readyz` (readiness) is 200 only while the operator can list its resources (Streams, Consumers,
JetStreamConnections) where it serves them, and the cluster-scoped ClusterJetStreamConnections. Without
that permission (a ClusterRoleBinding naming another namespace's ServiceAccount, a missing Role) kopf
watches nothing, so the pod must not look ready; the 503 body and one log line per change name what
cannot be listed.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import logging
from collections.abc import Sequence

import aiohttp.web
import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

from . import jsclient
from .crdgen import GROUP, KINDS, VERSION

PLURALS = tuple(kind.lower() + "s" for kind in KINDS if not kind.startswith("Cluster"))  # namespaced kinds
CLUSTER_PLURALS = tuple(kind.lower() + "s" for kind in KINDS if kind.startswith("Cluster"))
_GLOB = set("*?[")
logger = logging.getLogger(__name__)


@functools.cache
def _api() -> kubernetes.client.CustomObjectsApi:
    kubernetes.config.load_config()  # type: ignore[no-untyped-call]  # kubeconfig, else in-cluster
    return kubernetes.client.CustomObjectsApi()


def _list(plural: str, namespace: str | None) -> None:
    if namespace is None:
        _api().list_cluster_custom_object(GROUP, VERSION, plural, limit=1)
    else:
        _api().list_namespaced_custom_object(GROUP, VERSION, namespace, plural, limit=1)


def _cannot(plural: str, namespace: str | None) -> str | None:
    """Why `plural` cannot be listed in `namespace` (None: cluster-wide), or None when it can."""
    try:
        _list(plural, namespace)
    except ApiException as exc:
        where = f"in namespace {namespace}" if namespace else "at the cluster scope"
        return f"cannot list {plural}.{GROUP} {where}: {exc.status} {exc.reason}"
    return None


def _served(patterns: Sequence[str]) -> list[str]:
    """The namespaces the operator serves: exact names as given, globs matched against existing namespaces
    (kopf's `!pattern` exclusions are not served, so they need no access)."""
    names = [p for p in patterns if not _GLOB & set(p) and not p.startswith("!")]
    globs = [p for p in patterns if _GLOB & set(p) and not p.startswith("!")]
    if globs:
        listed = kubernetes.client.CoreV1Api().list_namespace().items
        existing = [ns.metadata.name for ns in listed if ns.metadata and ns.metadata.name]
        names += [name for name in existing if any(fnmatch.fnmatchcase(name, glob) for glob in globs)]
    return sorted(set(names))


def problems(namespaces: Sequence[str]) -> list[str]:
    """What the operator cannot list where it serves (`namespaces` empty: the whole cluster); [] = ready.
    Cluster-wide access covers every namespace, so it is tried first; cluster-scoped kinds are listed at the
    cluster scope in every mode."""
    cluster_kinds = [p for p in (_cannot(plural, None) for plural in CLUSTER_PLURALS) if p]
    cluster = [p for p in (_cannot(plural, None) for plural in PLURALS) if p]
    if not cluster or not namespaces:
        return cluster + cluster_kinds
    try:
        served = _served(namespaces)
    except ApiException as exc:
        return [f"cannot list namespaces to match {', '.join(namespaces)}: {exc.status} {exc.reason}"]
    return [p for ns in served for p in (_cannot(plural, ns) for plural in PLURALS) if p] + cluster_kinds


class Health:
    """The two endpoints; `serve()` starts them, `close()` stops them."""

    def __init__(self, pool: jsclient.Pool, namespaces: Sequence[str]) -> None:
        self._pool, self._namespaces = pool, tuple(namespaces)
        self._last: list[str] | None = None
        self._runner: aiohttp.web.AppRunner | None = None

    async def liveness(self, _: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"brokers": "connected" if self._pool.connected() else "reconnecting"})

    async def readiness(self, _: aiohttp.web.Request) -> aiohttp.web.Response:
        try:
            found = await asyncio.to_thread(problems, self._namespaces)
        except Exception as exc:  # noqa: BLE001  (the apiserver unreachable, a bad kubeconfig: not ready)
            found = [f"cannot reach the Kubernetes API: {exc}"]
        if found != self._last:
            if found:
                logger.warning("not ready: %s; grant the operator's ServiceAccount list on them", "; ".join(found))
            elif self._last:
                logger.info("ready: the jsoperator.io resources can be listed")
            self._last = found
        return aiohttp.web.json_response({"ready": not found, "problems": found}, status=503 if found else 200)

    async def serve(self, port: int, host: str = "0.0.0.0") -> None:
        app = aiohttp.web.Application()
        app.add_routes([aiohttp.web.get("/healthz", self.liveness), aiohttp.web.get("/readyz", self.readiness)])
        self._runner = aiohttp.web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await aiohttp.web.TCPSite(self._runner, host, port).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
