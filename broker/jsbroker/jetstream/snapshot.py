"""Stream snapshots: jsbroker's archive format (pure: values in, bytes out, and back).

An archive is a Snappy framing-format stream, which nats-server's and natscli's s2 readers read (natscli
decompresses what it receives to show progress and fails on bytes it cannot decode). Decompressed:

    b"JSBROKER-SNAPSHOT 1\\n"
    u32 length, then a JSON header: {"config", "state", "created", "consumers": [Consumer.to_json()...]}
    one record per message: b"M", u64 seq, i64 time (ns), u16 subject length, u32 header length,
                            u32 body length, subject, header block, body
    the trailer:            b"E", u64 number of records, u64 the stream's last sequence

Sequences are the stream's, so removed messages stay gaps; the trailer proves the archive is whole.
nats-server's own snapshots (an s2 stream of its file store's blocks) are recognised by their s2 stream
identifier and refused with an `ArchiveError` saying so (`read`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import IO, Any, Iterable, Iterator

import cramjam

from jsbroker.store.base import ConsumerState, StoredMsg

MAGIC = b"JSBROKER-SNAPSHOT 1\n"
_LEN = struct.Struct("<I")
_RECORD = struct.Struct("<QqHII")  # seq, ts, subject length, header length, body length
_TRAILER = struct.Struct("<QQ")  # records, last seq
_BLOCK = 60 * 1024  # plain bytes per frame: one Snappy chunk each (the format's limit is 64 KiB)

# Snappy framing: 1 byte chunk type, 3 bytes little-endian length; a stream identifier chunk first.
_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
_S2_IDENTIFIER = b"\xff\x06\x00\x00S2sTwO"  # nats-server's s2 writer
_DATA_CHUNKS = (0x00, 0x01)  # compressed, uncompressed


class ArchiveError(Exception):
    """The bytes are not a whole jsbroker snapshot; the text says what is wrong and what to do."""


FOREIGN = ("this is a nats-server snapshot (an s2 archive of its file store), which jsbroker cannot read: "
           "restore it into nats-server, or take the backup from jsbroker")


@dataclass(slots=True)
class ConsumerSnapshot:
    name: str
    created_ns: int
    config: dict[str, Any]  # ConsumerConfig.to_json()
    state: ConsumerState


@dataclass(slots=True)
class Header:
    config: dict[str, Any]  # the stream's config as stored (StreamConfig.to_json(dynamic_metadata=False))
    state: dict[str, Any]  # the StreamInfo state at the snapshot (for the reader's checks)
    consumers: list[ConsumerSnapshot] = field(default_factory=list)


# -- writing ------------------------------------------------------------------------------------------


def _consumer_json(c: ConsumerSnapshot) -> dict[str, Any]:
    st = c.state
    return {"name": c.name, "created": c.created_ns, "config": c.config,
            "delivered": [st.delivered_consumer_seq, st.delivered_stream_seq],
            "ack_floor": [st.ack_floor_consumer_seq, st.ack_floor_stream_seq],
            "pending": [[s, d, ts] for s, (d, ts) in sorted(st.pending.items())],
            "redelivered": sorted(st.redelivered.items())}


def header_bytes(header: Header) -> bytes:
    """The header as the archive holds it, taken when the snapshot starts (the state goes on changing)."""
    return json.dumps({"config": header.config, "state": header.state,
                       "consumers": [_consumer_json(c) for c in header.consumers]}).encode()


def write(body: bytes, messages: Iterable[StoredMsg], last_seq: int) -> Iterator[bytes]:
    """The archive (`header_bytes`, then the messages) as compressed frames, produced as `messages` are
    read: a large stream is never held in memory."""
    plain = bytearray(MAGIC + _LEN.pack(len(body)) + body)
    count = 0
    for m in messages:
        subject = m.subject.encode()
        plain += b"M" + _RECORD.pack(m.seq, m.ts, len(subject), len(m.hdr), len(m.data))
        plain += subject + m.hdr + m.data
        count += 1
        if len(plain) >= _BLOCK:
            yield from _frames(plain)
            plain = bytearray()
    plain += b"E" + _TRAILER.pack(count, last_seq)
    yield from _frames(plain)


def _frames(plain: bytearray) -> Iterator[bytes]:
    view = memoryview(plain)
    for start in range(0, len(plain), _BLOCK):
        yield bytes(cramjam.snappy.compress(view[start:start + _BLOCK]))


# -- reading ------------------------------------------------------------------------------------------


class _Plain:
    """The decompressed bytes of an archive file, read in order; every chunk's checksum is verified."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self._buf = b""
        self._pos = 0
        self._seen_identifier = False

    def _chunk(self) -> bytes | None:
        """The next chunk's plain bytes (b"" for chunks without data), None at the end of the file."""
        head = self._f.read(4)
        if not head:
            return None
        if len(head) < 4:
            raise ArchiveError("the archive is truncated (it ends inside a chunk header): take the backup again")
        kind, length = head[0], int.from_bytes(head[1:], "little")
        body = self._f.read(length)
        if len(body) < length:
            raise ArchiveError("the archive is truncated (it ends inside a chunk): take the backup again")
        if kind == 0xFF:
            if head + body == _S2_IDENTIFIER:
                raise ArchiveError(FOREIGN)
            if head + body != _IDENTIFIER:
                raise ArchiveError("not a jsbroker snapshot (no Snappy stream identifier): restore an archive "
                                   "written by `nats stream backup` from jsbroker")
            self._seen_identifier = True
            return b""
        if not self._seen_identifier:
            raise ArchiveError("not a jsbroker snapshot (it does not start with a Snappy stream identifier): "
                               "restore an archive written by `nats stream backup` from jsbroker")
        if kind in _DATA_CHUNKS:
            try:
                return bytes(cramjam.snappy.decompress(_IDENTIFIER + head + body))
            except Exception as err:  # cramjam raises its own DecompressionError
                raise ArchiveError(f"the archive is corrupt ({err}): take the backup again") from None
        if kind < 0x80:
            raise ArchiveError(f"the archive is corrupt (unknown chunk type {kind:#x}): take the backup again")
        return b""  # a skippable chunk (0x80-0xfe)

    def read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            if self._pos >= len(self._buf):
                chunk = self._chunk()
                if chunk is None:
                    raise ArchiveError("the archive is truncated (it ends before its trailer): take the backup again")
                self._buf, self._pos = chunk, 0
                continue
            take = self._buf[self._pos:self._pos + n - len(out)]
            self._pos += len(take)
            out += take
        return bytes(out)

    def at_end(self) -> bool:
        while self._pos >= len(self._buf):
            chunk = self._chunk()
            if chunk is None:
                return True
            self._buf, self._pos = chunk, 0
        return False


def _consumer_from_json(raw: dict[str, Any]) -> ConsumerSnapshot:
    (dc, ds), (fc, fs) = raw["delivered"], raw["ack_floor"]
    state = ConsumerState(dc, ds, fc, fs, {int(s): (int(d), int(ts)) for s, d, ts in raw["pending"]},
                          {int(s): int(n) for s, n in raw["redelivered"]})
    return ConsumerSnapshot(str(raw["name"]), int(raw["created"]), dict(raw["config"]), state)


class Reader:
    """An archive file read back: `header` at once, then `messages()`, then `last_seq` (the trailer)."""

    def __init__(self, f: IO[bytes]) -> None:
        self._plain = _Plain(f)
        if self._plain.read(len(MAGIC)) != MAGIC:
            raise ArchiveError("not a jsbroker snapshot (no JSBROKER-SNAPSHOT preamble): restore an archive "
                               "written by `nats stream backup` from jsbroker")
        (length,) = _LEN.unpack(self._plain.read(_LEN.size))
        try:
            raw = json.loads(self._plain.read(length))
            self.header = Header(dict(raw["config"]), dict(raw["state"]),
                                 [_consumer_from_json(c) for c in raw["consumers"]])
        except (ValueError, KeyError, TypeError) as err:
            raise ArchiveError(f"the archive's header is damaged ({err}): take the backup again") from None
        self.last_seq = 0

    def messages(self) -> Iterator[StoredMsg]:
        read, count = self._plain.read, 0
        while True:
            kind = read(1)
            if kind == b"E":
                records, self.last_seq = _TRAILER.unpack(read(_TRAILER.size))
                if records != count or not self._plain.at_end():
                    raise ArchiveError("the archive is corrupt (its trailer does not match its records): "
                                       "take the backup again")
                return
            if kind != b"M":
                raise ArchiveError("the archive is corrupt (an unknown record): take the backup again")
            seq, ts, slen, hlen, dlen = _RECORD.unpack(read(_RECORD.size))
            payload = read(slen + hlen + dlen)
            count += 1
            yield StoredMsg(seq, payload[:slen].decode(), payload[slen:slen + hlen], payload[slen + hlen:], ts)
