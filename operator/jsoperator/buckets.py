"""KeyValue and ObjectStore buckets as the streams the client libraries create for them, and the names of
every stream-backed resource (Stream, KeyValue, ObjectStore) on the server.

A bucket IS a stream with a fixed mapping, so a bucket resource is reconciled as a Stream is (same plan,
drift, adoption, deletion); only the spec -> StreamConfig translation differs. That translation is
nats.go's (jetstream/kv.go prepareKeyValueConfig, jetstream/object.go prepareObjectStoreConfig, the
reference implementation of ADR-8 and ADR-20), so a bucket made here is byte-for-byte the one
`nats kv add` / `CreateKeyValue` makes, and nats-py's and nats.go's clients read and write it as theirs:

- KeyValue ``b``: stream ``KV_b`` on ``$KV.b.>``; history -> max_msgs_per_subject (default 1), ttl ->
  max_age, maxValueSize -> max_msg_size, maxBytes (unset -1); always allow_rollup_hdrs, deny_delete,
  allow_direct, discard new, max_msgs/max_consumers -1, duplicate_window = ttl when below 2m else 2m;
  limitMarkerTtl -> subject_delete_marker_ttl plus allow_msg_ttl; a mirror names the origin bucket
  (KV_ added) with mirror_direct and no subjects; a source without subjectTransforms names a bucket and
  gets the transform ``$KV.<origin>.>`` -> ``$KV.b.>`` (not for an external source of the same name).
- ObjectStore ``b``: stream ``OBJ_b`` on ``$O.b.C.>`` and ``$O.b.M.>``; ttl -> max_age, maxBytes (unset
  -1); always discard new, allow_rollup_hdrs, allow_direct; sealed as the clients' Seal (an update).
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic.alias_generators import to_camel

from jsoperator import mapping, models
from jsoperator.mapping import Config

STREAM_KINDS: tuple[Literal["Stream", "KeyValue", "ObjectStore"], ...] = ("Stream", "KeyValue", "ObjectStore")
BUCKET_KINDS = ("KeyValue", "ObjectStore")
PREFIX = {"KeyValue": "KV_", "ObjectStore": "OBJ_"}
_DUPLICATE_WINDOW = 120_000_000_000  # the clients' 2m

# Bucket spec fields named differently from their stream config key (for messages and the field reference).
WIRE = {
    "KeyValue": {
        "bucket": "name",
        "history": "max_msgs_per_subject",
        "ttl": "max_age",
        "max_value_size": "max_msg_size",
        "max_bytes": "max_bytes",
        "storage": "storage",
        "replicas": "num_replicas",
        "compression": "compression",
        "allow_msg_ttl": "allow_msg_ttl",
        "limit_marker_ttl": "subject_delete_marker_ttl",
        "mirror": "mirror",
        "sources": "sources",
        "republish": "republish",
        "placement": "placement",
        "description": "description",
        "metadata": "metadata",
    },
    "ObjectStore": {
        "bucket": "name",
        "ttl": "max_age",
        "max_bytes": "max_bytes",
        "storage": "storage",
        "replicas": "num_replicas",
        "compression": "compression",
        "sealed": "sealed",
        "placement": "placement",
        "description": "description",
        "metadata": "metadata",
    },
}


def is_stream_kind(kind: str) -> bool:
    """Is the resource's server object a stream (not a consumer)?"""
    return kind in STREAM_KINDS


def bucket_name(spec: Mapping[str, Any], name: str) -> str:
    """The bucket a KeyValue/ObjectStore names: spec.bucket, else metadata.name."""
    return str(spec.get("bucket") or name)


def stream_of(kind: str, spec: Mapping[str, Any], name: str) -> str:
    """The stream on the server behind a Stream, KeyValue or ObjectStore resource (from its raw spec)."""
    if kind in PREFIX:
        return PREFIX[kind] + bucket_name(spec, name)
    return str(spec.get("name") or name)


def subjects_of(kind: str, spec: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """The subjects the resource's stream stores (none for a mirror), for conflict detection."""
    if spec.get("mirror"):
        return ()
    bucket = bucket_name(spec, name)
    if kind == "KeyValue":
        return (f"$KV.{bucket}.>",)
    if kind == "ObjectStore":
        return (f"$O.{bucket}.C.>", f"$O.{bucket}.M.>")
    return tuple(spec.get("subjects") or [stream_of(kind, spec, name)])


def labels(kind: str) -> dict[str, str]:
    """Stream config key -> the spec field users write, for a bucket kind's messages ({} for a Stream)."""
    return {wire: to_camel(field) for field, wire in WIRE.get(kind, {}).items()}


# -- spec -> stream config ------------------------------------------------------------------------------


def key_value_config(spec: models.KeyValueSpec, default_bucket: str) -> Config:
    """The StreamConfig nats.go's CreateKeyValue sends for this bucket."""
    bucket = spec.bucket or default_bucket
    ttl = spec.ttl or 0
    ttls = spec.allow_msg_ttl or bool(spec.limit_marker_ttl)
    config: Config = {
        "name": f"KV_{bucket}",
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": spec.max_bytes or -1,
        "max_age": ttl,
        "max_msgs_per_subject": spec.history or 1,
        "max_msg_size": spec.max_value_size or -1,
        "discard": "new",
        "storage": spec.storage or "file",
        "num_replicas": spec.replicas or 1,
        "duplicate_window": ttl if 0 < ttl < _DUPLICATE_WINDOW else _DUPLICATE_WINDOW,
        "compression": "s2" if spec.compression else "none",
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "allow_direct": True,
        **_optional(spec, ("description", "placement", "republish", "metadata")),
    }
    if ttls:
        config["allow_msg_ttl"] = True
    if spec.limit_marker_ttl:
        config["subject_delete_marker_ttl"] = spec.limit_marker_ttl
    if spec.mirror is not None:
        mirror = mapping.wire(spec.mirror)
        mirror["name"] = _kv_stream(mirror["name"])
        config["mirror"], config["mirror_direct"] = mirror, True
        return config
    if spec.sources:
        config["sources"] = [_kv_source(mapping.wire(source), bucket) for source in spec.sources]
    config["subjects"] = [f"$KV.{bucket}.>"]
    return config


def object_store_config(spec: models.ObjectStoreSpec, default_bucket: str) -> Config:
    """The StreamConfig nats.go's CreateObjectStore sends for this bucket."""
    bucket = spec.bucket or default_bucket
    return {
        "name": f"OBJ_{bucket}",
        "subjects": [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        "max_age": spec.ttl or 0,
        "max_bytes": spec.max_bytes or -1,
        "storage": spec.storage or "file",
        "num_replicas": spec.replicas or 1,
        "discard": "new",
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "compression": "s2" if spec.compression else "none",
        **_optional(spec, ("description", "placement", "metadata", "sealed")),
    }


def _optional(spec: Any, fields: tuple[str, ...]) -> Config:
    return {field: mapping.wire_value(getattr(spec, field)) for field in fields if getattr(spec, field) is not None}


def _kv_stream(name: str) -> str:
    return name if name.startswith("KV_") else f"KV_{name}"


def _kv_source(source: Config, bucket: str) -> Config:
    if source.get("subject_transforms"):
        return source  # full control: any stream, named as is
    origin = source["name"].removeprefix("KV_")
    source["name"] = f"KV_{origin}"
    if source.get("external") is None or origin != bucket:
        source["subject_transforms"] = [{"src": f"$KV.{origin}.>", "dest": f"$KV.{bucket}.>"}]
    return source


AnySpec = models.StreamSpec | models.KeyValueSpec | models.ObjectStoreSpec


def desired(kind: str, raw: Mapping[str, Any] | None, name: str) -> tuple[AnySpec, Config]:
    """A stream-backed resource's validated spec and the StreamConfig it stands for (SpecError when invalid)."""
    _check_bucket_name(kind, raw or {}, name)
    if kind == "KeyValue":
        kv = models.parse_spec(models.KeyValueSpec, raw)
        return kv, key_value_config(kv, name)
    if kind == "ObjectStore":
        obj = models.parse_spec(models.ObjectStoreSpec, raw)
        return obj, object_store_config(obj, name)
    stream = models.parse_spec(models.StreamSpec, raw)
    return stream, mapping.stream_config(stream, name)


def _check_bucket_name(kind: str, raw: Mapping[str, Any], name: str) -> None:
    """metadata.name stands in for an unset spec.bucket only when it is a valid bucket name (the CRD says
    so too; this catches resources that bypassed it)."""
    if kind in PREFIX and not raw.get("bucket") and not re.match(models.BUCKET_PATTERN, name):
        raise models.SpecError(
            f"metadata.name {name!r} is not a valid bucket name (letters, digits, _ and - only): "
            "set spec.bucket to one"
        )
