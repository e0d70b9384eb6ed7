"""Durable consumer state stores.

Owns the rules that turn delivered/ack updates into a `ConsumerState` (nats-server's consumer store rules:
pending by stream seq, redelivery counts, the ack floor) and two ways to keep it:
- MemoryConsumerStore: the state in memory (consumers of memory streams).
- FileConsumerStore: the same plus `<consumer_dir>/state.log.<gen>`, an append-only log of checksummed
  updates (record.py, consumer section), compacted now and then into `state.snap` (gen + full state,
  written to a temp file, fsynced and renamed). Opening loads the snapshot and replays only the log of
  the snapshot's generation, so a crash between writing a snapshot and starting its log loses nothing;
  a torn log tail is dropped (truncated) and logged. Every update is written before the call returns;
  with SyncPolicy.always it is fsynced too.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
from pathlib import Path

from . import record
from .base import ConsumerState, StoreClosed, StoreError, SyncPolicy

log = logging.getLogger(__name__)

_COMPACT_MIN = 1 << 20  # compact the log once it is this large and 4x the last snapshot


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def apply_delivered(st: ConsumerState, consumer_seq: int, stream_seq: int, delivery_count: int, ts: int) -> None:
    if consumer_seq <= st.ack_floor_consumer_seq:
        return  # an old delivery replayed: already acked
    if stream_seq <= st.delivered_stream_seq:
        pending = st.pending.get(stream_seq)
        if pending is not None:  # redelivery keeps the original consumer seq
            st.pending[stream_seq] = (pending[0], ts)
    else:
        st.pending[stream_seq] = (consumer_seq, ts)
    st.delivered_consumer_seq = max(st.delivered_consumer_seq, consumer_seq)
    st.delivered_stream_seq = max(st.delivered_stream_seq, stream_seq)
    if delivery_count > 1 and st.redelivered.get(stream_seq, 0) < delivery_count:
        st.redelivered[stream_seq] = delivery_count


def apply_ack(st: ConsumerState, consumer_seq: int, stream_seq: int, ack_all: bool) -> None:
    if consumer_seq <= st.ack_floor_consumer_seq:
        return
    if stream_seq not in st.pending:
        st.redelivered.pop(stream_seq, None)
        return
    if ack_all:
        st.ack_floor_consumer_seq, st.ack_floor_stream_seq = consumer_seq, stream_seq
        for seq in [s for s in st.pending if s <= stream_seq]:
            del st.pending[seq]
            st.redelivered.pop(seq, None)
        return
    original = st.pending.pop(stream_seq)[0]
    if 0 < original < consumer_seq:
        consumer_seq = original
    if not st.pending:
        st.ack_floor_consumer_seq = st.delivered_consumer_seq
        st.ack_floor_stream_seq = st.delivered_stream_seq
    elif consumer_seq == st.ack_floor_consumer_seq + 1:
        st.ack_floor_consumer_seq, st.ack_floor_stream_seq = consumer_seq, stream_seq
        above = [s for s in st.pending if s > stream_seq]
        if above and st.delivered_consumer_seq > consumer_seq:
            nxt = min(above)
            st.ack_floor_consumer_seq, st.ack_floor_stream_seq = st.pending[nxt][0] - 1, nxt - 1
    st.redelivered.pop(stream_seq, None)


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

    def update_delivered(self, consumer_seq: int, stream_seq: int, delivery_count: int, ts: int) -> None:
        self._check_open()
        apply_delivered(self._state, consumer_seq, stream_seq, delivery_count, ts)
        self._logged(record.KIND_DELIVERED, record.DELIVERED.pack(consumer_seq, stream_seq, delivery_count, ts))

    def update_acks(self, consumer_seq: int, stream_seq: int, ack_all: bool = False) -> None:
        self._check_open()
        apply_ack(self._state, consumer_seq, stream_seq, ack_all)
        self._logged(record.KIND_ACK, record.ACK.pack(consumer_seq, stream_seq, ack_all))

    def reset(self, state: ConsumerState) -> None:
        self._check_open()
        self._state = copy.deepcopy(state)
        self._snapshot()

    def _logged(self, kind: bytes, payload: bytes) -> None:
        """Persist one update (memory: nothing to do)."""

    def _snapshot(self) -> None:
        """Persist the whole state (memory: nothing to do)."""

    def sync(self) -> None:
        self._check_open()

    def close(self) -> None:
        self._closed = True

    def delete(self) -> None:
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
        self._recover()

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
        path = self._log_path(self._gen)
        data = path.read_bytes() if path.exists() else b""
        offset = 0
        while offset < len(data):
            try:
                kind, payload, length = record.decode_frame(data, offset)
            except record.RecordError as e:
                log.warning("consumer store %s: dropping torn log tail at %d of %d bytes: %s",
                            self._dir, offset, len(data), e)
                os.truncate(path, offset)
                break
            if kind == record.KIND_DELIVERED:
                apply_delivered(self._state, *record.DELIVERED.unpack(payload))
            elif kind == record.KIND_ACK:
                apply_ack(self._state, *record.ACK.unpack(payload))
            offset += length
        self._log_size = offset
        for stale in self._dir.glob("state.log.*"):
            if stale != path:
                stale.unlink()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _logged(self, kind: bytes, payload: bytes) -> None:
        frame = record.encode_frame(kind, payload)
        try:
            _write_all(self._fd, frame)
            self._log_size += len(frame)
            self._dirty = True
            if self._sync.always:
                self.sync()
            if self._log_size > max(_COMPACT_MIN, 4 * self._snap_size):
                self._snapshot()
        except OSError as e:
            raise StoreError(f"consumer store {self._dir}: write failed ({e}); free disk space or fix the "
                             "device, then restart the server") from e

    def _snapshot(self) -> None:
        """Write the whole state as generation gen+1, then start (and switch to) an empty log for it."""
        gen = self._gen + 1
        data = encode_snapshot(gen, self._state)
        tmp = self._dir / "state.snap.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._dir / "state.snap")
        new_fd = os.open(self._log_path(gen), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        dfd = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        os.close(self._fd)
        self._log_path(self._gen).unlink(missing_ok=True)
        self._fd, self._gen, self._snap_size, self._log_size, self._dirty = new_fd, gen, len(data), 0, False

    def sync(self) -> None:
        self._check_open()
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        if self._closed:
            return
        self.sync()
        os.close(self._fd)
        self._closed = True

    def delete(self) -> None:
        """Close and remove the consumer directory."""
        if not self._closed:
            os.close(self._fd)
            self._closed = True
        shutil.rmtree(self._dir, ignore_errors=True)
