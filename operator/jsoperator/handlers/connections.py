"""kopf handlers for JetStreamConnection and ClusterJetStreamConnection: check that the connection works
(status Ready), count the resources naming it (status referencedBy/referrers, from the `connection_users`
indexes kept on every kind that can name one), wake those resources when the connection changes or
appears, and hold a connection that is still named on its finalizer (deleting it would strand them)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import kopf

from .. import connections, credentials, events, jsclient, kubeapi, scheduler, status
from ..settings import Settings
from . import common

REFERRERS_SHOWN = 20
# Every kind that can name a connection: all of ours but the connections themselves.
RESOURCE_KINDS = tuple(kind for kind in kubeapi.PLURALS if kind not in connections.KINDS)


def users_index(kind: str) -> str:
    """The id of the kopf index (on each kind that can name a connection) of the resources naming each connection Ref."""
    return f"{kind.lower()}_connection_users"


def referrers(ref: connections.Ref, indexes: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    for kind in RESOURCE_KINDS:
        index = indexes.get(users_index(kind))
        found += list(index.get(ref, [])) if index is not None else []
    return sorted(found)


def _referrer_status(names: list[str]) -> dict[str, Any]:
    return {"referencedBy": len(names), "referrers": names[:REFERRERS_SHOWN]}


class _Counts:
    """Writes a connection's referencedBy/referrers, one write at a time per connection, each computed from
    the indexes right before it is sent: the last write carries the newest count, whatever the order in
    which the events that asked for them arrived. Only for the connections this operator serves (`served`,
    kept by the connections' watch): another operator's cluster connection is its to count."""

    def __init__(self) -> None:
        self._locks: dict[connections.Ref, asyncio.Lock] = {}
        self.served: set[connections.Ref] = set()

    async def write(self, ref: connections.Ref, indexes: Mapping[str, Any]) -> None:
        if ref[0] == connections.CLUSTER and ref not in self.served:
            return
        async with self._locks.setdefault(ref, asyncio.Lock()):
            with contextlib.suppress(kubeapi.ApiException):  # e.g. no access to cluster connections
                await kubeapi.patch_status(*ref, _referrer_status(referrers(ref, indexes)))


async def _check(kind: str, body: Mapping[str, Any], settings: Settings, pool: jsclient.Pool) -> status.Outcome:
    """Resolve the Secrets and connect, as a resource naming it would."""
    ref = connections.ref_of_body(kind, body)
    try:
        spec, secrets_in = connections.usable(ref, body, None)
        client = await pool.client(await credentials.resolve(spec, secrets_in, settings))
    except connections.Unusable as exc:
        return status.stalled(exc.reason, str(exc))
    except credentials.CredentialsError as exc:
        return status.credentials_not_found(str(exc))
    except jsclient.BrokerUnavailable as exc:
        return status.broker_unavailable(str(exc))
    try:
        release = (await client.server()).describe()
    except (jsclient.BrokerUnavailable, jsclient.ApiError) as exc:  # the servers answer, JetStream may not
        release = f"JetStream release unknown: {exc}"
    return status.synced(f"{connections.describe(ref)} resolves and its servers answer ({release})")


def register(registry: kopf.OperatorRegistry, settings: Settings) -> None:
    counts = _Counts()
    for resource_kind in RESOURCE_KINDS:
        _register_users_index(registry, resource_kind, counts)
    for kind in connections.KINDS:
        # kopf takes its finalizer off every object of a watched kind that none of its handlers needs it for (even
        # a kind with event handlers only): an operator serving no cluster connection must not watch them, or it
        # would strip the finalizer of the operator of the same --instance that serves them.
        if kind != connections.CLUSTER or settings.cluster_connections:
            _register_kind(registry, settings, kind, kubeapi.PLURALS[kind], counts)


def _register_users_index(registry: kopf.OperatorRegistry, kind: str, counts: _Counts) -> None:
    plural = kubeapi.PLURALS[kind]

    @kopf.index(common.GROUP, common.VERSION, plural, id=users_index(kind), registry=registry)
    def users(*, body: kopf.Body, **_: Any) -> dict[connections.Ref, str] | None:
        meta = body["metadata"]
        ref = connections.ref_of(meta["namespace"], body.get("spec") or {})
        return {ref: f"{kind} {meta['namespace']}/{meta['name']}"} if ref is not None else None

    named: dict[tuple[str, str], connections.Ref | None] = {}  # (namespace, name) -> the connection it names

    @kopf.on.event(common.GROUP, common.VERSION, plural, id="connection_users", registry=registry)
    async def refresh(*, event: Mapping[str, Any], body: kopf.Body, **kw: Any) -> None:
        """A resource naming a connection appeared, went or named another: rewrite the count of the connection
        it names and of the one it named before."""
        raw = dict(event.get("object") or body)
        key = (raw["metadata"]["namespace"], raw["metadata"]["name"])
        ref = None if event.get("type") == "DELETED" else connections.ref_of(key[0], raw.get("spec") or {})
        before = named.pop(key, None)
        if ref is not None:
            named[key] = ref
        if before == ref:
            return  # most events (status patches) change no reference
        for changed in {before, ref} - {None}:
            assert changed is not None
            await counts.write(changed, kw)


def _register_kind(registry: kopf.OperatorRegistry, settings: Settings, kind: str, plural: str,
                   counts: _Counts) -> None:
    cluster = kind == connections.CLUSTER

    def serves(body: Mapping[str, Any]) -> bool:
        return not cluster or connections.serves(settings.instance, settings.namespaces, body)

    def served(body: kopf.Body, **_: Any) -> bool:
        return serves(body)

    resource: dict[str, Any] = dict(group=common.GROUP, version=common.VERSION, plural=plural, registry=registry,
                                    when=served)
    generations: dict[connections.Ref, Any] = {}

    async def check(*, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **kw: Any) -> None:
        ref = connections.ref_of_body(kind, body)
        counts.served.add(ref)  # its `when` matched (the watch may not have seen it yet)
        outcome = await _check(kind, body, memo["settings"], memo["pool"])
        patch.status.update(status.build(body.get("status"), generation=int(body["metadata"].get("generation") or 0),
                                         outcome=outcome, now=datetime.now(timezone.utc)))
        await counts.write(ref, kw)
        if outcome.reconciling:
            raise kopf.TemporaryError(outcome.message, delay=scheduler.backoff(retry))

    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(**resource, id=on.__name__)(check)

    # Every operator watches every connection (no `when`): a grant taken away wakes the resources it served.
    @kopf.on.event(**{**resource, "when": None}, id="watch")
    async def watch(*, event: Mapping[str, Any], body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        """A connection that appears, changes or goes wakes the resources naming it (not its status patches)."""
        raw = dict(event.get("object") or body)
        ref = connections.ref_of_body(kind, raw)
        if event.get("type") != "DELETED" and serves(raw):
            counts.served.add(ref)
        else:
            counts.served.discard(ref)
        generation = None if event.get("type") == "DELETED" else raw["metadata"].get("generation")
        if generations.get(ref) != generation:
            generations[ref] = generation
            sched: scheduler.Scheduler = memo["scheduler"]
            sched.signal(sched.referencing(ref))

    if not settings.finalizers:
        return

    @kopf.on.delete(**resource, id="delete")
    async def delete(*, body: kopf.Body, patch: kopf.Patch, retry: int, **kw: Any) -> None:
        ref = connections.ref_of_body(kind, body)
        names = referrers(ref, kw)
        if not names:
            return
        message = (f"{connections.describe(ref)} is still named in spec.connectionRef of {', '.join(names)}: "
                   "delete those resources or point them at another connection first; the connection is deleted "
                   "once none names it")
        ready = status.condition(body.get("status"), status.READY) or {}
        if ready.get("message") != message:
            kopf.event(body, type="Warning", reason=events.DELETE_BLOCKED, message=message[:1024])
        patch.status.update(status.build(body.get("status"), generation=int(body["metadata"].get("generation") or 0),
                                         outcome=status.deletion_blocked(message), now=datetime.now(timezone.utc)))
        await counts.write(ref, kw)
        raise kopf.TemporaryError(message, delay=min(scheduler.backoff(retry), 5.0))
