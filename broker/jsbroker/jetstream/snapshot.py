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
from typing import IO, Any, Iterable, Iterator

import cramjam

from jsbroker.jetstream import s2
from jsbroker.store.base import ConsumerState, StoredMsg

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


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


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
    return ((ts << 1) ^ (ts >> 63)) & 0xFFFFFFFFFFFFFFFF


def _low_varint_bytes(z: int) -> bytes:
    """The first four bytes of the varint of `z` >= 1 << 28: its low 28 bits, continuation bits set."""
    return ((z & 0x7F) | ((z << 1) & 0x7F00) | ((z << 2) & 0x7F0000) | ((z << 3) & 0x7F000000)
            | 0x80808080).to_bytes(4, "little")


def _time_varint(ts: int) -> bytes:
    """The zig-zag varint of a time in ns (`write` builds it from its parts instead)."""
    z = _zigzag(ts)
    if z < 1 << 28:
        return _uvarint(z)
    return _low_varint_bytes(z) + _uvarint(z >> 28)


def _entry(name: str, ts: int, seq: int, hdr: bytes, payload: bytes) -> bytes:
    raw = name.encode()
    return b"".join((_uvarint(len(raw)), _time_varint(ts), _uvarint(seq), _uvarint(len(hdr)),
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


def write(head: bytes, batches: Iterable[list[StoredMsg]]) -> Iterator[bytes]:
    """The archive (`header_bytes`, the messages, the end) as compressed frames, produced as the batches
    of messages are read: a large stream is never held in memory. The per-message cost of a backup is
    this loop: one join per entry of bytes mostly reused from the entry before (the subject's name and
    lengths, the time's high bytes, shared by ~134 ms of times)."""
    plain = bytearray(head)
    # subject -> (its length's varint, header length, payload length, those two varints and the name)
    names: dict[str, tuple[bytes, int, int, bytes]] = {}
    high, high_bytes = -1, b""  # the time's varint beyond its low 28 bits, for the last time seen
    uvarint, low_bytes, one_byte = _uvarint, _low_varint_bytes, _ONE_BYTE
    for batch in batches:
        for m in batch:
            subject, hdr, data = m.subject, m.hdr, m.data
            hlen, plen = len(hdr), len(data)
            name = names.get(subject)
            if name is None or name[1] != hlen or name[2] != plen:
                if len(names) > 4096:
                    names.clear()
                raw = subject.encode()
                name = names[subject] = (uvarint(len(raw)), hlen, plen, uvarint(hlen) + uvarint(plen) + raw)
            z = _zigzag(m.ts)
            if z >> 28 != high:
                high = z >> 28
                high_bytes = uvarint(high) if high else b""
            seq = m.seq
            plain += b"".join((name[0], low_bytes(z) if high else uvarint(z), high_bytes,
                               one_byte[seq] if seq < 0x80 else uvarint(seq), name[3], hdr, data))
        if len(plain) >= _BLOCK:
            yield from _frames(plain, last=False)
            del plain[: len(plain) // _BLOCK * _BLOCK]
    plain += _entry("", 0, 0, b"", b"")
    yield from _frames(plain, last=True)


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
            raw = int.from_bytes(buf[at:at + 8], "little")
            if raw & _HIGH_BITS == _HIGH_BITS and buf[at + 8] < 0x80:  # a time: nine bytes, in one go
                zigzag, at = _compact(raw) | buf[at + 8] << 56, at + 9
            else:
                zigzag, at = _varint_at(buf, at)
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
                raw = int.from_bytes(buf[p:p + 8], "little")
                if raw & _HIGH_BITS == _HIGH_BITS and buf[p + 8] < 0x80:
                    zigzag, p = _compact(raw) | buf[p + 8] << 56, p + 9
                else:
                    zigzag, p = _varint_at(buf, p)
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
                add(StoredMsg(seq, buf[p:hdr_at].decode(), buf[hdr_at:hdr_at + hlen], buf[hdr_at + hlen:end],
                              (zigzag >> 1) ^ -(zigzag & 1)))
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


_HIGH_BITS = 0x8080808080808080


def _compact(raw: int) -> int:
    """The 56 value bits of eight varint bytes (little-endian in `raw`, continuation bits set)."""
    x = raw & 0x7F7F7F7F7F7F7F7F
    x = (x & 0x007F007F007F007F) | ((x & 0x7F007F007F007F00) >> 1)
    x = (x & 0x00003FFF00003FFF) | ((x & 0x3FFF00003FFF0000) >> 2)
    return (x & 0x000000000FFFFFFF) | ((x & 0x0FFFFFFF00000000) >> 4)


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
