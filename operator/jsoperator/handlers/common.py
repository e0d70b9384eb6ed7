"""The glue shared by the Stream, Consumer and bucket handlers: register the reconcilers, run a reconciliation
under the resource's lock, apply its Result through kopf (status patch, Events, TemporaryError with
backoff) or, for the scheduler's reconciliations outside kopf's handlers, through the API; feed kopf's
watch into the scheduler; delete with or without finalizers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from .. import buckets, conflicts, jsclient, kubeapi, metrics, reconcile, scheduler, state_storage
from ..settings import Settings

GROUP, VERSION = kubeapi.GROUP, kubeapi.VERSION

log = logging.getLogger("jsoperator")

backoff = scheduler.backoff
GIVE_UP_AFTER = 3  # delete attempts before a resource in a terminating namespace lets go of an unreachable server


def claims_index(kind: str) -> str:
    """The id of the kopf index of the conflicts.Claims of one kind, by connection key."""
    return f"{kind.lower()}_claims"


def conflict(kind: reconcile.Kind, body: Mapping[str, Any], indexes: Mapping[str, Any], sched: scheduler.Scheduler,
             *, subjects: bool = True) -> str:
    """An older resource driving the same server object (or overlapping subjects), from the claims indexes
    (kopf's, by id): a Stream, KeyValue or ObjectStore competes with all three kinds, a Consumer with Consumers."""
    kinds = buckets.STREAM_KINDS if buckets.is_stream_kind(kind) else (kind,)
    key = conflicts.connection_key(body["metadata"]["namespace"], body.get("spec") or {})
    others = [_fresher(c, sched) for k in kinds if (index := indexes.get(claims_index(k))) is not None
              for c in index.get(key, [])]
    return conflicts.conflict(conflicts.claim(kind, body), others, subjects=subjects)


def _fresher(claim: conflicts.Claim, sched: scheduler.Scheduler) -> conflicts.Claim:
    """kopf updates an index when its worker for that object takes the watch event, after a batch window,
    so it can lag our own status write (`Scheduler.wrote`): a resource Ready for a client would still be a
    newcomer in the index, and a second resource created that second could win its server object."""
    entry = sched.entries.get((claim.kind, claim.namespace, claim.name))
    return conflicts.claim(entry.kind, entry.body) if entry is not None else claim


def _runtime(memo: kopf.Memo) -> reconcile.Runtime:
    return reconcile.Runtime(settings=memo["settings"], pool=memo["pool"])


def _scheduler(memo: kopf.Memo) -> scheduler.Scheduler:
    sched: scheduler.Scheduler = memo["scheduler"]
    return sched


def _log_events(body: Mapping[str, Any], result: reconcile.Result) -> None:
    where = {"object": f"{body['metadata']['namespace']}/{body['metadata']['name']}", "kind": body.get("kind")}
    for event in result.events:
        level = logging.WARNING if event.type == "Warning" else logging.INFO
        log.log(level, event.message, extra={**where, "reason": event.reason})


def _apply(result: reconcile.Result, body: kopf.Body, patch: kopf.Patch) -> None:
    if result.status:
        patch.status.update(result.status)
    for event in result.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    _log_events(body, result)


async def _apply_by_api(kind: reconcile.Kind, body: Mapping[str, Any], result: reconcile.Result) -> None:
    meta = dict(body["metadata"])
    if result.status:
        await kubeapi.patch_status(kind, meta["namespace"], meta["name"], result.status)
    for event in result.events:
        await kubeapi.post_event(kind, meta, event)
    _log_events(body, result)


async def reconcile_handler(
    kind: reconcile.Kind, trigger: reconcile.Trigger, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo,
    retry: int, claims: Mapping[str, Any],
) -> None:
    sched = _scheduler(memo)
    entry = sched.entry(kind, body)
    async with entry.lock:
        resource = reconcile.Resource.from_body(kind, body)
        clash = conflict(kind, body, claims, sched)
        result = await reconcile.reconcile(resource, _runtime(memo), trigger, entry.executed, clash)
        sched.wrote(entry, result.status)
    sched.done(entry, False, result.reached)  # kopf retries its own handlers; the drift check comes later
    _apply(result, body, patch)
    if trigger == "resume":
        state_storage.drop_legacy(body, patch)  # objects written by a version that kept kopf's state under jsoperator.io/
    if result.retry:
        raise kopf.TemporaryError(result.message, delay=backoff(retry))


def scheduled(runtime: reconcile.Runtime, sched: scheduler.Scheduler) -> scheduler.Run:
    """The scheduler's reconciliation (drift check, retry, signal): like a handler's, applied by the API."""

    async def run(entry: scheduler.Entry, why: scheduler.Why) -> tuple[bool, jsclient.ConnectionSettings | None]:
        async with entry.lock:
            body = entry.body
            if body["metadata"].get("deletionTimestamp"):
                return False, None
            clash = conflict(entry.kind, body, sched.indexes, sched)
            resource = reconcile.Resource.from_body(entry.kind, body)
            result = await reconcile.reconcile(resource, runtime, why, entry.executed, clash)
            if entry.out_of_storage is not None:
                result = reconcile.out_of_storage(resource, result, entry.out_of_storage, entry.server_names[0])
                entry.out_of_storage = None
            sched.wrote(entry, result.status)
        await _apply_by_api(entry.kind, body, result)
        return result.retry, result.reached

    return run


async def delete_handler(
    kind: reconcile.Kind, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int,
    consumers_left: list[str], claims: Mapping[str, Any],
) -> None:
    """The finalizer's work: delete (or keep) the server object, then kopf removes the finalizer."""
    namespace = body["metadata"]["namespace"]
    give_up = ""
    if retry >= GIVE_UP_AFTER and await kubeapi.namespace_terminating(namespace):
        give_up = f"namespace {namespace} is being deleted"
    sched = _scheduler(memo)
    entry = sched.entry(kind, body)
    async with entry.lock:
        resource = reconcile.Resource.from_body(kind, body)
        clash = conflict(kind, body, claims, sched, subjects=False)
        result = await reconcile.delete(resource, _runtime(memo), consumers_left, give_up=give_up, conflict=clash)
    _apply(result, body, patch)
    if not result.done:
        raise kopf.TemporaryError(result.message, delay=backoff(retry))


async def _delete_without_finalizer(
    kind: reconcile.Kind, body: Mapping[str, Any], runtime: reconcile.Runtime, claims: Mapping[str, Any],
    sched: scheduler.Scheduler,
) -> None:
    """--no-finalizers: the resource is already gone; delete the server object as the policy says, best effort."""
    resource = reconcile.Resource.from_body(kind, body)
    clash = conflict(kind, body, claims, sched, subjects=False)
    for attempt in range(GIVE_UP_AFTER + 1):
        last = attempt == GIVE_UP_AFTER
        give_up = "the operator runs without finalizers" if last else ""
        result = await reconcile.delete(resource, runtime, [], give_up=give_up, conflict=clash)
        if result.done:
            await _apply_by_api(kind, body, reconcile.Result({}, result.events))
            return
        await asyncio.sleep(backoff(attempt))


def register_reconcilers(registry: kopf.OperatorRegistry, settings: Settings, kind: reconcile.Kind, plural: str) -> None:
    """create / update / resume handlers (all run the same reconciliation) and the watch feeding the scheduler."""
    resource: dict[str, Any] = dict(group=GROUP, version=VERSION, plural=plural, registry=registry)

    index = claims_index(kind)

    @kopf.index(**resource, id=index)
    def claims(*, body: kopf.Body, **_: Any) -> dict[str, conflicts.Claim]:
        return {conflicts.connection_key(body["metadata"]["namespace"], body.get("spec") or {}): conflicts.claim(kind, body)}

    def handler(trigger: reconcile.Trigger) -> Any:
        async def run(*, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **kw: Any) -> None:
            await reconcile_handler(kind, trigger, body, patch, memo, retry, kw)

        return run

    kopf.on.resume(**resource, id="resume")(handler("resume"))
    kopf.on.create(**resource, id="create")(handler("create"))
    kopf.on.update(**resource, id="update")(handler("update"))

    @kopf.on.event(**resource, id="watch")
    async def watch(*, event: Mapping[str, Any], body: kopf.Body, memo: kopf.Memo, **kw: Any) -> None:
        sched = _scheduler(memo)
        sched.indexes[index] = kw[index]  # a live view: the scheduler's runs check conflicts with it too
        raw = dict(event.get("object") or body)
        if event.get("type") == "DELETED":
            sched.gone(kind, raw)
            if not settings.finalizers:
                task = asyncio.create_task(_delete_without_finalizer(kind, raw, _runtime(memo), kw, sched))
                memo["background"].add(task)
                task.add_done_callback(memo["background"].discard)
        else:
            sched.seen(kind, raw)
        metrics.MANAGED.labels(kind).set(sum(1 for e in sched.entries.values() if e.kind == kind))


def register_delete(registry: kopf.OperatorRegistry, settings: Settings, plural: str, fn: Any) -> None:
    """The deletion handler; without finalizers (--no-finalizers) none is registered, so kopf adds none
    (and removes ours from objects that still carry it), and deletion follows the watch instead."""
    if settings.finalizers:
        kopf.on.delete(GROUP, VERSION, plural, id="delete", registry=registry)(fn)


