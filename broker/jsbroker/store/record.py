"""On-disk record formats of the file stores (pure: bytes in, bytes out, no I/O).

Stream records (block files `msgs/NNNNNNNN.blk` are nothing but these, back to back):

    offset  size  field
    0       4     length    the whole record in bytes, this field and the CRC included (big-endian)
    4       1     kind      b"M" message, b"D" delete tombstone, b"F" floor (sequence state)
    5       8     seq       M: the message's seq   D: the removed seq   F: the stream's last seq
    13      8     ts        M: store time (ns)     D: 0                 F: the last message's store time
    21      8     aux       M: TTL in ns (0 none, -1 never expires)  D: 0  F: first seq that may still exist
    29      2     subj_len  M only (0 otherwise)
    31      4     hdr_len   M only
    35      ...   subject (UTF-8), header block, payload
    end-4   4     crc32     zlib.crc32 of every byte before it

The CRC covers the length field too, so a torn length can never send a reader somewhere plausible
without also failing the check. A "D" record removes one seq; an "F" record says "nothing below `aux`
exists any more, the last seq is `seq`" (purges, compaction, skips, and the head of every new block).

The index snapshot in `msgs/index.snap` (a stream's whole in-memory index at a checkpoint or clean close,
so the next open reads only what was appended since) is one file of whole arrays, not records: its format table is in
index_snapshot.py.

Consumer state records (`consumers/<name>/state.log.<gen>`; the snapshot `state.snap` is one record):

    0  4  length (whole record)   4  1  kind   5  ...  payload   end-4  4  crc32 of every byte before it

    kind b"d" delivered  payload = consumer_seq(8) stream_seq(8) delivery_count(8) ts(8)
    kind b"a" ack        payload = consumer_seq(8) stream_seq(8) ack_all(1)
    kind b"m" dropped    payload as delivered: the delivery past max_deliver, after which it is not pending
    kind b"s" snapshot   payload = gen(8) delivered c/s(8+8) ack floor c/s(8+8) n_pending(4) n_redelivered(4)
                                   then n_pending x (stream_seq(8) consumer_seq(8) ts(8))
                                   then n_redelivered x (stream_seq(8) count(8))
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass
from typing import Iterator, Union

Buffer = Union[bytes, bytearray, memoryview, "mmap.mmap"]

# ---- stream records ---------------------------------------------------------------------------------
HEADER = struct.Struct(
    ">I"  # length
    "c"  # kind
    "Q"  # seq
    "q"  # ts
    "q"  # aux: ttl (M) or floor (F)
    "H"  # subj_len
    "I"  # hdr_len
)
# The header fields a read checks or needs: length, kind, seq, subj_len, hdr_len (ts and aux skipped).
MSG_FRAME = struct.Struct(">IcQ16xHI")
# Where a message record's fields lie (the table above), for a reader that takes them byte by byte.
SEQ_AT, TS_AT, SUBJ_LEN_AT, HDR_LEN_AT = 5, 13, 29, 31
KIND_OFFSET = struct.calcsize(">I")
KIND_SEQ = struct.Struct(">cQ")  # to read the seq of a record whose header is cut short
SEQ_END = KIND_OFFSET + KIND_SEQ.size
CRC = struct.Struct(">I")
_CRC_PACK = CRC.pack
_crc32 = zlib.crc32
OVERHEAD = HEADER.size + CRC.size  # bytes a record adds around subject + header + payload
MAX_LEN = 1 << 31  # anything larger is garbage, not a record

MSG, DELETE, FLOOR = b"M", b"D", b"F"
KINDS = frozenset((MSG, DELETE, FLOOR))


class RecordError(ValueError):
    """Bytes that are not a valid record (short, bad length, bad checksum)."""


@dataclass(frozen=True, slots=True)
class Record:
    kind: bytes
    seq: int
    ts: int
    aux: int
    subject: bytes
    hdr: bytes
    data: bytes
    length: int


def memory_size(subj_len: int, hdr_len: int, data_len: int) -> int:
    """Bytes as nats-server's memory store accounts a message (subject, header, payload, seq + ts)."""
    return subj_len + hdr_len + data_len + 16


def file_size(subj_len: int, hdr_len: int, data_len: int) -> int:
    """Bytes as nats-server's file store accounts a message: its own record layout (length, seq, ts,
    subject length, subject, payload, 8-byte hash), plus a 4-byte header length and the header when
    the message has one. Stream `bytes` and max_bytes use this for file streams."""
    if hdr_len:
        return 34 + subj_len + hdr_len + data_len
    return 30 + subj_len + data_len


# Our record length of a message minus its file_size, without and with a header.
LEN_MINUS_FILE_SIZE = OVERHEAD - 30
LEN_MINUS_FILE_SIZE_HDR = OVERHEAD - 34


def record_len_from_file_size(size: int, has_hdr: bool) -> int:
    """Our record length of a message whose file_size is `size` (the store keeps only the latter)."""
    return size + (LEN_MINUS_FILE_SIZE_HDR if has_hdr else LEN_MINUS_FILE_SIZE)


def encode_msg(seq: int, ts: int, ttl: int, subject: bytes, hdr: bytes, data: bytes) -> bytes:
    slen, hlen = len(subject), len(hdr)
    body = HEADER.pack(OVERHEAD + slen + hlen + len(data), MSG, seq, ts, ttl, slen, hlen) + subject + hdr + data
    return body + _CRC_PACK(_crc32(body))


def _encode_fixed(kind: bytes, seq: int, ts: int, aux: int) -> bytes:
    head = HEADER.pack(OVERHEAD, kind, seq, ts, aux, 0, 0)
    return head + CRC.pack(zlib.crc32(head))


def encode_delete(seq: int) -> bytes:
    return _encode_fixed(DELETE, seq, 0, 0)


def encode_erased(seq: int, length: int) -> bytes:
    """A delete record of exactly `length` bytes (zero padding as payload), written over an erased message."""
    head = HEADER.pack(length, DELETE, seq, 0, 0, 0, 0)
    body = head + bytes(length - OVERHEAD)
    return body + CRC.pack(zlib.crc32(body))


def encode_floor(last_seq: int, last_ts: int, floor: int) -> bytes:
    return _encode_fixed(FLOOR, last_seq, last_ts, floor)


def check(buf: Buffer, offset: int = 0) -> tuple[int, bytes, int, int, int, int, int]:
    """Validate the record at `offset` (lengths and CRC) without copying it: (length, kind, seq, ts, aux,
    subj_len, hdr_len), or RecordError."""
    end = len(buf)
    if end - offset < OVERHEAD:
        raise RecordError(f"short record at {offset}: {end - offset} bytes")
    fields = HEADER.unpack_from(buf, offset)
    length, kind, _, _, _, slen, hlen = fields
    if kind not in KINDS or length < OVERHEAD + slen + hlen or length > MAX_LEN:
        raise RecordError(f"bad record header at {offset}")
    if offset + length > end:
        raise RecordError(f"truncated record at {offset}: needs {length}, has {end - offset}")
    crc_at = offset + length - CRC.size
    if zlib.crc32(memoryview(buf)[offset:crc_at]) != CRC.unpack_from(buf, crc_at)[0]:
        raise RecordError(f"checksum mismatch at {offset}")
    return fields


def decode(buf: Buffer, offset: int = 0) -> Record:
    """The valid record starting at `offset`, or RecordError."""
    length, kind, seq, ts, aux, slen, hlen = check(buf, offset)
    view = memoryview(buf)
    body = offset + HEADER.size
    crc_at = offset + length - CRC.size
    return Record(
        kind,
        seq,
        ts,
        aux,
        bytes(view[body : body + slen]),
        bytes(view[body + slen : body + slen + hlen]),
        bytes(view[body + slen + hlen : crc_at]),
        length,
    )


def decode_msg(buf: bytes, seq: int) -> tuple[bytes, bytes]:
    """(hdr, data) of the message record `buf` (exactly one record) for `seq`, or RecordError. Checks
    the frame (length, kind, seq), not the CRC: a store reads only records whose CRC it checked when it
    opened, or that it wrote itself."""
    length, kind, got, _, _, slen, hlen = HEADER.unpack_from(buf)
    if length != len(buf) or kind != MSG or got != seq or OVERHEAD + slen + hlen > length:
        raise RecordError(f"expected message {seq}, found {kind!r} seq {got} of {length} bytes")
    at = HEADER.size + slen
    return buf[at : at + hlen], buf[at + hlen : length - CRC.size]


# ---- consumer state records -------------------------------------------------------------------------
FRAME = struct.Struct(">Ic")
DELIVERED = struct.Struct(">QQQq")
ACK = struct.Struct(">QQ?")
SNAP_HEAD = struct.Struct(">QQQQQII")
SNAP_PENDING = struct.Struct(">QQq")
SNAP_REDELIVERED = struct.Struct(">QQ")
KIND_DELIVERED, KIND_ACK, KIND_SNAPSHOT = b"d", b"a", b"s"
KIND_DROPPED = b"m"  # a delivery past max_deliver: DELIVERED's payload, and the message leaves pending
# A batch frame: the updates of one flush under one checksum, each as its kind byte + payload.
KIND_BATCH = b"b"
DELIVERED_UPDATE = struct.Struct(">c" + DELIVERED.format[1:])  # an update in a batch: kind + payload
ACK_UPDATE = struct.Struct(">c" + ACK.format[1:])
_UPDATE_SIZES = {KIND_DELIVERED: DELIVERED.size, KIND_ACK: ACK.size, KIND_DROPPED: DELIVERED.size}


def batch_updates(payload: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(kind, payload) of each update in a batch frame's payload, or RecordError."""
    at = 0
    while at < len(payload):
        kind = payload[at : at + 1]
        size = _UPDATE_SIZES.get(kind)
        if size is None or at + 1 + size > len(payload):
            raise RecordError(f"bad update {kind!r} at {at} of a batch")
        yield kind, payload[at + 1 : at + 1 + size]
        at += 1 + size


def encode_frame(kind: bytes, payload: bytes) -> bytes:
    head = FRAME.pack(FRAME.size + len(payload) + CRC.size, kind)
    return head + payload + CRC.pack(zlib.crc32(payload, zlib.crc32(head)))


def decode_frame(buf: Buffer, offset: int = 0) -> tuple[bytes, bytes, int]:
    """(kind, payload, length) of the valid frame at `offset`, or RecordError."""
    if len(buf) - offset < FRAME.size + CRC.size:
        raise RecordError(f"short frame at {offset}")
    length, kind = FRAME.unpack_from(buf, offset)
    if length < FRAME.size + CRC.size or offset + length > len(buf):
        raise RecordError(f"truncated frame at {offset}")
    crc_at = offset + length - CRC.size
    view = memoryview(buf)
    if zlib.crc32(view[offset:crc_at]) != CRC.unpack_from(buf, crc_at)[0]:
        raise RecordError(f"checksum mismatch in frame at {offset}")
    return kind, bytes(view[offset + FRAME.size : crc_at]), length
