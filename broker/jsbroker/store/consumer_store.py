"""Durable consumer state stores.

Owns the rules that turn delivered/ack updates into a `ConsumerState` (nats-server's consumer store rules:
pending by stream seq, redelivery counts, the ack floor) and two ways to keep it:
- MemoryConsumerStore: the state in memory (consumers of memory streams).
- FileConsumerStore: the same plus `<consumer_dir>/state.log.<gen>`, an append-only log of checksummed
  updates (record.py, consumer section), compacted now and then into `state.snap` (gen + full state,
  written to a temp file, fsynced and renamed). Opening loads the snapshot and replays only the log of
  the snapshot's generation, so a crash between writing a snapshot and starting its log loses nothing;
  a torn log tail is dropped (truncated) and logged. Updates are buffered and written by `flush()` as
  one batch frame (one checksum, one write()); `set_flush_hook(hook)` makes the store call `hook()` when
  its buffer gains its first update (the consumer then flushes before the broker's next output, so an
  ack is on disk before its reply is sent; without a hook every update is written at once). With
  SyncPolicy.always a flush is fsynced too. Ack-none deliveries (`update_floor`) are kept as the latest
  floor only and written as one delivered+ack pair per flush. `update_delivered` / `update_acks` run
  once per message: a memory store only applies the rules, a file store also appends one packed update.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Callable

from . import record
from .base import ConsumerState, StoreClosed, StoreError, next_pending
from .durable import write_all
from .syncer import SyncPolicy

log = logging.getLogger(__name__)

_COMPACT_MIN = 1 << 20  # compact the log once it is this large and 4x the last snapshot
_pack_delivered = record.DELIVERED_UPDATE.pack
_pack_ack = record.ACK_UPDATE.pack


def apply_delivered(st: ConsumerState, consumer_seq: int, stream_seq: int, delivery_count: int, ts: int) -> None:
    if consumer_seq <= st.ack_floor_consumer_seq:
        return  # an old delivery replayed: already acked
    if stream_seq > st.delivered_stream_seq:
        st.pending[stream_seq] = (consumer_seq, ts)
        st.delivered_stream_seq = stream_seq
    else:
        pending = st.pending.get(stream_seq)
        if pending is not None:  # redelivery keeps the original consumer seq
            st.pending[stream_seq] = (pending[0], ts)
    if consumer_seq > st.delivered_consumer_seq:
        st.delivered_consumer_seq = consumer_seq
    if delivery_count > 1 and st.redelivered.get(stream_seq, 0) < delivery_count:
        st.redelivered[stream_seq] = delivery_count


def apply_dropped(st: ConsumerState, consumer_seq: int, stream_seq: int, delivery_count: int, ts: int) -> None:
    if consumer_seq <= st.ack_floor_consumer_seq:
        return
    apply_delivered(st, consumer_seq, stream_seq, delivery_count, ts)
    st.pending.pop(stream_seq, None)


def apply_ack(st: ConsumerState, consumer_seq: int, stream_seq: int, ack_all: bool) -> None:
    if consumer_seq <= st.ack_floor_consumer_seq:
        return
    pending = st.pending
    if ack_all:
        if stream_seq in pending:
            st.ack_floor_consumer_seq, st.ack_floor_stream_seq = consumer_seq, stream_seq
            for seq in [s for s in pending if s <= stream_seq]:
                del pending[seq]
                st.redelivered.pop(seq, None)
        else:
            st.redelivered.pop(stream_seq, None)
        return
    acked = pending.pop(stream_seq, None)
    if st.redelivered:
        st.redelivered.pop(stream_seq, None)
    if acked is None:
        return
    if 0 < acked[0] < consumer_seq:
        consumer_seq = acked[0]
    if not pending:
        st.ack_floor_consumer_seq = st.delivered_consumer_seq
        st.ack_floor_stream_seq = st.delivered_stream_seq
    elif consumer_seq == st.ack_floor_consumer_seq + 1:
        st.ack_floor_consumer_seq, st.ack_floor_stream_seq = consumer_seq, stream_seq
        if st.delivered_consumer_seq > consumer_seq:
            nxt = next_pending(pending, stream_seq, st.delivered_stream_seq + 1)
            if nxt:
                st.ack_floor_consumer_seq, st.ack_floor_stream_seq = pending[nxt][0] - 1, nxt - 1


class MemoryConsumerStore:
    def __init__(self) -> None:
        self._state = ConsumerState()
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the consumer store is closed")

    def load(self) -> ConsumerState:
        self._check_open()
        return copy.deepcopy(self._state)

    def floors(self) -> tuple[int, int, int, int]:
        st = self._state
        return (st.delivered_consumer_seq, st.delivered_stream_seq, st.ack_floor_consumer_seq,
                st.ack_floor_stream_seq)

    def has_state(self) -> bool:
        """nats-server's HasState: a memory store has one once a delivered position is stored."""
        st = self._state
        return bool(st.delivered_consumer_seq or st.delivered_stream_seq)

    # update_delivered / update_acks run once per delivered / acked message: kept to one call each.
    def update_delivered(self, consumer_seq: int, stream_seq: int, delivery_count: int, ts: int) -> None:
        if self._closed:
            self._check_open()
        apply_delivered(self._state, consumer_seq, stream_seq, delivery_count, ts)

    def update_acks(self, consumer_seq: int, stream_seq: int, ack_all: bool = False) -> None:
        if self._closed:
            self._check_open()
        apply_ack(self._state, consumer_seq, stream_seq, ack_all)

    def update_dropped(self, consumer_seq: int, stream_seq: int, delivery_count: int, ts: int) -> None:
        self._check_open()
        apply_dropped(self._state, consumer_seq, stream_seq, delivery_count, ts)

    def update_acks_many(self, acks: list[tuple[int, int]]) -> None:
        if self._closed:
            self._check_open()
        st = self._state
        for consumer_seq, stream_seq in acks:
            apply_ack(st, consumer_seq, stream_seq, False)

    def update_floor(self, consumer_seq: int, stream_seq: int, ts: int) -> None:
        """An ack-none delivery: delivered and acked at once (nothing becomes pending)."""
        self._check_open()
        st = self._state
        st.delivered_consumer_seq = st.ack_floor_consumer_seq = consumer_seq
        st.delivered_stream_seq = st.ack_floor_stream_seq = stream_seq
        self._floor_moved(consumer_seq, stream_seq, ts)

    def reset(self, state: ConsumerState) -> None:
        self._check_open()
        self._state = copy.deepcopy(state)
        self._snapshot()

    def set_flush_hook(self, hook: Callable[[], None]) -> None:
        """Buffer updates; call `hook()` whenever the buffer gains its first one (it must arrange a
        `flush()` soon). Memory stores have nothing to flush."""

    def flush(self) -> None:
        """Write the buffered updates (memory: nothing to do)."""

    def _floor_moved(self, consumer_seq: int, stream_seq: int, ts: int) -> None:
        """Persist an ack-none floor (memory: nothing to do)."""

    def _snapshot(self) -> None:
        """Persist the whole state (memory: nothing to do)."""

    def when_durable(self, callback: Callable[[], None]) -> None:
        callback()

    def sync(self) -> None:
        self._check_open()

    def close(self) -> None:
        self._closed = True

    def delete(self, on_error: Callable[[OSError], None] | None = None) -> None:
        self.close()


def encode_snapshot(gen: int, st: ConsumerState) -> bytes:
    parts = [
        record.SNAP_HEAD.pack(
            gen,
            st.delivered_consumer_seq,
            st.delivered_stream_seq,
            st.ack_floor_consumer_seq,
            st.ack_floor_stream_seq,
            len(st.pending),
            len(st.redelivered),
        )
    ]
    parts += [record.SNAP_PENDING.pack(s, c, ts) for s, (c, ts) in st.pending.items()]
    parts += [record.SNAP_REDELIVERED.pack(s, n) for s, n in st.redelivered.items()]
    return record.encode_frame(record.KIND_SNAPSHOT, b"".join(parts))


def decode_snapshot(payload: bytes) -> tuple[int, ConsumerState]:
    gen, dc, ds, fc, fs, n_pending, n_redelivered = record.SNAP_HEAD.unpack_from(payload)
    st = ConsumerState(dc, ds, fc, fs)
    at = record.SNAP_HEAD.size
    for s, c, ts in record.SNAP_PENDING.iter_unpack(payload[at : at + n_pending * record.SNAP_PENDING.size]):
        st.pending[s] = (c, ts)
    at += n_pending * record.SNAP_PENDING.size
    for s, n in record.SNAP_REDELIVERED.iter_unpack(
        payload[at : at + n_redelivered * record.SNAP_REDELIVERED.size]
    ):
        st.redelivered[s] = n
    return gen, st


class FileConsumerStore(MemoryConsumerStore):
    def __init__(self, directory: Path, sync: SyncPolicy) -> None:
        super().__init__()
        self._dir = Path(directory)
        self._sync = sync
        self._dir.mkdir(parents=True, exist_ok=True)
        self._gen = 0
        self._snap_size = 0
        self._log_size = 0
        self._dirty = False
        self._fd = -1
        self._buf: list[bytes] = []  # updates not yet written (kind byte + payload), one batch frame per flush
        self._floor: tuple[int, int, int] | None = None  # the latest unwritten ack-none floor
        self._hook: Callable[[], None] | None = None
        self._failed: str | None = None  # an fsync failed in the syncer's thread: the store stopped
        self._recover()

    def has_state(self) -> bool:
        """Always: the state is on disk from the creation on (nats-server's file store HasState)."""
        return True

    def _log_path(self, gen: int) -> Path:
        return self._dir / f"state.log.{gen}"

    def _recover(self) -> None:
        snap = self._dir / "state.snap"
        if snap.exists():
            data = snap.read_bytes()
            try:
                kind, payload, _ = record.decode_frame(data)
                if kind != record.KIND_SNAPSHOT:
                    raise record.RecordError(f"unexpected kind {kind!r}")
                self._gen, self._state = decode_snapshot(payload)
                self._snap_size = len(data)
            except (record.RecordError, ValueError) as e:  # only a rename makes it: should never happen
                log.error("consumer store %s: unreadable snapshot (%s); replaying the log alone", self._dir, e)
        # A compaction switches to the next log at once and renames its snapshot later (in the syncer's
        # thread): until then every log from the snapshot's generation on holds updates the snapshot lacks.
        snap_gen = gen = self._gen
        while self._log_path(gen).exists():
            self._log_size = self._replay(self._log_path(gen))
            gen += 1
        self._gen = max(gen - 1, snap_gen)
        for stale in self._dir.glob("state.log.*"):
            suffix = stale.name.rsplit(".", 1)[1]
            if not suffix.isdigit() or int(suffix) < snap_gen:
                stale.unlink()
        self._fd = os.open(self._log_path(self._gen), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if self._gen > snap_gen:  # back to one snapshot and one log
            self._snapshot()

    def _replay(self, path: Path) -> int:
        """Apply the updates of one log (a torn tail is truncated); returns its length."""
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            try:
                kind, payload, length = record.decode_frame(data, offset)
            except record.RecordError as e:
                log.warning("consumer store %s: dropping torn log tail at %d of %d bytes: %s",
                            self._dir, offset, len(data), e)
                os.truncate(path, offset)
                break
            try:
                updates = list(record.batch_updates(payload)) if kind == record.KIND_BATCH else [(kind, payload)]
            except record.RecordError as e:  # checksummed, so written wrong: keep what came before
                log.error("consumer store %s: unreadable batch at %d: %s; dropping the log from there",
                          self._dir, offset, e)
                os.truncate(path, offset)
                break
            for kind, payload in updates:
                if kind == record.KIND_DELIVERED:
                    apply_delivered(self._state, *record.DELIVERED.unpack(payload))
                elif kind == record.KIND_ACK:
                    apply_ack(self._state, *record.ACK.unpack(payload))
                elif kind == record.KIND_DROPPED:
                    apply_dropped(self._state, *record.DELIVERED.unpack(payload))
            offset += length
        return offset

    def set_flush_hook(self, hook: Callable[[], None]) -> None:
        self._hook = hook

    def update_delivered(self, consumer_seq: int, stream_seq: int, delivery_count: int, ts: int) -> None:
        if self._closed:
            self._check_open()
        apply_delivered(self._state, consumer_seq, stream_seq, delivery_count, ts)
        buf = self._buf
        buf.append(_pack_delivered(record.KIND_DELIVERED, consumer_seq, stream_seq, delivery_count, ts))
        if len(buf) == 1 and self._floor is None:
            self._buffered()

    def update_acks(self, consumer_seq: int, stream_seq: int, ack_all: bool = False) -> None:
        if self._closed:
            self._check_open()
        apply_ack(self._state, consumer_seq, stream_seq, ack_all)
        buf = self._buf
        buf.append(_pack_ack(record.KIND_ACK, consumer_seq, stream_seq, ack_all))
        if len(buf) == 1 and self._floor is None:
            self._buffered()

    def update_dropped(self, consumer_seq: int, stream_seq: int, delivery_count: int, ts: int) -> None:
        super().update_dropped(consumer_seq, stream_seq, delivery_count, ts)
        self._buf.append(_pack_delivered(record.KIND_DROPPED, consumer_seq, stream_seq, delivery_count, ts))
        if len(self._buf) == 1 and self._floor is None:
            self._buffered()

    def update_acks_many(self, acks: list[tuple[int, int]]) -> None:
        if self._closed:
            self._check_open()
        st, buf, kind = self._state, self._buf, record.KIND_ACK
        first = not buf and self._floor is None
        for consumer_seq, stream_seq in acks:
            apply_ack(st, consumer_seq, stream_seq, False)
            buf.append(_pack_ack(kind, consumer_seq, stream_seq, False))
        if first and buf:
            self._buffered()

    def _floor_moved(self, consumer_seq: int, stream_seq: int, ts: int) -> None:
        first = not self._buf and self._floor is None
        self._floor = (consumer_seq, stream_seq, ts)
        if first:
            self._buffered()

    def _buffered(self) -> None:
        if self._hook is None:
            self.flush()
        else:
            self._hook()

    def flush(self) -> None:
        if self._closed:
            return
        if self._failed is not None:
            raise StoreError(self._failed)
        if self._floor is not None:
            dseq, sseq, ts = self._floor
            self._floor = None
            self._buf.append(_pack_delivered(record.KIND_DELIVERED, dseq, sseq, 1, ts))
            self._buf.append(_pack_ack(record.KIND_ACK, dseq, sseq, False))
        if not self._buf:
            return
        data = record.encode_frame(record.KIND_BATCH, b"".join(self._buf))
        self._buf.clear()
        try:
            write_all(self._fd, data)
            self._log_size += len(data)
            self._dirty = True
            if self._sync.always:
                self._sync.fsync(self._fd, self._fd_key, self._sync_failed)
                self._dirty = False
            if self._log_size > max(_COMPACT_MIN, 4 * self._snap_size):
                self._snapshot()
        except OSError as e:
            raise StoreError(f"consumer store {self._dir}: write failed ({e}); free disk space or fix the "
                             "device, then restart the server") from e

    def _snapshot(self) -> None:
        """Write the whole state as generation gen+1 and switch to an empty log for it. The switch is made at
        once; the snapshot's fsync and rename (and the directory's fsync), then the old log's removal, follow
        in that order (in the syncer's thread when there is one). Until the rename an open finds the old
        snapshot and replays the old log and the new one (`_recover`): the same state."""
        gen = self._gen + 1
        data = encode_snapshot(gen, self._state)
        new_fd = os.open(self._log_path(gen), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        self._buf.clear()  # the snapshot holds every buffered update
        self._floor = None
        old_log = self._log_path(self._gen)
        os.close(self._fd)  # (a queued fsync of it has its own descriptor)
        self._fd, self._gen, self._snap_size, self._log_size, self._dirty = new_fd, gen, len(data), 0, False
        self._sync.replace(self._dir / "state.snap", data, self._sync_failed)
        self._sync.then(lambda: old_log.unlink(missing_ok=True), old_log, self._sync_failed)

    def when_durable(self, callback: Callable[[], None]) -> None:
        if self._sync.always:
            self._sync.when_durable(self._dir, callback)
        else:
            callback()

    @property
    def _fd_key(self) -> Path:
        return self._log_path(self._gen)

    def _sync_failed(self, error: OSError) -> None:
        """An fsync failed in the syncer's thread: the next flush raises (no ack it carries is confirmed)."""
        if self._failed is None:
            self._failed = (f"consumer store {self._dir}: fsync failed ({error}); free disk space or fix the "
                            "device, then restart the server")
            log.error(self._failed)

    def sync(self) -> None:
        self._check_open()
        self.flush()
        if self._dirty:
            self._sync.fsync(self._fd, self._fd_key, self._sync_failed)
            self._dirty = False

    def close(self) -> None:
        if self._closed:
            return
        self.sync()
        self._hook = None
        os.close(self._fd)
        self._closed = True

    def delete(self, on_error: Callable[[OSError], None] | None = None) -> None:
        """Close and remove the consumer directory (`on_error`: the removal failed in the syncer's thread)."""
        if not self._closed:
            os.close(self._fd)
            self._closed = True
        self._sync.remove_dir(self._dir, on_error or self._sync_failed)
