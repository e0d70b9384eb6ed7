"""Reading s2 streams (klauspost/compress/s2, what nats-server compresses its snapshots with), pure.

The stream is Snappy's framing format (a stream identifier, then chunks: 1 byte type, 3 bytes length;
a data chunk starts with the masked CRC-32C of its plain bytes) with the identifier `S2sTwO` and
blocks that may use s2's extension of Snappy's block format: a copy with a one-byte offset of 0
repeats the previous offset, with longer lengths. A Snappy stream (identifier `sNaPpY`, what jsbroker
writes) is decoded by cramjam, which checks its CRCs; an s2 block by `decode_block` here, its CRC
computed with cramjam's Snappy framing (which checksums each 64 KiB it frames) and combined.
"""

from __future__ import annotations

from functools import lru_cache
from typing import IO, Iterator

import cramjam

SNAPPY_ID = b"\xff\x06\x00\x00sNaPpY"
S2_ID = b"\xff\x06\x00\x00S2sTwO"
_COMPRESSED, _UNCOMPRESSED, _IDENTIFIER, _PADDING = 0x00, 0x01, 0xFF, 0xFE
_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


class CorruptStream(Exception):
    pass


def decode_stream(f: IO[bytes]) -> Iterator[bytes]:
    """The plain bytes of each data chunk of a Snappy or s2 framed stream, in order, checked."""
    s2 = None  # which identifier the stream started with
    while True:
        head = f.read(4)
        if not head:
            return
        if len(head) < 4:
            raise CorruptStream("it ends inside a chunk header")
        kind, length = head[0], int.from_bytes(head[1:], "little")
        body = f.read(length)
        if len(body) < length:
            raise CorruptStream("it ends inside a chunk")
        if kind == _IDENTIFIER:
            if head + body not in (SNAPPY_ID, S2_ID):
                raise CorruptStream("an unknown stream identifier")
            s2 = head + body == S2_ID
        elif s2 is None:
            raise CorruptStream("it does not start with an s2 or Snappy stream identifier")
        elif kind in (_COMPRESSED, _UNCOMPRESSED):
            yield _s2_chunk(kind, body) if s2 else _snappy_chunk(head, body)
        elif kind < 0x80:
            raise CorruptStream(f"an unknown chunk type {kind:#x}")
        # 0x80-0xfe: skippable (s2's index, padding)


def _snappy_chunk(head: bytes, body: bytes) -> bytes:
    try:
        return bytes(cramjam.snappy.decompress(SNAPPY_ID + head + body))
    except Exception as err:  # cramjam's DecompressionError: bad data or CRC
        raise CorruptStream(str(err)) from None


def _s2_chunk(kind: int, body: bytes) -> bytes:
    if len(body) < 4:
        raise CorruptStream("a chunk too short for its checksum")
    plain = decode_block(body[4:]) if kind == _COMPRESSED else body[4:]
    if _mask(crc32c(plain)) != int.from_bytes(body[:4], "little"):
        raise CorruptStream("a chunk's checksum does not match")
    return plain


def decode_block(src: bytes) -> bytes:
    """One s2 (or Snappy) block: its uvarint length, then literals and copies."""
    n = len(src)
    size, s = _uvarint(src, 0)
    dst = bytearray()
    offset = 0
    try:
        while s < n:
            tag = src[s]
            kind = tag & 3
            if kind == 0:  # literal
                length = tag >> 2
                if length < 60:
                    s += 1
                else:
                    extra = length - 59
                    length = int.from_bytes(src[s + 1:s + 1 + extra], "little")
                    s += 1 + extra
                length += 1
                if s + length > n:
                    raise CorruptStream("a literal runs past the block")
                dst += src[s:s + length]
                s += length
                continue
            if kind == 1:  # copy, 1-byte offset; offset 0 repeats the last one (s2)
                length = (tag >> 2) & 7
                new = ((tag & 0xE0) << 3) | src[s + 1]
                s += 2
                if new:
                    offset = new
                elif length == 5:
                    length, s = src[s] + 4, s + 1
                elif length == 6:
                    length, s = int.from_bytes(src[s:s + 2], "little") + (1 << 8), s + 2
                elif length == 7:
                    length, s = int.from_bytes(src[s:s + 3], "little") + (1 << 16), s + 3
                length += 4
            elif kind == 2:  # copy, 2-byte offset
                length, offset = (tag >> 2) + 1, int.from_bytes(src[s + 1:s + 3], "little")
                s += 3
            else:  # copy, 4-byte offset
                length, offset = (tag >> 2) + 1, int.from_bytes(src[s + 1:s + 5], "little")
                s += 5
            if not 0 < offset <= len(dst):
                raise CorruptStream("a copy reaches before the block")
            start = len(dst) - offset
            if offset >= length:
                dst += dst[start:start + length]
            else:  # overlapping: the last `offset` bytes repeat
                pattern = bytes(dst[start:])
                dst += (pattern * (length // offset + 1))[:length]
    except IndexError:
        raise CorruptStream("a tag runs past the block") from None
    if len(dst) != size:
        raise CorruptStream("a block's length does not match its contents")
    return bytes(dst)


def _uvarint(buf: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while at < len(buf):
        byte = buf[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, at
        shift += 7
    raise CorruptStream("a block length runs past the chunk")


# -- CRC-32C ------------------------------------------------------------------------------------------


def _mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _unmask(masked: int) -> int:
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def crc32c(data: bytes) -> int:
    """CRC-32C of `data`: cramjam's Snappy framing checksums each piece of up to 64 KiB; the pieces'
    CRCs are combined as zlib's crc32_combine does (GF(2) operators for appending zero bytes)."""
    framed = bytes(cramjam.snappy.compress(data))
    crc, at = 0, len(SNAPPY_ID)
    while at < len(framed):
        kind, length = framed[at], int.from_bytes(framed[at + 1:at + 4], "little")
        body = framed[at + 4:at + 4 + length]
        at += 4 + length
        piece = length - 4 if kind == _UNCOMPRESSED else _uvarint(body, 4)[0]
        crc = _apply(_zeros_operator(piece), crc) ^ _unmask(int.from_bytes(body[:4], "little"))
    return crc


def _apply(matrix: tuple[int, ...], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= matrix[i]
        vec >>= 1
        i += 1
    return out


def _compose(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The operator applying b, then a."""
    return tuple(_apply(a, col) for col in b)


@lru_cache(maxsize=8)
def _zeros_operator(nbytes: int) -> tuple[int, ...]:
    """The operator taking a CRC to the CRC of the same data followed by `nbytes` zero bytes (with the
    pre- and post-conditioning cancelling out, as in crc32_combine)."""
    op: tuple[int, ...] = (_POLY, *(1 << n for n in range(31)))  # one zero bit
    for _ in range(3):
        op = _compose(op, op)  # one zero byte
    result = tuple(1 << n for n in range(32))  # identity
    while nbytes:
        if nbytes & 1:
            result = _compose(op, result)
        nbytes >>= 1
        if nbytes:
            op = _compose(op, op)
    return result
