"""Stream configuration: the JSON shape, defaults, validation and the update rules of nats-server.

`parse(raw)` reads a StreamConfig request body (unknown fields ignored, wrong types 10025), fills the
defaults and checks it as nats-server's `checkStreamCfg` does, in the same order so the same bad config
gets the same error. `check_update(old, new)` adds the rules of a STREAM.UPDATE. `StreamConfig.to_json()`
is the config as responses and the persisted metadata carry it (omit-empty fields left out as Go does).

Every field nats-server knows has its effect (tests/jetstream/test_config_fields.py walks them all).
A source's `external` prefixes are checked and kept: nats-server's link through them never copies on
one server, and jsbroker's stays inactive the same way (jetstream/sourcing.py).
`mirror` and `sources` are `SourceConfig`s (jetstream/sourcing.py copies them); the checks that need
other streams (cycles, message sizes, mirror_direct) are sourcing.check_origins'.
`placement` and `compression` are stored and echoed: on a single server they change nothing a client sees.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

from jsbroker import subjects
from jsbroker.config import VERSION
from jsbroker.jetstream import errors, subject_transform, times
from jsbroker.jetstream.requests import (
    API_LEVEL,
    get_bool,
    get_int,
    get_object,
    get_str,
    get_str_list,
    get_str_map,
    get_time,
)
from jsbroker.store.base import StoreLimits

MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
MAX_REPLICAS = 5
DEFAULT_DUPLICATE_WINDOW = 120_000_000_000  # 2 min in ns
MIN_WINDOW = 100_000_000  # 100 ms: the smallest max_age / duplicate_window
_BAD_NAME_CHARS = frozenset(" \t\r\n\f.*>\\/")
JS_API_PREFIX = "$JS.API"  # what an external api prefix must not overlap
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# Metadata keys the server owns: `_nats.req.level` is stored, the other two are added to responses only.
REQ_LEVEL_KEY, LEVEL_KEY, VERSION_KEY = "_nats.req.level", "_nats.level", "_nats.ver"

RETENTIONS = ("limits", "interest", "workqueue")
DISCARDS = ("old", "new")
STORAGES = ("file", "memory")
COMPRESSIONS = ("none", "s2")


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """A `mirror` or one of the `sources` (nats-server's StreamSource)."""

    name: str
    opt_start_seq: int = 0
    opt_start_time: int | None = None  # ns
    filter_subject: str = ""
    subject_transforms: tuple[tuple[str, str], ...] = ()  # (src, dest)
    consumer: tuple[str, str] | None = None  # durable sourcing: the origin's consumer (name, deliver_subject)
    external: tuple[str, str] | None = None  # another JetStream's (api prefix, deliver prefix)

    @property
    def index_name(self) -> str:
        """nats-server's index name, "<stream>[:<api prefix hash>][:C=<consumer hash>] <filters> <transform
        destinations>" ('>' when empty, several joined by a form feed): what tells two sources apart and
        what a Nats-Stream-Source header names."""
        name = self.name
        if self.external is not None:
            name += f":{short_hash(self.external[0])}"
        if self.consumer is not None:
            name += f":C={short_hash(self.consumer[0])}"
        if not self.subject_transforms:
            return f"{name} {self.filter_subject or '>'} >"
        srcs = "\f".join(src or ">" for src, _ in self.subject_transforms)
        return f"{name} {srcs} " + "\f".join(dest or ">" for _, dest in self.subject_transforms)

    @property
    def filters(self) -> list[str] | None:
        """The origin subjects read (None: all)."""
        if self.subject_transforms:
            srcs = [src for src, _ in self.subject_transforms]
            return None if "" in srcs or ">" in srcs else srcs
        return [self.filter_subject] if self.filter_subject else None

    def transforms(self) -> list[subject_transform.Transform]:
        """The subject transforms, in order (the first whose src matches maps a subject)."""
        parsed = (subject_transform.parse(src, dest) for src, dest in self.subject_transforms)
        return [t for t in parsed if t is not None]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.opt_start_seq:
            out["opt_start_seq"] = self.opt_start_seq
        if self.opt_start_time is not None:
            out["opt_start_time"] = times.rfc3339(self.opt_start_time)
        if self.filter_subject:
            out["filter_subject"] = self.filter_subject
        if self.subject_transforms:
            out["subject_transforms"] = [{"src": src, "dest": dest} for src, dest in self.subject_transforms]
        if self.external is not None:
            out["external"] = {"api": self.external[0], "deliver": self.external[1]}
        if self.consumer is not None:
            name, deliver_subject = self.consumer
            out["consumer"] = {k: v for k, v in (("name", name), ("deliver_subject", deliver_subject)) if v}
        return out


@dataclass(frozen=True, slots=True)
class StreamConfig:
    name: str
    subjects: tuple[str, ...] = ()
    description: str = ""
    retention: str = "limits"
    max_consumers: int = -1
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: int = 0  # ns
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: str = "old"
    storage: str = "file"
    num_replicas: int = 1
    no_ack: bool = False
    duplicate_window: int = DEFAULT_DUPLICATE_WINDOW  # ns
    compression: str = "none"  # stored and echoed: the messages read back are the same either way
    first_seq: int = 0
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: int = 0  # ns
    allow_msg_counter: bool = False  # jetstream/counters.py
    allow_atomic: bool = False  # jetstream/atomic_batch.py
    allow_msg_schedules: bool = False  # jetstream/schedule.py
    persist_mode: str = "default"  # "async": file streams whose writes are not fsynced one by one (service.py)
    allow_batched: bool = False  # jetstream/fast_batch.py
    republish: dict[str, Any] | None = None  # {src, dest[, headers_only]}
    subject_transform: dict[str, Any] | None = None  # {src, dest}
    mirror: SourceConfig | None = None
    sources: tuple[SourceConfig, ...] = ()
    # Stored and echoed as given (validated shape): one server has no replicas to place.
    placement: dict[str, Any] | None = None
    consumer_limits: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)

    def to_json(self, dynamic_metadata: bool = True) -> dict[str, Any]:
        """The config as nats-server sends it; `dynamic_metadata` adds the server version keys."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        if self.subjects:
            out["subjects"] = list(self.subjects)
        out.update(retention=self.retention, max_consumers=self.max_consumers, max_msgs=self.max_msgs,
                   max_bytes=self.max_bytes, max_age=self.max_age,
                   max_msgs_per_subject=self.max_msgs_per_subject, max_msg_size=self.max_msg_size,
                   discard=self.discard, storage=self.storage, num_replicas=self.num_replicas)
        if self.mirror is not None:
            out["mirror"] = self.mirror.to_json()
        if self.sources:
            out["sources"] = [source.to_json() for source in self.sources]
        if self.no_ack:
            out["no_ack"] = True
        if self.duplicate_window:
            out["duplicate_window"] = self.duplicate_window
        if self.placement is not None:
            out["placement"] = self.placement
        out["compression"] = self.compression
        if self.first_seq:
            out["first_seq"] = self.first_seq
        if self.subject_transform:
            out["subject_transform"] = self.subject_transform
        if self.republish:
            out["republish"] = self.republish
        out.update(allow_direct=self.allow_direct, mirror_direct=self.mirror_direct)
        if self.discard_new_per_subject:
            out["discard_new_per_subject"] = True
        out.update(sealed=self.sealed, deny_delete=self.deny_delete, deny_purge=self.deny_purge,
                   allow_rollup_hdrs=self.allow_rollup_hdrs, consumer_limits=self.consumer_limits,
                   allow_msg_ttl=self.allow_msg_ttl)
        if self.subject_delete_marker_ttl:
            out["subject_delete_marker_ttl"] = self.subject_delete_marker_ttl
        if self.allow_msg_counter:
            out["allow_msg_counter"] = True
        if self.allow_atomic:
            out["allow_atomic"] = True
        if self.allow_msg_schedules:
            out["allow_msg_schedules"] = True
        if self.persist_mode != "default":
            out["persist_mode"] = self.persist_mode
        if self.allow_batched:
            out["allow_batched"] = True
        metadata = dict(self.metadata)
        if dynamic_metadata:
            metadata.update({LEVEL_KEY: str(API_LEVEL), VERSION_KEY: VERSION})
        if metadata:
            out["metadata"] = dict(sorted(metadata.items()))  # Go marshals a map's keys sorted
        return out

    def store_limits(self) -> StoreLimits:
        """What the store trims to by itself. Under discard new the stream refuses publishes past
        `max_msgs` / `max_bytes` instead, and nothing trims to them: nats-server's stores enforce those two
        only under discard old, so an UPDATE lowering them below what is stored (or a restart) keeps it all."""
        discard_old = self.discard == "old"
        return StoreLimits(max_msgs=self.max_msgs if discard_old else -1,
                           max_bytes=self.max_bytes if discard_old else -1, max_age_ns=self.max_age,
                           max_msgs_per_subject=self.max_msgs_per_subject)

    def same_as_request(self, other: StreamConfig) -> bool:
        """Whether a re-create asks for exactly this config (server metadata keys aside)."""
        return dataclasses.replace(self, metadata=_user_metadata(self.metadata)) == dataclasses.replace(
            other, metadata=_user_metadata(other.metadata))


def short_hash(text: str) -> str:
    """nats-server's getHash: 8 base-62 characters of the SHA-256 of `text` (stream identities, the
    consumer part of a durable source's index name)."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_BASE62[b % 62] for b in digest[:8])


def is_valid_name(name: str) -> bool:
    """Stream and consumer names: non-empty, no `. * > / \\` and no whitespace."""
    return bool(name) and not any(c in _BAD_NAME_CHARS for c in name)


def parse(raw: dict[str, Any]) -> StreamConfig:
    """Decode, default and validate a StreamConfig request body (nats-server's checkStreamCfg order).
    With `"pedantic": true` the values nats-server would silently adjust are refused instead (10157)."""
    return _validate(_decode(raw), get_bool(raw, "pedantic"))


def _decode(raw: dict[str, Any]) -> StreamConfig:
    return StreamConfig(
        name=get_str(raw, "name"),
        subjects=tuple(get_str_list(raw, "subjects")),
        description=get_str(raw, "description"),
        retention=_enum(raw, "retention", RETENTIONS),
        max_consumers=get_int(raw, "max_consumers"),
        max_msgs=get_int(raw, "max_msgs"),
        max_bytes=get_int(raw, "max_bytes"),
        max_age=get_int(raw, "max_age"),
        max_msgs_per_subject=get_int(raw, "max_msgs_per_subject"),
        max_msg_size=get_int(raw, "max_msg_size", kind="int32"),
        discard=_enum(raw, "discard", DISCARDS),
        storage=_enum(raw, "storage", STORAGES),
        num_replicas=get_int(raw, "num_replicas"),
        no_ack=get_bool(raw, "no_ack"),
        duplicate_window=get_int(raw, "duplicate_window"),
        compression=_enum(raw, "compression", COMPRESSIONS),
        first_seq=get_int(raw, "first_seq", kind="uint64"),
        allow_direct=get_bool(raw, "allow_direct"),
        mirror_direct=get_bool(raw, "mirror_direct"),
        discard_new_per_subject=get_bool(raw, "discard_new_per_subject"),
        sealed=get_bool(raw, "sealed"),
        deny_delete=get_bool(raw, "deny_delete"),
        deny_purge=get_bool(raw, "deny_purge"),
        allow_rollup_hdrs=get_bool(raw, "allow_rollup_hdrs"),
        allow_msg_ttl=get_bool(raw, "allow_msg_ttl"),
        subject_delete_marker_ttl=get_int(raw, "subject_delete_marker_ttl"),
        allow_msg_counter=get_bool(raw, "allow_msg_counter"),
        allow_atomic=get_bool(raw, "allow_atomic"),
        allow_msg_schedules=get_bool(raw, "allow_msg_schedules"),
        persist_mode=_persist_mode(raw),
        allow_batched=get_bool(raw, "allow_batched"),
        mirror=_source(get_object(raw, "mirror"), "mirror"),
        sources=tuple(_source(_as_object(item), "sources") or SourceConfig("") for item in _list(raw, "sources")),
        placement=_placement(raw),
        republish=_republish(raw),
        subject_transform=_subject_transform(raw),
        consumer_limits=_consumer_limits(raw),
        metadata=get_str_map(raw, "metadata"),
    )


def _enum(raw: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = raw.get(key)
    if value is None or value == "":
        return allowed[0]
    if not isinstance(value, str) or value.lower() not in allowed:
        raise errors.INVALID_JSON(err=f"can not unmarshal {value!r} into {key}; use one of {', '.join(allowed)}")
    return value.lower()


def _persist_mode(raw: dict[str, Any]) -> str:
    """nats-server's PersistModeType: "default" (or empty) and "async", case-sensitive."""
    value = raw.get("persist_mode")
    if value is None or value in ("", "default"):
        return "default"
    if value != "async":
        raise errors.INVALID_JSON(err=f"can not unmarshal {value!r} into persist_mode; use default or async")
    return "async"


def _list(raw: dict[str, Any], key: str) -> list[Any]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise errors.INVALID_JSON(err=f"cannot unmarshal {errors.json_kind(value)} into {key}")
    return value


def _as_object(value: Any) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise errors.INVALID_JSON(err=f"cannot unmarshal {errors.json_kind(value)} into sources")
    return value


def _source(obj: dict[str, Any] | None, key: str) -> SourceConfig | None:
    """A mirror / source object; None when absent (a JSON null source is kept as an invalid name)."""
    if obj is None:
        return None
    transforms = tuple((get_str(t, "src"), get_str(t, "dest"))
                       for t in (_as_object(item) or {} for item in _list(obj, "subject_transforms")))
    consumer, external = get_object(obj, "consumer"), get_object(obj, "external")
    return SourceConfig(name=get_str(obj, "name"), opt_start_seq=get_int(obj, "opt_start_seq", kind="uint64"),
                        opt_start_time=get_time(obj, "opt_start_time"),
                        filter_subject=get_str(obj, "filter_subject"), subject_transforms=transforms,
                        consumer=None if consumer is None else (get_str(consumer, "name"),
                                                                get_str(consumer, "deliver_subject")),
                        external=None if external is None else (get_str(external, "api"), get_str(external, "deliver")))


def _placement(raw: dict[str, Any]) -> dict[str, Any] | None:
    obj = get_object(raw, "placement")
    if not obj:
        return None
    out: dict[str, Any] = {}
    if get_str(obj, "cluster"):
        out["cluster"] = get_str(obj, "cluster")
    if get_str_list(obj, "tags"):
        out["tags"] = get_str_list(obj, "tags")
    if get_str(obj, "preferred"):
        raise errors.STREAM_INVALID_CONFIG(err="preferred server not permitted in placement")
    # Go keeps a placement whose tags were given, even empty ({"tags": []} is echoed as {}).
    return out if out or isinstance(obj.get("tags"), list) else None


def _republish(raw: dict[str, Any]) -> dict[str, Any] | None:
    obj = get_object(raw, "republish")
    if obj is None:
        return None
    out: dict[str, Any] = {"src": get_str(obj, "src"), "dest": get_str(obj, "dest")}
    if get_bool(obj, "headers_only"):
        out["headers_only"] = True
    return out


def _subject_transform(raw: dict[str, Any]) -> dict[str, Any] | None:
    obj = get_object(raw, "subject_transform")
    if obj is None:
        return None
    return {"src": get_str(obj, "src"), "dest": get_str(obj, "dest")}


def _consumer_limits(raw: dict[str, Any]) -> dict[str, Any]:
    obj = get_object(raw, "consumer_limits") or {}
    out: dict[str, Any] = {}
    if get_int(obj, "inactive_threshold"):
        out["inactive_threshold"] = get_int(obj, "inactive_threshold")
    if get_int(obj, "max_ack_pending"):
        out["max_ack_pending"] = get_int(obj, "max_ack_pending")
    return out


def _invalid(text: str) -> errors.ApiError:
    return errors.STREAM_INVALID_CONFIG(err=text)


def _validate(cfg: StreamConfig, pedantic: bool = False) -> StreamConfig:
    if not is_valid_name(cfg.name):
        raise _invalid("stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(cfg.name) > MAX_NAME_LEN:
        raise _invalid(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if len(cfg.description) > MAX_DESCRIPTION_LEN:
        raise _invalid(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    if sum(len(k) + len(v) for k, v in cfg.metadata.items()) > MAX_METADATA_LEN:
        raise _invalid(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")
    replicas = cfg.num_replicas or 1
    if replicas > MAX_REPLICAS:
        raise _invalid(f"maximum replicas is {MAX_REPLICAS}")
    if replicas < 0:
        raise errors.REPLICAS_COUNT_CANNOT_BE_NEGATIVE()
    if pedantic:
        for key in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
            if getattr(cfg, key) < -1:
                raise errors.PEDANTIC(err=f"{key} must be set to -1")
    cfg = dataclasses.replace(
        cfg, num_replicas=replicas, max_msgs=_unlimited(cfg.max_msgs), max_bytes=_unlimited(cfg.max_bytes),
        max_msgs_per_subject=_unlimited(cfg.max_msgs_per_subject), max_msg_size=_unlimited(cfg.max_msg_size),
        max_consumers=_unlimited(cfg.max_consumers))
    if cfg.max_age < 0:
        raise _invalid("max age can not be negative")
    if 0 < cfg.max_age < MIN_WINDOW:
        raise _invalid("max age needs to be >= 100ms")
    if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources:  # a sourcing stream has none
        if pedantic and 0 < cfg.max_age < DEFAULT_DUPLICATE_WINDOW:
            raise errors.PEDANTIC(err="duplicate window cannot be bigger than max age")
        window = min(cfg.max_age, DEFAULT_DUPLICATE_WINDOW) if cfg.max_age else DEFAULT_DUPLICATE_WINDOW
        cfg = dataclasses.replace(cfg, duplicate_window=window)
    if cfg.duplicate_window < 0:
        raise _invalid("duplicates window can not be negative")
    if cfg.max_age and cfg.duplicate_window > cfg.max_age:
        raise _invalid("duplicates window can not be larger then max age")
    if 0 < cfg.duplicate_window < MIN_WINDOW:
        raise _invalid("duplicates window needs to be >= 100ms")
    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise _invalid("roll-ups require the purge permission")
    _check_counter(cfg)
    _check_discard_new_per_subject(cfg)
    if cfg.subject_delete_marker_ttl > 0:
        if cfg.subject_delete_marker_ttl < 1_000_000_000:
            raise _invalid("subject delete marker TTL must be at least 1 second")
        if pedantic and not cfg.allow_msg_ttl:
            raise _invalid("subject delete marker cannot be set if message TTLs are disabled")
        if pedantic and not cfg.allow_rollup_hdrs:
            raise _invalid("subject delete marker cannot be set if roll-ups are disabled")
        cfg = dataclasses.replace(cfg, allow_msg_ttl=True, allow_rollup_hdrs=True, deny_purge=False)
    elif cfg.subject_delete_marker_ttl < 0:
        raise _invalid("subject delete marker TTL must not be negative")
    if cfg.allow_msg_schedules:
        if cfg.discard == "new":
            raise _invalid("message scheduling cannot use discard new")
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise _invalid("message scheduling cannot be set if roll-ups are disabled")
            cfg = dataclasses.replace(cfg, allow_rollup_hdrs=True, deny_purge=False)
    if cfg.persist_mode == "async":
        if cfg.storage != "file":
            raise _invalid("async persist mode is only supported on file storage")
        if cfg.num_replicas > 1:
            raise _invalid("async persist mode is not supported on replicated streams")
        if cfg.allow_atomic:
            raise _invalid("async persist mode is not supported with atomic batch publish")
    _check_mirror(cfg)
    _check_sources(cfg)
    _check_external_prefixes(cfg)
    if not cfg.subjects and cfg.mirror is None and not cfg.sources:
        cfg = dataclasses.replace(cfg, subjects=(cfg.name,))
    _check_subjects(cfg)
    _check_subject_transform(cfg)
    cfg = _check_republish(cfg, pedantic)
    return dataclasses.replace(cfg, metadata=_stored_metadata(cfg))


def _check_mirror(cfg: StreamConfig) -> None:
    """nats-server's mirror rules that need no other stream (in its order)."""
    if cfg.mirror is None:
        return
    if cfg.first_seq:
        raise errors.MIRROR_WITH_FIRST_SEQ()
    if cfg.subjects:
        raise errors.MIRROR_WITH_SUBJECTS()
    if cfg.sources:
        raise errors.MIRROR_WITH_SOURCES()
    if cfg.allow_msg_counter:
        raise errors.MIRROR_WITH_COUNTERS()
    if cfg.allow_atomic:
        raise errors.MIRROR_WITH_ATOMIC_PUBLISH()
    if cfg.allow_batched:
        raise errors.MIRROR_WITH_BATCH_PUBLISH()
    if cfg.allow_msg_schedules:
        raise errors.MIRROR_WITH_MSG_SCHEDULES()
    if not _durable_consumer_ok(cfg.mirror):
        raise errors.MIRROR_DURABLE_CONSUMER_CFG_INVALID()
    if cfg.mirror.filter_subject and cfg.mirror.subject_transforms:
        raise errors.MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED()
    if cfg.subject_delete_marker_ttl > 0:  # markers would take sequences the origin does not have
        raise _invalid("subject delete markers forbidden on mirrors")
    _check_transforms(cfg.mirror, errors.MIRROR_INVALID_SUBJECT_FILTER, errors.MIRROR_INVALID_TRANSFORM_DESTINATION)
    srcs = [src for src, _ in cfg.mirror.subject_transforms]
    if any(subjects.subjects_overlap(a, b) for i, a in enumerate(srcs) for b in srcs[i + 1:]):
        raise errors.MIRROR_OVERLAPPING_SUBJECT_FILTERS()
    if cfg.mirror.external is None and not is_valid_name(cfg.mirror.name):  # another domain's names are its own
        raise errors.MIRROR_INVALID_STREAM_NAME()


def _check_sources(cfg: StreamConfig) -> None:
    if cfg.sources and cfg.allow_msg_schedules:
        raise errors.SOURCE_WITH_MSG_SCHEDULES()
    seen: set[str] = set()
    consumers: set[tuple[str, str]] = set()
    for source in cfg.sources:
        if not is_valid_name(source.name):
            raise errors.SOURCE_INVALID_STREAM_NAME()
        if source.index_name in seen:
            raise errors.SOURCE_DUPLICATE_DETECTED()
        seen.add(source.index_name)
        if source.filter_subject and source.subject_transforms:
            raise errors.SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED()
        _check_transforms(source, errors.SOURCE_INVALID_SUBJECT_FILTER, errors.SOURCE_INVALID_TRANSFORM_DESTINATION)
        srcs = [src for src, _ in source.subject_transforms]
        if any(subjects.is_subset(a, b) for i, a in enumerate(srcs) for j, b in enumerate(srcs) if i != j):
            raise errors.SOURCE_OVERLAPPING_SUBJECT_FILTERS()
        if source.consumer is not None:
            if not _durable_consumer_ok(source):
                raise errors.SOURCE_DURABLE_CONSUMER_CFG_INVALID()
            if (source.name, source.consumer[0]) in consumers:  # one consumer feeds one source
                raise errors.SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED()
            consumers.add((source.name, source.consumer[0]))


def _check_external_prefixes(cfg: StreamConfig) -> None:
    """The api and deliver prefixes of external origins: literal subjects, the api one away from this
    server's own `$JS.API` (their overlap with the origins' subjects is sourcing.check_origins')."""
    externals = [s.external for s in (cfg.mirror, *cfg.sources) if s is not None and s.external is not None]
    for _, deliver in externals:
        if deliver and not subjects.is_valid_publish_subject(deliver):
            raise errors.STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ(prefix=deliver)
    for api, _ in externals:
        if api and not subjects.is_valid_publish_subject(api):
            raise _invalid(f'stream external api prefix "{api}" must be a valid subject without wildcards')
        if api and subjects.subjects_overlap(api, JS_API_PREFIX):
            raise errors.STREAM_EXTERNAL_API_OVERLAP(prefix=api, subject=JS_API_PREFIX)


def _durable_consumer_ok(source: SourceConfig) -> bool:
    """A durable source's consumer: a valid name and a literal deliver subject; where to start and what
    to read are the consumer's own config, so the source names neither."""
    if source.consumer is None:
        return True
    name, deliver_subject = source.consumer
    return (is_valid_name(name) and subjects.is_literal(deliver_subject) and subjects.is_valid_subject(deliver_subject)
            and not source.opt_start_seq and source.opt_start_time is None and not source.filter_subject)


def _check_transforms(source: SourceConfig, bad_source: errors.ErrorKind, bad_destination: errors.ErrorKind) -> None:
    for src, dest in source.subject_transforms:
        try:
            subject_transform.parse(src, dest)
        except subject_transform.InvalidSource as exc:
            raise bad_source(err=str(exc)) from None
        except subject_transform.InvalidDestination as exc:
            raise bad_destination(err=str(exc)) from None


def _unlimited(value: int) -> int:
    """0 and anything below -1 mean "no limit" (-1), as nats-server normalises them."""
    return -1 if value == 0 or value < -1 else value


def _check_counter(cfg: StreamConfig) -> None:
    if cfg.allow_msg_counter:
        if cfg.discard == "new":
            raise _invalid("counter stream cannot use discard new")
        if cfg.allow_msg_ttl:
            raise _invalid("counter stream cannot use message TTLs")
        if cfg.allow_msg_schedules:
            raise _invalid("counter stream cannot use message schedules")
        if cfg.retention != "limits":
            raise _invalid("counter stream can only use limits retention")
        if cfg.subject_delete_marker_ttl > 0:  # nats-server accepts it, then never stores a marker (no Nats-Incr)
            raise _invalid("subject_delete_marker_ttl: subject delete markers in a counter stream are not supported "
                           "by jsbroker; leave subject_delete_marker_ttl unset (max_age and Nats-TTL still expire)")


def _check_discard_new_per_subject(cfg: StreamConfig) -> None:
    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise _invalid("discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise _invalid("discard new per subject requires max msgs per subject > 0")


def _check_subjects(cfg: StreamConfig) -> None:
    seen: set[str] = set()
    for i, subj in enumerate(cfg.subjects):
        if not subjects.is_valid_subject(subj):
            raise _invalid("invalid subject")
        if subj in seen:
            raise _invalid("duplicate subjects detected")
        if subj == ">" and not cfg.no_ack:
            raise _invalid("capturing all subjects requires no-ack to be true")
        if not cfg.no_ack:
            for namespace in ("$JS.>", "$JSC.>", "$NRG.>"):
                if subjects.subjects_overlap(subj, namespace) and not subjects.is_subset(subj, "$JS.EVENT.>"):
                    raise _invalid("subjects that overlap with jetstream api require no-ack to be true")
            if subjects.subjects_overlap(subj, "$SYS.>") and not subjects.is_subset(subj, "$SYS.ACCOUNT.>"):
                raise _invalid("subjects that overlap with system api require no-ack to be true")
        for other in cfg.subjects[i + 1:]:
            if subjects.subjects_overlap(other, subj):
                raise _invalid(f'subject "{subj}" overlaps with "{other}"')
        seen.add(subj)


def _check_subject_transform(cfg: StreamConfig) -> None:
    if cfg.subject_transform is not None:
        input_transform(cfg)


def input_transform(cfg: StreamConfig) -> subject_transform.Transform | None:
    """The stream's `subject_transform` applied to what is published into it (None: none configured)."""
    if cfg.subject_transform is None:
        return None
    try:
        return subject_transform.parse(cfg.subject_transform["src"], cfg.subject_transform["dest"])
    except subject_transform.InvalidSource as exc:
        raise errors.STREAM_TRANSFORM_INVALID_SOURCE(err=str(exc)) from None
    except subject_transform.InvalidDestination as exc:
        raise errors.STREAM_TRANSFORM_INVALID_DESTINATION(err=str(exc)) from None


def _check_republish(cfg: StreamConfig, pedantic: bool) -> StreamConfig:
    republish = cfg.republish
    if not republish:
        return cfg
    if not republish["src"]:
        if pedantic:
            raise errors.PEDANTIC(err="republish source can not be empty")
        republish = {**republish, "src": ">"}
    transform = cfg.subject_transform
    if (republish["src"] == republish["dest"] == ">" and transform and len(cfg.subjects) == 1
            and transform["src"] == cfg.subjects[0]):
        # nats-server: '>' to '>' republishes what the transform made of the stream's one subject.
        if pedantic:
            raise errors.PEDANTIC(err="implicit republish based on subject transform")
        republish = {**republish, "src": transform["dest"], "dest": transform["dest"]}
    cfg = dataclasses.replace(cfg, republish=republish)
    src, dest = republish["src"], republish["dest"]
    if any(subjects.subjects_overlap(dest, subj) for subj in cfg.subjects):
        raise _invalid("stream configuration for republish destination forms a cycle")
    if republish_transform(cfg) is None and dest:
        raise _invalid(f"stream configuration for republish with transform from '{src}' to '{dest}' not valid")
    return cfg


def republish_transform(cfg: StreamConfig) -> subject_transform.Transform | None:
    """The transform from a stored message's subject to its republish subject (None: no republish, or
    an invalid one, which `_check_republish` refuses)."""
    if not cfg.republish:
        return None
    try:
        return subject_transform.parse(cfg.republish["src"] or ">", cfg.republish["dest"], check_tokens=False)
    except ValueError:
        return None


def _user_metadata(metadata: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in metadata.items() if k not in (REQ_LEVEL_KEY, LEVEL_KEY, VERSION_KEY)}


def _stored_metadata(cfg: StreamConfig) -> dict[str, str]:
    """User metadata plus the API level the config needs (1 for per-message TTLs, 2 for counters, schedules,
    atomic batches and async persistence, 4 for fast batches), as nats-server keeps."""
    level = 4 if cfg.allow_batched else 2 if cfg.allow_msg_counter or cfg.allow_msg_schedules or cfg.allow_atomic \
        or cfg.persist_mode == "async" else 1 if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0 else 0
    return {**_user_metadata(cfg.metadata), REQ_LEVEL_KEY: str(level)}


def check_update(old: StreamConfig, new: StreamConfig) -> StreamConfig:
    """The rules of STREAM.UPDATE on top of `parse` (nats-server's configUpdateCheck, same order)."""
    if new.name != old.name:
        raise _invalid("stream configuration name must match original")
    if new.num_replicas > 1:
        raise errors.STREAM_REPLICAS_NOT_SUPPORTED()
    if new.storage != old.storage:
        raise _invalid("stream configuration update can not change storage type")
    if new.retention != old.retention and "workqueue" in (old.retention, new.retention):
        raise _invalid("stream configuration update can not change retention policy to/from workqueue")
    if old.sealed and not new.sealed:
        raise _invalid("stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not new.deny_delete:
        raise _invalid("stream configuration update can not cancel deny message deletes")
    if old.deny_purge and not new.deny_purge:
        raise _invalid("stream configuration update can not cancel deny purge")
    if new.mirror is not None and new.mirror != old.mirror:  # removing it promotes the mirror to a stream
        raise errors.STREAM_MIRROR_NOT_UPDATABLE()
    if old.allow_msg_ttl and not new.allow_msg_ttl:
        raise _invalid("message TTL status can not be disabled")
    if old.allow_msg_schedules and not new.allow_msg_schedules:
        raise _invalid("message schedules can not be disabled")
    if new.allow_msg_counter != old.allow_msg_counter:
        raise _invalid("stream configuration update can not change message counter setting")
    if new.persist_mode != old.persist_mode:
        raise _invalid("stream configuration update can not change persist mode")
    if new.sealed:
        new = dataclasses.replace(new, max_age=0, discard="new", deny_delete=True, deny_purge=True,
                                  allow_rollup_hdrs=False)
    return new


def from_stored(raw: dict[str, Any]) -> StreamConfig:
    """A config read back from the store's metadata (written by `to_json(dynamic_metadata=False)`)."""
    cfg = _decode(raw)
    return dataclasses.replace(cfg, metadata=get_str_map(raw, "metadata"),
                               num_replicas=cfg.num_replicas or 1)
