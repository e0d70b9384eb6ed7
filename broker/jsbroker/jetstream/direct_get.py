"""DIRECT.GET (ADR-31, pure): a request's JSON or subject form read and checked as nats-server checks it, and
its answer as (header block, payload) messages: one message, a batch or the last messages of several
subjects, ending with the EOB status, or the 404 / 408 / 413 status nats-server sends. The stream
subscribes the DIRECT.GET subjects and publishes the answer; this module reads its store through
`StreamStore` only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jsbroker.jetstream import errors, headers, requests, times
from jsbroker.store.base import StoredMsg, StreamStore

_STATUS_408_EMPTY = b"NATS/1.0 408 Empty Request\r\n\r\n"
_STATUS_408_MALFORMED = b"NATS/1.0 408 Malformed Request\r\n\r\n"
_STATUS_408_BAD = b"NATS/1.0 408 Bad Request\r\n\r\n"
_STATUS_404 = b"NATS/1.0 404 Message Not Found\r\n\r\n"
_STATUS_404_NO_RESULTS = b"NATS/1.0 404 No Results\r\n\r\n"
_MAX_MULTI_RESULTS = 1024
_DIRECT_MAX_BYTES = 64 * 1024 * 1024  # nats-server's default max_pending bounds one answer


def answer(stream: str, store: StreamStore, hdr: bytes, payload: bytes, last_for: str | None) -> list[tuple[bytes, bytes]]:
    """The DIRECT.GET answer (ADR-31) of stream `stream` as (header block, payload) messages. `last_for` is
    the subject of the `DIRECT.GET.<stream>.<subject>` form (None for the JSON form)."""
    if not requests.api_level_supported(hdr):
        return [(headers.API_LEVEL_TOO_HIGH, b"")]
    if last_for is not None:
        return _direct_last_for(stream, store, payload, last_for)
    if not payload:
        return [(_STATUS_408_EMPTY, b"")]
    try:
        req = _DirectRequest.parse(requests.parse_json(payload))
    except errors.ApiError:
        return [(_STATUS_408_MALFORMED, b"")]
    if not (req.seq or req.last_by_subj or req.next_by_subj or req.multi_last or req.start_time is not None):
        return [(_STATUS_408_EMPTY, b"")]
    if req.conflicts():
        return [(_STATUS_408_BAD, b"")]
    if req.multi_last:
        return _direct_multi_last(stream, store, req)
    return _direct_batch(stream, store, req)


@dataclass(slots=True)
class _DirectRequest:
    seq: int = 0
    last_by_subj: str = ""
    next_by_subj: str = ""
    start_time: int | None = None
    batch: int = 0
    max_bytes: int = 0
    multi_last: list[str] | None = None
    up_to_seq: int = 0
    up_to_time: int | None = None
    no_hdr: bool = False

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> _DirectRequest:
            return cls(seq=requests.get_int(raw, "seq", kind="uint64"), last_by_subj=requests.get_str(raw, "last_by_subj"),
                   next_by_subj=requests.get_str(raw, "next_by_subj"), start_time=requests.get_time(raw, "start_time"),
                   batch=requests.get_int(raw, "batch"), max_bytes=requests.get_int(raw, "max_bytes"),
                   multi_last=requests.get_str_list(raw, "multi_last") or None,
                   up_to_seq=requests.get_int(raw, "up_to_seq", kind="uint64"), up_to_time=requests.get_time(raw, "up_to_time"),
                   no_hdr=requests.get_bool(raw, "no_hdr"))

    def conflicts(self) -> bool:
        last, nxt, multi = bool(self.last_by_subj), bool(self.next_by_subj), bool(self.multi_last)
        timed = self.start_time is not None
        return ((self.seq > 0 and (last or timed)) or (timed and last) or (last and (nxt or self.batch > 0 or multi))
                or (nxt and multi) or (self.up_to_seq > 0 and self.up_to_time is not None))


def _direct_last_for(stream: str, store: StreamStore, payload: bytes, subject: str) -> list[tuple[bytes, bytes]]:
    req = _DirectRequest()
    if payload:
        try:
            req = _DirectRequest.parse(requests.parse_json(payload))
        except errors.ApiError:
            return [(_STATUS_408_MALFORMED, b"")]
    if not subject or (req.last_by_subj or req.next_by_subj or req.multi_last or req.seq or req.batch
                       or req.start_time is not None or req.up_to_seq or req.up_to_time is not None):
        return [(_STATUS_408_BAD, b"")]
    req.last_by_subj = subject
    return _direct_batch(stream, store, req)


def _direct_headers(stream: str, msg: StoredMsg, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    return headers.append(msg.hdr, ((headers.STREAM, stream), (headers.SUBJECT, msg.subject),
                                    (headers.SEQUENCE, str(msg.seq)), (headers.TIME_STAMP, times.rfc3339(msg.ts)),
                                    *extra))


def _direct_batch(stream: str, store: StreamStore, req: _DirectRequest) -> list[tuple[bytes, bytes]]:
    seq = store.first_seq_at_or_after_time(req.start_time) if req.start_time is not None else req.seq
    is_batch = req.batch > 0
    pending = store.num_pending(seq, [req.next_by_subj] if req.next_by_subj else None) if is_batch else 0
    limit = req.max_bytes or _DIRECT_MAX_BYTES
    out: list[tuple[bytes, bytes]] = []
    sent_bytes = prev_seq = 0
    for i in range(max(req.batch, 1)):
        if seq > 0 and not req.next_by_subj:
            msg = store.load_msg(seq) if i == 0 and not is_batch else store.load_next_msg(seq)
        elif req.next_by_subj:
            msg = store.load_next_msg(seq, req.next_by_subj)
        else:
            msg = store.load_last_msg(req.last_by_subj)
        if msg is None:
            if i > 0:
                break
            return [(_STATUS_404, b"")]
        seq = msg.seq + 1
        if req.no_hdr:
            out_hdr = b""
        elif is_batch:
            pending = max(pending - 1, 0)
            out_hdr = _direct_headers(stream, msg, ((headers.NUM_PENDING, str(pending)),
                                                    (headers.LAST_SEQUENCE, str(prev_seq))))
        else:
            out_hdr = _direct_headers(stream, msg)
        prev_seq = msg.seq
        out.append((out_hdr, msg.data))
        sent_bytes += len(msg.subject) + len(msg.hdr) + len(msg.data)
        if sent_bytes >= limit:
            break
    if is_batch:
        pending = store.num_pending(seq, [req.next_by_subj] if req.next_by_subj else None)
        out.append((headers.build(((headers.NUM_PENDING, str(pending)), (headers.LAST_SEQUENCE, str(prev_seq))),
                                  status=204, description="EOB"), b""))
    return out


def _direct_multi_last(stream: str, store: StreamStore, req: _DirectRequest) -> list[tuple[bytes, bytes]]:
    state = store.state()
    up_to = req.up_to_seq
    if req.up_to_time is not None:
        up_to = store.first_seq_at_or_after_time(req.up_to_time)
        if up_to <= state.first_seq:
            return [(_STATUS_404_NO_RESULTS, b"")]
        up_to -= 1
    up_to = up_to or state.last_seq
    found: dict[str, StoredMsg] = {}
    for subject_filter in req.multi_last or ():
        for subject in store.subjects_state(subject_filter):
            msg = _last_at_or_before(store, subject, up_to, req.seq)
            if msg is not None:
                found[msg.subject] = msg
    if len(found) > _MAX_MULTI_RESULTS:
        return [(b"NATS/1.0 413 Too Many Results\r\n\r\n", b"")]
    if not found:
        return [(_STATUS_404_NO_RESULTS, b"")]
    msgs = sorted(found.values(), key=lambda m: m.seq)
    limit = req.max_bytes or _DIRECT_MAX_BYTES
    out: list[tuple[bytes, bytes]] = []
    sent_bytes = prev_seq = 0
    for i, msg in enumerate(msgs):
        pending = len(msgs) - i - 1
        out.append((_direct_headers(stream, msg, ((headers.NUM_PENDING, str(pending)),
                                                  (headers.LAST_SEQUENCE, str(prev_seq)))), msg.data))
        prev_seq = msg.seq
        sent_bytes += len(msg.subject) + len(msg.hdr) + len(msg.data)
        if sent_bytes >= limit or (req.batch > 0 and i + 1 >= req.batch):
            break
    remaining = len(msgs) - len(out)
    out.append((headers.build(((headers.NUM_PENDING, str(remaining)), (headers.LAST_SEQUENCE, str(prev_seq)),
                               (headers.UP_TO_SEQUENCE, str(up_to))), status=204, description="EOB"), b""))
    return out


def _last_at_or_before(store: StreamStore, subject: str, up_to: int, start: int) -> StoredMsg | None:
    last = store.load_last_msg(subject)
    if last is None or last.seq <= up_to:
        return last if last is not None and last.seq >= start else None
    best = None
    msg = store.load_next_msg(start, subject)
    while msg is not None and msg.seq <= up_to:
        best = msg
        msg = store.load_next_msg(msg.seq + 1, subject)
    return best
