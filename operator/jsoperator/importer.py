"""Server configs -> Stream, KeyValue, ObjectStore and Consumer manifests that adopt them (`jsoperator import`):
mapping and buckets in reverse.

Owns:
- ``spec_fields``: a StreamConfig / ConsumerConfig as the server reports it -> the spec fields that say the
  same (camelCase, durations as ``30s``, enums as the CRDs spell them), for every field the model knows;
  a server field the model cannot express makes the object unimportable rather than silently dropped;
- minimal specs: a field is left out when the spec without it still shows no drift against the server
  (mapping's own comparison, so "adopted with no change" holds by construction). The consumer limits the
  drift check ignores when unset (they come from the stream's consumer_limits) are left out only at the
  value the server picks itself;
- buckets: a ``KV_*`` / ``OBJ_*`` stream (``BUCKET_PREFIXES``) becomes a KeyValue / ObjectStore when a
  bucket spec reproduces it with no drift (buckets.py's mapping, checked the same way); else it becomes a
  Stream, which adopts anything a StreamSpec can say, with a note naming what no bucket spec can hold (a
  bucket made by nats-py has allow_direct off, which a bucket resource would turn on: a Stream changes nothing);
- resource names: DNS-1123 labels made from server names (a bucket's from its bucket name); spec.name /
  bucket / durableName keep the real name;
- what is not imported, as one note each: ephemeral consumers, and objects the spec cannot express.
Every manifest adopts (``adoptionPolicy: adopt``: never creates) and keeps the server object when the
resource is deleted (``deletionPolicy: retain`` unless asked otherwise).
Pure: configs in, manifests and notes out; the command (cli.py) reads the server and writes the files.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from pydantic.alias_generators import to_camel

from jsoperator import buckets, mapping, ownership, units
from jsoperator.models import ConnectionSpec, ConsumerSpec, DeletionPolicy, KeyValueSpec, ObjectStoreSpec, StreamSpec

API_VERSION = "jsoperator.io/v1alpha1"
KINDS = (*buckets.STREAM_KINDS, "Consumer")  # what an import writes, in the order it is summed up
# Stream name prefixes of the buckets nats.go and nats-py create -> the resource that owns them.
BUCKET_PREFIXES = {prefix: kind for kind, prefix in buckets.PREFIX.items()}

Info = Mapping[str, Any]
"""A StreamInfo or ConsumerInfo as the JetStream API returns it (``config`` is the part imported)."""


class Unrepresentable(ValueError):
    """The server object has something a spec cannot say; importing it would lose or change it."""


@dataclasses.dataclass(frozen=True)
class Options:
    """What the user chose for every manifest."""

    namespace: str | None = None
    connection: ConnectionSpec | None = None  # spec.connection; None: the operator's own settings
    deletion_policy: DeletionPolicy = "retain"


@dataclasses.dataclass
class Imported:
    manifests: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)  # one line each: what was skipped and why
    failed: int = 0  # objects that could not be imported (ephemeral consumers are skipped by design)


def import_server(
    streams: Mapping[str, Info], consumers: Mapping[str, Mapping[str, Info]], options: Options, now: datetime
) -> Imported:
    """Manifests for every stream (by name, as STREAM.LIST) and its durable consumers (stream -> name -> info).

    ``now`` decides whether a consumer's pause_until has passed (a passed one is not imported)."""
    out = Imported()
    kinds = {stream: kind_of(stream) for stream in streams}
    as_buckets, not_buckets = _buckets(streams, kinds, options)
    stream_names = resource_names({s: s for s in streams if s not in as_buckets}, "stream")
    durables = _durables(streams, consumers, out)
    consumer_names = resource_names({(s, c): f"{s}-{c}" for s, cs in durables.items() for c in cs}, "consumer")
    for stream in sorted(streams):
        config = streams[stream]["config"]
        _note_owner(out, f"stream {stream}", config)
        if stream in as_buckets:
            out.manifests.append(as_buckets[stream])
        elif _add(out, f"stream {stream}", stream_manifest, config, stream_names[stream], options) and (
                stream in not_buckets):
            out.notes.append(f"bucket {_bucket(stream)} imported as the Stream {stream_names[stream]}, which adopts "
                             f"it with no change: as a {kinds[stream]}, {not_buckets[stream]}")
        for consumer in durables.get(stream, []):
            _note_owner(out, f"consumer {consumer} of stream {stream}", consumers[stream][consumer]["config"])
            _add(out, f"consumer {consumer} of stream {stream}", consumer_manifest,
                 consumers[stream][consumer]["config"], stream, config, consumer_names[stream, consumer], options, now)
    return out


def _buckets(
    streams: Mapping[str, Info], kinds: Mapping[str, str], options: Options
) -> tuple[dict[str, dict[str, Any]], dict[str, Unrepresentable]]:
    """Bucket stream -> its KeyValue / ObjectStore manifest, or why no bucket spec says what it has.

    Resource names come from the bucket names, apart for each kind (a KeyValue and an ObjectStore may
    share one)."""
    names: dict[str, str] = {}
    for kind in buckets.BUCKET_KINDS:
        names |= resource_names({s: _bucket(s) for s in streams if kinds[s] == kind}, "bucket")
    manifests, refused = {}, {}
    for stream, name in names.items():
        try:
            manifests[stream] = BUILDERS[kinds[stream]](streams[stream]["config"], name, options)
        except Unrepresentable as exc:
            refused[stream] = exc
    return manifests, refused


def _durables(
    streams: Mapping[str, Info], consumers: Mapping[str, Mapping[str, Info]], out: Imported
) -> dict[str, list[str]]:
    """Stream -> its durable consumers' names; each ephemeral one gets a note in ``out``."""
    durables: dict[str, list[str]] = {}
    for stream in sorted(streams):
        for consumer, info in sorted(consumers.get(stream, {}).items()):
            if info.get("config", {}).get("durable_name"):
                durables.setdefault(stream, []).append(consumer)
            else:
                out.notes.append(f"consumer {consumer} of stream {stream} skipped: it is ephemeral (no durable name), "
                                 "the server removes it once idle")
    return durables


def _note_owner(out: Imported, what: str, config: Mapping[str, Any]) -> None:
    """A server object another resource's ownership marks name: applying the import takes it over."""
    owner = ownership.read(config)
    if owner is not None:
        out.notes.append(f"{what} belongs to {owner.describe()}: the imported resource (adoptionPolicy: adopt) "
                         "takes it over once applied and that one stops changing it; delete that resource with "
                         "deletionPolicy: retain first to hand it over cleanly")


def _add(out: Imported, what: str, build: Callable[..., dict[str, Any]], *args: Any) -> bool:
    try:
        out.manifests.append(build(*args))
        return True
    except Unrepresentable as exc:
        out.notes.append(f"{what} not imported: {exc}")
        out.failed += 1
        return False


def kind_of(stream: str) -> str:
    """The resource kind a server stream belongs to: a bucket's (``KV_orders``) or Stream."""
    return next((kind for prefix, kind in BUCKET_PREFIXES.items() if stream.startswith(prefix)), "Stream")


def _bucket(stream: str) -> str:
    """The bucket name in a bucket's stream name (``KV_orders`` -> ``orders``)."""
    return stream.removeprefix(buckets.PREFIX.get(kind_of(stream), ""))


def render(manifests: list[dict[str, Any]]) -> str:
    """YAML documents separated by ``---``."""
    return yaml.safe_dump_all(manifests, sort_keys=False, width=120, allow_unicode=True)


# -- one object -------------------------------------------------------------------------------------


def stream_manifest(config: Mapping[str, Any], name: str, options: Options) -> dict[str, Any]:
    """The Stream that adopts the server stream with this config under resource name ``name``."""
    full = spec_fields(StreamSpec, config)

    def no_drift(spec: dict[str, Any]) -> list[str]:
        return mapping.stream_drift(mapping.stream_config(_valid(StreamSpec, spec), name), config)

    spec = _minimal(full, no_drift, keep={"name"} if config["name"] != name else set())
    return _manifest("Stream", name, spec, options)


def consumer_manifest(
    config: Mapping[str, Any], stream: str, stream_config: Mapping[str, Any], name: str, options: Options,
    now: datetime,
) -> dict[str, Any]:
    """The Consumer that adopts the durable with this config (of ``stream``, whose config is given)."""
    full = {"streamName": stream, **spec_fields(ConsumerSpec, config)}

    def no_drift(spec: dict[str, Any]) -> list[str]:
        desired = mapping.consumer_config(_valid(ConsumerSpec, spec), name)
        return mapping.consumer_drift(desired, config, now=now)

    limits = stream_config.get("consumer_limits") or {}
    picked = {  # what the server picks for these when the consumer leaves them unset
        "maxAckPending": limits.get("max_ack_pending") or (0 if config.get("ack_policy") in (None, "none") else 1000),
        "inactiveThreshold": units.format_duration(limits.get("inactive_threshold") or 0),
    }
    kept = {key for key, value in picked.items() if key in full and full[key] != value}
    keep = {"streamName", "durableName"} - ({"durableName"} if config["durable_name"] == name else set())
    spec = _minimal(full, no_drift, keep=keep | kept)
    return _manifest("Consumer", name, spec, options)


def key_value_manifest(config: Mapping[str, Any], name: str, options: Options) -> dict[str, Any]:
    """The KeyValue that adopts the bucket stream (``KV_<bucket>``) with this config; Unrepresentable when
    no KeyValue spec says exactly what the server has."""
    return _bucket_manifest("KeyValue", KeyValueSpec, buckets.key_value_config, config, name, options)


def object_store_manifest(config: Mapping[str, Any], name: str, options: Options) -> dict[str, Any]:
    """The ObjectStore that adopts the bucket stream (``OBJ_<bucket>``) with this config (or Unrepresentable)."""
    return _bucket_manifest("ObjectStore", ObjectStoreSpec, buckets.object_store_config, config, name, options)


# Resource kind -> its manifest from a stream's config, resource name and options.
BUILDERS: dict[str, Callable[[Mapping[str, Any], str, Options], dict[str, Any]]] = {
    "Stream": stream_manifest, "KeyValue": key_value_manifest, "ObjectStore": object_store_manifest}


def _bucket_manifest(
    kind: str, model: type[KeyValueSpec] | type[ObjectStoreSpec], to_config: Callable[[Any, str], mapping.Config],
    config: Mapping[str, Any], name: str, options: Options,
) -> dict[str, Any]:
    full = bucket_fields(kind, config)

    def diff(spec: dict[str, Any]) -> dict[str, mapping.Difference]:
        return mapping.stream_diff(to_config(_valid(model, spec), name), config)

    left = diff(full)
    if left:
        labels = buckets.labels(kind)
        raise Unrepresentable("it would change " + ", ".join(
            f"{labels.get(key) or mapping.spec_name(key)} (server: {mapping.show(key, have)}, "
            f"{kind}: {mapping.show(key, want)})" for key, (want, have) in left.items()))
    spec = _minimal(full, lambda spec: list(diff(spec)), keep={"bucket"} if full["bucket"] != name else set())
    return _manifest(kind, name, spec, options)


def _manifest(kind: str, name: str, spec: dict[str, Any], options: Options) -> dict[str, Any]:
    policies: dict[str, Any] = {"adoptionPolicy": "adopt", "deletionPolicy": options.deletion_policy}
    if options.connection is not None:
        policies["connection"] = options.connection.model_dump(by_alias=True, exclude_none=True)
    metadata = {"name": name, **({"namespace": options.namespace} if options.namespace else {})}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": {**spec, **policies}}


def _valid(model: type[BaseModel], spec: dict[str, Any]) -> Any:
    try:
        return model.model_validate(spec)
    except ValidationError as exc:
        raise Unrepresentable("; ".join(f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))


def _minimal(full: dict[str, Any], drift: Callable[[dict[str, Any]], list[str]], keep: set[str]) -> dict[str, Any]:
    """``full`` without every field whose absence still shows no drift (``keep`` always stays)."""
    left = drift(full)
    if left:
        raise Unrepresentable(f"its spec would still differ from the server in {', '.join(left)} (please report this)")
    spec = dict(full)
    for key in full:
        if key in keep:
            continue
        trial = {k: v for k, v in spec.items() if k != key}
        try:
            if not drift(trial):
                spec = trial
        except Unrepresentable:  # the model needs it with another field (optStartSeq and deliverPolicy)
            continue
    return spec


# -- wire -> spec -----------------------------------------------------------------------------------

_ENUM_SPELLING = {wire: spec for spec, wire in mapping.ENUM_VALUES.items()}
# Keys the server reports that are no spec field but say nothing new (the consumer's name is its durable name).
_IDENTITY_KEYS = frozenset({"name"})
_GO_ZERO: tuple[Any, ...] = (None, False, 0, "", [], {})


def spec_fields(model: type[BaseModel], config: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``model`` (camelCase, as users write them) that ``config`` sets to a non-zero value.

    Zero values are left out: the server treats them as unset (Go's ``omitempty``). Server-managed
    metadata (``_nats.*``) and ownership marks (``jsoperator.io/*``: the imported resource writes its own) are
    not part of a spec. Raises Unrepresentable for a non-zero server field the
    model has no field for (leaving it out would reset it at the operator's next update)."""
    spec: dict[str, Any] = {}
    known = set(_IDENTITY_KEYS) - set(model.model_fields)
    for field, info in model.model_fields.items():
        if field in mapping.OPERATOR_FIELDS:
            continue
        key = mapping.wire_name(field)
        known.add(key)
        value = config.get(key)
        if key == "metadata":  # an empty value is still a key: only an empty map is unset
            value = ownership.user_metadata(value) or None
        if value is None or (key != "metadata" and _is_zero(value)):
            continue
        nested = mapping.nested_models(info.annotation)
        if nested:
            value = [spec_fields(nested[0], v) for v in value] if isinstance(value, list) else spec_fields(
                nested[0], value)
        elif field in mapping.ENUM_FIELDS:
            value = _ENUM_SPELLING.get(value, value)
        elif key in mapping.DURATION_KEYS:
            value = [_duration(v) for v in value] if isinstance(value, list) else _duration(value)
        spec[info.alias or field] = value
    unknown = sorted(key for key, value in config.items() if key not in known and not _is_zero(value))
    if unknown:
        shown = ", ".join(f"{key}={mapping.show(key, config[key])}" for key in unknown)
        raise Unrepresentable(f"the server sets {shown}, which this jsoperator version has no spec field for")
    return spec


def bucket_fields(kind: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The KeyValue / ObjectStore spec fields saying what the bucket stream ``config`` has, where a bucket
    field can: buckets.py's mapping in reverse (whether they say all of it is the drift check's to tell)."""
    stream = spec_fields(StreamSpec, config)  # a server field no StreamSpec can hold: no bucket spec can either
    fields = {"bucket": config["name"].removeprefix(buckets.PREFIX[kind])}
    fields |= {to_camel(field): stream[mapping.spec_name(wire)] for field, wire in buckets.WIRE[kind].items()
               if field != "bucket" and mapping.spec_name(wire) in stream}
    if fields.pop("compression", None) == "s2":
        fields["compression"] = True
    if "mirror" in fields:
        fields["mirror"] = {**fields["mirror"], "name": _bucket_of(fields["mirror"]["name"])}
    if "sources" in fields:
        fields["sources"] = [_kv_source(source, fields["bucket"]) for source in fields["sources"]]
    return fields


def _bucket_of(stream: str) -> str:
    """How a KeyValue's mirror or source names the stream ``KV_<origin>``: by the bucket, unless that
    would be read as a stream name itself (a bucket named ``KV_x``); other streams as they are."""
    origin = stream.removeprefix("KV_")
    return origin if stream.startswith("KV_") and not origin.startswith("KV_") else stream


def _kv_source(source: dict[str, Any], bucket: str) -> dict[str, Any]:
    """A source as a KeyValue spec names it: by the bucket, the transform nats.go adds for it left implied
    (whether the spec's source is the server's is the drift check's to tell)."""
    implied = [{"src": f"$KV.{source['name'].removeprefix('KV_')}.>", "dest": f"$KV.{bucket}.>"}]
    if not source["name"].startswith("KV_") or source.get("subjectTransforms") not in (None, implied):
        return source
    return {**{k: v for k, v in source.items() if k != "subjectTransforms"}, "name": _bucket_of(source["name"])}


def _is_zero(value: Any) -> bool:
    if isinstance(value, Mapping):
        return all(_is_zero(v) for v in value.values())
    return any(value is zero or (type(value) is type(zero) and value == zero) for zero in _GO_ZERO)


def _duration(ns: int) -> str:
    """Nanoseconds as a spec duration; a value no spec duration can hold (negative) is refused."""
    text = units.format_duration(ns)
    try:
        if units.parse_duration(text) == ns:
            return text
    except ValueError:
        pass
    raise Unrepresentable(f"the duration {ns}ns cannot be written as a spec duration (such as 1h30m)")


# -- names ------------------------------------------------------------------------------------------

MAX_NAME = 63  # a DNS-1123 label: what every Kubernetes name accepts
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NOT_LABEL = re.compile(r"[^a-z0-9]+")
_HASH = 6


def resource_names(sources: Mapping[Any, str], fallback: str) -> dict[Any, str]:
    """key -> a distinct resource name made from its text (a server name, or stream-consumer).

    A text that is already a DNS-1123 label is used as it is; others are lower-cased with runs of other
    characters turned into ``-``. A name that is too long, empty after that (``fallback`` then), or that
    two texts share gets a short hash of its text: only the text that is that name exactly keeps it bare,
    else none does."""
    wanted = {key: _label(text) for key, text in sources.items()}
    uses = collections.Counter(wanted.values())
    names = {}
    for key, text in sources.items():
        name = wanted[key]
        shared = uses[name] > 1
        if not name:
            name = _hashed(fallback, text)
        elif len(name) > MAX_NAME or (shared and name != text):
            name = _hashed(name, text)
        names[key] = name
    return names


def _label(text: str) -> str:
    if _LABEL.match(text):
        return text
    return _NOT_LABEL.sub("-", text.lower()).strip("-")


def _hashed(name: str, text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:_HASH]
    return f"{name[: MAX_NAME - _HASH - 1].rstrip('-')}-{digest}"
