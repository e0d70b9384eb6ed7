"""Stream snapshots: the archive nats-server 2.15 writes and reads (pure: values in, bytes out, and back).

So a backup moves between the two servers both ways, jsbroker uses nats-server's format: an s2 (Snappy
framing compatible) stream holding `NATSARC1` and then entries, each: uvarint name length, zig-zag
varint time (ns), uvarint sequence, uvarint header length, uvarint payload length, the name, then the
header block and the payload. In order:

    "state.json"          the StreamState JSON (first/last seq, consumer_count: how many entries follow)
    "consumers/<name>"    {"config": ConsumerConfig, "state": ConsumerState} as nats-server's JSON
    <subject>             one message: its sequence, time, header block and body (gaps are removed ones)
    ""                    all zero: the end (an archive without it was cut short)

jsbroker writes Snappy framing (which nats-server's and natscli's s2 readers read) through cramjam, and
reads both that and nats-server's s2 chunks (`s2.py`'s block decoder; every chunk's CRC-32C checked).
The restored stream's config is the restore request's, as in nats-server: the archive holds none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import IO, Any, Final, Iterable, Iterator

import cramjam

from jsbroker.jetstream import s2
from jsbroker.store.base import RECORD_MSG, RECORD_OFFSETS, RECORD_SKIPPED, RECORD_TAIL, ConsumerState, StoredMsg, StoreError, new_stored_msg

MAGIC = b"NATSARC1"
STATE_ENTRY = "state.json"
CONSUMER_PREFIX = "consumers/"
_BLOCK = 64 * 1024  # plain bytes per frame: one Snappy chunk each (the framing format's limit)
_MAX_ENTRY_HEAD = 50  # five varints of at most 10 bytes


class ArchiveError(Exception):
    """The bytes are not a whole snapshot; the text says what is wrong and what to do."""


RETAKE = "take the backup again"


@dataclass(slots=True)
class ConsumerSnapshot:
    name: str
    config: dict[str, Any]  # ConsumerConfig JSON
    state: ConsumerState


@dataclass(slots=True)
class Header:
    state: dict[str, Any]  # the StreamState JSON (first_seq, last_seq, consumer_count, ...)
    consumers: list[ConsumerSnapshot] = field(default_factory=list)


# -- entries ------------------------------------------------------------------------------------------


_ONE_BYTE: Final = [bytes((n,)) for n in range(0x80)]


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _ONE_BYTE[n]
    if n < 0x4000:  # the bytes as one little-endian int: one allocation, no tuple
        return ((n & 0x7F) | 0x80 | (n >> 7) << 8).to_bytes(2, "little")
    if n < 0x200000:
        return ((n & 0x7F) | 0x80 | ((n >> 7) & 0x7F | 0x80) << 8 | (n >> 14) << 16).to_bytes(3, "little")
    if n < 0x10000000:
        return ((n & 0x7F) | 0x80 | ((n >> 7) & 0x7F | 0x80) << 8 | ((n >> 14) & 0x7F | 0x80) << 16
                | (n >> 21) << 24).to_bytes(4, "little")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zigzag(ts: int) -> int:
    if ts >= 0:  # every store time: no 64-bit mask, which a compiled int would take as a big one
        return ts << 1
    return ((ts << 1) ^ (ts >> 63)) & 0xFFFFFFFFFFFFFFFF


def _entry(name: str, ts: int, seq: int, hdr: bytes, payload: bytes) -> bytes:
    raw = name.encode()
    return b"".join((_uvarint(len(raw)), _uvarint(_zigzag(ts)), _uvarint(seq), _uvarint(len(hdr)),
                     _uvarint(len(payload)), raw, hdr, payload))


def _consumer_json(c: ConsumerSnapshot) -> bytes:
    """nats-server's SnapshotConsumerState: its Redelivered counts redeliveries (deliveries - 1)."""
    st = c.state
    state: dict[str, Any] = {
        "delivered": {"consumer_seq": st.delivered_consumer_seq, "stream_seq": st.delivered_stream_seq},
        "ack_floor": {"consumer_seq": st.ack_floor_consumer_seq, "stream_seq": st.ack_floor_stream_seq},
    }
    if st.pending:
        state["pending"] = {str(s): {"Sequence": d, "Timestamp": ts} for s, (d, ts) in sorted(st.pending.items())}
    if st.redelivered:
        state["redelivered"] = {str(s): n - 1 for s, n in sorted(st.redelivered.items()) if n > 1}
    return json.dumps({"config": c.config, "state": state}).encode()


def _consumer_from_json(name: str, raw: Any) -> ConsumerSnapshot:
    try:
        config, st = dict(raw["config"]), raw["state"]
        delivered, floor = st.get("delivered") or {}, st.get("ack_floor") or {}
        state = ConsumerState(
            int(delivered.get("consumer_seq", 0)), int(delivered.get("stream_seq", 0)),
            int(floor.get("consumer_seq", 0)), int(floor.get("stream_seq", 0)),
            {int(s): (int(p["Sequence"]), int(p["Timestamp"])) for s, p in (st.get("pending") or {}).items()},
            {int(s): int(n) + 1 for s, n in (st.get("redelivered") or {}).items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ArchiveError(f"consumer {name!r} in the archive is damaged ({err!r}): {RETAKE}") from None
    return ConsumerSnapshot(name, config, state)


# -- writing ------------------------------------------------------------------------------------------


def header_bytes(header: Header, now_ns: int) -> bytes:
    """The entries before the messages, taken when the snapshot starts (the state goes on changing)."""
    state = {**header.state, "consumer_count": len(header.consumers)}
    parts = [MAGIC, _entry(STATE_ENTRY, now_ns, 0, b"", json.dumps(state).encode())]
    parts += [_entry(CONSUMER_PREFIX + c.name, now_ns, 0, b"", _consumer_json(c)) for c in header.consumers]
    return b"".join(parts)


def write(head: bytes, runs: Iterable[bytes]) -> Iterator[bytes]:
    """The archive (`header_bytes`, the messages, the end) as compressed frames, produced as the store's
    runs of records (`StreamStore.load_records`) are read: a large stream is never held in memory."""
    plain = bytearray(head)
    encoder = _EntryEncoder()
    for run in runs:
        plain += encoder.entries(run)
        if len(plain) >= _BLOCK:
            yield from _frames(plain, last=False)
            del plain[: len(plain) // _BLOCK * _BLOCK]
    plain += _entry("", 0, 0, b"", b"")
    yield from _frames(plain, last=True)


def _be64(buf: bytes, at: int, signed: bool) -> int:
    """The big-endian 64-bit integer at `at`: byte by byte below 2 ** 62 (every seq and store time), where
    a compiled int stays unboxed and no method is looked up."""
    if buf[at] < 0x40:
        return (buf[at] << 56 | buf[at + 1] << 48 | buf[at + 2] << 40 | buf[at + 3] << 32
                | buf[at + 4] << 24 | buf[at + 5] << 16 | buf[at + 6] << 8 | buf[at + 7])
    return int.from_bytes(buf[at:at + 8], "big", signed=signed)


_CONTINUED: Final = [bytes((n | 0x80,)) for n in range(0x80)]  # a varint's byte with more to follow


class _EntryEncoder:
    """Message records (record.py's format, as `load_records` hands them over) to archive entries. A
    record holds what an entry does, its subject, header block and payload back to back as an entry's end
    has them, so an entry is its five varints and one slice of the record. The per-message cost of a
    backup is `entries`: it reads the record's fields byte by byte (compiled, that is cheaper than a
    struct's tuple) and builds the varints from parts kept between entries, which change slowly: a
    seq's beyond its low 7 bits every 128 messages, a time's beyond its low 21 bits every 2 ms."""

    def __init__(self) -> None:
        self.lengths: dict[int, bytes] = {}  # header length << 32 | payload length -> their two varints
        self.seq_high = -1  # seq >> 7 and the varint bytes of it, for the last seq seen
        self.seq_tail = b""
        self.time_high = -1  # a time's zig-zag >> 21 and its varint bytes, for the last time seen
        self.time_tail = b""
        self.last_seq = 0

    def entries(self, run: bytes) -> bytes:
        parts: list[bytes] = []
        seq_at, ts_at, slen_at, hlen_at, body_at = RECORD_OFFSETS
        tail, msg, skipped = RECORD_TAIL, RECORD_MSG, RECORD_SKIPPED
        pos = 0
        size = len(run)
        while pos < size:
            length = run[pos] << 24 | run[pos + 1] << 16 | run[pos + 2] << 8 | run[pos + 3]
            end = pos + length
            if length < body_at + tail or end > size:
                raise StoreError(f"the stream store handed over a damaged run (a record of {length} bytes at "
                                 f"{pos} of {size}): {RETAKE}")
            kind = run[pos + 4]
            if kind != msg:
                if kind not in skipped:
                    raise StoreError(f"the stream store handed over a damaged run (kind {kind} at {pos}): {RETAKE}")
                pos = end  # a tombstone or floor record between messages
                continue
            seq = _be64(run, pos + seq_at, False)
            z = _zigzag(_be64(run, pos + ts_at, True))
            slen = run[pos + slen_at] << 8 | run[pos + slen_at + 1]
            at = pos + hlen_at
            hlen = run[at] << 24 | run[at + 1] << 16 | run[at + 2] << 8 | run[at + 3]
            body = pos + body_at
            plen = end - tail - body - slen - hlen
            if plen < 0 or seq <= self.last_seq:
                raise StoreError(f"the stream store handed over a damaged record (seq {seq}): {RETAKE}")
            self.last_seq = seq
            parts.append(_ONE_BYTE[slen] if slen < 0x80 else _uvarint(slen))
            if z < 0x200000:
                parts.append(_uvarint(z))
            else:
                parts.append(_CONTINUED[z & 0x7F])
                parts.append(_CONTINUED[z >> 7 & 0x7F])
                parts.append(_CONTINUED[z >> 14 & 0x7F])
                parts.append(self._time_tail(z >> 21))
            if seq < 0x80:
                parts.append(_ONE_BYTE[seq])
            else:
                parts.append(_CONTINUED[seq & 0x7F])
                parts.append(self._seq_tail(seq >> 7))
            parts.append(self._lengths(hlen, plen))
            parts.append(run[body:end - tail])
            pos = end
        return b"".join(parts)

    def _time_tail(self, high: int) -> bytes:
        if high != self.time_high:
            self.time_high, self.time_tail = high, _uvarint(high)
        return self.time_tail

    def _seq_tail(self, high: int) -> bytes:
        if high != self.seq_high:
            self.seq_high, self.seq_tail = high, _uvarint(high)
        return self.seq_tail

    def _lengths(self, hlen: int, plen: int) -> bytes:
        key = hlen << 32 | plen
        got = self.lengths.get(key)
        if got is None:
            if len(self.lengths) > 4096:
                self.lengths.clear()
            got = self.lengths[key] = _uvarint(hlen) + _uvarint(plen)
        return got


def _frames(plain: bytearray, last: bool) -> Iterator[bytes]:
    view = memoryview(plain)
    end = len(plain) if last else len(plain) // _BLOCK * _BLOCK
    for start in range(0, end, _BLOCK):
        yield bytes(cramjam.snappy.compress(view[start:start + _BLOCK]))
    view.release()


# -- reading ------------------------------------------------------------------------------------------


class _Plain:
    """The decompressed bytes of an archive file, read in order."""

    def __init__(self, f: IO[bytes]) -> None:
        self._chunks = s2.decode_stream(f)
        self._buf = b""
        self._pos = 0

    def read(self, n: int) -> bytes:
        if self._pos + n <= len(self._buf):  # the common case: within the current chunk
            self._pos += n
            return self._buf[self._pos - n:self._pos]
        out = bytearray(self._buf[self._pos:])
        while len(out) < n:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                raise ArchiveError(f"the archive is truncated (it ends before its end marker): {RETAKE}") from None
            except s2.CorruptStream as err:
                raise ArchiveError(f"the archive is corrupt ({err}): {RETAKE}") from None
            take = n - len(out)
            out += self._buf[:take]
            self._pos = min(take, len(self._buf))
        return bytes(out)

    def _ahead(self, n: int) -> None:
        """At least `n` bytes from the position in the buffer, unless the archive ends first."""
        while len(self._buf) - self._pos < n:
            try:
                more = next(self._chunks)
            except StopIteration:
                return
            except s2.CorruptStream as err:
                raise ArchiveError(f"the archive is corrupt ({err}): {RETAKE}") from None
            self._buf, self._pos = self._buf[self._pos:] + more, 0

    def entry(self) -> tuple[str, int, int, bytes, bytes]:
        """(name, time ns, seq, header block, payload)."""
        self._ahead(_MAX_ENTRY_HEAD)
        buf, at = self._buf, self._pos
        try:
            name_len, at = _varint_at(buf, at)
            zigzag, at = _time_at(buf, at)
            seq, at = _varint_at(buf, at)
            hlen, at = _varint_at(buf, at)
            plen, at = _varint_at(buf, at)
        except IndexError:
            raise ArchiveError(f"the archive is truncated (it ends inside an entry): {RETAKE}") from None
        self._pos = at
        if name_len > 1 << 20:
            raise ArchiveError(f"the archive is corrupt (an entry name of {name_len} bytes): {RETAKE}")
        body = self.read(name_len + hlen + plen)
        try:
            name = body[:name_len].decode()
        except UnicodeDecodeError:
            raise ArchiveError(f"the archive is corrupt (an entry name is not UTF-8): {RETAKE}") from None
        return name, (zigzag >> 1) ^ -(zigzag & 1), seq, body[name_len:name_len + hlen], body[name_len + hlen:]

    def messages(self) -> tuple[list[StoredMsg], bool]:
        """The message entries from the position on, decoded in one pass over the current buffer (at least
        one, unless the end marker comes first); whether the end marker was read."""
        buf, at = self._buf, self._pos
        safe = len(buf) - _MAX_ENTRY_HEAD  # an entry head starting before this is whole in the buffer
        out: list[StoredMsg] = []
        add = out.append
        try:
            while at < safe:
                name_len = buf[at]
                if name_len < 0x80:
                    p = at + 1
                else:
                    name_len, p = _varint_at(buf, at)
                zigzag, p = _time_at(buf, p)
                seq, p = _varint_at(buf, p)
                hlen = buf[p]
                if hlen < 0x80:  # mostly 0: no headers
                    p += 1
                else:
                    hlen, p = _varint_at(buf, p)
                plen, p = _varint_at(buf, p)
                hdr_at = p + name_len
                end = hdr_at + hlen + plen
                if seq == 0 or end > len(buf) or name_len > 1 << 20:
                    break  # the end marker, an entry running into the next chunk, or damage: one at a time
                add(new_stored_msg((seq, buf[p:hdr_at].decode(), buf[hdr_at:hdr_at + hlen], buf[hdr_at + hlen:end],
                                    (zigzag >> 1) ^ -(zigzag & 1))))
                at = end
        except UnicodeDecodeError:
            raise ArchiveError(f"the archive is corrupt (an entry name is not UTF-8): {RETAKE}") from None
        self._pos = at
        if out:
            return out, False
        subject, ts, seq, hdr, data = self.entry()
        if seq == 0:
            if subject or ts or hdr or data:
                raise ArchiveError(f"the archive is corrupt (a message without a sequence): {RETAKE}")
            return out, True
        return [StoredMsg(seq, subject, hdr, data, ts)], False


def _time_at(buf: bytes, at: int) -> tuple[int, int]:
    """(the zig-zag time varint at `at`, the position after it): a time since 1970 is nine bytes, read one
    by one (no `int.from_bytes` method call; compiled, the int stays unboxed until 2043); others by the loop."""
    if at + 9 <= len(buf) and buf[at + 8] < 0x80 \
            and buf[at] & buf[at + 1] & buf[at + 2] & buf[at + 3] & buf[at + 4] & buf[at + 5] & buf[at + 6] & buf[at + 7] & 0x80:
        return ((buf[at] & 0x7F) | (buf[at + 1] & 0x7F) << 7 | (buf[at + 2] & 0x7F) << 14 | (buf[at + 3] & 0x7F) << 21
                | (buf[at + 4] & 0x7F) << 28 | (buf[at + 5] & 0x7F) << 35 | (buf[at + 6] & 0x7F) << 42
                | (buf[at + 7] & 0x7F) << 49 | buf[at + 8] << 56), at + 9
    return _varint_at(buf, at)


def _varint_at(buf: bytes, at: int) -> tuple[int, int]:
    """(the uvarint at `at`, the position after it); IndexError when the buffer ends inside it."""
    byte = buf[at]
    if byte < 0x80:
        return byte, at + 1
    value, shift = byte & 0x7F, 7
    while True:
        at += 1
        byte = buf[at]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at + 1
        shift += 7
        if shift > 63:
            raise ArchiveError(f"the archive is corrupt (a number is too long): {RETAKE}")


def read_state(f: IO[bytes]) -> dict[str, Any]:
    """The state.json of an archive file (read from its start; the file is left where the read ended)."""
    f.seek(0)
    return Reader(f).header.state


class Reader:
    """An archive file read back: `header` at once, then `messages()` up to the end marker."""

    def __init__(self, f: IO[bytes]) -> None:
        self._plain = _Plain(f)
        if self._plain.read(len(MAGIC)) != MAGIC:
            raise ArchiveError("not a stream snapshot (no NATSARC1 preamble; nats-server before 2.15 wrote "
                               "tar archives, which jsbroker cannot read): restore an archive written by "
                               "`nats stream backup` from jsbroker or nats-server 2.15")
        name, _, _, _, body = self._plain.entry()
        if name != STATE_ENTRY:
            raise ArchiveError(f"the archive does not start with its state ({name!r}): {RETAKE}")
        try:
            state = json.loads(body)
            count = int(state.get("consumer_count") or 0)
        except (ValueError, AttributeError, TypeError) as err:
            raise ArchiveError(f"the archive's state is damaged ({err}): {RETAKE}") from None
        consumers = []
        for _ in range(count):
            name, _, _, _, body = self._plain.entry()
            if not name.startswith(CONSUMER_PREFIX):
                raise ArchiveError(f"the archive holds {name!r} where a consumer was expected: {RETAKE}")
            try:
                raw = json.loads(body)
            except ValueError as err:
                raise ArchiveError(f"consumer {name!r} in the archive is damaged ({err}): {RETAKE}") from None
            consumers.append(_consumer_from_json(name[len(CONSUMER_PREFIX):], raw))
        self.header = Header(state, consumers)

    def batches(self) -> Iterator[list[StoredMsg]]:
        """The messages up to the end marker, a decompressed chunk's worth at a time."""
        while True:
            batch, ended = self._plain.messages()
            if batch:
                yield batch
            if ended:
                return
