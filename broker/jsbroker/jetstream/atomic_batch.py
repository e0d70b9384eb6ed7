"""Atomic batch publishing (ADR-50, a stream's `allow_atomic`), pure: staging and the commit checks.

A publish with a `Nats-Batch-Id` header is one message of a batch; `Nats-Batch-Sequence` numbers them from 1
and the last carries `Nats-Batch-Commit` ("1": store it too, "eob": an end marker, not stored). `Batches`
holds each open batch's messages until its commit (a staged message is answered with an empty reply), then
`check_commit` runs every check of the batch's messages against the stream as the batch would leave it, as
nats-server 2.15.1's processJetStreamAtomicBatchMsg and checkMsgHeadersPreClusteredProposal do. Any failure
drops the whole batch: nothing of it is stored. The stream (stream.py) stores what the commit returns in one
write and answers the commit with `"batch"` and `"count"` in the pub ack.

Refusals in nats-server's order, each message on arrival (after the stream's sealed / resources / max_msg_size
checks): id longer than 64 (10179) -> no or no numeric sequence (10175) -> an unknown batch not at 1 (10199
past the size limit, else 10176) -> 50 open batches on the stream or 1000 on the server (10210) -> a commit
other than "1" / "eob" (10200) -> a `Nats-Required-Api-Level` above ours (10185; else the header goes) -> a
gap, an "eob" at 1 (10176) -> more than 1000 messages (10199). A batch without a message for 10 s goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from jsbroker.jetstream import counters, errors, headers, requests, schedule, times
from jsbroker.jetstream.publish_checks import MAX_HEADER_SIZE
from jsbroker.jetstream.stream_config import StreamConfig

MAX_ID_LEN = 64
MAX_SIZE = 1000  # messages in one batch (nats-server's default max_batch_size; the EOB marker not counted)
MAX_INFLIGHT_PER_STREAM = 50
MAX_INFLIGHT_TOTAL = 1000
TIMEOUT_NS = 10 * 1_000_000_000  # an open batch goes this long after its last message

# The reasons of a stream_batch_abandoned advisory.
TIMEOUT = "timeout"
LARGE = "large"
INCOMPLETE = "incomplete"
UNSUPPORTED = "unsupported"


@dataclass(slots=True)
class Msg:
    subject: str  # after the stream's subject transform
    hdr: bytes
    payload: bytes


class Refused(Exception):
    """A batch message refused with `error`; `abandoned` names the advisory's reason when an open batch was
    dropped with it ("" when nats-server sends none)."""

    def __init__(self, error: errors.ApiError, abandoned: str = "") -> None:
        super().__init__(error.description)
        self.error = error
        self.abandoned = abandoned


@dataclass(slots=True)
class Inflight:
    """The open batches of the whole server (one per JetStream service, shared by its streams)."""

    count: int = 0


@dataclass(slots=True)
class _Open:
    deadline: int
    msgs: list[Msg] = field(default_factory=list)


class Batches:
    """A stream's open batches by id."""

    def __init__(self, inflight: Inflight) -> None:
        self._inflight = inflight
        self._open: dict[str, _Open] = {}

    def __len__(self) -> int:
        return len(self._open)

    def stage(self, batch_id: str, msg: Msg, now: int) -> list[Msg] | None:
        """Take one message of batch `batch_id`: None while the batch is open, the messages to store at its
        commit (an "eob" batch's last one gets `Nats-Batch-Commit: 1`). Raises Refused."""
        if len(batch_id) > MAX_ID_LEN:
            raise Refused(errors.ATOMIC_PUBLISH_INVALID_BATCH_ID())
        seq = headers.as_uint(headers.get(msg.hdr, headers.BATCH_SEQUENCE) or "")
        if seq < 0:
            raise Refused(errors.ATOMIC_PUBLISH_MISSING_SEQ())
        commit = headers.get(msg.hdr, headers.BATCH_COMMIT)
        eob = commit == "eob"
        size = seq - 1 if eob else seq
        batch = self._open.get(batch_id)
        if batch is None:
            if seq != 1:
                raise Refused(errors.ATOMIC_PUBLISH_TOO_LARGE_BATCH(size=MAX_SIZE) if size > MAX_SIZE
                              else errors.ATOMIC_PUBLISH_INCOMPLETE_BATCH())
            if len(self._open) >= MAX_INFLIGHT_PER_STREAM or self._inflight.count >= MAX_INFLIGHT_TOTAL:
                raise Refused(errors.ATOMIC_PUBLISH_TOO_MANY_INFLIGHT())
            batch = self._open[batch_id] = _Open(now + TIMEOUT_NS)
            self._inflight.count += 1
        if commit is not None and not eob and commit != "1":
            self.drop(batch_id)
            raise Refused(errors.ATOMIC_PUBLISH_INVALID_BATCH_COMMIT())
        if not only_batch_headers(msg.hdr) and headers.get(msg.hdr, headers.REQUIRED_API_LEVEL):
            if not requests.api_level_supported(msg.hdr):
                self.drop(batch_id)
                raise Refused(errors.REQUIRED_API_LEVEL(), UNSUPPORTED)
            msg.hdr = headers.without(msg.hdr, headers.REQUIRED_API_LEVEL)
        if seq != len(batch.msgs) + 1 or (seq == 1 and eob):
            self.drop(batch_id)
            raise Refused(errors.ATOMIC_PUBLISH_INCOMPLETE_BATCH(), INCOMPLETE)
        if size > MAX_SIZE:
            self.drop(batch_id)
            raise Refused(errors.ATOMIC_PUBLISH_TOO_LARGE_BATCH(size=MAX_SIZE), LARGE)
        batch.deadline = now + TIMEOUT_NS
        if commit is None:
            batch.msgs.append(msg)
            return None
        self.drop(batch_id)
        msgs = batch.msgs
        if eob:
            last = msgs[-1]
            last.hdr = headers.append(last.hdr, ((headers.BATCH_COMMIT, "1"),))
        else:
            msgs.append(msg)
        return msgs

    def drop(self, batch_id: str) -> None:
        if self._open.pop(batch_id, None) is not None:
            self._inflight.count -= 1

    def clear(self) -> None:
        """Drop every open batch (the stream stops, or no longer allows atomic batches)."""
        for batch_id in list(self._open):
            self.drop(batch_id)

    def expire(self, now: int) -> list[str]:
        """Drop the batches whose time is up; returns their ids."""
        gone = [batch_id for batch_id, batch in self._open.items() if batch.deadline <= now]
        for batch_id in gone:
            self.drop(batch_id)
        return gone

    def next_deadline(self) -> int | None:
        return min((batch.deadline for batch in self._open.values()), default=None)


def only_batch_headers(hdr: bytes) -> bool:
    """Whether every header of the block is a `Nats-Batch-*` one (most batch messages): no other check
    applies to it. A block has a line per header between its first line and its blank end."""
    return hdr.count(b"\r\nNats-Batch-") == hdr.count(b"\r\n") - 2


class StreamView(Protocol):
    """What the commit checks read of the stream, before the batch is stored."""

    config: StreamConfig
    last_seq: int
    max_payload: int

    def last_msg(self, subject: str) -> tuple[bytes, bytes] | None: ...  # (headers, body) of its last message

    def last_seq_of(self, subject: str) -> int: ...

    def is_duplicate(self, msg_id: str) -> bool: ...  # inside the duplicate window

    def totals(self) -> tuple[int, int]: ...  # the stream's messages and bytes

    def subject_count(self, subject: str) -> int: ...

    def accounted_size(self, subject: str, hdr: bytes, payload: bytes) -> int: ...


@dataclass(slots=True)
class _Staged:
    """What the batch adds to the stream so far (nats-server's batchStagedDiff)."""

    ops: dict[str, int] = field(default_factory=dict)  # messages per subject
    size: int = 0  # their accounted bytes
    msg_ids: set[str] = field(default_factory=set)
    last: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)  # per subject: its last (headers, body)
    expected: dict[str, int] = field(default_factory=dict)  # per subject: the last seq an expectation found


def check_commit(msgs: list[Msg], view: StreamView, now: int) -> list[Msg]:
    """The messages of a committed batch as they are to be stored (counters computed, schedules given their
    rollup), or ApiError: the first check any of them fails."""
    staged = _Staged()
    for i, msg in enumerate(msgs):
        plain = only_batch_headers(msg.hdr)
        if not plain and headers.get(msg.hdr, headers.EXPECTED_LAST_MSG_ID):
            raise errors.ATOMIC_PUBLISH_UNSUPPORTED_HEADER(header=headers.EXPECTED_LAST_MSG_ID)
        _check(msg, plain, view, staged, view.last_seq + i, now)
        staged.ops[msg.subject] = staged.ops.get(msg.subject, 0) + 1
        staged.size += view.accounted_size(msg.subject, msg.hdr, msg.payload)
        staged.last[msg.subject] = (msg.hdr, msg.payload)
        _check_discard_new(msg, view, staged)
    return msgs


def _check(msg: Msg, plain: bool, view: StreamView, staged: _Staged, last_seq: int, now: int) -> None:
    cfg = view.config
    subject, hdr = msg.subject, msg.hdr
    incr = None
    if len(hdr) > MAX_HEADER_SIZE:
        raise errors.STREAM_HEADER_EXCEEDS_MAXIMUM()
    if not plain:
        incr = counters.increment(hdr, msg.payload, cfg.allow_msg_counter, False)
        expected = headers.get(hdr, headers.EXPECTED_STREAM)
        if expected and expected != cfg.name:
            raise errors.STREAM_NOT_MATCH()
        ttl_text = headers.get(hdr, headers.TTL)
        ttl = times.parse_ttl(ttl_text) if ttl_text else 0
        if ttl != 0:
            if not cfg.allow_msg_ttl:
                raise errors.MESSAGE_TTL_DISABLED()
            if ttl == -2:
                raise errors.MESSAGE_TTL_INVALID()
        msg_id = headers.get(hdr, headers.MSG_ID)
        if msg_id:
            if msg_id in staged.msg_ids or (cfg.duplicate_window > 0 and view.is_duplicate(msg_id)):
                raise errors.ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE()
            staged.msg_ids.add(msg_id)
        if headers.STREAM_SOURCE_NEEDLE in hdr and headers.get(hdr, headers.STREAM_SOURCE) is not None:
            raise errors.MESSAGE_SOURCE_HDR_NOT_ALLOWED()
    if cfg.allow_msg_counter:
        if incr is None:
            raise errors.MESSAGE_INCR_MISSING()
        last = staged.last.get(subject) or view.last_msg(subject)
        limit = min(view.max_payload, cfg.max_msg_size) if cfg.max_msg_size >= 0 else view.max_payload
        hdr, msg.payload, _ = counters.apply(incr, last, hdr, msg.payload, limit)
    if not plain:
        hdr = _check_expected(msg, hdr, view, staged, last_seq, now)
    msg.hdr = hdr


def _check_expected(msg: Msg, hdr: bytes, view: StreamView, staged: _Staged, last_seq: int, now: int) -> bytes:
    """The expected-sequence, schedule and rollup checks; a message on a subject the batch already wrote
    cannot expect its last sequence nor roll it up, and only the first may expect the stream's."""
    cfg = view.config
    subject = msg.subject
    expected_seq = headers.get(hdr, headers.EXPECTED_LAST_SEQ)
    if expected_seq is not None:
        if headers.as_uint(expected_seq) != last_seq:
            raise errors.STREAM_WRONG_LAST_SEQUENCE(seq=last_seq)
        if staged.ops:
            raise errors.STREAM_WRONG_LAST_SEQUENCE_CONSTANT()
    subject_seq = headers.get(hdr, headers.EXPECTED_LAST_SUBJ_SEQ)
    on = headers.get(hdr, headers.EXPECTED_LAST_SUBJ_SEQ_SUBJ)
    if subject_seq is not None:
        on = on or subject
        if on in staged.ops:
            raise errors.STREAM_WRONG_LAST_SEQUENCE_CONSTANT()
        found = staged.expected.get(on)
        if found is None:
            found = staged.expected[on] = view.last_seq_of(on)
        if headers.as_uint(subject_seq) != found:
            raise errors.STREAM_WRONG_LAST_SEQUENCE(seq=found)
    elif on:
        raise errors.STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID()
    if headers.SCHEDULE_NEEDLE in hdr:
        def last_on(scheduler: str) -> bytes | None:
            last = staged.last.get(scheduler) or view.last_msg(scheduler)
            return None if last is None else last[0]

        hdr = schedule.check_publish(subject, hdr, cfg.subjects, cfg.allow_msg_schedules, cfg.allow_msg_ttl,
                                     lambda text: times.parse_ttl(text) != -2, last_on, now)
    rollup = headers.rollup(hdr)
    if rollup:
        if not cfg.allow_rollup_hdrs or cfg.deny_purge:
            raise errors.STREAM_ROLLUP_FAILED(err="rollup not permitted")
        if rollup == "sub":
            if subject in staged.ops:
                raise errors.STREAM_ROLLUP_FAILED(err="batch rollup sub invalid")
        elif rollup == "all":
            if staged.ops:
                raise errors.STREAM_ROLLUP_FAILED(err="batch rollup all invalid")
        else:
            raise errors.STREAM_ROLLUP_FAILED(err=f'rollup value invalid: "{rollup}"')
    return hdr


def _check_discard_new(msg: Msg, view: StreamView, staged: _Staged) -> None:
    """DiscardNew limits with the batch so far counted in (the message itself included)."""
    cfg = view.config
    if cfg.discard != "new":
        return
    if cfg.max_msgs > 0 or cfg.max_bytes > 0:
        msgs, size = view.totals()
        if 0 < cfg.max_msgs < msgs + sum(staged.ops.values()):
            raise errors.STREAM_STORE_FAILED(err="maximum messages exceeded")
        if 0 < cfg.max_bytes < size + staged.size:
            raise errors.STREAM_STORE_FAILED(err="maximum bytes exceeded")
    if cfg.discard_new_per_subject and cfg.max_msgs_per_subject > 0 and not headers.get(msg.hdr, headers.ROLLUP):
        if view.subject_count(msg.subject) + staged.ops[msg.subject] > cfg.max_msgs_per_subject:
            raise errors.STREAM_STORE_FAILED(err="maximum messages per subject exceeded")
