"""Spec <-> JetStream API configuration: the translation tables and the drift comparison.

Owns:
- ``stream_config`` / ``consumer_config``: validated spec -> the StreamConfig / ConsumerConfig JSON the
  JetStream API takes (snake_case, nanoseconds, bytes). Only fields the user set are sent; the server
  applies its own defaults to the rest, so the CRDs need no ``default:``.
- ``stream_drift`` / ``consumer_drift``: which spec fields the server's config no longer matches.
  Both sides are compared in effective values: server-side normal forms (0 vs -1 limits, ``_nats.*``
  metadata, omitted-when-default keys, times in any zone, subject order) and the operator's ownership marks
  (ownership.py: reconcile writes and checks those) never count as drift, and a
  field the user left unset is compared against the server's fixed default, so a change made behind our
  back is noticed even there. Defaults the server derives from other fields (duplicate window, ack
  wait, max waiting, pin timeout, subjects) are derived the same way here; those that come from
  stream or account limits (max_ack_pending, inactive_threshold) are not compared when unset.
Pure: no I/O; knows nothing about Kubernetes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, get_args

from pydantic import BaseModel, BeforeValidator
from pydantic.alias_generators import to_camel

from jsoperator import ownership, units
from jsoperator.models import ConsumerSpec, StreamSpec, format_time

Config = dict[str, Any]

# Python field name -> JetStream JSON name, where the two differ (everything else is the same snake name).
WIRE_NAMES = {
    "replicas": "num_replicas",
    "allow_atomic_publish": "allow_atomic",
    "allow_batch_publish": "allow_batched",
    "api_prefix": "api",
    "deliver_prefix": "deliver",
}
# Spec fields that steer the operator and never reach the server config.
OPERATOR_FIELDS = frozenset(
    {"adoption_policy", "deletion_policy", "prevent_delete", "connection", "connection_ref", "stream_name",
     "recreate_on_immutable_change", "accept_data_loss", "terminal_policy"}
)
# Enum values spelled camelCase in the CRD (Kubernetes style) and snake_case on the wire.
ENUM_VALUES = {
    "byStartSequence": "by_start_sequence",
    "byStartTime": "by_start_time",
    "lastPerSubject": "last_per_subject",
    "pinnedClient": "pinned_client",
    "flowControl": "flow_control",
}
ENUM_NAMES = {wire: spec for spec, wire in ENUM_VALUES.items()}
ENUM_FIELDS = frozenset({"deliver_policy", "priority_policy", "ack_policy"})

_FLOW_CONTROL_HEARTBEAT = 1_000_000_000  # ns: what ack_policy flow_control requires and the server sets

# Fixed server defaults (nats-server 2.15.1, observed): an unset spec field means this value; None means
# "absent or empty". Defaults that depend on other fields are in _stream/_consumer_expectations.
STREAM_DEFAULTS: Config = {
    "description": "",
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "discard": "old",
    "discard_new_per_subject": False,
    "storage": "file",
    "num_replicas": 1,
    "no_ack": False,
    "compression": "none",
    "allow_direct": False,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "allow_msg_ttl": False,
    "allow_msg_counter": False,
    "allow_atomic": False,
    "allow_msg_schedules": False,
    "allow_batched": False,
    "persist_mode": "default",
    "first_seq": 0,
    "subject_delete_marker_ttl": 0,
    "placement": None,
    "mirror": None,
    "sources": None,
    "subject_transform": None,
    "republish": None,
    "consumer_limits": None,
    "metadata": {},
}
CONSUMER_DEFAULTS: Config = {
    "description": "",
    "deliver_policy": "all",
    "ack_policy": "none",
    "replay_policy": "instant",
    "max_deliver": -1,
    "rate_limit_bps": 0,
    "flow_control": False,
    "headers_only": False,
    "max_batch": 0,
    "max_expires": 0,
    "max_bytes": 0,
    "deliver_subject": "",
    "deliver_group": "",
    "mem_storage": False,
    "priority_policy": "none",
    "opt_start_seq": 0,
    "opt_start_time": None,
    "filter_subject": "",
    "filter_subjects": None,
    "backoff": None,
    "sample_freq": "",
    "idle_heartbeat": 0,
    "num_replicas": 0,
    "pause_until": None,
    "priority_groups": None,
    "metadata": {},
}
# Limits where the server stores 0 (and anything below -1) as -1.
_MINUS_ONE_LIMITS = frozenset(
    {"max_consumers", "max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size", "max_deliver"}
)
_UNORDERED_LISTS = frozenset({"subjects", "filter_subjects", "tags"})
_TIME_FIELDS = frozenset({"opt_start_time", "pause_until"})
# Compared as a whole: a key added on the server is drift (elsewhere the server may add its own keys).
_EXACT = frozenset({"metadata"})
# A sealed stream has these forced by the server (stream.go configUpdateCheckLocked).
_FORCED_BY_SEAL = frozenset({"max_age", "discard", "deny_delete", "deny_purge", "allow_rollup_hdrs"})
FORCED_BY_SEAL = _FORCED_BY_SEAL
# A mirror's mirror_direct is copied by the server from the origin's allow_direct.
_DERIVED_FOR_MIRRORS = frozenset({"mirror_direct"})


# -- spec -> config ---------------------------------------------------------------------------------


def stream_config(spec: StreamSpec, default_name: str) -> Config:
    """The StreamConfig to send for this spec; ``name`` falls back to ``default_name`` (metadata.name)."""
    config = _to_wire(spec)
    config["name"] = spec.name or default_name
    return config


def consumer_config(spec: ConsumerSpec, default_name: str) -> Config:
    """The ConsumerConfig to send; ``durable_name`` falls back to ``default_name`` (metadata.name)."""
    config = _to_wire(spec)
    config["durable_name"] = spec.durable_name or default_name
    return config


def wire_name(field: str) -> str:
    """Python field name -> JetStream JSON key."""
    return WIRE_NAMES.get(field, field)


def spec_name(wire: str) -> str:
    """JetStream JSON key -> the camelCase spec field users write (for messages)."""
    return to_camel(_PYTHON_NAMES.get(wire, wire))


_PYTHON_NAMES = {wire: python for python, wire in WIRE_NAMES.items()}


def show(key: str, value: Any) -> str:
    """A wire value as users write it, for messages: durations as ``1h30m``, the rest as JSON."""
    if value is None:
        return "unset"
    if key in DURATION_KEYS and isinstance(value, int):
        return units.format_duration(value)
    if key in DURATION_KEYS and isinstance(value, list):
        return "[" + ", ".join(units.format_duration(v) for v in value) + "]"
    return json.dumps(value, default=str)


def _keys_parsed_by(parser: Any, models: tuple[type[BaseModel], ...]) -> frozenset[str]:
    """Wire keys of every (nested) spec field whose type is parsed by ``parser``."""
    found: set[str] = set()
    pending, seen = list(models), set()
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            annotations = annotation_parts(info.annotation)
            if any(isinstance(m, BeforeValidator) and m.func is parser for a in annotations for m in _meta(a)):
                found.add(wire_name(name))
            pending += nested_models(info.annotation)
    return frozenset(found)


def annotation_parts(annotation: Any) -> list[Any]:
    """A type annotation and every type nested in it (Optional, list, Annotated, ...)."""
    return [annotation, *(inner for arg in get_args(annotation) for inner in annotation_parts(arg))]


def nested_models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation refers to (``list[StreamSource] | None`` -> StreamSource)."""
    return [a for a in annotation_parts(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]


def _meta(annotation: Any) -> tuple[Any, ...]:
    return getattr(annotation, "__metadata__", ())


DURATION_KEYS = _keys_parsed_by(units.parse_duration, (StreamSpec, ConsumerSpec))


def _to_wire(model: BaseModel) -> Config:
    config: Config = {}
    for field in type(model).model_fields:
        value = getattr(model, field)
        if value is None or field in OPERATOR_FIELDS:
            continue
        if field in ENUM_FIELDS:
            value = ENUM_VALUES.get(value, value)
        config[wire_name(field)] = _wire_value(value)
    return config


def wire(model: BaseModel) -> Config:
    """A (nested) spec model as JetStream JSON: wire names, set fields only."""
    return _to_wire(model)


def wire_value(value: Any) -> Any:
    """A spec value as JetStream JSON (models become objects, times RFC 3339)."""
    return _wire_value(value)


def _wire_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _to_wire(value)
    if isinstance(value, list):
        return [_wire_value(item) for item in value]
    if isinstance(value, datetime):
        return format_time(value)
    return value


# -- drift ------------------------------------------------------------------------------------------

Difference = tuple[Any, Any]
"""(what the spec means, what the server has), both in effective normal form."""


def stream_diff(desired: Mapping[str, Any], observed: Mapping[str, Any]) -> dict[str, Difference]:
    """JetStream keys whose server value differs from ``desired`` (a ``stream_config``)."""
    skip = (_FORCED_BY_SEAL if observed.get("sealed") else frozenset()) | (
        _DERIVED_FOR_MIRRORS if observed.get("mirror") else frozenset()
    )
    return _diff(_stream_expectations(dict(desired)), observed, STREAM_DEFAULTS, skip)


def consumer_diff(
    desired: Mapping[str, Any], observed: Mapping[str, Any], *, now: datetime | None = None
) -> dict[str, Difference]:
    """JetStream keys whose server value differs from ``desired`` (a ``consumer_config``).

    A ``pause_until`` that has passed (at ``now``, default: the current time) counts as unset.
    """
    now = now or datetime.now(timezone.utc)
    want = _without_past_pause(_consumer_expectations(dict(desired)), now)
    return _diff(want, _without_past_pause(dict(observed), now), CONSUMER_DEFAULTS, frozenset())


def _without_past_pause(config: Config, now: datetime) -> Config:
    until = config.get("pause_until")
    if until and _normal("pause_until", until) <= now:
        return {key: value for key, value in config.items() if key != "pause_until"}
    return config


def stream_drift(desired: Mapping[str, Any], observed: Mapping[str, Any]) -> list[str]:
    """Spec field names (camelCase) whose server value differs from ``desired`` (a ``stream_config``)."""
    return [spec_name(key) for key in stream_diff(desired, observed)]


def consumer_drift(
    desired: Mapping[str, Any], observed: Mapping[str, Any], *, now: datetime | None = None
) -> list[str]:
    """Spec field names (camelCase) whose server value differs from ``desired`` (a ``consumer_config``)."""
    return [spec_name(key) for key in consumer_diff(desired, observed, now=now)]


def effective(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> Config:
    """``config`` with unset keys filled from the fixed server ``defaults``, in normal form."""
    merged = {**config, **{key: value for key, value in defaults.items() if key not in config}}
    return {key: _normal(key, value) for key, value in merged.items()}


_DEFAULT_DUPLICATE_WINDOW = 120_000_000_000
_DEFAULT_ACK_WAIT = 30_000_000_000
_DEFAULT_MAX_WAITING = 512
_DEFAULT_PINNED_TTL = 120_000_000_000


# Keys where 0 asks for the server's default rather than meaning zero.
_STREAM_ZERO_IS_DEFAULT = frozenset({"duplicate_window"})
_CONSUMER_ZERO_IS_DEFAULT = frozenset(
    {"ack_wait", "max_ack_pending", "inactive_threshold", "max_waiting", "priority_timeout"}
)


def _stream_expectations(desired: Config) -> Config:
    """Defaults the server derives from other fields (stream.go checkStreamCfg)."""
    want = {k: v for k, v in desired.items() if not (k in _STREAM_ZERO_IS_DEFAULT and v == 0)}
    if "subjects" not in want:
        # No subjects means the stream name, unless the stream only gathers from elsewhere.
        want["subjects"] = None if want.get("mirror") or want.get("sources") else [want.get("name")]
    if want.get("subject_delete_marker_ttl"):
        want.setdefault("allow_msg_ttl", True)
        want.setdefault("allow_rollup_hdrs", True)
    if want.get("allow_msg_schedules"):
        want.setdefault("allow_rollup_hdrs", True)
    if "duplicate_window" not in want:
        max_age = want.get("max_age") or 0
        if want.get("mirror") or want.get("sources"):
            want["duplicate_window"] = 0
        else:
            want["duplicate_window"] = min(max_age or _DEFAULT_DUPLICATE_WINDOW, _DEFAULT_DUPLICATE_WINDOW)
    return want


def _consumer_expectations(desired: Config) -> Config:
    """Defaults the server derives from other fields (consumer.go setConsumerConfigDefaults)."""
    want = {k: v for k, v in desired.items() if not (k in _CONSUMER_ZERO_IS_DEFAULT and v == 0)}
    if want.get("backoff"):
        want["ack_wait"] = want["backoff"][0]  # the server waits backoff[0], whatever ack_wait says
    elif "ack_wait" not in want:
        want["ack_wait"] = _DEFAULT_ACK_WAIT if want.get("ack_policy") in ("explicit", "all") else 0
    if "max_waiting" not in want:
        want["max_waiting"] = 0 if want.get("deliver_subject") else _DEFAULT_MAX_WAITING
    if want.get("ack_policy") == "flow_control":  # the server turns flow control on with a 1 s heartbeat
        want.setdefault("flow_control", True)
        want.setdefault("idle_heartbeat", _FLOW_CONTROL_HEARTBEAT)
    if "priority_timeout" not in want:
        want["priority_timeout"] = _DEFAULT_PINNED_TTL if want.get("priority_policy") == "pinned_client" else 0
    return want


def _diff(
    want_config: Config, observed: Mapping[str, Any], defaults: Mapping[str, Any], skip: frozenset[str]
) -> dict[str, Difference]:
    want = effective(want_config, defaults)
    have = effective(observed, {key: defaults[key] for key in want if key in defaults})
    return {
        key: (want[key], have.get(key))
        for key in want
        if key not in skip and not _matches(want[key], have.get(key), exact=key in _EXACT)
    }


def _normal(key: str, value: Any) -> Any:
    if key in _MINUS_ONE_LIMITS and isinstance(value, int) and (value == 0 or value < -1):
        return -1
    if key in _TIME_FIELDS and isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    if key == "metadata" and isinstance(value, Mapping):
        return ownership.user_metadata(value)
    if key in _UNORDERED_LISTS and isinstance(value, list):
        return sorted(value)
    if isinstance(value, Mapping):
        return {k: _normal(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(key, item) for item in value]
    return value


_ZERO_VALUES: tuple[Any, ...] = (False, 0, "", [], {})


def _is_zero(value: Any, *, whole: bool = False) -> bool:
    """Go's zero value: an object counts as zero when all its fields are (``{"tags": []}``); a map compared
    as a ``whole`` (metadata) only when empty: its keys are data, so ``{"k": ""}`` holds one."""
    if isinstance(value, Mapping):
        return not value if whole else all(_is_zero(v) for v in value.values())
    return value in _ZERO_VALUES


def _matches(want: Any, have: Any, *, exact: bool = False) -> bool:
    """Does the server value ``have`` satisfy ``want``?

    ``None`` wants the key absent or empty. A key the server left out equals its zero value (Go's
    ``omitempty``). Nested objects match when every key we set matches (the server may add its own),
    unless ``exact``; lists match element-wise.
    """
    if want is None:
        return have is None or _is_zero(have, whole=exact)
    if have is None and _is_zero(want, whole=exact):
        return True
    if isinstance(want, Mapping) and not exact:
        return isinstance(have, Mapping) and all(_matches(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(_matches, want, have))
    return bool(want == have)
