"""Spec <-> JetStream API configuration: the translation tables and the drift comparison.

Owns:
- ``stream_config`` / ``consumer_config``: validated spec -> the StreamConfig / ConsumerConfig JSON the
  JetStream API takes (snake_case, nanoseconds, bytes). Only fields the user set are sent; the server
  applies its own defaults to the rest, so the CRDs need no ``default:``.
- ``stream_drift`` / ``consumer_drift``: which spec fields the server's config no longer matches.
  Both sides are compared in effective values: server-side normal forms (0 vs -1 limits, ``_nats.*``
  metadata, omitted-when-default keys, times in any zone, subject order) never count as drift, and a
  field the user left unset is compared against the server's fixed default, so a change made behind our
  back is noticed even there. Defaults that depend on other fields (ack_wait, max_ack_pending, ...)
  are not compared when unset.
Pure: no I/O; knows nothing about Kubernetes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

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
OPERATOR_FIELDS = frozenset({"prevent_delete", "connection", "stream_name"})
# Enum values spelled camelCase in the CRD (Kubernetes style) and snake_case on the wire.
ENUM_VALUES = {
    "byStartSequence": "by_start_sequence",
    "byStartTime": "by_start_time",
    "lastPerSubject": "last_per_subject",
    "pinnedClient": "pinned_client",
}
ENUM_FIELDS = frozenset({"deliver_policy", "priority_policy"})

# Fixed server defaults (nats-server 2.15.1, observed): an unset spec field means this value.
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
}
# Limits where the server stores 0 (and anything below -1) as -1.
_MINUS_ONE_LIMITS = frozenset(
    {"max_consumers", "max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size", "max_deliver"}
)
_UNORDERED_LISTS = frozenset({"subjects", "filter_subjects", "tags"})
_TIME_FIELDS = frozenset({"opt_start_time", "pause_until"})
# A sealed stream has these forced by the server (stream.go configUpdateCheckLocked).
_FORCED_BY_SEAL = frozenset({"max_age", "discard", "deny_delete", "deny_purge", "allow_rollup_hdrs"})
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


def _wire_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _to_wire(value)
    if isinstance(value, list):
        return [_wire_value(item) for item in value]
    if isinstance(value, datetime):
        return format_time(value)
    return value


# -- drift ------------------------------------------------------------------------------------------


def stream_drift(desired: Mapping[str, Any], observed: Mapping[str, Any]) -> list[str]:
    """Spec field names (camelCase) whose server value differs from ``desired`` (a ``stream_config``)."""
    skip = (_FORCED_BY_SEAL if observed.get("sealed") else frozenset()) | (
        _DERIVED_FOR_MIRRORS if observed.get("mirror") else frozenset()
    )
    return _drift(desired, observed, STREAM_DEFAULTS, skip, _stream_expectations)


def consumer_drift(desired: Mapping[str, Any], observed: Mapping[str, Any]) -> list[str]:
    """Spec field names (camelCase) whose server value differs from ``desired`` (a ``consumer_config``)."""
    return _drift(desired, observed, CONSUMER_DEFAULTS, frozenset(), _consumer_expectations)


def effective(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> Config:
    """``config`` with unset keys filled from the fixed server ``defaults``, in normal form."""
    merged = {**config, **{key: value for key, value in defaults.items() if key not in config}}
    return {key: _normal(key, value) for key, value in merged.items()}


def _stream_expectations(desired: Config) -> Config:
    return desired


def _consumer_expectations(desired: Config) -> Config:
    # With backoff the server waits backoff[0] for the first ack, whatever ack_wait says.
    if desired.get("backoff") and "ack_wait" in desired:
        return {**desired, "ack_wait": desired["backoff"][0]}
    return desired


def _drift(
    desired: Mapping[str, Any],
    observed: Mapping[str, Any],
    defaults: Mapping[str, Any],
    skip: frozenset[str],
    expectations: Callable[[Config], Config],
) -> list[str]:
    want = effective(expectations(dict(desired)), defaults)
    have = effective(observed, {key: defaults[key] for key in want if key in defaults})
    return [spec_name(key) for key in want if key not in skip and not _matches(want[key], have.get(key))]


def _normal(key: str, value: Any) -> Any:
    if key in _MINUS_ONE_LIMITS and isinstance(value, int) and (value == 0 or value < -1):
        return -1
    if key in _TIME_FIELDS and isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    if key == "metadata" and isinstance(value, Mapping):
        return {k: v for k, v in value.items() if not k.startswith("_nats.")}
    if key in _UNORDERED_LISTS and isinstance(value, list):
        return sorted(value)
    if isinstance(value, Mapping):
        return {k: _normal(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(key, item) for item in value]
    return value


def _matches(want: Any, have: Any) -> bool:
    """Subset comparison: nested objects match when every key we set matches; lists element-wise.

    A key the server left out equals its zero value (Go's ``omitempty``).
    """
    if have is None and want in (False, 0, "", [], {}):
        return True
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(_matches(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(_matches, want, have))
    return bool(want == have)
