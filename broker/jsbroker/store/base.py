"""The storage interface streams and consumers see.

`jetstream/stream.py` imports only this module, never `memory.py` or `file.py` directly: it asks
`open_stream_store()` for a store and talks to it through `StreamStore`. A store reports upward only
through the callback a stream registers (`on_remove`), never by importing stream code.

What a store owns: message records by sequence, the per-subject index (last seq per subject, counts),
and the *limits* that drop old data (max_msgs, max_bytes, max_age, max_msgs_per_subject and per-message
TTL, always "discard old" style). What it does not own: discard-new decisions, dedupe, expected-header
checks, retention policies: those are the stream's (it checks `state()` before calling `store_msg`).

Times are nanoseconds since the Unix epoch (int). Header blocks are the raw `NATS/1.0\r\n...\r\n\r\n`
bytes exactly as published (b"" when the message had none).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterator, Mapping, NamedTuple, Protocol

from . import record

# The records `StreamStore.load_records` hands over (record.py has the format): where the seq, time,
# subject length, header length and subject start, the bytes after the payload (the CRC), the kind byte
# (at 4) of a message and those of the tombstones and floor records that may lie between messages.
RECORD_OFFSETS = (record.SEQ_AT, record.TS_AT, record.SUBJ_LEN_AT, record.HDR_LEN_AT, record.HEADER.size)
RECORD_TAIL, RECORD_MSG, RECORD_SKIPPED = record.CRC.size, record.MSG[0], (record.DELETE[0], record.FLOOR[0])

# Called with the error when an fsync (or a removal after one) failed in the syncer's thread (syncer.py).
ErrorCallback = Callable[[OSError], None]


class StoreError(Exception):
    """Base of all storage errors."""


class StoreClosed(StoreError):
    """The store was closed or deleted."""


class StoreFull(StoreError):
    """No room for a new message: the volume is down to its reserve (disk_room.py). Nothing was stored.
    `first`: the first refusal since the volume last had room (the stream announces it once)."""

    def __init__(self, message: str, first: bool = True) -> None:
        super().__init__(message)
        self.first = first


class StoredMsg(NamedTuple):  # a NamedTuple: built once per delivered message, 3x cheaper than a dataclass
    seq: int
    subject: str
    hdr: bytes
    data: bytes
    ts: int  # ns since epoch, when the message was stored

    @property
    def size(self) -> int:
        """Bytes as nats-server's memory store accounts them: len(subject) + len(hdr) + len(data) + 16."""
        return len(self.subject) + len(self.hdr) + len(self.data) + 16


# A StoredMsg from a (seq, subject, hdr, data, ts) tuple without a Python-level call (the NamedTuple's own
# `__new__` is a Python function): batch reads and a restore's decoding build one per message with it.
new_stored_msg = partial(tuple.__new__, StoredMsg)


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """The limits a store enforces by itself (all "discard old"); -1 / 0 mean unlimited as in StreamConfig."""

    max_msgs: int = -1
    max_bytes: int = -1
    max_age_ns: int = 0
    max_msgs_per_subject: int = -1


@dataclass(slots=True)
class FsyncStats:
    """What the stores' fsyncs cost, for /metrics: how many, their total and their longest duration."""

    count: int = 0
    seconds: float = 0.0
    max_seconds: float = 0.0


@dataclass(slots=True)
class StoreState:
    msgs: int = 0
    bytes: int = 0
    first_seq: int = 0  # 0 when the store never held anything; last_seq + 1 after everything was removed
    first_ts: int = 0
    last_seq: int = 0
    last_ts: int = 0
    num_subjects: int = 0
    num_deleted: int = 0  # interior gaps between first_seq and last_seq
    deleted: list[int] | None = None  # filled only when asked for (deleted_details)
    lost: list[int] | None = None  # sequences dropped by recovery (torn tail)


@dataclass(slots=True)
class ConsumerState:
    """Durable consumer delivery state, persisted by `ConsumerStore`."""

    delivered_consumer_seq: int = 0
    delivered_stream_seq: int = 0
    ack_floor_consumer_seq: int = 0
    ack_floor_stream_seq: int = 0
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)  # stream seq -> (consumer seq, ts)
    redelivered: dict[int, int] = field(default_factory=dict)  # stream seq -> delivery count (> 1 only)


def next_pending(pending: Mapping[int, object], after: int, below: int) -> int:
    """The smallest pending stream seq in (after, below), or 0: how an ack floor moves past what is no
    longer pending (the consumer and its store both keep pending maps and apply this rule). Walks the
    seqs (the next one is usually pending, as acks come mostly in order), or the pending set when that
    is the shorter walk."""
    if after + 1 < below and after + 1 in pending:
        return after + 1
    if below - after - 1 <= len(pending):
        for seq in range(after + 1, below):
            if seq in pending:
                return seq
        return 0
    return min((s for s in pending if after < s < below), default=0)


# Called by a store after it removed a message on its own (limits, age, TTL): (seq, subject).
RemoveCallback = Callable[[int, str], None]


class StreamStore(Protocol):
    """Sequence-indexed message storage for one stream. All methods are synchronous and never block on
    the network; `store_msg` returns only after the record reached the OS (write() done)."""

    def store_msg(self, subject: str, hdr: bytes, data: bytes, ttl_ns: int = 0, ts_ns: int = 0) -> tuple[int, int]:
        """Append a message with the next sequence; returns (seq, ts). Then applies the limits. `ts_ns`
        (a mirror keeps its origin's times) replaces now; without it a time never goes back below the last one."""

    def store_deferred(self, subject: str, hdr: bytes, data: bytes, ttl_ns: int = 0, ts_ns: int = 0) -> tuple[int, int]:
        """store_msg without the write: the record waits in memory (reads still see it) until `flush()`
        or any other writing call. The caller must flush before it tells anyone the message is stored."""

    def flush(self) -> None:
        """Write what `store_deferred` buffered (one write(); fsync with SyncPolicy.always)."""

    def store_batch(self, msgs: list[tuple[str, bytes, bytes, int]]) -> list[tuple[int, int]]:
        """store_msg for each (subject, hdr, data, ttl_ns) in order, with one write() (and fsync) for the
        whole batch: the cheap way to ingest everything one socket read brought in."""

    def accounted_size(self, subject: str, hdr: bytes, data: bytes) -> int:
        """The bytes this message would add to `state().bytes` (nats-server's file and memory stores
        account differently); for discard-new max_bytes checks."""

    def check_room(self, size: int) -> None:
        """Raise StoreFull when `size` more bytes of messages would not fit (a file store's volume down to
        its reserve: disk_room.py); for a group of messages that must be stored all or none."""

    def skip_msgs(self, next_seq: int, stamp: bool = True) -> None:
        """Advance the sequence so the next stored message gets `next_seq` (interest retention with no
        interest); last_ts becomes now, as nats-server's SkipMsg does, unless `stamp` is False (a restore
        skipping removed messages keeps the last stored time, as nats-server's SkipMsgs). (A stream's
        first_seq is a purge.)"""

    def load_msg(self, seq: int) -> StoredMsg | None:
        """The message with this sequence, or None when it never existed or was removed."""

    def load_next_msg(self, start_seq: int, subject_filter: str | None = None) -> StoredMsg | None:
        """The first message with seq >= start_seq whose subject matches `subject_filter` (NATS wildcards;
        None or ">" = any). Must not scan every message for a sparse filter when an index can answer."""

    def load_next_msgs(self, start_seq: int, subject_filters: list[str] | None, max_count: int,
                       max_bytes: int = 0) -> list[StoredMsg]:
        """Up to `max_count` messages in seq order from start_seq matching any of the filters (None or []
        = any), as repeated `load_next_msg` would give them, stopping once their accounted sizes reach
        `max_bytes` (> 0). Unreadable bodies are left out. Cheaper than one call per message: a file
        store reads adjacent records with one pread."""

    def load_records(self, start_seq: int, last_seq: int, max_count: int) -> tuple[bytes, int]:
        """Up to `max_count` messages from start_seq to last_seq as records (record.py's format) back to
        back, and the seq to read on from (0: none left). Tombstone and floor records may lie between the
        messages; unreadable bodies are left out. For reading a whole stream (a backup) without an object
        per message: a file store hands over its records as they lie on disk, from one pread per run."""

    def load_last_msg(self, subject_filter: str) -> StoredMsg | None:
        """The newest message matching the filter (wildcards allowed)."""

    def last_seq(self, subject_filter: str) -> int:
        """The seq of `load_last_msg(subject_filter)`, from the index alone (0: none)."""

    def first_seq_at_or_after_time(self, ts: int) -> int:
        """The first stored seq whose ts >= the given time; last_seq + 1 when none."""

    def remove_msg(self, seq: int, erase: bool = False) -> bool:
        """Delete one message (tombstone). False when it was not there."""

    def purge(self, subject_filter: str | None = None, up_to_seq: int = 0, keep: int = 0) -> int:
        """Remove messages matching the filter; `up_to_seq` > 0 limits it to seq < up_to_seq; `keep` > 0
        keeps the newest `keep`. Returns how many went. As nats-server's PurgeEx:
        - no filter (None, "" or ">"): nothing set purges all (first_seq = last_seq + 1); `up_to_seq` > 1
          removes every seq below it (past the end: the next message gets `up_to_seq`); `keep` keeps the
          newest `keep` messages (gaps do not count; checked against nats-server 2.15.1).
        - with a filter: `keep` counts over *all* matching messages together (not per subject): the
          oldest matching messages go until `keep` remain; `up_to_seq` limits it to seq < up_to_seq."""

    def state(self, deleted_details: bool = False) -> StoreState: ...

    def subjects_state(self, subject_filter: str) -> dict[str, int]:
        """Message count per subject for subjects matching the filter."""

    def num_pending(self, start_seq: int, subject_filters: list[str] | None, last_per_subject: bool = False) -> int:
        """How many messages with seq >= start_seq match any of the filters (None or [] = all). With
        last_per_subject, count only the newest message of each matching subject."""

    def header_seqs(self, start_seq: int) -> Iterator[int]:
        """Live messages from `start_seq` that may carry headers (a file store's index knows exactly)."""
        ...

    def messages(self, start_seq: int = 0) -> Iterator[StoredMsg]:
        """Iterate stored messages in seq order from start_seq without loading the store into memory."""

    def subject_of(self, seq: int) -> str | None:
        """The subject of the stored message `seq` from the index alone, None when it is not stored."""

    def seqs(self, start_seq: int = 0) -> Iterator[tuple[int, str]]:
        """(seq, subject) of the stored messages in seq order from start_seq, from the index alone (no
        body is read); messages removed while iterating may still be listed."""

    def update_limits(self, limits: StoreLimits) -> None:
        """Apply new limits now (may remove messages, reporting each through on_remove)."""

    def expire(self, now_ns: int) -> int:
        """Remove messages past max_age / their TTL at `now_ns`; returns how many. The stream calls this
        from a timer (`next_expiry()` says when), so expiry does not depend on new publishes."""

    def take_expired(self, now_ns: int) -> list[int]:
        """The seqs past max_age / their TTL at `now_ns`, in order, without removing them: the caller
        removes each (their TTL entries are handed over). A stream with subject delete markers expires
        this way, replacing a subject's last message by a marker instead of removing it."""

    def next_expiry(self) -> int | None:
        """ns timestamp of the next age/TTL expiry, or None."""

    def set_on_remove(self, cb: RemoveCallback | None) -> None: ...

    def sync(self) -> None:
        """fsync what was written (no-op for memory)."""

    def when_durable(self, callback: Callable[[], None]) -> None:
        """Call `callback` (on the loop) once what was written so far is as durable as the store's policy
        promises a caller: fsynced with SyncPolicy.always and a syncer, else at once (every call on one
        store waits, or none does, so the callbacks keep their order). A `flush()` in the callback raises when
        the fsync failed."""

    def checkpoint(self) -> None:
        """Save the index so that an open after a crash need not rebuild it from everything (no-op for
        memory)."""

    def close(self) -> None: ...

    def delete(self, on_error: ErrorCallback | None = None) -> None:
        """Close and remove everything on disk; `on_error` hears of a removal that failed later, in the
        syncer's thread (SyncPolicy.remove_dir)."""


class ConsumerStore(Protocol):
    """Persistent state of one durable consumer. Contract: every `update_*` reaches the OS (write() done;
    fsync too with SyncPolicy.always) before the broker's next output. With a flush hook set
    (`set_flush_hook`), updates are buffered and the store calls the hook when its buffer gains its first
    one; the owner then calls `flush()` before anything else is sent, so one write() carries a whole
    turn's updates. Without a hook each update is written at once. An ack confirmed to an ack_sync caller
    must be held by the owner until the flush that carries it succeeded, so it survives kill -9."""

    def load(self) -> ConsumerState: ...

    def floors(self) -> tuple[int, int, int, int]:
        """(delivered consumer seq, delivered stream seq, ack floor consumer seq, ack floor stream seq) as
        the store holds them now (what INFO reports); cheap, no copy."""

    def has_state(self) -> bool:
        """Whether INFO reports the stored delivered pair (nats-server's HasState): a file store always (its
        state is written at creation), a memory store once a delivered position is stored."""

    def update_delivered(self, consumer_seq: int, stream_seq: int, delivery_count: int, ts: int) -> None:
        """Record a delivery as nats-server's consumer store does: delivered = max; a new stream seq becomes
        pending (consumer seq, ts); a redelivery refreshes the pending ts and, with delivery_count > 1,
        sets redelivered[stream_seq] = max(old, delivery_count). Ignored at or below the ack floor.
        AckNone consumers use `update_floor` instead."""

    def update_dropped(self, consumer_seq: int, stream_seq: int, delivery_count: int, ts: int) -> None:
        """A message reached max_deliver: `update_delivered` with its delivery count past max_deliver, and it
        leaves pending without moving the ack floor (nats-server's UpdateDelivered does both when the count
        is past MaxDeliver)."""

    def update_acks(self, consumer_seq: int, stream_seq: int, ack_all: bool = False) -> None:
        """Ack one message (explicit) or, with ack_all, everything pending up to stream_seq; moves the ack
        floor as nats-server does. Acks at or below the floor or of non-pending seqs change nothing but
        the redelivered count."""

    def update_acks_many(self, acks: list[tuple[int, int]]) -> None:
        """Explicit acks of (consumer seq, stream seq), in order: `update_acks` for each, in one call
        (a consumer applies the plain acks of one read together)."""

    def update_floor(self, consumer_seq: int, stream_seq: int, ts: int) -> None:
        """An AckNone delivery: delivered and ack floor both move to (consumer_seq, stream_seq) at once,
        nothing becomes pending. Stores may keep only the latest floor until the next flush."""

    def set_flush_hook(self, hook: Callable[[], None]) -> None:
        """Buffer updates from now on; `hook()` is called whenever the buffer gains its first update and
        must arrange a `flush()` before the broker's next output."""

    def flush(self) -> None:
        """Write the buffered updates with one write() (fsync with SyncPolicy.always); raises StoreError
        when the write failed (then no ack it carried may be confirmed). No-op when nothing is buffered."""

    def reset(self, state: ConsumerState) -> None:
        """Replace the whole state (CONSUMER.RESET, compaction)."""

    def when_durable(self, callback: Callable[[], None]) -> None:
        """As StreamStore.when_durable: an ack_sync reply waits for it."""

    def sync(self) -> None: ...

    def close(self) -> None: ...

    def delete(self, on_error: ErrorCallback | None = None) -> None: ...
