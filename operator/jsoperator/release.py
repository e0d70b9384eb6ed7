"""`jsoperator release`: let go of every Stream and Consumer when the operator goes away, so nothing is
stranded on its finalizer (run by the chart's pre-delete hook, or by hand after the operator is gone).

For each resource carrying the finalizer: one being deleted gets its server object deleted or kept as its
deletion policy says, then loses the finalizer; any other just loses the finalizer (its server object and
the resource stay; an operator started later puts the finalizer back). A running operator would put the
finalizers back at once, so `--stop NS/DEPLOYMENT` first scales it to zero.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from . import jsclient, kubeapi, reconcile
from .settings import FINALIZER, Settings

STOP_TIMEOUT = 120.0


def _selected(body: dict[str, Any], patterns: tuple[str, ...]) -> bool:
    namespace = body["metadata"]["namespace"]
    return not patterns or any(fnmatch.fnmatchcase(namespace, p) for p in patterns)


async def _listed(kind: reconcile.Kind, patterns: tuple[str, ...]) -> list[dict[str, Any]]:
    """Namespace by namespace when they are all named (an operator with Roles only may not list cluster-wide)."""
    if not patterns or any(set("*?[!") & set(p) for p in patterns):
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
    try:
        kinds: tuple[reconcile.Kind, ...] = ("Consumer", "Stream", "KeyValue", "ObjectStore")
        for kind in kinds:  # consumers first: a stream's deletion waits for none of them here
            for body in await _listed(kind, settings.namespaces):
                if FINALIZER in (body["metadata"].get("finalizers") or []) and _selected(body, settings.namespaces):
                    held += not await _release_one(kind, body, runtime, force, out)
    finally:
        await pool.close()
    return 1 if held else 0


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
    await kubeapi.remove_finalizer(kind, body, FINALIZER)
    print(f"{where}: released ({what})", file=out)
    return True
