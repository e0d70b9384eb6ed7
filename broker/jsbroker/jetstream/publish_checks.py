"""A stream's publish checks, pure: one message against the stream's config, its store, its msg-id window and
its last sequence and msg id, before stream.py stores it. Each check raises the ApiError of nats-server's pub
ack (`processJetStreamMsgWithBatch`, the order stream.py's docstring lists); none changes anything.

`check_headers` makes the header checks up to the rollup, `check_size` the size ones, `check_resources` the
account's and server's limits, `check_ttl` those of a message's TTL, `check_discard_new` the stream's limits
under `discard: new`, `check_batch` those a batch publish meets before its batch is looked at. The store is
only read (`jsbroker.store.base.StreamStore`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from jsbroker.jetstream import errors, headers, schedule, times
from jsbroker.jetstream.dedupe import MsgIdWindow
from jsbroker.jetstream.stream_config import StreamConfig
from jsbroker.store.base import StreamStore

MAX_HEADER_SIZE = 65535

# The account's and the server's memory / storage check of a storage type: the error it names, None when
# there is room (stream.py's `resources_exhausted`; None when no limit is set).
Exhausted = Callable[[str], errors.ErrorKind | None]


class HeaderChecks(NamedTuple):
    """What the header checks found."""

    msg_id: str
    rollup: str  # "", "sub" or "all"
    ttl: int  # seconds; -1 never, -2 invalid
    duplicate_of: int  # the seq of the message with the same msg id inside the window; 0 none
    hdr: bytes  # the headers to store (a schedule gets its rollup)


def check_headers(subject: str, hdr: bytes, config: StreamConfig, store: StreamStore, msg_ids: MsgIdWindow,
                  last_seq: int, last_msg_id: str, now_ns: int, sourced: bool = False,
                  scheduled: bool = False) -> HeaderChecks:
    """The header checks up to the rollup. `sourced`: copied from a source (its Nats-Stream-Source header
    allowed, a TTL without allow_msg_ttl kept as a header, a rollup without the purge permission ignored);
    `scheduled`: produced by a schedule (its schedule headers are the server's, not checked)."""
    expected = headers.get(hdr, headers.EXPECTED_STREAM)
    if expected and expected != config.name:
        raise errors.STREAM_NOT_MATCH()
    ttl_text = headers.get(hdr, headers.TTL)
    ttl = times.parse_ttl(ttl_text) if ttl_text else 0
    if ttl not in (0, -2) and not config.allow_msg_ttl:
        if not sourced:
            raise errors.MESSAGE_TTL_DISABLED()
        ttl = 0  # kept as a header; without allow_msg_ttl it does not expire the copy
    last_subj_seq = headers.get(hdr, headers.EXPECTED_LAST_SUBJ_SEQ)
    last_subj = headers.get(hdr, headers.EXPECTED_LAST_SUBJ_SEQ_SUBJ)
    if last_subj_seq is not None:
        found = store.last_seq(last_subj or subject)
        if headers.as_uint(last_subj_seq) != found:
            raise errors.STREAM_WRONG_LAST_SEQUENCE(seq=found)
    elif last_subj:
        raise errors.STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID()
    expected_seq = headers.get(hdr, headers.EXPECTED_LAST_SEQ)
    if expected_seq is not None and headers.as_uint(expected_seq) != last_seq:
        raise errors.STREAM_WRONG_LAST_SEQUENCE(seq=last_seq)
    if not (sourced or scheduled) and headers.SCHEDULE_NEEDLE in hdr:
        hdr = _check_schedule(subject, hdr, config, store, now_ns)
    if not sourced and headers.STREAM_SOURCE_NEEDLE in hdr and headers.get(hdr, headers.STREAM_SOURCE) is not None:
        raise errors.MESSAGE_SOURCE_HDR_NOT_ALLOWED()
    msg_id = headers.get(hdr, headers.MSG_ID) or ""
    duplicate_of = msg_ids.find(msg_id, now_ns) if msg_id and config.duplicate_window > 0 else 0
    if duplicate_of:
        return HeaderChecks(msg_id, "", ttl, duplicate_of, hdr)
    last_id = headers.get(hdr, headers.EXPECTED_LAST_MSG_ID)
    if last_id and last_id != last_msg_id:
        raise errors.STREAM_WRONG_LAST_MSG_ID(id=last_msg_id)
    rollup = headers.rollup(hdr)
    rollup_ok = rollup_permitted(config)
    if rollup and sourced and not rollup_ok:
        rollup = ""  # a sourced rollup is not refused; without the purge permission it purges nothing
    if rollup:
        if not rollup_ok:
            raise errors.STREAM_ROLLUP_FAILED(err="rollup not permitted")
        if rollup not in ("sub", "all"):
            raise errors.STREAM_ROLLUP_FAILED(err=f'rollup value invalid: "{rollup}"')
    return HeaderChecks(msg_id, rollup, ttl, 0, hdr)


def header_ttl(hdr: bytes) -> int:
    """The TTL a Nats-TTL header gives a message to store (seconds; -1 never; 0 none, also for an invalid one)."""
    text = headers.get(hdr, headers.TTL)
    ttl = times.parse_ttl(text) if text else 0
    return ttl if ttl >= -1 else 0


def rollup_permitted(config: StreamConfig) -> bool:
    """Nats-Rollup needs allow_rollup_hdrs, and a stream that may be purged."""
    return config.allow_rollup_hdrs and not config.deny_purge


def _check_schedule(subject: str, hdr: bytes, config: StreamConfig, store: StreamStore, now_ns: int) -> bytes:
    def last_hdr(on: str) -> bytes | None:
        msg = store.load_last_msg(on)
        return None if msg is None else msg.hdr or b""

    return schedule.check_publish(subject, hdr, config.subjects, config.allow_msg_schedules, config.allow_msg_ttl,
                                  lambda text: times.parse_ttl(text) != -2, last_hdr, now_ns)


def check_size(hdr: bytes, payload: bytes, max_msg_size: int) -> None:
    """max_msg_size (10054; -1 no limit), then the header block's size (10097)."""
    if max_msg_size >= 0 and len(hdr) + len(payload) > max_msg_size:
        raise errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM()
    if len(hdr) > MAX_HEADER_SIZE:
        raise errors.STREAM_HEADER_EXCEEDS_MAXIMUM()


def check_ttl(ttl: int, hdr: bytes, marker_ttl: int, max_msgs_per_subject: int) -> tuple[int, bytes]:
    """A Nats-TTL value (10165), and a TTL shorter than the subject delete markers' raised to theirs (in the
    header too: nats-server's message must outlive the marker that may replace it); seconds, -1 never."""
    if ttl < 0 and ttl != -1:
        raise errors.MESSAGE_TTL_INVALID()
    if 0 < ttl < marker_ttl and max_msgs_per_subject != 1:
        return marker_ttl, headers.append(headers.without(hdr, headers.TTL), ((headers.TTL, str(marker_ttl)),))
    return ttl, hdr


def check_discard_new(subject: str, hdr: bytes, payload: bytes, rollup: str, config: StreamConfig,
                      store: StreamStore) -> None:
    """`discard: new`: the per-subject limit (with discard_new_per_subject; a rollup makes room), then
    max_msgs and max_bytes unless the subject is at its own limit (its oldest message then goes)."""
    at_subject_limit = False
    if config.max_msgs_per_subject > 0:
        count = store.subjects_state(subject).get(subject, 0)
        at_subject_limit = count >= config.max_msgs_per_subject
        if at_subject_limit and config.discard_new_per_subject and not rollup:
            raise errors.STREAM_STORE_FAILED(err="maximum messages per subject exceeded")
    if at_subject_limit or (config.max_msgs <= 0 and config.max_bytes <= 0):
        return
    state = store.state()
    if 0 < config.max_msgs <= state.msgs:
        raise errors.STREAM_STORE_FAILED(err="maximum messages exceeded")
    if config.max_bytes > 0 and state.bytes + store.accounted_size(subject, hdr, payload) > config.max_bytes:
        raise errors.STREAM_STORE_FAILED(err="maximum bytes exceeded")


def check_batch(hdr: bytes, payload: bytes, config: StreamConfig, exhausted: Exhausted | None) -> None:
    """The checks nats-server makes of a batch publish before it looks at the batch: sealed (10109), memory
    or storage used up (10002, 10023), max_msg_size (10054)."""
    if config.sealed:
        raise errors.STREAM_SEALED()
    check_resources(config.storage, exhausted)
    if 0 <= config.max_msg_size < len(hdr) + len(payload):
        raise errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM()


def check_resources(storage: str, exhausted: Exhausted | None) -> None:
    """The account's or the server's memory / storage used up (10002, 10023)."""
    if exhausted is not None and (kind := exhausted(storage)) is not None:
        raise kind()
