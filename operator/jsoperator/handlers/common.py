"""The glue shared by the Stream and Consumer handlers: register the reconcilers, run a reconciliation
under a per-object lock, apply its Result through kopf (status patch, Events, TemporaryError with
backoff), keep the managed-resources metric."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from .. import metrics, reconcile, state_storage
from ..settings import Settings

GROUP, VERSION = "jsoperator.io", "v1alpha1"

log = logging.getLogger("jsoperator")

MAX_BACKOFF = 30.0


def backoff(retry: int) -> float:
    """Seconds before retry number `retry` (0-based): 0.5, 1, 2, 4, ... capped at MAX_BACKOFF."""
    return min(0.5 * 2.0**retry, MAX_BACKOFF)


def _runtime(memo: kopf.Memo) -> reconcile.Runtime:
    return reconcile.Runtime(settings=memo["settings"], pool=memo["pool"])


def _lock(memo: kopf.Memo) -> asyncio.Lock:
    # kopf gives each object its own memo (a shallow copy of the operator's): one lock per object,
    # so a drift timer never races a change handler on the same resource.
    lock = memo.get("lock")
    if lock is None:
        lock = memo["lock"] = asyncio.Lock()
    return lock


def _track(memo: kopf.Memo, kind: str, uid: str, present: bool) -> None:
    managed: dict[str, set[str]] = memo["managed"]  # shared by all objects (same dict in every memo copy)
    uids = managed.setdefault(kind, set())
    (uids.add if present else uids.discard)(uid)
    metrics.MANAGED.labels(kind).set(len(uids))


def _apply(result: reconcile.Result, body: kopf.Body, patch: kopf.Patch) -> None:
    if result.status:
        patch.status.update(result.status)
    where = {"object": f"{body['metadata']['namespace']}/{body['metadata']['name']}", "kind": body.get("kind")}
    for event in result.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
        level = logging.WARNING if event.type == "Warning" else logging.INFO
        log.log(level, event.message, extra={**where, "reason": event.reason})


async def reconcile_handler(
    kind: reconcile.Kind, trigger: reconcile.Trigger, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo,
    retry: int,
) -> None:
    async with _lock(memo):
        resource = reconcile.Resource.from_body(kind, body)
        executed = memo.setdefault("resets", set())
        result = await reconcile.reconcile(resource, _runtime(memo), trigger, executed)
    _track(memo, kind, body["metadata"]["uid"], True)
    _apply(result, body, patch)
    if trigger == "resume":
        state_storage.drop_legacy(body, patch)  # objects written by a version that kept kopf's state under jsoperator.io/
    if result.retry and trigger != "timer":  # the timer comes back by itself
        raise kopf.TemporaryError(result.message, delay=backoff(retry))


async def delete_handler(
    kind: reconcile.Kind, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int,
    consumers_left: list[str],
) -> None:
    async with _lock(memo):
        result = await reconcile.delete(reconcile.Resource.from_body(kind, body), _runtime(memo), consumers_left)
    _apply(result, body, patch)
    if not result.done:
        raise kopf.TemporaryError(result.message, delay=backoff(retry))
    _track(memo, kind, body["metadata"]["uid"], False)


def register_reconcilers(registry: kopf.OperatorRegistry, settings: Settings, kind: reconcile.Kind, plural: str) -> None:
    """create / update / resume handlers and the drift timer of one kind: all run the same reconciliation."""
    resource: dict[str, Any] = dict(group=GROUP, version=VERSION, plural=plural, registry=registry)

    def handler(trigger: reconcile.Trigger) -> Any:
        async def run(*, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **_: Any) -> None:
            await reconcile_handler(kind, trigger, body, patch, memo, retry)

        return run

    kopf.on.resume(**resource, id="resume")(handler("resume"))
    kopf.on.create(**resource, id="create")(handler("create"))
    kopf.on.update(**resource, id="update")(handler("update"))
    interval = settings.drift_interval
    kopf.timer(**resource, id="drift", interval=interval, initial_delay=interval)(handler("timer"))
