"""The index snapshot of a file stream store (`msgs/index.snap`): its format, pure bytes in, bytes out.

A FileStore writes its whole in-memory index here at a clean close and at checkpoints while it runs, so
the next open loads it and reads only what was appended since instead of scanning every block (file.py
decides when and how far a snapshot may be trusted; this module only encodes and validates). All
integers little-endian; arrays are the raw machine arrays, byte-swapped on big-endian machines.

    magic(8) b"JSIXSNAP"  version(4)  total_len(8)  the whole file, the CRC included
    head   base first last last_ts msgs bytes (8 each); `first` as the store reports it (empty: 0 until a
           purge or a message set it, then last + 1)
           n_rows n_subjects names_len n_ttl n_never n_blocks seq_width (8 each; seq_width: version 3 only)
    blocks n_blocks x (no size live live_bytes first_seq last_seq n_tombs (8 each) tail(4) head_crc(4)),
           then the tombstone seqs of each block in that order (8 each). `tail`: the block file's last 4
           bytes (the last record's CRC), 0 for a file shorter than that. `head_crc`: zlib.crc32 of the
           file's `size` bytes, for the last (active) block only (0 for the others): the one block that
           may have grown since, the CRC proves it only grew.
    rows   sids (4 x n_rows), ts (8 x n_rows), sizes (4 x n_rows), locs (8 x n_rows); row i is seq base+i,
           sid 0 = no message, sid k = the k-th subject below
    subjects  name lengths in characters (4 x n_subjects), seq counts (8 x n_subjects), the names one
           after the other (UTF-8, names_len bytes), then each subject's live seqs (seq_width bytes each,
           4 or 8; 8 in version 2; msgs in all)
    ttl    n_ttl expiry times (8 each), then their seqs (8 each): the live messages with a TTL
    never  n_never seqs (8 each): live messages whose TTL is "never"
    crc32(4)  zlib.crc32 of every byte before it

Sections are whole arrays so that loading is a handful of C-level copies, even for a KV stream with a
subject per message.

A block index (`msgs/NNNNNNNN.idx`, one closed block's rows) is the same format with one block: `base` its
first row's seq, `first` the store's floor when it was written, `last` the block's last message seq, and
`head_crc` the crc32 of the whole block file.
Decoding checks the magic, version, length and CRC first, then that every count adds up; anything else is
`SnapshotError`, and the caller falls back to a full scan.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from itertools import accumulate
from dataclasses import dataclass, field

from .record import Buffer

MAGIC = b"JSIXSNAP"
VERSION = 3  # 2: head_crc (checkpoints); 3: 4-byte subject seqs; version 2 is read too, 1 ignored (a scan)
_PREAMBLE = struct.Struct("<8sIQ")
_HEADS = {2: struct.Struct("<12Q"), 3: struct.Struct("<13Q")}
_BLOCK = struct.Struct("<7QII")
_NAME_LEN = struct.Struct("<I")
_COUNT = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_SWAP = sys.byteorder == "big"


class SnapshotError(ValueError):
    """Bytes that are not a whole, valid index snapshot of a known version."""


@dataclass(slots=True)
class BlockImage:
    """One block file as the store accounts it."""

    no: int
    size: int
    live: int
    live_bytes: int
    first_seq: int
    last_seq: int
    tail: int  # the file's last 4 bytes as a big-endian int (the last record's CRC)
    head_crc: int  # crc32 of the file's `size` bytes (the last block only; 0 for the others)
    tombs: array = field(default_factory=lambda: array("Q"))


@dataclass(slots=True)
class IndexImage:
    """The index of an IndexedStore with compact subject ids (`subjects[k - 1]` is sid k)."""

    base: int
    first: int
    last: int
    last_ts: int
    msgs: int
    bytes: int
    sids: array  # "I"
    ts: array  # "q"
    sizes: array  # "I"
    locs: array  # "Q"
    subjects: list[str]
    subject_seqs: list[array]  # "I" or "Q", live seqs per subject, ascending
    ttl_at: array  # "q"
    ttl_seqs: array  # "Q"
    never: array  # "Q"


def _raw(values: array) -> memoryview:
    """The array's bytes, little-endian: a view, not a copy (a snapshot of a million messages is 32 MB)."""
    if _SWAP:
        values = array(values.typecode, values)
        values.byteswap()
    return memoryview(values).cast("B")


class _Reader:
    def __init__(self, buf: memoryview) -> None:
        self._buf = buf
        self._at = 0

    def unpack(self, fmt: struct.Struct) -> tuple:
        if self._at + fmt.size > len(self._buf):
            raise SnapshotError("index snapshot ends early")
        fields = fmt.unpack_from(self._buf, self._at)
        self._at += fmt.size
        return fields

    def take(self, n: int) -> memoryview:
        if n < 0 or self._at + n > len(self._buf):
            raise SnapshotError("index snapshot ends early")
        self._at += n
        return self._buf[self._at - n : self._at]

    def array(self, typecode: str, n: int) -> array:
        values = array(typecode)
        values.frombytes(self.take(n * values.itemsize))
        if _SWAP:
            values.byteswap()
        return values

    def done(self) -> bool:
        return self._at == len(self._buf)


def encode(index: IndexImage, blocks: list[BlockImage]) -> bytes:
    parts = encode_parts(index, blocks)
    try:
        return b"".join(parts)
    finally:
        release(parts)


def encode_parts(index: IndexImage, blocks: list[BlockImage]) -> list[bytes | memoryview]:
    """The snapshot as consecutive parts to write one after the other, most of them views of the index's
    arrays (no copy). The arrays cannot grow while a view exists: `release` the parts once written."""
    names = "".join(index.subjects).encode()
    seq_lists = index.subject_seqs
    wide = any(seqs.typecode != "I" for seqs in seq_lists)  # a stream past 2^32: all seqs 8 bytes wide
    if wide:
        seq_lists = [seqs if seqs.typecode == "Q" else array("Q", seqs) for seqs in seq_lists]
    parts: list[bytes | memoryview] = [
        b"",  # the preamble, once the length is known
        _HEADS[VERSION].pack(index.base, index.first, index.last, index.last_ts, index.msgs, index.bytes,
                             len(index.sids), len(index.subjects), len(names), len(index.ttl_at), len(index.never),
                             len(blocks), 8 if wide else 4),
        *(_BLOCK.pack(b.no, b.size, b.live, b.live_bytes, b.first_seq, b.last_seq, len(b.tombs), b.tail, b.head_crc)
          for b in blocks),
        *(_raw(b.tombs) for b in blocks),
        _raw(index.sids), _raw(index.ts), _raw(index.sizes), _raw(index.locs),
        _raw(array("I", map(len, index.subjects))), _raw(array("Q", map(len, seq_lists))), names,
        *map(_raw, seq_lists),
        _raw(index.ttl_at), _raw(index.ttl_seqs), _raw(index.never),
    ]
    total = sum(map(len, parts)) + _PREAMBLE.size + _CRC.size
    parts[0] = _PREAMBLE.pack(MAGIC, VERSION, total)
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    parts.append(_CRC.pack(crc))
    return parts


def release(parts: list[bytes | memoryview]) -> None:
    """Let the arrays behind `encode_parts` views grow again."""
    for part in parts:
        if isinstance(part, memoryview):
            part.release()


def decode(data: Buffer) -> tuple[IndexImage, list[BlockImage]]:
    """The index and blocks of a snapshot, or SnapshotError when it is not whole, valid and consistent."""
    if len(data) < _PREAMBLE.size + _CRC.size:
        raise SnapshotError(f"index snapshot too short ({len(data)} bytes)")
    magic, version, total = _PREAMBLE.unpack_from(data)
    if magic != MAGIC:
        raise SnapshotError("not an index snapshot (bad magic)")
    if version not in _HEADS:
        raise SnapshotError(f"unknown index snapshot version {version} (this broker reads {sorted(_HEADS)})")
    if total != len(data):
        raise SnapshotError(f"index snapshot is {len(data)} bytes, its header says {total}")
    crc_at = len(data) - _CRC.size
    view = memoryview(data)
    if zlib.crc32(view[:crc_at]) != _CRC.unpack_from(data, crc_at)[0]:
        raise SnapshotError("index snapshot checksum mismatch")
    r = _Reader(view[_PREAMBLE.size : crc_at])
    base, first, last, last_ts, msgs, nbytes, n_rows, n_subjects, names_len, n_ttl, n_never, n_blocks, *width = \
        r.unpack(_HEADS[version])
    seq_code = {4: "I", 8: "Q"}.get(width[0] if width else 8)
    if seq_code is None:
        raise SnapshotError(f"index snapshot has seqs {width[0]} bytes wide")
    heads = [r.unpack(_BLOCK) for _ in range(n_blocks)]
    blocks = [BlockImage(no, size, live, live_bytes, first_seq, last_seq, tail, head_crc, r.array("Q", n_tombs))
              for no, size, live, live_bytes, first_seq, last_seq, n_tombs, tail, head_crc in heads]
    sids, ts, sizes, locs = (r.array(code, n_rows) for code in "IqIQ")
    name_ends = list(accumulate(r.array("I", n_subjects)))
    seq_ends = list(accumulate(r.array("Q", n_subjects)))
    try:
        names = str(r.take(names_len), "utf-8")
    except UnicodeDecodeError as e:
        raise SnapshotError(f"index snapshot holds a bad subject: {e}") from None
    if (name_ends[-1] if name_ends else 0) != len(names) or (seq_ends[-1] if seq_ends else 0) != msgs:
        raise SnapshotError(f"index snapshot counts disagree: {msgs} messages, subject names or seq lists "
                            "of other lengths")
    seqs = r.array(seq_code, msgs)
    subjects = list(map(names.__getitem__, map(slice, [0, *name_ends[:-1]], name_ends)))
    subject_seqs = list(map(seqs.__getitem__, map(slice, [0, *seq_ends[:-1]], seq_ends)))
    index = IndexImage(base, first, last, last_ts, msgs, nbytes, sids, ts, sizes, locs, subjects, subject_seqs,
                       r.array("q", n_ttl), r.array("Q", n_ttl), r.array("Q", n_never))
    if not r.done():
        raise SnapshotError("index snapshot has bytes after its last section")
    _check_counts(index)
    return index, blocks


def _check_counts(index: IndexImage) -> None:
    """The counts that must add up in any index (a guard against an encoder bug, not against damage,
    which the CRC catches)."""
    live, top = _live_and_top(index.sids)
    if live != index.msgs or top > len(index.subjects):
        raise SnapshotError(f"index snapshot counts disagree: {index.msgs} messages, {live} live rows")


def _live_and_top(sids: array) -> tuple[int, int]:
    """The rows that hold a message and the highest subject id, in one pass (`sids.count(0)` and `max(sids)`
    were two: 146 M instructions for 300,000 rows, now 131 M; each row is still boxed)."""
    live = top = 0
    for sid in sids:
        if sid:
            live += 1
            if sid > top:
                top = sid
    return live, top
