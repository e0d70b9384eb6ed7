"""ConsumerConfig: the consumer configuration with NATS JSON field names, its defaults, validation and
update rules, exactly as nats-server 2.15.1 applies them (`consumer.go setConsumerConfigDefaults`,
`checkConsumerCfg`, `checkNewConsumerConfig`, workqueue rules of `addConsumerWithAssignmentAndMode`).

Pure data: no I/O, no stream objects. The caller passes the few stream facts the rules need
(`StreamFacts`). Durations are int nanoseconds as on the wire; times are kept as the RFC 3339 text the
client sent (echoed back unchanged) plus their ns value.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from .. import subjects
from . import errors
from .times import ZERO_TIME, format_duration, parse_rfc3339

DELIVER_POLICIES = ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject")
ACK_POLICIES = ("none", "all", "explicit", "flow_control")
REPLAY_POLICIES = ("instant", "original")
PRIORITY_POLICIES = ("none", "overflow", "pinned_client", "prioritized")

ACK_WAIT_DEFAULT = 30_000_000_000
MAX_ACK_PENDING_DEFAULT = 1000
MAX_WAITING_DEFAULT = 512
EPHEMERAL_INACTIVE_DEFAULT = 5_000_000_000
PINNED_TTL_DEFAULT = 120_000_000_000
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
MAX_NAME_LEN = 255
MS = 1_000_000

_ASSET_FORBIDDEN = frozenset(" \t\r\n\f.*>\\/")
_GROUP_NAME = re.compile(r"^[a-zA-Z0-9/_=-]{1,16}$")
DYNAMIC_METADATA = ("_nats.ver", "_nats.level")
REQ_LEVEL_KEY = "_nats.req.level"


@dataclass(frozen=True, slots=True)
class StreamFacts:
    """What the consumer rules need to know about the parent stream."""

    name: str
    retention: str = "limits"  # limits | interest | workqueue
    replicas: int = 1
    max_msgs_per_subject: int = -1
    limit_max_ack_pending: int = 0  # stream consumer_limits
    limit_inactive_threshold: int = 0
    account_max_ack_pending: int = 0  # the account's jetstream max_ack_pending
    subjects: tuple[str, ...] = ()  # a push consumer may not deliver into these (a cycle)


def valid_group_name(group: str) -> bool:
    return bool(_GROUP_NAME.match(group))


def is_valid_asset_name(name: str) -> bool:
    return bool(name) and not any(c in _ASSET_FORBIDDEN for c in name)


@dataclass(slots=True)
class ConsumerConfig:
    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: str = "all"
    opt_start_seq: int = 0
    opt_start_time: str | None = None
    ack_policy: str = "none"
    ack_wait: int = 0
    max_deliver: int = 0
    backoff: list[int] = field(default_factory=list)
    filter_subject: str = ""
    filter_subjects: list[str] = field(default_factory=list)
    replay_policy: str = "instant"
    rate_limit_bps: int = 0
    sample_freq: str = ""
    max_waiting: int = 0
    max_ack_pending: int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = 0
    max_expires: int = 0
    max_bytes: int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: int = 0
    inactive_threshold: int = 0
    num_replicas: int = 0
    mem_storage: bool = False
    direct: bool = False
    sourcing: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    pause_until: str | None = None
    priority_groups: list[str] = field(default_factory=list)
    priority_policy: str = "none"
    priority_timeout: int = 0

    # ---- derived views -------------------------------------------------------------------------

    @property
    def is_push(self) -> bool:
        return bool(self.deliver_subject)

    @property
    def is_durable(self) -> bool:
        return bool(self.durable_name)

    @property
    def filters(self) -> list[str]:
        """All subject filters ([] = the whole stream); ">" counts as no filter."""
        fs = [self.filter_subject] if self.filter_subject else list(self.filter_subjects)
        return [] if fs == [">"] else fs

    @property
    def opt_start_time_ns(self) -> int:
        return parse_rfc3339(self.opt_start_time) if self.opt_start_time else 0

    @property
    def pause_until_ns(self) -> int:
        return parse_rfc3339(self.pause_until) if self.pause_until else 0

    # ---- JSON ----------------------------------------------------------------------------------

    @classmethod
    def from_json(cls, data: Any) -> ConsumerConfig:
        """Build from a decoded JSON object; unknown fields are ignored, wrong types are 10025."""
        if data is None:
            raise errors.CONSUMER_CONFIG_REQUIRED()
        if not isinstance(data, dict):
            raise errors.INVALID_JSON(err="json: cannot unmarshal into Go value of type server.ConsumerConfig")
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data or data[f.name] is None:
                continue
            kwargs[f.name] = _coerce(f.name, _FIELD_TYPES[f.name], data[f.name])
        cfg = cls(**kwargs)
        for fname, allowed in (
            ("deliver_policy", DELIVER_POLICIES),
            ("ack_policy", ACK_POLICIES),
            ("replay_policy", REPLAY_POLICIES),
            ("priority_policy", PRIORITY_POLICIES),
        ):
            value = getattr(cfg, fname)
            if value == "undefined" and fname == "deliver_policy":
                cfg.deliver_policy = "all"
            elif value == "" and fname == "priority_policy":
                cfg.priority_policy = "none"
            elif value not in allowed:
                raise errors.INVALID_JSON(err=f'can not unmarshal "{value}"')
        for t in (cfg.opt_start_time, cfg.pause_until):
            if t is not None:
                try:
                    parse_rfc3339(t)
                except ValueError as e:
                    raise errors.INVALID_JSON(err=str(e)) from None
        return cfg

    def to_json(self, extra_metadata: dict[str, str] | None = None) -> dict[str, Any]:
        """The config as nats-server marshals it (Go `omitempty` rules, field order kept)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in _ALWAYS:
                out[f.name] = v
            elif f.name == "metadata":
                md = {**v, **(extra_metadata or {})}
                if md:
                    out["metadata"] = dict(sorted(md.items()))  # Go marshals a map's keys sorted
            elif f.name == "priority_policy":
                if v != "none":
                    out[f.name] = v
            elif v:
                out[f.name] = list(v) if isinstance(v, list) else v
        return out

    def copy(self) -> ConsumerConfig:
        return dataclasses.replace(
            self,
            backoff=list(self.backoff),
            filter_subjects=list(self.filter_subjects),
            metadata=dict(self.metadata),
            priority_groups=list(self.priority_groups),
        )

    def comparable(self) -> ConsumerConfig:
        """This config without the metadata the server manages, for "same config" checks."""
        c = self.copy()
        for key in (*DYNAMIC_METADATA, REQ_LEVEL_KEY):
            c.metadata.pop(key, None)
        return c


_ALWAYS = frozenset({"deliver_policy", "ack_policy", "replay_policy", "num_replicas"})
_FIELD_TYPES: dict[str, Any] = {
    f.name: f.type for f in dataclasses.fields(ConsumerConfig)  # type strings, see _coerce
}


def _coerce(name: str, typ: str, value: Any) -> Any:
    """Check a JSON value against the field's type as Go's decoder would."""
    ok: bool
    if typ == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok and isinstance(value, float) and value.is_integer():
            value, ok = int(value), True
    elif typ == "bool":
        ok = isinstance(value, bool)
    elif typ in ("str", "str | None"):
        ok = isinstance(value, str)
    elif typ == "list[int]":
        ok = isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value)
    elif typ == "list[str]":
        ok = isinstance(value, list) and all(isinstance(x, str) for x in value)
    elif typ == "dict[str, str]":
        ok = isinstance(value, dict) and all(isinstance(x, str) for x in value.values())
    else:  # pragma: no cover - every field type is listed above
        raise AssertionError(typ)
    if not ok:
        raise errors.INVALID_JSON(
            err=f"json: cannot unmarshal {errors.json_kind(value)} into Go struct field ConsumerConfig.config.{name}"
        )
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value


# ---- defaults ------------------------------------------------------------------------------------


def fill_defaults(cfg: ConsumerConfig, stream: StreamFacts, pedantic: bool = False) -> None:
    """Fill defaults in place as `setConsumerConfigDefaults` does."""

    def fix(cond: bool, msg: str) -> bool:
        if cond and pedantic:
            raise errors.PEDANTIC(err=msg)
        return cond

    if cfg.max_deliver == 0 or fix(cfg.max_deliver < -1, "max_deliver must be set to -1"):
        cfg.max_deliver = -1
    if fix(cfg.max_waiting < 0, "max_waiting must not be negative"):
        cfg.max_waiting = 0
    if fix(cfg.max_ack_pending < -1, "max_ack_pending must be set to -1"):
        cfg.max_ack_pending = -1
    for fname, msg in (
        ("max_batch", "max_batch must not be negative"),
        ("max_expires", "max_expires must not be negative"),
        ("max_bytes", "max_bytes must not be negative"),
        ("idle_heartbeat", "idle_heartbeat must not be negative"),
        ("inactive_threshold", "inactive_threshold must not be negative"),
        ("priority_timeout", "priority_timeout must not be negative"),
    ):
        if fix(getattr(cfg, fname) < 0, msg):
            setattr(cfg, fname, 0)

    if not cfg.deliver_subject and cfg.max_waiting == 0:
        cfg.max_waiting = MAX_WAITING_DEFAULT
    if cfg.ack_wait == 0 and cfg.ack_policy in ("explicit", "all"):
        cfg.ack_wait = ACK_WAIT_DEFAULT
    if cfg.backoff:
        if pedantic and cfg.ack_wait != cfg.backoff[0]:
            raise errors.PEDANTIC(err="first backoff value has to equal batch AckWait")
        cfg.ack_wait = cfg.backoff[0]
    if cfg.max_ack_pending == 0:
        if pedantic and stream.limit_max_ack_pending > 0:
            raise errors.PEDANTIC(err="max_ack_pending must be set if it's configured in stream limits")
        cfg.max_ack_pending = stream.limit_max_ack_pending
    if cfg.inactive_threshold == 0:
        if pedantic and stream.limit_inactive_threshold > 0:
            raise errors.PEDANTIC(err="inactive_threshold must be set if it's configured in stream limits")
        cfg.inactive_threshold = stream.limit_inactive_threshold
    if cfg.max_ack_pending == 0 and cfg.ack_policy != "none":
        account = stream.account_max_ack_pending
        cfg.max_ack_pending = min(MAX_ACK_PENDING_DEFAULT, account) if account > 0 else MAX_ACK_PENDING_DEFAULT
    if cfg.priority_policy == "pinned_client" and cfg.priority_timeout == 0:
        cfg.priority_timeout = PINNED_TTL_DEFAULT
    if cfg.ack_policy == "flow_control" and not pedantic:
        cfg.flow_control = True
        cfg.idle_heartbeat = 1_000_000_000


def stamp_ephemeral_threshold(cfg: ConsumerConfig) -> None:
    """Ephemerals always get an inactive threshold (5 s unless set); applied after validation."""
    if not cfg.durable_name and cfg.inactive_threshold <= 0:
        cfg.inactive_threshold = EPHEMERAL_INACTIVE_DEFAULT


def set_static_metadata(cfg: ConsumerConfig) -> None:
    """Record the API level the config needs (`_nats.req.level`), as the server stores it."""
    level = 0
    if cfg.pause_until and cfg.pause_until != ZERO_TIME:  # any pause time but Go's zero, a past one too
        level = max(level, 1)
    if cfg.priority_policy != "none" or cfg.priority_timeout or cfg.priority_groups:
        level = max(level, 1)
    if cfg.ack_policy == "flow_control":
        level = max(level, 4)
    for key in DYNAMIC_METADATA:
        cfg.metadata.pop(key, None)
    cfg.metadata[REQ_LEVEL_KEY] = str(level)


# ---- validation ----------------------------------------------------------------------------------

# The ConsumerConfig fields nats-server knows and jsbroker refuses (10012): field -> why and what to do.
UNSUPPORTED: dict[str, str] = {
    "direct": "direct consumers (nats-server's internal ones for mirrors and sources) are not supported by jsbroker; leave direct unset",
    "sourcing": "sourcing consumers (nats-server's internal ones for stream sources) are not supported by jsbroker; leave sourcing unset",
}


def refuse_unsupported(cfg: ConsumerConfig) -> None:
    """Refuse a (validated) config asking for a feature jsbroker does not have, naming the field."""
    for key, text in UNSUPPORTED.items():
        if getattr(cfg, key) not in ("", "none", False):
            raise errors.CONSUMER_CREATE(err=f"{key}: {text}")



def validate(cfg: ConsumerConfig, stream: StreamFacts) -> None:
    """Raise the ApiError nats-server returns for an invalid (defaults-filled) config."""
    if cfg.name and not is_valid_asset_name(cfg.name):
        raise errors.STREAM_INVALID_CONFIG(err="consumer name can not contain '.', '*', '>', '\\', '/'")
    if cfg.durable_name and not is_valid_asset_name(cfg.durable_name):
        raise errors.STREAM_INVALID_CONFIG(err="consumer durable name can not contain '.', '*', '>', '\\', '/'")
    if cfg.num_replicas > 0 and cfg.num_replicas > stream.replicas:
        raise errors.CONSUMER_REPLICAS_EXCEEDS_STREAM()
    if cfg.num_replicas < 0:
        raise errors.REPLICAS_COUNT_CANNOT_BE_NEGATIVE()
    if stream.retention in ("interest", "workqueue") and cfg.num_replicas not in (0, stream.replicas):
        raise errors.CONSUMER_REPLICAS_SHOULD_MATCH_STREAM()
    if any(b < 0 for b in cfg.backoff):
        raise errors.CONSUMER_BACKOFF_NEGATIVE()
    if cfg.ack_wait < 0:
        raise errors.CONSUMER_ACK_WAIT_NEGATIVE()
    if cfg.ack_policy == "flow_control":
        _check_ack_flow_control(cfg)
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise errors.CONSUMER_MAX_DELIVER_BACKOFF()
    if len(cfg.description) > MAX_DESCRIPTION_LEN:
        raise errors.CONSUMER_DESCRIPTION_TOO_LONG(max=MAX_DESCRIPTION_LEN)
    if cfg.deliver_subject:
        _check_push(cfg, stream)
    else:
        _check_pull(cfg, stream)
    if stream.account_max_ack_pending > 0 and cfg.max_ack_pending > stream.account_max_ack_pending:
        raise errors.CONSUMER_MAX_PENDING_ACK_EXCESS(limit=stream.account_max_ack_pending)
    if stream.limit_max_ack_pending > 0 and cfg.max_ack_pending > stream.limit_max_ack_pending:
        raise errors.CONSUMER_MAX_PENDING_ACK_EXCESS(limit=stream.limit_max_ack_pending)
    if stream.limit_inactive_threshold > 0 and cfg.inactive_threshold > stream.limit_inactive_threshold:
        raise errors.CONSUMER_INACTIVE_THRESHOLD_EXCESS(limit=format_duration(stream.limit_inactive_threshold))
    if cfg.direct:
        if not cfg.deliver_subject:
            raise errors.CONSUMER_DIRECT_REQUIRES_PUSH()
        if cfg.durable_name:
            raise errors.CONSUMER_DIRECT_REQUIRES_EPHEMERAL()
    _check_filters(cfg)
    _check_start(cfg)
    if cfg.sample_freq:
        text = cfg.sample_freq.removesuffix("%")
        if not re.fullmatch(r"[+-]?\d+", text) or int(text) < 0:
            raise errors.CONSUMER_INVALID_SAMPLING(err=f'strconv.Atoi: parsing "{text}": invalid syntax')
    if cfg.flow_control and cfg.idle_heartbeat == 0:
        raise errors.CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS()
    if cfg.durable_name and cfg.name and cfg.name != cfg.durable_name:
        raise errors.CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH()
    if sum(len(k) + len(v) for k, v in cfg.metadata.items()) > MAX_METADATA_LEN:
        raise errors.CONSUMER_METADATA_LENGTH(limit=f"{MAX_METADATA_LEN // 1024}KB")
    _check_priority(cfg)


def _check_ack_flow_control(cfg: ConsumerConfig) -> None:
    if not cfg.deliver_subject:
        raise errors.CONSUMER_ACK_FC_REQUIRES_PUSH()
    if not cfg.flow_control:
        raise errors.CONSUMER_ACK_FC_REQUIRES_FC()
    if cfg.idle_heartbeat != 1_000_000_000:
        raise errors.STREAM_INVALID_CONFIG(err="flow control ack policy heartbeat needs to be 1s")
    if cfg.max_ack_pending <= 0:
        raise errors.CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING()
    if cfg.ack_wait or cfg.backoff:
        raise errors.CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT()
    if cfg.max_deliver > 0:
        raise errors.CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER()


def _check_push(cfg: ConsumerConfig, stream: StreamFacts) -> None:
    if not subjects.is_literal(cfg.deliver_subject):
        raise errors.CONSUMER_DELIVER_TO_WILDCARDS()
    if not subjects.is_valid_subject(cfg.deliver_subject):
        raise errors.CONSUMER_INVALID_DELIVER_SUBJECT()
    if any(subjects.subject_matches(s, cfg.deliver_subject) for s in stream.subjects):
        raise errors.CONSUMER_DELIVER_CYCLE()
    if cfg.max_waiting != 0:
        raise errors.CONSUMER_PUSH_MAX_WAITING()
    if cfg.max_ack_pending > 0 and cfg.ack_policy == "none":
        raise errors.CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED()
    if 0 < cfg.idle_heartbeat < 100 * MS:
        raise errors.CONSUMER_SMALL_HEARTBEAT()


def _check_pull(cfg: ConsumerConfig, stream: StreamFacts) -> None:
    if cfg.ack_policy == "none" and stream.retention == "workqueue":
        raise errors.CONSUMER_PULL_REQUIRES_ACK()
    if cfg.rate_limit_bps > 0:
        raise errors.CONSUMER_PULL_WITH_RATE_LIMIT()
    if cfg.max_waiting < 0:
        raise errors.CONSUMER_MAX_WAITING_NEGATIVE()
    if cfg.idle_heartbeat > 0:
        raise errors.CONSUMER_HB_REQUIRES_PUSH()
    if cfg.flow_control:
        raise errors.CONSUMER_FC_REQUIRES_PUSH()
    if cfg.max_batch < 0:
        raise errors.CONSUMER_MAX_REQUEST_BATCH_NEGATIVE()
    if cfg.max_expires != 0 and cfg.max_expires < MS:
        raise errors.CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL()


def _check_filters(cfg: ConsumerConfig) -> None:
    if cfg.filter_subject and cfg.filter_subjects:
        raise errors.CONSUMER_DUPLICATE_FILTER_SUBJECTS()
    if cfg.filter_subject and not subjects.is_valid_subject(cfg.filter_subject):
        raise errors.STREAM_INVALID_CONFIG(err="invalid subject")
    if any(f == "" for f in cfg.filter_subjects):
        raise errors.CONSUMER_EMPTY_FILTER()
    fs = [cfg.filter_subject] if cfg.filter_subject else cfg.filter_subjects
    for i, a in enumerate(fs):
        if not subjects.is_valid_subject(a):
            raise errors.STREAM_INVALID_CONFIG(err="invalid subject")
        for j, b in enumerate(fs):
            if i != j and subjects.is_subset(a, b):
                raise errors.CONSUMER_OVERLAPPING_SUBJECT_FILTERS()


_POLICY_WORDS = {
    "all": "all",
    "last": "last",
    "last_per_subject": "last per subject",
    "new": "new",
    "by_start_sequence": "by start sequence",
    "by_start_time": "by start time",
}


def _check_start(cfg: ConsumerConfig) -> None:
    dp = _POLICY_WORDS[cfg.deliver_policy]

    def bad_start(start: str) -> errors.ApiError:
        return errors.CONSUMER_INVALID_POLICY(
            err=f"consumer delivery policy is deliver {dp}, but optional start {start} is also set"
        )

    def not_set(what: str) -> errors.ApiError:
        return errors.CONSUMER_INVALID_POLICY(
            err=f"consumer delivery policy is deliver {dp}, but optional {what} is not set"
        )

    if cfg.deliver_policy in ("all", "last", "last_per_subject", "new"):
        if cfg.opt_start_seq > 0:
            raise bad_start("sequence")
        if cfg.opt_start_time is not None:
            raise bad_start("time")
        if cfg.deliver_policy == "last_per_subject" and not cfg.filter_subject and not cfg.filter_subjects:
            raise not_set("filter subject")
    elif cfg.deliver_policy == "by_start_sequence":
        if cfg.opt_start_seq == 0:
            raise not_set("start sequence")
        if cfg.opt_start_time is not None:
            raise bad_start("time")
    elif cfg.deliver_policy == "by_start_time":
        if cfg.opt_start_time is None:
            raise not_set("start time")
        if cfg.opt_start_seq != 0:
            raise bad_start("start sequence")


def _check_priority(cfg: ConsumerConfig) -> None:
    if cfg.priority_policy != "none":
        if cfg.deliver_subject:
            raise errors.CONSUMER_PUSH_WITH_PRIORITY_GROUP()
        if not cfg.priority_groups:
            raise errors.CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP()
        for group in cfg.priority_groups:
            if group == "":
                raise errors.CONSUMER_EMPTY_GROUP_NAME()
            if not _GROUP_NAME.match(group):
                raise errors.CONSUMER_INVALID_GROUP_NAME()
    else:
        if cfg.priority_groups:
            raise errors.CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE()
        if cfg.priority_timeout > 0:
            raise errors.CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE()


def check_workqueue(cfg: ConsumerConfig, other_filters: list[list[str]]) -> None:
    """Workqueue stream rules against the filters of the stream's other consumers."""
    if cfg.ack_policy not in ("explicit", "flow_control"):
        raise errors.CONSUMER_WQ_REQUIRES_EXPLICIT_ACK()
    if cfg.deliver_policy != "all":
        raise errors.CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL()
    check_workqueue_partition(cfg, other_filters)


def check_workqueue_partition(cfg: ConsumerConfig, other_filters: list[list[str]]) -> None:
    if not other_filters:
        return
    mine = cfg.filters
    if not mine:
        raise errors.CONSUMER_WQ_MULTIPLE_UNFILTERED()
    for theirs in other_filters:
        if not theirs or any(subjects.subjects_overlap(a, b) for a in mine for b in theirs):
            raise errors.CONSUMER_WQ_CONSUMER_NOT_UNIQUE()


# ---- updates -------------------------------------------------------------------------------------


def update_refusal(old: ConsumerConfig, new: ConsumerConfig, deliver_subject_bound: bool) -> str | None:
    """Why `new` may not replace `old` (nats-server's reason text), or None when it may.
    `deliver_subject_bound`: the old push deliver subject still has interest."""
    if old.comparable() == new.comparable():
        return None
    checks = (
        (old.deliver_policy != new.deliver_policy, "deliver policy can not be updated"),
        (old.mem_storage != new.mem_storage, "storage type can not be updated"),
        (old.direct != new.direct, "direct can not be updated"),
        (old.opt_start_seq != new.opt_start_seq, "start sequence can not be updated"),
        (_start_time_changed(old, new), "start time can not be updated"),
        (old.ack_policy != new.ack_policy, "ack policy can not be updated"),
        (old.replay_policy != new.replay_policy, "replay policy can not be updated"),
        (old.idle_heartbeat != new.idle_heartbeat, "heart beats can not be updated"),
        (old.flow_control != new.flow_control, "flow control can not be updated"),
    )
    for changed, reason in checks:
        if changed:
            return reason
    if old.deliver_subject != new.deliver_subject:
        if not old.deliver_subject:
            return "can not update pull consumer to push based"
        if not new.deliver_subject:
            return "can not update push consumer to pull based"
        if deliver_subject_bound:
            return errors.CONSUMER_NAME_EXIST.description
    if old.max_waiting != new.max_waiting:
        return "max waiting can not be updated"
    if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
        return errors.CONSUMER_MAX_DELIVER_BACKOFF.description
    return None


def _start_time_changed(old: ConsumerConfig, new: ConsumerConfig) -> bool:
    if old.opt_start_time is None or new.opt_start_time is None:
        return (old.opt_start_time is None) != (new.opt_start_time is None)
    return old.opt_start_time_ns != new.opt_start_time_ns
