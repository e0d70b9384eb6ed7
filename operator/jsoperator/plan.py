"""What to do about one stream or consumer: (desired config, observed config | None) -> Plan.

Owns the decision create / update / none, the drifted fields, and the changes the server would refuse
(immutable fields), so the runtime reports those as Stalled instead of looping on a server error.
The immutability rules mirror nats-server 2.15 (stream.go configUpdateCheckLocked,
consumer.go checkNewConsumerConfig); the CRD's CEL rules (crdgen.py) refuse the same edits earlier,
at `kubectl apply`, but a server object changed behind our back or adopted by name only shows up here.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from jsoperator import mapping
from jsoperator.mapping import Config, Difference

Action = Literal["create", "update", "none"]


@dataclass(frozen=True)
class ImmutableChange:
    """A field whose change the server refuses."""

    key: str  # JetStream (wire) name
    desired: Any
    observed: Any
    rule: str  # what the server does not allow, e.g. "cannot change"
    label: str = ""  # the spec field, when not the Stream spec's (a bucket's `ttl` for max_age)

    @property
    def field(self) -> str:
        """The spec (camelCase) name."""
        return self.label or mapping.spec_name(self.key)

    def describe(self) -> str:
        server, spec = mapping.show(self.key, self.observed), mapping.show(self.key, self.desired)
        return f"{self.field} {self.rule} (server: {server}, spec: {spec})"


@dataclass(frozen=True)
class Plan:
    """The outcome of comparing a desired config with the server's.

    ``config`` is what to send for ``action``. After a create, plan again: a sealed stream needs a
    second step because the server refuses ``sealed`` on create (``followup`` is then True).
    When ``immutable`` is non-empty, do not send anything: the server would refuse it.
    ``pause`` (consumers) is the body of a ``$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`` request to
    send after the update: ``{"pause_until": "<RFC 3339>"}`` pauses, ``{}`` resumes. The server ignores
    ``pause_until`` when updating a consumer; it only honours it on create.
    """

    action: Action
    config: Config
    drift: tuple[str, ...] = ()
    immutable: tuple[ImmutableChange, ...] = ()
    followup: bool = False
    differences: Mapping[str, Difference] = field(default_factory=dict)
    pause: Config | None = None
    labels: Mapping[str, str] = field(default_factory=dict)  # config key -> spec field, where not the Stream's

    @property
    def blocked(self) -> bool:
        return bool(self.immutable)

    def message(self, kind: str) -> str:
        """One line for a condition message or an Event."""
        if self.immutable:
            changes = "; ".join(change.describe() for change in self.immutable)
            return (
                f"the server cannot apply this {kind} change: {changes}. Revert the spec, or delete and "
                f"recreate the {kind} (this loses its data/state)"
            )
        if self.action == "create":
            return f"{kind} does not exist on the server: creating it"
        if self.action == "update":
            return f"{self.difference(kind)}: updating it"
        return f"{kind} matches the spec"

    def difference(self, kind: str) -> str:
        """What differs, field by field: "stream differs from the spec in maxMsgs (server: 10, spec: 20)"."""
        if self.action == "create":
            return f"{kind} does not exist on the server"
        fields = ", ".join(
            f"{self.labels.get(key) or mapping.spec_name(key)} (server: {mapping.show(key, have)}, "
            f"spec: {mapping.show(key, want)})"
            for key, (want, have) in self.differences.items()
        )
        return f"{kind} differs from the spec in {fields}"


RuleKind = Literal["fixed", "no_turning_off", "workqueue", "mirror", "push_pull"]


@dataclass(frozen=True)
class Immutable:
    """How a field may not change; crdgen.py turns the same table into the CRD's CEL rules."""

    kind: RuleKind
    rule: str  # what the server does not allow, as a predicate of the field: "cannot change"

    def refuses(self, want: Any, have: Any) -> bool:
        """Would the server refuse changing ``have`` (its value) into ``want`` (effective values)?"""
        if self.kind == "fixed":
            return bool(want != have)
        if self.kind == "no_turning_off":
            return bool(have) and not want
        if self.kind == "workqueue":
            return want != have and "workqueue" in (want, have)
        if self.kind == "mirror":
            return bool(want)  # removing the mirror promotes the stream; adding or changing one is refused
        return bool(want) != bool(have)  # push_pull: deliverSubject set or not


STREAM_IMMUTABLE: dict[str, Immutable] = {
    "name": Immutable("fixed", "cannot change"),
    "storage": Immutable("fixed", "cannot change"),
    "retention": Immutable("workqueue", "cannot change to or from workqueue"),
    "sealed": Immutable("no_turning_off", "cannot be turned off (a sealed stream stays sealed)"),
    "deny_delete": Immutable("no_turning_off", "cannot be turned off"),
    "deny_purge": Immutable("no_turning_off", "cannot be turned off"),
    "allow_msg_ttl": Immutable("no_turning_off", "cannot be turned off"),
    "allow_msg_schedules": Immutable("no_turning_off", "cannot be turned off"),
    "allow_msg_counter": Immutable("fixed", "cannot change"),
    "persist_mode": Immutable("fixed", "cannot change"),
    "mirror": Immutable("mirror", "cannot be added or changed (removing it promotes the mirror to a normal stream)"),
}
CONSUMER_IMMUTABLE: dict[str, Immutable] = {
    "durable_name": Immutable("fixed", "cannot change"),
    "deliver_policy": Immutable("fixed", "cannot change"),
    "opt_start_seq": Immutable("fixed", "cannot change"),
    "opt_start_time": Immutable("fixed", "cannot change"),
    "ack_policy": Immutable("fixed", "cannot change"),
    "replay_policy": Immutable("fixed", "cannot change"),
    "idle_heartbeat": Immutable("fixed", "cannot change"),
    "flow_control": Immutable("fixed", "cannot change"),
    "mem_storage": Immutable("fixed", "cannot change"),
    "max_waiting": Immutable("fixed", "cannot change"),
    "deliver_subject": Immutable("push_pull", "cannot switch a consumer between push (set) and pull (unset)"),
}


def plan_stream(
    desired: Config, observed: Mapping[str, Any] | None, labels: Mapping[str, str] | None = None
) -> Plan:
    """Plan for a stream: ``desired`` from mapping.stream_config (or buckets), ``observed`` the server's config;
    ``labels`` names config keys as the resource's spec does (buckets.labels)."""
    if observed is None:
        sealed = bool(desired.get("sealed"))
        config = {key: value for key, value in desired.items() if key != "sealed"}
        return Plan("create", config, followup=sealed)
    result = _plan(desired, mapping.stream_diff(desired, observed), STREAM_IMMUTABLE, labels or {})
    if result.action == "update":
        return dataclasses.replace(result, config=stream_update(desired, observed))
    return result


def stream_update(desired: Config, observed: Mapping[str, Any]) -> Config:
    """The config to send as an update of the stream ``observed``: an update of a sealed stream must repeat what
    sealing forced (the server refuses "cancelling" them)."""
    if not observed.get("sealed"):
        return dict(desired)
    return {**desired, **{key: observed.get(key, mapping.STREAM_DEFAULTS[key]) for key in mapping.FORCED_BY_SEAL}}


def plan_consumer(desired: Config, observed: Mapping[str, Any] | None, *, now: datetime | None = None) -> Plan:
    """Plan for a consumer: ``desired`` from mapping.consumer_config, ``observed`` the server's config.

    ``now`` (default: the current time) decides whether a ``pause_until`` has already passed.
    """
    if observed is None:
        return Plan("create", dict(desired))
    differences = mapping.consumer_diff(desired, observed, now=now)
    result = _plan(desired, differences, CONSUMER_IMMUTABLE, {})
    if "pause_until" not in differences:
        return result
    until = desired.get("pause_until")
    return dataclasses.replace(result, pause={"pause_until": until} if until and differences["pause_until"][0] else {})


def _plan(
    desired: Config, differences: dict[str, Difference], rules: Mapping[str, Immutable], labels: Mapping[str, str]
) -> Plan:
    drift = tuple(labels.get(key) or mapping.spec_name(key) for key in differences)
    immutable = tuple(
        ImmutableChange(key, want, have, rules[key].rule, labels.get(key, ""))
        for key, (want, have) in differences.items()
        if key in rules and rules[key].refuses(want, have)
    )
    action: Action = "update" if differences else "none"
    return Plan(action, dict(desired), drift, immutable, differences=differences, labels=labels)

