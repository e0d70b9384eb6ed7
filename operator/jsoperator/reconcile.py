"""One reconciliation or deletion of a Stream, Consumer, KeyValue or ObjectStore, as I/O orchestration:
resource -> spec model -> JetStream config -> plan -> API calls -> Result (status patch, Events, retry).

Decisions live in pure modules (annotations, plan, status); this module sequences the I/O
(Secrets via credentials, JetStream via jsclient) and turns every failure into a Result.
It knows nothing about kopf: the handlers apply the Result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, MutableSet
from datetime import datetime, timezone
from typing import Any, Literal

from . import annotations as annotation
from . import (
    buckets, connections, credentials, events, features, jsclient, kubeapi, mapping, metrics, models, ownership, plan,
    reset, status, unpin,
)
from .settings import Settings

Kind = Literal["Stream", "Consumer", "KeyValue", "ObjectStore"]
# How messages name each kind's server object.
NOUNS = {"Stream": "stream", "Consumer": "consumer", "KeyValue": "key-value bucket", "ObjectStore": "object store"}
Trigger = Literal["create", "update", "resume", "timer", "signal"]


@dataclasses.dataclass(frozen=True)
class Resource:
    """The parts of a custom resource a reconciliation reads."""

    kind: Kind
    namespace: str
    name: str
    generation: int
    spec: Mapping[str, Any]
    annotations: Mapping[str, str]
    status: Mapping[str, Any]
    uid: str = ""

    @classmethod
    def from_body(cls, kind: Kind, body: Mapping[str, Any]) -> Resource:
        meta = body["metadata"]
        return cls(
            kind=kind, namespace=meta["namespace"], name=meta["name"], generation=int(meta.get("generation") or 0),
            spec=dict(body.get("spec") or {}), annotations=dict(meta.get("annotations") or {}),
            status=dict(body.get("status") or {}), uid=str(meta.get("uid") or ""),
        )

    def server_name(self) -> str:
        """Stream name (Stream), durable name (Consumer) or bucket name on the server, without full validation."""
        if self.kind in buckets.BUCKET_KINDS:
            return buckets.bucket_name(self.spec, self.name)
        key = "name" if self.kind == "Stream" else "durableName"
        return str(self.spec.get(key) or self.name)

    def stream_name(self) -> str:
        if buckets.is_stream_kind(self.kind):
            return buckets.stream_of(self.kind, self.spec, self.name)
        return str(self.spec.get("streamName") or "")


@dataclasses.dataclass
class Result:
    """What the handler must do: patch `status`, post `events`, and retry (with backoff) when `retry`."""

    status: dict[str, Any]
    events: list[events.Event] = dataclasses.field(default_factory=list)
    retry: bool = False
    done: bool = True  # deletion only: the finalizer may go
    message: str = ""
    reached: jsclient.ConnectionSettings | None = None  # the connection used, when one was opened


@dataclasses.dataclass(frozen=True)
class Runtime:
    """The operator-wide things a reconciliation uses."""

    settings: Settings
    pool: jsclient.Pool

    async def client(
        self, resource: Resource, spec: models.ConnectionSpec | None, ref: models.ConnectionRef | None = None
    ) -> jsclient.JetStreamClient:
        """The connection of spec.connection, or of the connection object spec.connectionRef names."""
        namespace = resource.namespace
        if ref is not None:
            spec, namespace = await credentials.referenced(ref, resource.namespace)
        settings = await credentials.resolve(spec, namespace, self.settings)
        return await self.pool.client(settings)

    def owner(self, resource: Resource) -> ownership.Owner | None:
        """The marks this resource's server object carries (None: a resource without a uid, as in unit tests)."""
        if not resource.uid:
            return None
        return ownership.Owner(self.settings.cluster_name, resource.kind, resource.namespace, resource.name,
                               resource.uid)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _patch(resource: Resource, outcome: status.Outcome, **kw: Any) -> dict[str, Any]:
    return status.build(resource.status, generation=resource.generation, outcome=outcome, now=_now(), **kw)


def _failed(resource: Resource, outcome: status.Outcome) -> Result:
    metrics.RECONCILIATIONS_FAILED.labels(resource.kind, outcome.reason).inc()
    outcome = outcome.with_policy(resource.spec.get("terminalPolicy"))
    # One Warning per distinct problem: retries and drift checks repeating it would flood the Events.
    # An outage's message varies per attempt (timeout, refused), so for it the reason alone counts.
    ready = status.condition(resource.status, status.READY) or {}
    same_reason = ready.get("reason") == outcome.reason
    new = not same_reason or (outcome.reason != status.BROKER_UNAVAILABLE and ready.get("message") != outcome.message)
    evs = [events.Event("Warning", events.FAILED, outcome.message)] if new else []
    return Result(_patch(resource, outcome), evs, retry=outcome.reconciling, message=outcome.message)


def out_of_storage(resource: Resource, result: Result, server: str, stream: str) -> Result:
    """`result` with StorageAvailable False (the server's out-of-storage advisory) and a Warning Event."""
    written = {**(resource.status or {}), **result.status}
    conditions = status.out_of_storage(written, server, stream, resource.generation, _now())
    message = str(conditions[-1]["message"])
    return dataclasses.replace(result, status={**result.status, "conditions": conditions},
                               events=[*result.events, events.Event("Warning", events.OUT_OF_STORAGE, message)])


# -- create / update / resume / drift -------------------------------------------------------------


async def reconcile(
    resource: Resource, runtime: Runtime, trigger: Trigger, executed: MutableSet[str], conflict: str = ""
) -> Result:
    """Make the server match the resource; `executed` remembers reset and unpin requests run by this process;
    `conflict` (conflicts.conflict) names another resource driving the same server object first: nothing is sent."""
    with metrics.timed(resource.kind, trigger):
        try:
            return await _reconcile(resource, runtime, trigger, executed, conflict)
        except annotation.AnnotationError as exc:
            return _failed(resource, status.invalid_annotation(str(exc)))
        except models.SpecError as exc:
            return _failed(resource, status.invalid_spec(str(exc)))
        except credentials.CredentialsError as exc:
            return _failed(resource, status.credentials_not_found(str(exc)))
        except connections.Unusable as exc:  # reconciled again when the connection object changes
            return _failed(resource, status.stalled(exc.reason, str(exc)))
        except jsclient.BrokerUnavailable as exc:
            return _failed(resource, status.broker_unavailable(str(exc)))
        except jsclient.ApiError as exc:
            return _failed(resource, status.api_error(exc.code, exc.err_code, exc.description))


async def _reconcile(
    resource: Resource, runtime: Runtime, trigger: Trigger, executed: MutableSet[str], conflict: str
) -> Result:
    if not annotation.is_managed(resource.annotations):
        return Result(_patch(resource, status.synced(""), mode="unmanaged"))
    if annotation.is_paused(resource.annotations):
        return Result(_patch(resource, status.synced(""), mode="paused"))
    if conflict:
        kind = resource.kind.lower()
        field = {"Stream": "spec.name (or subjects)", "Consumer": "spec.durableName (or subjects)"}.get(
            resource.kind, "spec.bucket")
        return _failed(resource, status.stalled(status.CONFLICT, 
            f"{conflict}: this {kind} changes nothing on the server. Delete one of the two resources, or give "
            f"this one another {field}"))
    if buckets.is_stream_kind(resource.kind):
        return await _reconcile_stream(resource, runtime, trigger)
    return await _reconcile_consumer(resource, runtime, trigger, executed)


async def _reconcile_stream(resource: Resource, runtime: Runtime, trigger: Trigger) -> Result:
    """A Stream, or a bucket (KeyValue, ObjectStore): a stream with a fixed mapping (buckets.py)."""
    spec, desired = buckets.desired(resource.kind, resource.spec, resource.name)
    client = await runtime.client(resource, spec.connection, spec.connection_ref)
    noun = NOUNS[resource.kind]
    server = await client.server()
    desired, refused = features.check("stream", desired, server, buckets.labels(resource.kind))
    if refused:
        return _failed(resource, status.unsupported_by_server(features.refusal_message(refused, server, noun)))
    adoption = _Adoption(spec.adoption_policy or "adoptOrCreate", _owned(resource), "stream", desired["name"])
    policy = _Policy(runtime.settings.read_only, models.recreates(spec))
    claim = _claim(runtime, resource, server, "stream")
    try:
        done = await _converge_stream(client, desired, adoption, buckets.labels(resource.kind), noun, policy, claim)
    except _Blocked as exc:
        return _failed(resource, status.immutable_change(str(exc)))
    except _ReadOnly as exc:
        return _failed(resource, status.stalled(status.READ_ONLY, str(exc)))
    except _Unadoptable as exc:
        return _failed(resource, exc.outcome)
    evs = _change_events(resource, noun, done, trigger, adoption.adopted(done)) + _deprecations(spec, trigger)
    return Result(_patch(resource, status.synced(_synced_message(noun, done, "stream")),
                         observed=status.observed_stream(resource.kind, done.info), adopted=adoption.adopted(done)),
                  evs, reached=client.settings)


async def _reconcile_consumer(
    resource: Resource, runtime: Runtime, trigger: Trigger, executed: MutableSet[str]
) -> Result:
    spec = models.parse_spec(models.ConsumerSpec, resource.spec)
    pending = annotation.pending_reset(resource.annotations, resource.status.get("lastReset"))
    unpinning = annotation.pending_unpin(resource.annotations, resource.status.get("lastUnpin"))
    desired = mapping.consumer_config(spec, resource.name)
    client = await runtime.client(resource, spec.connection, spec.connection_ref)
    server = await client.server()
    requests = [request.annotation for request in (pending, unpinning) if request is not None]
    desired, refused = features.check("consumer", desired, server, annotations_used=requests)
    if refused:
        return _failed(resource, status.unsupported_by_server(features.refusal_message(refused, server, "consumer")))
    durable = desired["durable_name"]
    adoption = _Adoption(spec.adoption_policy or "adoptOrCreate", _owned(resource), "consumer", durable)
    read_only = runtime.settings.read_only
    claim = _claim(runtime, resource, server, "consumer")
    try:
        done = await _converge_consumer(client, spec.stream_name, desired, adoption,
                                        _Policy(read_only, models.recreates(spec)), claim)
    except _Blocked as exc:
        return _failed(resource, status.immutable_change(str(exc)))
    except _ReadOnly as exc:
        return _failed(resource, status.stalled(status.READ_ONLY, str(exc)))
    except _Unadoptable as exc:
        return _failed(resource, exc.outcome)
    except _StreamMissing as exc:
        return _failed(resource, status.retrying(status.WAITING_FOR_STREAM, str(exc)))
    evs = _change_events(resource, "consumer", done, trigger, adoption.adopted(done))
    info, extra = done.info, {}
    if pending is not None and pending.request not in executed and not read_only:
        ran = await reset.execute(client, spec.stream_name, desired["durable_name"], pending, _now())
        executed.add(pending.request)
        evs.append(ran.event)
        extra["lastReset"] = ran.last_reset
        info = ran.info or await client.consumer_info(spec.stream_name, desired["durable_name"]) or info
    if unpinning is not None and unpinning.request not in executed and not read_only:
        unpinned = await unpin.execute(client, spec.stream_name, durable, spec, unpinning, _now())
        executed.add(unpinning.request)
        evs.append(unpinned.event)
        extra["lastUnpin"] = unpinned.last_unpin
    observed = {**status.consumer_state(info), **extra}
    evs += _deprecations(spec, trigger)
    return Result(_patch(resource, status.synced(_synced_message("consumer", done, "consumer")), observed=observed,
                         adopted=adoption.adopted(done)), evs, reached=client.settings)


def _deprecations(spec: buckets.AnySpec | models.ConsumerSpec, trigger: Trigger) -> list[events.Event]:
    """A Warning for deprecated fields, when the spec is (re)read: not at every drift check."""
    prevent_delete = getattr(spec, "prevent_delete", None)  # buckets never had it
    if prevent_delete is None or trigger in ("timer", "signal"):
        return []
    policy = models.effective_deletion_policy(spec.deletion_policy, prevent_delete)
    message = f"spec.preventDelete is deprecated and will be removed: write deletionPolicy: {policy} instead"
    return [events.Event("Warning", events.DEPRECATED, message)]


def _synced_message(kind: str, done: _Converged, scope: Literal["stream", "consumer"]) -> str:
    config = done.info.get("config", {})
    name = config.get("name") or done.info.get("name")
    action = f" ({done.action})" if done.action != "unchanged" else ""
    action = f" (recreated: {done.lost})" if done.action == "recreated" else action
    return f"{kind} {name} matches the spec{action}" + features.unknown_note(features.unknown_fields(scope, config))


def _change_events(
    resource: Resource, kind: str, done: _Converged, trigger: Trigger, adopted: bool | None
) -> list[events.Event]:
    what = f"{kind} {resource.server_name()}"
    if done.action == "recreated":
        changes = "; ".join(change.describe() for change in done.plan.immutable)
        return [events.Event("Warning", events.RECREATED, f"{what} deleted and created again because the server "
                             f"cannot change it in place ({changes}; recreateOnImmutableChange): {done.lost}")]
    if adopted:
        how = "it matches the spec" if done.action == "unchanged" else f"updated {', '.join(done.plan.drift)}"
        previous = f"; {done.previous}" if done.previous else ""
        return [events.Event("Normal", events.ADOPTED, f"adopted the existing {what}: {how}{previous}")]
    if done.action == "unchanged":
        return []
    if trigger in ("timer", "signal"):
        repair = "recreated it" if done.action == "created" else f"put back {', '.join(done.plan.drift)}"
        metrics.DRIFT_REPAIRS.labels(resource.kind).inc()
        return [events.Event("Normal", events.DRIFT_REPAIRED, f"{what} changed on the server: {repair}")]
    if done.action == "created":
        return [events.Event("Normal", events.CREATED, f"created {what}")]
    return [events.Event("Normal", events.UPDATED, f"updated {what}: {', '.join(done.plan.drift)}")]


# -- JetStream calls ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Converged:
    action: Literal["created", "updated", "unchanged", "recreated"]
    info: dict[str, Any]  # StreamInfo / ConsumerInfo after the last call
    plan: plan.Plan
    lost: str = ""  # recreated: what the deletion lost
    previous: str = ""  # whose ownership marks this reconciliation replaced


@dataclasses.dataclass(frozen=True)
class _Policy:
    """How far a reconciliation may go: read_only (--read-only) sends nothing; recreate (the spec's
    recreateOnImmutableChange with acceptDataLoss) deletes and creates again what the server cannot change."""

    read_only: bool
    recreate: bool


class _Blocked(Exception):
    """The server would refuse the change (immutable fields); nothing was sent."""


class _StreamMissing(Exception):
    pass


class _ReadOnly(Exception):
    """The server differs from the spec and the operator runs --read-only: reported, nothing sent."""

    def __init__(self, p: plan.Plan, noun: str, name: str) -> None:
        super().__init__(f"{p.difference(f'{noun} {name}')}; the operator runs read-only (--read-only), so nothing "
                         "was created or changed on the server")


class _Unadoptable(Exception):
    """The adoption policy forbids what the server state asks for; nothing was sent."""

    def __init__(self, outcome: status.Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


def _owned(resource: Resource) -> bool:
    """Did this resource create or take over its server object before? (It then recreates it as drift.)"""
    observed = resource.status.get("streamName" if buckets.is_stream_kind(resource.kind) else "consumerName")
    return bool(observed) or status.condition(resource.status, status.ADOPTED) is not None


@dataclasses.dataclass(frozen=True)
class _Claim:
    """The ownership marks of one reconciliation: this resource's (None without a uid) and whether to write them
    (never read-only, never to a server without metadata)."""

    me: ownership.Owner | None
    write: bool

    async def standing(self, observed: Mapping[str, Any] | None) -> tuple[ownership.Standing, ownership.Owner | None]:
        mark = ownership.read(observed)
        if self.me is None or mark is None:
            return "unmarked", mark
        alive = mark.uid != self.me.uid and await _alive(mark, self.me)
        return ownership.standing(mark, self.me, alive), mark

    def stamp(self, config: mapping.Config) -> mapping.Config:
        return ownership.marked(config, self.me) if self.write and self.me is not None else config

    def missing(self, observed: Mapping[str, Any]) -> bool:
        return self.write and self.me is not None and not ownership.carries(observed, self.me)


def _claim(runtime: Runtime, resource: Resource, server: features.Server, scope: Literal["stream", "consumer"]
           ) -> _Claim:
    write = not runtime.settings.read_only and features.honours_key(server, scope, "metadata")
    return _Claim(runtime.owner(resource), write)


async def _alive(mark: ownership.Owner, me: ownership.Owner) -> bool:
    """Does the resource a mark names still exist? Only this cluster's can be looked up; any other, or one this
    operator cannot read, counts as alive: what may still be owned is never taken over unasked."""
    if not ownership.same_cluster(mark, me) or mark.kind not in kubeapi.PLURALS:
        return True
    try:
        body = await kubeapi.get_resource(mark.kind, mark.namespace, mark.name)
    except kubeapi.ApiException:
        return True
    return body is not None and body["metadata"].get("uid") == mark.uid


def _replaced(standing: ownership.Standing, mark: ownership.Owner | None) -> str:
    """What an Adopted Event says about the marks it replaced."""
    if mark is None or standing not in ("stale", "foreign"):
        return ""
    if standing == "stale":
        return f"its marks named {mark.describe()}, which no longer exists"
    return f"taken over from {mark.describe()} (adoptionPolicy: adopt)"


@dataclasses.dataclass(frozen=True)
class _Adoption:
    """spec.adoptionPolicy applied to a server object this resource does not own yet."""

    policy: models.AdoptionPolicy
    owned: bool
    kind: str
    name: str

    def check(self, exists: bool, standing: ownership.Standing, mark: ownership.Owner | None) -> None:
        if standing == "foreign" and (self.owned or self.policy != "adopt"):
            assert mark is not None
            raise _Unadoptable(status.stalled(status.OWNED_ELSEWHERE, self._elsewhere(mark)))
        if self.owned or standing == "ours":
            return
        if exists and self.policy == "never":
            raise _Unadoptable(status.stalled(status.ADOPTION_REFUSED, 
                f"{self.kind} {self.name} already exists on the server and this resource did not create it; "
                "adoptionPolicy is never, so nothing was changed. Delete the server object, choose another name, "
                "or set adoptionPolicy: adopt"))
        if not exists and self.policy == "adopt":
            raise _Unadoptable(status.retrying(status.NOT_FOUND_ON_SERVER, 
                f"{self.kind} {self.name} does not exist on the server; adoptionPolicy is adopt, so it is taken "
                "over once it exists and never created (set adoptOrCreate to create it)"))

    def _elsewhere(self, mark: ownership.Owner) -> str:
        where = f"{self.kind} {self.name} belongs to {mark.describe()} (the {ownership.PREFIX} marks in its metadata)"
        if self.owned:
            return (f"{where}: that resource took it over, so this one changes nothing and leaves it on the server "
                    "when deleted. Delete one of the two resources (deleting that one hands it back)")
        return (f"{where}; adoptionPolicy is {self.policy}, so nothing was changed. Delete that resource first, "
                f"give this one another name on the server, or set adoptionPolicy: adopt to take the {self.kind} "
                "over (that resource then stops changing it)")

    def adopted(self, done: _Converged) -> bool | None:
        """The Adopted condition's new value: True (taken over), False (created), None (owned already)."""
        return None if self.owned else done.action != "created"


async def _converge_stream(
    client: jsclient.JetStreamClient, desired: mapping.Config, adoption: _Adoption, labels: Mapping[str, str],
    noun: str, policy: _Policy, claim: _Claim,
) -> _Converged:
    info = await client.stream_info(desired["name"])
    observed = info["config"] if info else None
    standing, mark = await claim.standing(observed)
    adoption.check(info is not None, standing, mark)
    previous = _replaced(standing, mark)
    p = plan.plan_stream(desired, observed, labels)
    if p.blocked and (policy.read_only or not policy.recreate):
        raise _Blocked(p.message(noun))
    if policy.read_only and p.action != "none":
        raise _ReadOnly(p, noun, desired["name"])
    if p.action == "none":
        assert info is not None and observed is not None
        if claim.missing(observed):  # the spec holds, only the marks are to be written: onto the server's own
            # config, so what the spec leaves open (a republish's headers_only, say) stays as the server has it
            info = await client.update_stream(claim.stamp(dict(observed)))
        return _Converged("unchanged", info, p, previous=previous)
    if p.blocked:
        assert info is not None
        await client.delete_stream(desired["name"])
        return _Converged("recreated", await _create_stream(client, desired, labels, claim), p, _stream_loss(info))
    if p.action == "update":
        return _Converged("updated", await client.update_stream(claim.stamp(p.config)), p, previous=previous)
    return _Converged("created", await _create_stream(client, desired, labels, claim), p)


async def _create_stream(client: jsclient.JetStreamClient, desired: mapping.Config, labels: Mapping[str, str],
                         claim: _Claim) -> dict[str, Any]:
    created = plan.plan_stream(desired, None, labels)
    info = await client.create_stream(claim.stamp(created.config))
    if created.followup:  # sealed: the server only takes it as an update after the create
        second = plan.plan_stream(desired, info["config"], labels)
        if second.action == "update":
            info = await client.update_stream(claim.stamp(second.config))
    return info


def _stream_loss(info: Mapping[str, Any]) -> str:
    state = info.get("state") or {}
    consumers = state.get("consumer_count", 0)
    return (f"its {state.get('messages', 0)} messages ({state.get('bytes', 0)} bytes) and {consumers} "
            f"consumer{'' if consumers == 1 else 's'} were deleted")


def _consumer_loss(info: Mapping[str, Any]) -> str:
    delivered, floor = info.get("delivered") or {}, info.get("ack_floor") or {}
    return (f"its delivery state was deleted (delivered up to stream sequence {delivered.get('stream_seq', 0)}, "
            f"acknowledged up to {floor.get('stream_seq', 0)}, {info.get('num_ack_pending', 0)} awaiting "
            f"acknowledgement): delivery starts again by its deliverPolicy")


async def _converge_consumer(
    client: jsclient.JetStreamClient, stream: str, desired: mapping.Config, adoption: _Adoption, policy: _Policy,
    claim: _Claim,
) -> _Converged:
    info = await client.consumer_info(stream, desired["durable_name"])
    observed = info["config"] if info else None
    standing, mark = await claim.standing(observed)
    adoption.check(info is not None, standing, mark)
    previous = _replaced(standing, mark)
    if info is None and await client.stream_info(stream) is None:
        raise _StreamMissing(
            f"stream {stream} does not exist on the server; the consumer is created as soon as it does"
        )
    p = plan.plan_consumer(desired, observed)
    if p.blocked and (policy.read_only or not policy.recreate):
        raise _Blocked(p.message("consumer"))
    if policy.read_only and p.action != "none":
        raise _ReadOnly(p, "consumer", desired["durable_name"])
    if p.action == "none":
        assert info is not None and observed is not None
        if claim.missing(observed):  # the spec holds, only the marks are to be written (onto the server's config)
            info = await client.put_consumer(stream, claim.stamp(dict(observed)), "update")
        return _Converged("unchanged", info, p, previous=previous)
    lost = ""
    if p.blocked:
        assert info is not None
        await client.delete_consumer(stream, desired["durable_name"])
        lost, info = _consumer_loss(info), None
    info = await client.put_consumer(stream, claim.stamp(p.config), "create" if info is None else "update")
    if p.pause is not None:  # the server ignores pause_until on update: pause/resume is its own call
        await client.pause_consumer(stream, desired["durable_name"], p.pause)
        info = await client.consumer_info(stream, desired["durable_name"]) or info
    if lost:
        return _Converged("recreated", info, p, lost)
    return _Converged("created" if p.action == "create" else "updated", info, p, previous=previous)


# -- delete ---------------------------------------------------------------------------------------


async def delete(
    resource: Resource, runtime: Runtime, consumers_left: list[str], *, give_up: str = "", conflict: str = ""
) -> Result:
    """Delete the server object unless kept; `consumers_left` are Consumer resources of this Stream.

    `give_up` (why) lets the resource go when the server cannot be reached or its Secrets are gone (its
    namespace is being deleted, or `jsoperator release --force`), leaving the server object in place.
    `conflict` names another resource that drives the same server object first: it is left to that one.
    """
    kind = NOUNS[resource.kind]
    keep = f"it belongs to another resource: {conflict}" if conflict else _kept_because(resource)
    keep = keep or ("the operator runs read-only (--read-only)" if runtime.settings.read_only else "")
    if keep:
        handed_back = not conflict and not runtime.settings.read_only and _retained(resource)
        keep += await _unmark(resource, runtime) if handed_back else ""
        return Result({}, [events.Event("Normal", events.LEFT_ON_SERVER, f"{kind} left on the server: {keep}")])
    if consumers_left:
        message = (
            f"waiting for Consumer resources {sorted(consumers_left)} of stream {resource.stream_name()} to be "
            "deleted before deleting the stream"
        )
        outcome = status.deletion_blocked(message)
        evs = [events.Event("Normal", events.DELETE_BLOCKED, message)]
        return Result(_patch(resource, outcome), evs, retry=True, done=False, message=message)
    try:
        client = await _client_of(resource, runtime)
        owner = await _other_owner(resource, runtime, client)
        if owner is not None:
            message = f"{kind} left on the server: it belongs to {owner.describe()} (the marks in its metadata)"
            return Result({}, [events.Event("Normal", events.LEFT_ON_SERVER, message)], message=message)
        if buckets.is_stream_kind(resource.kind):
            existed = await client.delete_stream(resource.stream_name())
        else:
            existed = await client.delete_consumer(resource.stream_name(), resource.server_name())
    except connections.Unusable as exc:
        if not _owned(resource):  # it never reached the server: nothing there is its own
            return Result({}, [], message=str(exc))
        if give_up:
            message = f"{kind} {resource.server_name()} left on the server: {give_up}, and {exc}"
            return Result({}, [events.Event("Warning", events.LEFT_ON_SERVER, message)], message=message)
        message = f"cannot delete the {kind} yet: {exc} (or annotate {annotation.MANAGED}=false to let go)"
        return Result(_patch(resource, status.stalled(exc.reason, str(exc))), [], retry=True, done=False,
                      message=message)
    except (jsclient.BrokerUnavailable, credentials.CredentialsError) as exc:
        if give_up:
            message = f"{kind} {resource.server_name()} left on the server: {give_up}, and {exc}"
            return Result({}, [events.Event("Warning", events.LEFT_ON_SERVER, message)], message=message)
        outcome = status.broker_unavailable(str(exc))
        message = f"cannot delete the {kind} yet: {exc}; retrying (annotate {annotation.MANAGED}=false to let go)"
        return Result(_patch(resource, outcome), [], retry=True, done=False, message=message)
    except jsclient.ApiError as exc:
        outcome = status.api_error(exc.code, exc.err_code, exc.description, action=f"deleting the {kind}")
        evs = [events.Event("Warning", events.FAILED, outcome.message)]
        return Result(_patch(resource, outcome), evs, retry=True, done=False, message=outcome.message)
    what = "deleted from" if existed else "was already gone from"
    return Result({}, [events.Event("Normal", events.DELETED, f"{kind} {resource.server_name()} {what} the server")])


async def _client_of(resource: Resource, runtime: Runtime) -> jsclient.JetStreamClient:
    """The connection a deletion uses, from the spec as it stands (not validated again)."""
    conn = models.ConnectionSpec.model_validate(resource.spec.get("connection") or {})
    ref = models.ConnectionRef.model_validate(resource.spec["connectionRef"]) if resource.spec.get(
        "connectionRef") else None
    return await runtime.client(resource, conn, ref)


async def _observed(resource: Resource, client: jsclient.JetStreamClient) -> dict[str, Any] | None:
    """The server config of the resource's stream or consumer, None when it does not exist."""
    if buckets.is_stream_kind(resource.kind):
        info = await client.stream_info(resource.stream_name())
    else:
        info = await client.consumer_info(resource.stream_name(), resource.server_name())
    return info["config"] if info else None


async def _other_owner(resource: Resource, runtime: Runtime, client: jsclient.JetStreamClient
                       ) -> ownership.Owner | None:
    """The owner another resource's marks name on the server object (taken over, or never this one's): a deletion
    leaves such an object alone."""
    me, mark = runtime.owner(resource), ownership.read(await _observed(resource, client))
    return mark if me is not None and mark is not None and mark.uid != me.uid else None


async def _unmark(resource: Resource, runtime: Runtime) -> str:
    """A retained server object loses this resource's marks (another resource, or cluster, may then adopt it as
    unowned); best effort: marks left behind by a failure count as stale wherever the uid can be looked up."""
    me = runtime.owner(resource)
    if me is None:
        return ""
    try:
        client = await _client_of(resource, runtime)
        observed = await _observed(resource, client)
        mark = ownership.read(observed)
        if observed is None or mark is None or mark.uid != me.uid:
            return ""
        if buckets.is_stream_kind(resource.kind):
            await client.update_stream(ownership.unmarked(observed))
        else:
            await client.put_consumer(resource.stream_name(), ownership.unmarked(observed), "update")
    except (connections.Unusable, credentials.CredentialsError, jsclient.BrokerUnavailable, jsclient.ApiError,
            ValueError) as exc:  # ValueError: a connection spec pydantic refuses
        return f" (its ownership marks stay: {exc})"
    return " (its ownership marks were removed)"


def _retained(resource: Resource) -> bool:
    """Is the server object kept only because the spec says so (deletionPolicy retain, or preventDelete)?"""
    try:
        managed = annotation.is_managed(resource.annotations) and not annotation.is_paused(resource.annotations)
    except annotation.AnnotationError:
        return False
    policy, prevent = resource.spec.get("deletionPolicy"), resource.spec.get("preventDelete")
    return managed and models.effective_deletion_policy(policy, prevent) == "retain"


def _kept_because(resource: Resource) -> str:
    try:
        if not annotation.is_managed(resource.annotations):
            return f"{annotation.MANAGED} is false"
        if annotation.is_paused(resource.annotations):
            return f"{annotation.PAUSE} is true"
    except annotation.AnnotationError as exc:
        return f"{exc} (not deleting while unsure)"
    policy, prevent = resource.spec.get("deletionPolicy"), resource.spec.get("preventDelete")
    if models.effective_deletion_policy(policy, prevent) == "retain":
        return "spec.deletionPolicy is retain" if policy else "spec.preventDelete is true"
    return ""
