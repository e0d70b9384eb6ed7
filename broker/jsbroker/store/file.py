"""FileStore: a crash-safe StreamStore on append-only block files (storage: file).

Owns the stream's `msgs/` directory: block files `NNNNNNNN.blk` (records as in record.py), appends,
reads by pread, recovery on open (from the index snapshot plus what was appended since, or by scanning
every block), and removal of emptied blocks. Bookkeeping (index, limits, purge rules) is `IndexedStore`'s;
bodies stay on disk, RAM holds only the index (see README.md for numbers).

Write path: every public call collects its records and hands them to the OS in one os.writev before it
returns; with `SyncPolicy.always` the block is fdatasync'ed first. `store_deferred` leaves its records
pending until `flush()` (or the next writing call, or a read of a pending record). A block is closed (and fsynced) at
`block_size`; each new block starts with a floor record, so the newest block alone knows first/last seq.

Reads check a record's frame (whole, length, kind, seq as the index says) but not its CRC, which a scan
checked (at this open or, through the index snapshot, an earlier one) or this store wrote the record
(README.md, "Recovery").

Index snapshot: a clean close and every `checkpoint()` (the stream layer's timer) write `msgs/index.snap`
(index_snapshot.py). Blocks only ever change by appends to the active block, new blocks, removal of
emptied blocks, rewrites (which shrink a block) and erasures (which a tombstone or floor record follows),
so an open loads the snapshot and replays the records appended since when: every closed block it lists
is either gone (emptied: its rows are dropped) or has its size and last 4 bytes, its active block still
starts with the bytes it had (CRC), and every other block file is newer. Anything doubtful about it means
a full scan, never a partial load.

Block indexes: a closed block gets `NNNNNNNN.idx` (its rows, tombstones and accounting, and the CRC32 of
the whole file, in the snapshot's format) at the commit after it closed, again after a rewrite or an erasure
in it. Where recovery would scan a closed block, it loads the block's index instead when the block is still
exactly those bytes; only the active block is always scanned (README.md, "Recovery").

Recovery by scan (no usable snapshot or block index): every block is scanned and every record's CRC checked.
- A bad record followed somewhere later in the same block by a valid one (found by re-synchronising on
  the next offset whose record validates): the bad bytes are skipped, the seqs missing between the
  last good message and the next one are reported in `state().lost`.
- A bad record with nothing valid after it (a torn tail): the block is truncated to the last good record;
  the torn message's seq, when its header is readable, is reported in `lost`.
The store always opens; problems are logged.

Removal: a delete writes a tombstone ("D") record, a front removal a floor ("F") record. A block whose
messages are all gone is unlinked (after re-appending the tombstones it holds for older blocks); a big
block that is mostly removed is rewritten with its live records only; the active block is never touched.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import mmap
import os
import re
import struct
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import index_snapshot, record
from .base import StoreError, StoreFull, StoreLimits
from .disk_room import DiskRoom
from .durable import fsync_dir, replace_file
from .indexed import IndexedStore
from .syncer import SyncPolicy

log = logging.getLogger(__name__)

BLOCK_SIZE = 8 << 20
# A location is hdr_flag << 63 | block << 40 | offset; the flag (the message has a header) turns the
# accounted size back into our record length.
_LOC_SHIFT = 40
_OFFSET_MASK = (1 << _LOC_SHIFT) - 1
_BLOCK_MASK = (1 << 23) - 1
_HDR_FLAG = 1 << 63
_BLOCK_BITS = _BLOCK_MASK << _LOC_SHIFT
_READ_FDS = 32  # open read descriptors kept per store
_MAX_IOV = 512  # beyond this many records, join them for one write
_READ_GAP = 4096  # batch reads read through gaps up to this (a memcpy is cheaper than another pread)
_READ_MAX = 1 << 20  # and start another pread past this many bytes (one record may be longer)
_unpack_frame, _HEADER_SIZE, _CRC_SIZE = record.MSG_FRAME.unpack_from, record.HEADER.size, record.CRC.size
_CANDIDATE = re.compile(rb"(?s)(?=....[MDF])")  # where a record could start (for re-synchronising)
_MAX_LOST_REPORTED = 100_000
SNAPSHOT = "index.snap"  # in msgs/: the index as of the last checkpoint or clean close (index_snapshot.py)
BLOCK_INDEX = ".idx"  # NNNNNNNN.idx beside NNNNNNNN.blk: that block's rows as of when it was sealed


@dataclass(slots=True)
class _Block:
    no: int
    path: Path
    size: int = 0  # bytes in the file (written)
    live: int = 0  # live messages stored in it
    live_bytes: int = 0  # their record bytes
    first_seq: int = 0  # first and last message seq ever written to it
    last_seq: int = 0
    tombs: array = field(default_factory=lambda: array("Q"))  # its tombstones for seqs in older blocks

    def add(self, seq: int, length: int) -> None:
        self.live += 1
        self.live_bytes += length
        self.first_seq = self.first_seq or seq
        self.last_seq = seq

    def remove(self, length: int) -> None:
        self.live -= 1
        self.live_bytes -= length


def _block_of(loc: int) -> int:
    return loc >> _LOC_SHIFT & _BLOCK_MASK


def _rec_len(loc: int, size: int) -> int:
    """Our record length of the message at `loc` with accounted size `size`."""
    return size + (record.LEN_MINUS_FILE_SIZE_HDR if loc >= _HDR_FLAG else record.LEN_MINUS_FILE_SIZE)


def _decode_adjacent(buf: bytes, seqs: list[int], hdrs: list[bytes], datas: list[bytes]) -> int:
    """Decode the records lying back to back from the start of `buf` while they are the messages `seqs`
    in order (the usual run: no removed message in between); returns how many were. Each record found so
    starts where the one before it ends, so the walk agrees with the index when it ends exactly where
    `buf` (sized by the index) ends; when it stops short, the last record walked (whose length may have
    led it astray) is left to the index with the rest. The per-message cost of a read is this loop."""
    unpack, hdr_at, crc_size, size = _unpack_frame, _HEADER_SIZE, _CRC_SIZE, len(buf)
    add_hdr, add_data = hdrs.append, datas.append
    pos = done = 0
    for seq in seqs:
        if pos + hdr_at > size:
            break
        length, kind, got, slen, hlen = unpack(buf, pos)
        end = pos + length
        if got != seq or kind != b"M" or end > size or length < hdr_at + slen + hlen + crc_size:
            break
        at = pos + hdr_at + slen
        add_hdr(buf[at : at + hlen])
        add_data(buf[at + hlen : end - crc_size])
        pos = end
        done += 1
    else:
        if pos == size:
            return done
    if done:
        hdrs.pop()
        datas.pop()
        done -= 1
    return done


def _head_crc(path: Path, size: int) -> int:
    """crc32 of the first `size` bytes of a file, -1 when it is shorter (read through a mapping: a heap
    buffer of a whole block would stay in the process's RSS after it is freed)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < size:
            return -1
        if size == 0:
            return 0
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
            return zlib.crc32(mm)


def _mapped(path: Path) -> mmap.mmap:
    """A read-only mapping of a whole file (not a heap copy: recovery reads one per block, and freed heap
    stays in the RSS). It is unmapped once nothing refers to it, or to a view of it, any more."""
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _size_and_tail(path: Path) -> tuple[int, int]:
    """A block file's size and its last 4 bytes (the last record's CRC) as an int, 0 when shorter."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return size, int.from_bytes(os.pread(fd, 4, size - 4), "big") if size >= 4 else 0
    finally:
        os.close(fd)


class FileStore(IndexedStore):
    _account = staticmethod(record.file_size)

    def __init__(
        self, directory: Path, limits: StoreLimits, sync: SyncPolicy, block_size: int = BLOCK_SIZE
    ) -> None:
        super().__init__(limits)
        self._dir = Path(directory)
        self._msgs_dir = self._dir / "msgs"
        self._sync = sync
        self._block_size = block_size
        self._blocks: dict[int, _Block] = {}  # by number, oldest first
        self._wfd = -1
        self._active = _Block(0, self._msgs_dir / "none")
        self._rfds: OrderedDict[int, int] = OrderedDict()
        self._pending: list[bytes] = []  # record parts for the next write
        self._pending_len = 0
        self._floor_dirty = False
        self._dirty = False  # written, not yet fsynced
        self._dir_dirty = False  # a block file was created or removed since the last fsync
        self._doomed: list[_Block] = []  # emptied blocks to unlink at the next commit
        self._unindexed: set[int] = set()  # closed blocks whose index file is due (new, or erased in)
        self._sparse_blocks: set[int] = set()  # mostly-removed blocks to rewrite at the next commit
        self._damaged = False  # a read found a record other than the index says: no snapshot at close
        self._checkpointed: tuple[int, int, int] | None = None  # (active block, its size, blocks) at the last
        self._msgs_dir.mkdir(parents=True, exist_ok=True)
        self._room = DiskRoom(self._msgs_dir)
        self._room_left = 0  # bytes of messages that may still be appended before the room is asked again
        self._recover()

    # ---- blocks and writes --------------------------------------------------------------------------
    def _block_path(self, no: int) -> Path:
        return self._msgs_dir / f"{no:08d}.blk"

    def _block_index_path(self, no: int) -> Path:
        return self._msgs_dir / f"{no:08d}{BLOCK_INDEX}"

    def _open_active(self, blk: _Block) -> None:
        if self._wfd >= 0:
            os.close(self._wfd)
        self._active = blk
        self._wfd = os.open(blk.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _roll(self) -> None:
        """Close the active block (flushed and fsynced) and start the next one with a floor record."""
        self._flush()
        if self._wfd >= 0:
            self._sync.fsync(self._wfd, self._active.path, self._sync_failed)
            self._dirty = False
        old = self._active
        if old.live == 0 and old.no in self._blocks:
            self._doomed.append(old)
        elif old.no in self._blocks:
            self._unindexed.add(old.no)
        blk = _Block(old.no + 1, self._block_path(old.no + 1))
        self._blocks[blk.no] = blk
        self._open_active(blk)
        self._dir_dirty = True
        if self._sync.always:
            self._sync.fsync_dir(self._msgs_dir, self._sync_failed)
            self._dir_dirty = False
        self._floor_dirty = False
        self._queue(self._floor_record())

    def _queue(self, rec: bytes) -> tuple[_Block, int]:
        """Append a record to the pending write; returns (block, offset) where it will land."""
        used = self._active.size + self._pending_len
        if used and used + len(rec) > self._block_size:
            try:
                self._roll()
            except OSError as e:
                self._fail(e)
            used = self._active.size + self._pending_len
        self._pending.append(rec)
        self._pending_len += len(rec)
        return self._active, used

    def _flush(self) -> None:
        if not self._pending:
            return
        if len(self._pending) == 1:
            written = os.write(self._wfd, self._pending[0])
        elif len(self._pending) <= _MAX_IOV:
            written = os.writev(self._wfd, self._pending)
        else:
            self._pending = [b"".join(self._pending)]
            written = os.write(self._wfd, self._pending[0])
        if written < self._pending_len:  # rare short write: finish it byte-exact
            rest = memoryview(b"".join(self._pending))[written:]
            while rest:
                rest = rest[os.write(self._wfd, rest) :]
        self._active.size += self._pending_len
        self._pending.clear()
        self._pending_len = 0
        self._dirty = True

    def _floor_record(self) -> bytes:
        floor = self._first if self._msgs else self._last + 1
        return record.encode_floor(self._last, self._last_ts, floor)

    def _rfd(self, no: int) -> int:
        fd = self._rfds.get(no)
        if fd is not None:
            self._rfds.move_to_end(no)
            return fd
        fd = os.open(self._block_path(no), os.O_RDONLY)
        self._rfds[no] = fd
        if len(self._rfds) > _READ_FDS:
            os.close(self._rfds.popitem(last=False)[1])
        return fd

    def _unlink_doomed(self) -> None:
        """Remove emptied blocks, first re-appending the tombstones they hold for older live blocks."""
        doomed = {b.no for b in self._doomed if b is not self._active and b.live == 0}
        self._doomed.clear()
        if not doomed:
            return
        for no in sorted(doomed):
            for seq in self._blocks[no].tombs:
                if self._still_needed(seq, no, doomed):
                    blk, _ = self._queue(record.encode_delete(seq))
                    blk.tombs.append(seq)
        self._flush()
        self._sync.fsync(self._wfd, self._active.path, self._sync_failed)
        self._dirty = False
        paths: list[Path] = []
        for no in doomed:
            blk = self._blocks.pop(no)
            fd = self._rfds.pop(no, None)
            if fd is not None:
                os.close(fd)
            paths += blk.path, self._block_index_path(no)

        def unlink() -> None:  # after that fsync: the re-appended tombstones must be on disk before their originals go
            for path in paths:
                path.unlink(missing_ok=True)

        self._sync.then(unlink, self._msgs_dir, self._sync_failed)
        self._dir_dirty = True

    def _rewrite_sparse(self) -> None:
        """Rewrite mostly-removed closed blocks with only their live messages and the tombstones they hold
        for older blocks (temp file, fsync, rename): the same records in the same order, minus the dead."""
        for no in sorted(self._sparse_blocks):
            blk = self._blocks.get(no)
            if blk is not None and blk is not self._active and blk.live and self._sparse(blk):
                self._rewrite(blk)
        self._sparse_blocks.clear()

    def _rewrite(self, blk: _Block) -> None:
        keep = [seq for seq in blk.tombs if self._still_needed(seq, blk.no, ())]
        out = [record.encode_delete(seq) for seq in keep]
        offset = len(out) * record.OVERHEAD
        moved: list[tuple[int, int]] = []  # (row, new offset)
        fd = self._rfd(blk.no)
        lo = max(blk.first_seq, self._first) - self._base
        for i in range(max(lo, 0), min(blk.last_seq - self._base + 1, len(self._sids))):
            loc = self._locs[i]
            if self._sids[i] and _block_of(loc) == blk.no:
                rec = os.pread(fd, _rec_len(loc, self._sizes[i]), loc & _OFFSET_MASK)
                out.append(rec)
                moved.append((i, offset))
                offset += len(rec)
        os.close(self._rfds.pop(blk.no))
        replace_file(blk.path, b"".join(out), sync_dir=False)  # the directory is fsynced with the next change
        self._dir_dirty = True
        for i, new_offset in moved:
            self._locs[i] = self._locs[i] & _HDR_FLAG | blk.no << _LOC_SHIFT | new_offset
        blk.size, blk.tombs = offset, array("Q", keep)
        self._write_block_index(blk)

    def _index_closed(self) -> None:
        """Write the index of each block closed (or erased in) since the last commit, once its records are
        all written, so that an open after a crash reads it instead of scanning the block."""
        for no in sorted(self._unindexed):
            blk = self._blocks.get(no)
            if blk is not None and blk is not self._active and blk.live:
                self._write_block_index(blk)
        self._unindexed.clear()

    def _write_block_index(self, blk: _Block) -> None:
        """`NNNNNNNN.idx`: the closed block's rows, the tombstones it holds, its accounting and the crc32 of
        all its bytes, in the index snapshot's format; not fsynced with the directory (a lost or torn one only
        costs a scan)."""
        path = self._block_index_path(blk.no)
        try:
            parts = index_snapshot.encode_parts(self._range_image(blk.first_seq, blk.last_seq),
                                                [self._block_image(blk, with_crc=True)])
            try:
                replace_file(path, parts, sync_dir=False, sync=False)
            finally:
                index_snapshot.release(parts)
        except Exception as e:  # noqa: BLE001 - a missing block index only costs the next open a scan
            log.warning("stream store %s: no index for block %d (%s: %s); a recovery would scan it",
                        self._dir, blk.no, type(e).__name__, e)
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)

    def _still_needed(self, seq: int, holder: int, going: set[int] | tuple[()]) -> bool:
        """Whether the tombstone for `seq` held by block `holder` still hides a message record on disk:
        an interior gap whose message sits in another block that stays."""
        i = seq - self._base
        if not (self._msgs and seq > self._first and i < len(self._sids) and not self._sids[i]):
            return False
        target = _block_of(self._locs[i])
        return target != holder and target in self._blocks and target not in going

    # ---- IndexedStore hooks -------------------------------------------------------------------------
    def _put(self, seq: int, ts: int, ttl: int, subject: bytes, hdr: bytes, data: bytes) -> int:
        rec = record.encode_msg(seq, ts, ttl, subject, hdr, data)
        self.check_room(len(rec))  # before anything changed: a message refused is simply not stored
        blk, offset = self._queue(rec)
        blk.add(seq, len(rec))
        return (_HDR_FLAG if hdr else 0) | blk.no << _LOC_SHIFT | offset

    def check_room(self, size: int) -> None:
        if size > self._room_left:
            had_room = not self._room.full
            left = self._room.grant(size)
            if left < 0:
                self._room_left = 0
                raise StoreFull(f"no room for {size} bytes of messages on the volume of {self._dir}", had_room)
            self._room_left = left
        self._room_left -= size

    def _get(self, seq: int, loc: int, size: int) -> tuple[bytes, bytes] | None:
        no, offset = _block_of(loc), loc & _OFFSET_MASK
        if self._pending and no == self._active.no and offset >= self._active.size:
            try:
                self._flush()  # a store_deferred record is read before its flush
            except OSError as e:
                self._fail(e)
        fd = self._rfds.get(no)
        try:
            buf = os.pread(self._rfd(no) if fd is None else fd, _rec_len(loc, size), offset)
            return record.decode_msg(buf, seq)
        except (OSError, record.RecordError, struct.error) as e:
            log.error("stream store %s: unreadable message seq=%d in block %d: %s", self._dir, seq, no, e)
            self._damaged = True
            return None

    def _read_many(self, seqs: list[int], rows: list[int]) -> tuple[list[int], list[bytes], list[bytes]]:
        """Records close together in one block are read with one pread and decoded straight from it."""
        locs = self._locs
        if self._pending and self._is_pending(locs[rows[-1]]):  # the newest seq is the last to be flushed
            try:
                self._flush()
            except OSError as e:
                self._fail(e)
        hdrs: list[bytes] = []
        datas: list[bytes] = []
        bad: list[int] = []
        if self._one_run(rows, 0):  # the usual batch
            self._read_run(seqs, rows, hdrs, datas, bad)
        else:
            k = 0
            while k < len(seqs):
                m = self._run_end(rows, k)
                self._read_run(seqs[k:m], rows[k:m], hdrs, datas, bad)
                k = m
        if bad:
            dropped = set(bad)
            seqs = [seq for seq in seqs if seq not in dropped]
        return seqs, hdrs, datas

    def _read_records(self, seqs: list[int], rows: list[int]) -> list[bytes]:
        """The records as they lie on disk, one pread per run. A run of consecutive seqs (the usual one:
        nothing removed among them) is handed over as read: nothing but their records and tombstones or
        floor records lie between its first and last record (a block holds its messages in seq order,
        each once). Other runs are cut to their messages' records, each frame checked."""
        if self._pending and self._is_pending(self._locs[rows[-1]]):
            try:
                self._flush()
            except OSError as e:
                self._fail(e)
        pieces: list[bytes] = []
        k = 0
        while k < len(seqs):
            m = self._run_end(rows, k)
            if seqs[m - 1] - seqs[k] == m - 1 - k:
                self._whole_run(seqs[k], rows[k], rows[m - 1], pieces)
            else:
                self._records_of_run(seqs[k:m], rows[k:m], pieces)
            k = m
        return pieces

    def _whole_run(self, seq: int, first_row: int, last_row: int, pieces: list[bytes]) -> None:
        buf = self._read_span(seq, first_row, last_row)
        if buf is not None:
            pieces.append(buf)

    def _read_span(self, seq: int, first_row: int, last_row: int) -> bytes | None:
        """The bytes of one block from the record at `first_row` to the end of the one at `last_row` (one
        pread); None when it cannot be read (logged, the store marked damaged). `seq`: the first's, for the log."""
        first, last = self._locs[first_row], self._locs[last_row]
        no, start = _block_of(first), first & _OFFSET_MASK
        span = (last & _OFFSET_MASK) + _rec_len(last, self._sizes[last_row]) - start
        fd = self._rfds.get(no)
        try:
            return os.pread(self._rfd(no) if fd is None else fd, span, start)
        except OSError as e:
            log.error("stream store %s: unreadable messages from seq=%d in block %d: %s", self._dir, seq, no, e)
            self._damaged = True
            return None

    def _records_of_run(self, seqs: list[int], rows: list[int], pieces: list[bytes]) -> None:
        """Append the records of one run, read with one pread, as the pieces of it that hold them: each
        record's frame (length, kind, seq as the index says) is checked, not its CRC (README.md,
        "Recovery"); a record that fails is logged and left out."""
        locs, sizes = self._locs, self._sizes
        buf = self._read_span(seqs[0], rows[0], rows[-1])
        if buf is None:
            return
        no, start = _block_of(locs[rows[0]]), locs[rows[0]] & _OFFSET_MASK
        size = len(buf)
        piece_at = piece_end = 0  # the piece of `buf` being extended: records back to back
        for seq, row in zip(seqs, rows):
            loc = locs[row]
            pos = (loc & _OFFSET_MASK) - start
            length = _rec_len(loc, sizes[row])
            try:
                got_len, kind, got, slen, hlen = _unpack_frame(buf, pos)
            except struct.error:  # the file is shorter than the index says
                got_len, kind, got, slen, hlen = 0, b"", 0, 0, 0
            if got != seq or kind != b"M" or got_len != length or pos + length > size or \
                    length < _HEADER_SIZE + slen + hlen + _CRC_SIZE:
                log.error("stream store %s: unreadable message seq=%d in block %d: found %r seq %d of %d bytes",
                          self._dir, seq, no, kind, got, got_len)
                self._damaged = True
                continue
            if pos != piece_end:
                if piece_end > piece_at:
                    pieces.append(buf[piece_at:piece_end])
                piece_at = pos
            piece_end = pos + length
        if piece_at == 0 and piece_end == size:
            pieces.append(buf)
        elif piece_end > piece_at:
            pieces.append(buf[piece_at:piece_end])

    def _is_pending(self, loc: int) -> bool:
        return _block_of(loc) == self._active.no and loc & _OFFSET_MASK >= self._active.size

    def _one_run(self, rows: list[int], k: int) -> bool:
        """Whether rows[k:] are one run: in one block, at most _READ_GAP bytes apart on average (the bytes
        between records are read through, not skipped), the last starting within _READ_MAX."""
        first, last = self._locs[rows[k]], self._locs[rows[-1]]
        return (first ^ last) & _BLOCK_BITS == 0 and \
            (last & _OFFSET_MASK) - (first & _OFFSET_MASK) <= min((len(rows) - k) * _READ_GAP, _READ_MAX)

    def _run_end(self, rows: list[int], k: int) -> int:
        """The end of the run starting at rows[k]: records in one block, no gap above _READ_GAP, each
        starting within _READ_MAX of the first."""
        locs, sizes = self._locs, self._sizes
        if self._one_run(rows, k):
            return len(rows)
        no, begin = _block_of(locs[rows[k]]), locs[rows[k]] & _OFFSET_MASK
        end = begin
        for m in range(k, len(rows)):
            loc = locs[rows[m]]
            offset = loc & _OFFSET_MASK
            if m > k and (_block_of(loc) != no or offset - end > _READ_GAP or offset - begin > _READ_MAX):
                return m
            end = offset + _rec_len(loc, sizes[rows[m]])
        return len(rows)

    def _read_run(self, seqs: list[int], rows: list[int], hdrs: list[bytes], datas: list[bytes],
                  bad: list[int]) -> None:
        """Decode the records of one run from one pread. Reads check each record's frame (whole, length,
        kind, seq), not its CRC: see README.md, "Recovery"."""
        buf = self._read_span(seqs[0], rows[0], rows[-1])
        if buf is None:
            bad += seqs
            return
        first = self._locs[rows[0]]
        no, start = _block_of(first), first & _OFFSET_MASK
        k = _decode_adjacent(buf, seqs, hdrs, datas)
        if k < len(seqs):
            self._decode_indexed(buf, start, no, seqs[k:], rows[k:], hdrs, datas, bad)

    def _decode_indexed(self, buf: bytes, start: int, no: int, seqs: list[int], rows: list[int],
                        hdrs: list[bytes], datas: list[bytes], bad: list[int]) -> None:
        """Decode each record at the offset the index gives (`buf` holds the block from `start`)."""
        locs, sizes, size = self._locs, self._sizes, len(buf)
        plain, with_hdr = record.LEN_MINUS_FILE_SIZE, record.LEN_MINUS_FILE_SIZE_HDR
        for seq, row in zip(seqs, rows):
            loc = locs[row]
            pos = (loc & _OFFSET_MASK) - start
            try:
                length, kind, got, slen, hlen = _unpack_frame(buf, pos)
            except struct.error:  # the file is shorter than the index says
                length, kind, got, slen, hlen = 0, b"", 0, 0, 0
            end = pos + length
            if got != seq or kind != b"M" or end > size or \
                    length != sizes[row] + (with_hdr if loc >= _HDR_FLAG else plain):
                log.error("stream store %s: unreadable message seq=%d in block %d: found %r seq %d of %d bytes",
                          self._dir, seq, no, kind, got, length)
                self._damaged = True
                bad.append(seq)
                continue
            at = pos + _HEADER_SIZE + slen
            hdrs.append(buf[at : at + hlen])
            datas.append(buf[at + hlen : end - _CRC_SIZE])

    def _drop(self, seq: int, loc: int, size: int) -> None:
        blk = self._blocks.get(_block_of(loc))
        if blk is None:
            return
        blk.remove(_rec_len(loc, size))
        if blk is not self._active:
            if blk.live == 0:
                self._doomed.append(blk)
            elif self._sparse(blk):
                self._sparse_blocks.add(blk.no)

    def _sparse(self, blk: _Block) -> bool:
        """Worth rewriting: a big closed block mostly made of removed messages."""
        return blk.size * 2 > self._block_size and blk.live_bytes * 4 < blk.size

    def _drop_all(self) -> None:
        for blk in self._blocks.values():
            blk.live = blk.live_bytes = 0
            blk.tombs = array("Q")
            if blk is not self._active:
                self._doomed.append(blk)

    def _erase(self, seq: int, loc: int, size: int) -> None:
        no, offset = _block_of(loc), loc & _OFFSET_MASK
        self._flush()
        if no != self._active.no:
            self._unindexed.add(no)  # its index holds the crc32 of the whole file
        try:
            fd = os.open(self._block_path(no), os.O_WRONLY)  # not O_APPEND: pwrite must hit the offset
            try:
                os.pwrite(fd, record.encode_erased(seq, _rec_len(loc, size)), offset)
                if self._sync.always:
                    self._sync.fsync(fd, self._block_path(no), self._sync_failed)
            finally:
                os.close(fd)
        except OSError as e:
            self._fail(e)

    def _log_delete(self, seq: int) -> None:
        blk, _ = self._queue(record.encode_delete(seq))
        if _block_of(self._locs[seq - self._base]) != blk.no:
            blk.tombs.append(seq)

    def _log_floor(self) -> None:
        self._floor_dirty = True

    def _commit(self) -> None:
        try:
            if self._floor_dirty:
                self._floor_dirty = False
                self._queue(self._floor_record())
            if self._pending:
                self._flush()
            if self._doomed:
                self._unlink_doomed()
            if self._sparse_blocks:
                self._rewrite_sparse()
            if self._unindexed:  # last: re-appended tombstones may have closed a block
                self._index_closed()
            if self._sync.always:
                self.sync()
        except OSError as e:
            self._fail(e)

    def _sync_failed(self, error: OSError) -> None:
        """An fsync (or a removal after one) failed in the syncer's thread: the store stops as after a
        failed write; the next call raises, and whoever waits to confirm a write checks `flush()`."""
        if self._failed is None:
            self._failed = (f"stream store {self._dir} stopped after an fsync error ({error}); "
                            "free disk space or fix the device, then restart the server")
            log.error(self._failed)

    def _fail(self, error: OSError) -> None:
        """A write failed (disk full, I/O error): the index may now be ahead of the disk, so the store
        stops; reopening it (a restart) recovers whatever reached the disk."""
        self._failed = (f"stream store {self._dir} stopped after a write error ({error}); "
                        "free disk space or fix the device, then restart the server")
        log.error(self._failed)
        self._pending.clear()
        self._pending_len = 0
        raise StoreError(self._failed) from error

    def header_seqs(self, start_seq: int) -> Iterator[int]:
        """Live messages from `start_seq` whose record has headers: the index's flag says, nothing is read
        (a restart rebuilds the Nats-Msg-Id window from these alone)."""
        self._check_readable()
        base, sids = self._base, self._sids
        first = max(start_seq - base, 0)
        for i, loc in enumerate(self._locs[first:], first):
            if loc >= _HDR_FLAG and sids[i]:
                yield base + i

    # ---- recovery -----------------------------------------------------------------------------------
    def _recover(self) -> None:
        numbers = sorted(int(p.stem) for p in self._msgs_dir.glob("*.blk") if p.stem.isdigit())
        snapshot = self._read_snapshot(bool(numbers))
        with _gc_paused():
            replayed = self._restore_snapshot(snapshot, numbers) if snapshot is not None else None
            if replayed is None:
                if snapshot is not None:
                    self._forget_snapshot()
                self._scan_blocks(numbers)
        for tmp in self._msgs_dir.glob("*.tmp"):  # a rewrite or snapshot interrupted before its rename
            tmp.unlink()
        if not self._blocks:
            first = _Block(1, self._block_path(1))
            self._blocks[1] = first
            self._dir_dirty = True
        self._open_active(next(reversed(self._blocks.values())))
        self._doomed = [b for b in self._blocks.values() if b.live == 0]
        self._sparse_blocks = {b.no for b in self._blocks.values() if b.live and self._sparse(b)}
        if not self._lost:  # closed blocks without an index (older stores, ignored indexes) get one now
            self._unindexed = {no for no in self._blocks
                               if no != self._active.no and not self._block_index_path(no).exists()}
        self._enforce_limits(None)
        self._commit()
        if replayed == 0:  # (after a scan no checkpoint is due: the commit above indexed the closed blocks)
            self._checkpointed = self._checkpoint_mark()

    def _scan_blocks(self, numbers: list[int]) -> None:
        """Index every record (CRCs checked) of these block files, each from the end of what the index
        already holds of it (a snapshot's active block) or from the start, and finish the recovery."""
        floor, gap = 0, False
        lost: list[int] = []
        subjects: dict[bytes, str] = {}
        indexed = 0
        for k, no in enumerate(numbers):
            is_tail = k == len(numbers) - 1
            blk = self._blocks.get(no)
            if blk is None:
                blk = self._blocks[no] = _Block(no, self._block_path(no))
                if not is_tail and not gap:
                    block_floor = self._load_block_index(blk)
                    if block_floor is not None:
                        floor, indexed = max(floor, block_floor), indexed + 1
                        continue
            floor, gap = self._scan(blk, floor, gap, lost, subjects, is_tail)
        if indexed:
            log.info("stream store %s: %d of %d block(s) read from their indexes, the others scanned", self._dir,
                     indexed, len(numbers))
        for loc, size in self._finish_restore(floor):
            self._blocks[_block_of(loc)].remove(_rec_len(loc, size))
        if lost:
            self._lost = lost[:_MAX_LOST_REPORTED]
            log.warning("stream store %s: recovery lost %d message(s): seqs %s", self._dir, len(lost),
                        _ranges(lost))

    def _load_block_index(self, blk: _Block) -> int | None:
        """Take a closed block's rows from its index file instead of scanning it, when the index is whole and
        the block still has the bytes it describes (size and crc32 of the whole file: damage inside the block
        means a scan, which finds it record by record); returns the floor it recorded, or None (nothing
        loaded: scan the block)."""
        path = self._block_index_path(blk.no)
        try:
            data = _mapped(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning("stream store %s: unreadable index of block %d (%s); scanning it", self._dir, blk.no, e)
            return None
        try:
            image, (b,) = index_snapshot.decode(data)
            if b.no != blk.no or blk.path.stat().st_size != b.size or _head_crc(blk.path, b.size) != b.head_crc:
                raise index_snapshot.SnapshotError(f"the block is not the {b.size} bytes it describes")
            self._append_index(image)
        except Exception as e:  # noqa: BLE001 - any doubt means a scan of that block
            log.warning("stream store %s: ignoring the index of block %d (%s: %s); scanning it", self._dir,
                        blk.no, type(e).__name__, e)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        blk.size, blk.live, blk.live_bytes, blk.first_seq, blk.last_seq = b.size, b.live, b.live_bytes, \
            b.first_seq, b.last_seq
        blk.tombs = array("Q", b.tombs)
        for seq in b.tombs:
            self._restore_tombstone(seq)
        return image.first

    def _restore_tombstone(self, seq: int) -> int | None:
        """Recovery met a tombstone: forget the row and take it off its block's accounting; returns the block
        that held the message, None when it was not live."""
        gone = self._restore_delete(seq)
        if gone is None:
            return None
        no = _block_of(gone[0])
        target = self._blocks.get(no)
        if target is not None:
            target.remove(_rec_len(*gone))
        return no

    # ---- index snapshot (written by checkpoints and a clean close, loaded by the next open) ---------
    def _read_snapshot(self, has_blocks: bool) -> bytes | None:
        path = self._msgs_dir / SNAPSHOT
        try:
            return path.read_bytes()
        except FileNotFoundError:
            if has_blocks:
                log.info("stream store %s: no index snapshot; scanning the blocks", self._dir)
        except OSError as e:
            log.warning("stream store %s: unreadable index snapshot (%s); scanning the blocks", self._dir, e)
        return None

    def _forget_snapshot(self) -> None:
        """Remove a snapshot that must not be used again (stale, damaged, or the blocks are)."""
        try:
            (self._msgs_dir / SNAPSHOT).unlink(missing_ok=True)
            fsync_dir(self._msgs_dir)
        except OSError as e:
            raise StoreError(f"stream store {self._dir}: cannot remove the index snapshot ({e}); "
                             "fix the directory's permissions or remove msgs/index.snap, then restart") from e

    def _restore_snapshot(self, data: bytes, numbers: list[int]) -> int | None:
        """Load the snapshot and replay what was appended to the blocks since; returns the bytes replayed,
        or None (logged, nothing loaded) when the snapshot cannot be used."""
        try:
            index, blocks = index_snapshot.decode(data)
            replay, stale = self._replay_plan(blocks, numbers)
            if stale:
                log.warning("stream store %s: stale index snapshot (%s); scanning the blocks", self._dir, stale)
                return None
            self._load_index(index)
        except Exception as e:  # noqa: BLE001 - never trust a snapshot partially: any doubt means a scan
            log.warning("stream store %s: ignoring the index snapshot (%s: %s); scanning the blocks", self._dir,
                        type(e).__name__, e)
            return None
        present = set(numbers)
        for b in blocks:
            if b.no in present:
                self._blocks[b.no] = _Block(b.no, self._block_path(b.no), b.size, b.live, b.live_bytes,
                                            b.first_seq, b.last_seq, b.tombs)
            else:
                self._forget_block(b)
        known = sum(blk.size for blk in self._blocks.values())
        self._scan_blocks(replay)
        replayed = sum(blk.size for blk in self._blocks.values()) - known
        removed = len(blocks) - len(present.intersection(b.no for b in blocks))
        log.info("stream store %s: index loaded from its snapshot (%d messages); replayed %d bytes appended "
                 "since, %d emptied block(s) gone", self._dir, self._msgs, replayed, removed)
        return replayed + removed

    def _replay_plan(self, blocks: list[index_snapshot.BlockImage], numbers: list[int]) -> tuple[list[int], str]:
        """(the block files to read on from where the snapshot left them, "") when only appends, new blocks
        and removals of emptied blocks happened since it was written; else ([], why not)."""
        present = set(numbers)
        last = blocks[-1].no if blocks else 0
        if last and last not in present and not (numbers and numbers[-1] > last):
            return [], f"its active block {last} is gone and no newer one exists"
        for b in blocks:
            if b.no not in present:
                continue  # emptied and removed since
            path = self._block_path(b.no)
            if b.no == last:
                if _head_crc(path, b.size) != b.head_crc:
                    return [], f"block {b.no} no longer starts with the {b.size} bytes the snapshot saw"
                continue
            size, tail = _size_and_tail(path)
            if (size, tail) != (b.size, b.tail):
                return [], f"block {b.no} is {size} bytes ending {tail:08x}, the snapshot says {b.size} ending {b.tail:08x}"
        listed = {b.no for b in blocks}
        unknown = [no for no in numbers if no < last and no not in listed]
        if unknown:
            return [], f"block files {_ranges(unknown)} are older than the snapshot but not in it"
        return [no for no in numbers if no >= last], ""

    def _forget_block(self, b: index_snapshot.BlockImage) -> None:
        """A block the snapshot lists is gone: the store removes a block only once all its messages are."""
        for seq in range(b.first_seq, b.last_seq + 1):
            i = seq - self._base
            if 0 <= i < len(self._sids) and self._sids[i] and _block_of(self._locs[i]) == b.no:
                self._restore_delete(seq)

    def checkpoint(self) -> None:
        """Write the index snapshot if the store changed since the last one, so that the open after a crash
        replays only what was appended since instead of scanning every block."""
        if self._closed or self._failed is not None:
            return
        self._commit()
        mark = self._checkpoint_mark()
        if mark != self._checkpointed:
            self._save_snapshot()
            self._checkpointed = mark

    def _checkpoint_mark(self) -> tuple[int, int, int]:
        """Every change appends to the active block or removes blocks."""
        return self._active.no, self._active.size, len(self._blocks)

    def _save_snapshot(self) -> None:
        """Write the index snapshot (temp file, fsync, rename, fsync of the directory), after a commit.
        When recovery lost messages or a read found a damaged record, the snapshot is removed instead: the
        next open's scan then reports them (again) in `lost`."""
        if self._lost or self._damaged:
            log.info("stream store %s: no index snapshot: its blocks are damaged; the next open scans them", self._dir)
            with contextlib.suppress(StoreError):
                self._forget_snapshot()
            return
        try:
            parts = index_snapshot.encode_parts(self._index_image(),
                                                [self._block_image(b) for b in self._blocks.values()])
            try:
                self._sync.replace(self._msgs_dir / SNAPSHOT, parts, self._snapshot_failed)
            finally:
                index_snapshot.release(parts)
        except Exception as e:  # noqa: BLE001 - a missing snapshot only costs the next open a scan
            log.warning("stream store %s: no index snapshot written (%s: %s); the next open scans the blocks",
                        self._dir, type(e).__name__, e)
            with contextlib.suppress(StoreError):
                self._forget_snapshot()

    def _snapshot_failed(self, error: OSError) -> None:
        log.warning("stream store %s: no index snapshot written (%s); the next open scans the blocks", self._dir, error)
        self._sync.then(lambda: (self._msgs_dir / SNAPSHOT).unlink(missing_ok=True), self._msgs_dir)

    def _block_image(self, blk: _Block, with_crc: bool = False) -> index_snapshot.BlockImage:
        """`with_crc` (always for the active block): the crc32 of the whole file too."""
        size, tail = _size_and_tail(blk.path)
        if size != blk.size:
            raise ValueError(f"block {blk.no} is {size} bytes on disk, the index says {blk.size}")
        head_crc = _head_crc(blk.path, size) if with_crc or blk is self._active else 0
        return index_snapshot.BlockImage(blk.no, size, blk.live, blk.live_bytes, blk.first_seq, blk.last_seq,
                                         tail, head_crc, blk.tombs)

    def _scan(
        self, blk: _Block, floor: int, gap: bool, lost: list[int], subjects: dict[bytes, str], is_tail: bool
    ) -> tuple[int, bool]:
        """Index every valid record of one block from `blk.size` (the bytes already indexed); returns the
        floor seen so far and whether bytes were skipped since the last message (then the next message
        tells which seqs were lost)."""
        size = blk.path.stat().st_size
        if size <= blk.size:
            return floor, gap
        with open(blk.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            offset = blk.size
            while offset < size:
                try:
                    length, kind, seq, ts, aux, slen, hlen = record.check(mm, offset)
                except record.RecordError as e:
                    resume = self._resync(mm, offset + 1)
                    log.warning("stream store %s: block %d: %s; %s", self._dir, blk.no, e,
                                f"skipping to offset {resume}" if resume is not None else "dropping the tail")
                    if resume is None:
                        torn_seq = self._torn_seq(mm, offset) if is_tail else 0
                        if torn_seq:
                            lost.append(torn_seq)
                        gap = not is_tail
                        break
                    offset, gap = resume, True
                    continue
                if kind == record.MSG:
                    if seq > self._last and seq >= floor:
                        if gap and seq > self._last + 1:
                            lost.extend(range(self._last + 1, seq))
                        body = offset + record.HEADER.size
                        raw = mm[body : body + slen]
                        subject = subjects.get(raw)
                        if subject is None:
                            subject = subjects[raw] = raw.decode("utf-8", "replace")
                        dsize = length - record.OVERHEAD - slen - hlen
                        self._restore_msg(seq, subject, ts, record.file_size(slen, hlen, dsize), aux,
                                          (_HDR_FLAG if hlen else 0) | blk.no << _LOC_SHIFT | offset)
                        blk.add(seq, length)
                    gap = False
                elif kind == record.DELETE:
                    target = self._restore_tombstone(seq)
                    if target is not None and target != blk.no:
                        blk.tombs.append(seq)
                else:  # FLOOR
                    floor = max(floor, aux)
                    if seq >= self._last:
                        if gap:  # the skipped bytes held these seqs (or skips: we cannot tell)
                            lost.extend(range(max(self._last + 1, floor), seq + 1))
                        self._last, self._last_ts = seq, ts
                offset += length
        if offset < size:
            os.truncate(blk.path, offset)
            log.warning("stream store %s: block %d truncated from %d to %d bytes", self._dir, blk.no, size, offset)
        blk.size = offset
        return floor, gap

    @staticmethod
    def _resync(mm: mmap.mmap, start: int) -> int | None:
        """The next offset >= start holding a valid record, or None."""
        for m in _CANDIDATE.finditer(mm, start):
            try:
                record.check(mm, m.start())
            except record.RecordError:
                continue
            return m.start()
        return None

    def _torn_seq(self, mm: mmap.mmap, offset: int) -> int:
        """The seq of a message whose record is torn, when its header is readable and plausible."""
        if len(mm) - offset < record.SEQ_END:
            return 0
        kind, seq = record.KIND_SEQ.unpack_from(mm, offset + record.KIND_OFFSET)
        return seq if kind == record.MSG and seq == self._last + 1 else 0

    # ---- StreamStore (lifecycle) --------------------------------------------------------------------
    def when_durable(self, callback: Callable[[], None]) -> None:
        if self._sync.always:
            self._sync.when_durable(self._dir, callback)
        else:
            callback()

    def sync(self) -> None:
        """fsync what was written since the last sync (no-op when nothing was)."""
        self._check_open()
        try:
            if self._dirty:
                self._sync.fsync(self._wfd, self._active.path, self._sync_failed)
                self._dirty = False
            if self._dir_dirty:
                self._sync.fsync_dir(self._msgs_dir, self._sync_failed)
                self._dir_dirty = False
        except OSError as e:
            self._fail(e)

    def close(self) -> None:
        if self._closed:
            return
        if self._failed is None:
            self._commit()
            self.sync()
            self.checkpoint()
        self._closed = True
        os.close(self._wfd)
        for fd in self._rfds.values():
            os.close(fd)
        self._rfds.clear()

    def delete(self, on_error: Callable[[OSError], None] | None = None) -> None:
        """Close and remove the stream directory with everything in it (meta, consumers); `on_error` hears
        of a removal that failed in the syncer's thread."""
        if not self._closed:
            self._closed = True
            os.close(self._wfd)
            for fd in self._rfds.values():
                os.close(fd)
            self._rfds.clear()
        self._sync.remove_dir(self._dir, on_error or self._sync_failed)


def _ranges(seqs: list[int]) -> str:
    out: list[str] = []
    start = prev = seqs[0]
    for s in seqs[1:] + [0]:
        if s != prev + 1:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = s
        prev = s
    return ",".join(out)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Recovery creates an object per subject and per seq list, none of them in a reference cycle; the
    cyclic collector would only walk them again and again (40% of opening 200k KV keys)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
