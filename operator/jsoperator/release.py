"""`jsoperator release`: let go of every Stream, Consumer and connection when the operator goes away, so
nothing is stranded on its finalizer (run by the chart's pre-delete hook, or by hand after the operator is gone).

For each resource carrying the finalizer: one being deleted gets its server object deleted or kept as its
deletion policy says, then loses the finalizer; any other just loses the finalizer (its server object and
the resource stay; an operator started later puts the finalizer back). A running operator would put the
finalizers back at once, so `--stop NS/DEPLOYMENT` first scales it to zero. Connections (JetStreamConnection,
ClusterJetStreamConnection) come last, as the resources' deletions use them; one being deleted while a resource
still names it is kept and named, unless `--force`.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from . import connections, jsclient, kubeapi, reconcile
from .settings import Settings

STOP_TIMEOUT = 120.0


def _selected(body: dict[str, Any], settings: Settings) -> bool:
    namespace, patterns = body["metadata"].get("namespace"), settings.namespaces
    if namespace is None:  # a cluster connection: the one this operator instance watching `patterns` serves
        return connections.serves(settings.instance, patterns, body)
    return not patterns or any(fnmatch.fnmatchcase(namespace, p) for p in patterns)


async def _listed(kind: str, patterns: tuple[str, ...]) -> list[dict[str, Any]]:
    """Namespace by namespace when they are all named (an operator with Roles only may not list cluster-wide)."""
    if kind == connections.CLUSTER or not patterns or any(set("*?[!") & set(p) for p in patterns):
        return await kubeapi.list_resources(kind, None)
    return [body for namespace in patterns for body in await kubeapi.list_resources(kind, namespace)]


async def release(settings: Settings, *, stop: str | None, force: bool, out: Any) -> int:
    """Release every selected resource (settings.namespaces, globs; empty: all); 0 when none is left held."""
    if stop:
        namespace, _, name = stop.partition("/")
        if not await kubeapi.scale_to_zero(namespace, name, STOP_TIMEOUT):
            print(f"jsoperator release: Deployment {stop} still has pods after {STOP_TIMEOUT:.0f}s; nothing released",
                  file=out)
            return 1
        print(f"stopped Deployment {stop}", file=out)
    pool = jsclient.Pool(timeout=settings.request_timeout)
    runtime = reconcile.Runtime(settings=settings, pool=pool)
    held = 0
    users: dict[connections.Ref, list[str]] = {}
    try:
        kinds: tuple[reconcile.Kind, ...] = ("Consumer", "Stream", "KeyValue", "ObjectStore")
        for kind in kinds:  # consumers first: a stream's deletion waits for none of them here
            for body in await _listed(kind, settings.namespaces):
                if settings.finalizer in (body["metadata"].get("finalizers") or []) and _selected(body, settings):
                    released = await _release_one(kind, body, runtime, force, out)
                    held += not released
                    if not (released and body["metadata"].get("deletionTimestamp")):
                        _note_user(users, kind, body)
        for connection_kind in connections.KINDS:
            for body in await _listed(connection_kind, settings.namespaces):
                if settings.finalizer in (body["metadata"].get("finalizers") or []) and _selected(body, settings):
                    held += not await _release_connection(connection_kind, body, users, settings.finalizer, force,
                                                          out)
    finally:
        await pool.close()
    return 1 if held else 0


def _note_user(users: dict[connections.Ref, list[str]], kind: str, body: dict[str, Any]) -> None:
    meta = body["metadata"]
    ref = connections.ref_of(meta["namespace"], body.get("spec") or {})
    if ref is not None:
        users.setdefault(ref, []).append(f"{kind} {meta['namespace']}/{meta['name']}")


async def _release_connection(kind: str, body: dict[str, Any], users: dict[connections.Ref, list[str]],
                              finalizer: str, force: bool, out: Any) -> bool:
    ref = connections.ref_of_body(kind, body)
    named_by = sorted(users.get(ref, []))
    if body["metadata"].get("deletionTimestamp") and named_by and not force:
        print(f"{connections.describe(ref)}: kept, being deleted while {', '.join(named_by)} still name it (delete "
              "those or point them elsewhere, or run again with --force)", file=out)
        return False
    await kubeapi.remove_finalizer(kind, body, finalizer)
    print(f"{connections.describe(ref)}: released", file=out)
    return True


async def _release_one(kind: reconcile.Kind, body: dict[str, Any], runtime: reconcile.Runtime, force: bool,
                       out: Any) -> bool:
    meta = body["metadata"]
    where = f"{kind} {meta['namespace']}/{meta['name']}"
    if meta.get("deletionTimestamp"):
        resource = reconcile.Resource.from_body(kind, body)
        result = await reconcile.delete(resource, runtime, [], give_up="released with --force" if force else "")
        if not result.done:
            print(f"{where}: kept, {result.message} (or run again with --force to leave it on the server)", file=out)
            return False
        for event in result.events:
            await kubeapi.post_event(kind, meta, event)
        what = "; ".join(event.message for event in result.events)
    else:
        what = "server object kept, resource kept"
    await kubeapi.remove_finalizer(kind, body, runtime.settings.finalizer)
    print(f"{where}: released ({what})", file=out)
    return True
