"""Fast batch publishing (`allow_batched`, nats-server 2.14 "fast ingest", ADR-50): a pure state machine.

A fast batch is a run of plain publishes whose reply subject carries the batch's control data:
`<prefix>.<id>.<flow>.<gap ok|fail>.<batch seq>.<op>.$FI`, op 0 start, 1 append, 2 commit (store this one
and end), 3 end without storing this one (EOB), 4 ping. Nothing is staged: each message is stored as it
comes (the batch is not atomic). The server answers on the reply subject:
- `{"type":"ack","seq":N,"msgs":M}` flow control: batch messages up to N are handled, the next ack comes
  after M more (M starts at min(flow, 500), at 1 when the stream has other open fast batches, and doubles
  or halves towards 500 / open batches, never above the client's flow);
- `{"type":"gap","last_seq":E,"seq":S}` a batch sequence other than the expected E: with gap `ok` a forward
  gap is skipped, anything else ends the batch;
- `{"type":"err","seq":S,"error":{...}}` a message the stream refused: with gap `ok` the batch goes on,
  with `fail` it ends;
- the pub ack that ends a batch: `{"stream":..,"seq":<last stored stream seq>,"batch":id,"count":<last
  batch seq>}`.
A batch idle for 10 s is forgotten silently (its next message is 10208); at most 1000 open batches per
stream and 50,000 per server (10211). Everything here is nats-server 2.15.1 as seen on the wire (standalone:
each message is persisted before the next is looked at).

`Batches.receive` decides what happens to one message before it is stored; the stream then reports the
outcome with `stored`, `duplicate` or `refused`. Each returns the answers to send, as `Answer`s that
`render` turns into bytes. Expiry is lazy (a batch past its deadline is dropped when next looked at): nats-
server sends nothing when a batch times out, so no timer is needed to be equal on the wire.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

from jsbroker.jetstream import errors, headers

SUFFIX = ".$FI"
MAX_ID_LEN = 64
TIMEOUT_NS = 10 * 1_000_000_000  # nats-server's default max batch inactivity (streamDefaultMaxBatchTimeout)
MAX_INFLIGHT_PER_STREAM = 1000
MAX_INFLIGHT_TOTAL = 50_000
_MAX_ACK_INTERVAL = 500  # the most messages between two flow acks, shared by a stream's open batches
_DEFAULT_FLOW = 10  # a flow token that is no positive number
_MAX_FLOW = 65535
START, APPEND, COMMIT, EOB, PING = range(5)
_NEVER = 2**63  # a committing batch does not time out


def is_fast_batch(reply: str) -> bool:
    return len(reply) > len(SUFFIX) and reply.endswith(SUFFIX)


def _int64(token: str) -> int:
    """nats-server's parseInt64: -1 for anything but ASCII digits; a number past int64 wraps around as there."""
    if not (token.isascii() and token.isdigit()):
        return -1
    n = int(token) & 0xFFFF_FFFF_FFFF_FFFF
    return n - (1 << 64) if n >> 63 else n


@dataclass(frozen=True, slots=True)
class Ref:
    """What one message's reply subject says about its batch."""

    id: str
    seq: int
    flow: int  # the most messages the client lets pass between two flow acks
    gap_ok: bool
    op: int


def parse(reply: str) -> Ref:
    """The control data of a reply subject that ends in `.$FI`; 10206 when it is malformed."""
    tokens = reply[:-len(SUFFIX)].rsplit(".", 5)
    if len(tokens) < 6:
        raise errors.BATCH_PUBLISH_INVALID_PATTERN()
    _, batch_id, flow_token, gap, seq_token, op_token = tokens
    op = _int64(op_token)
    seq = headers.as_uint(seq_token)  # no wrap: past uint64 is invalid
    if not START <= op <= PING or seq < 1 or seq >= 2**64 - 1 or (seq == 1 and op == EOB) \
            or (op == START and seq != 1) or (op == APPEND and seq == 1) or gap not in ("ok", "fail"):
        raise errors.BATCH_PUBLISH_INVALID_PATTERN()
    flow = _int64(flow_token)
    flow = _DEFAULT_FLOW if flow <= 0 else min(flow, _MAX_FLOW)
    return Ref(batch_id, seq, flow, gap == "ok", op)


@dataclass(frozen=True, slots=True)
class Answer:
    """One message to the batch's reply subject. kind: "flow" (a, b = seq, msgs), "gap" (a, b = last_seq,
    seq), "err" (a = seq, error), "ack" (the closing pub ack: a, b = stream seq, batch count), "dup" (a
    first message that was a duplicate: a, b = its original's seq, batch count) or "error" (a pub ack
    error). `needs_acks`: not sent on a `no_ack` stream."""

    kind: str
    a: int = 0
    b: int = 0
    error: errors.ApiError | None = None
    needs_acks: bool = False


def render(answer: Answer, batch_id: str, ack_prefix: bytes, err_suffix: bytes,
           error_json: Callable[[errors.ApiError], bytes]) -> bytes:
    """The answer's bytes; `ack_prefix` / `err_suffix` are the stream's pub ack pieces (`{"stream":..,"seq":`
    and `,"stream":..,"seq":0}`), `error_json` how it writes an error."""
    if answer.kind == "flow":
        return b'{"type":"ack","seq":%d,"msgs":%d}' % (answer.a, answer.b)
    if answer.kind == "gap":
        return b'{"type":"gap","last_seq":%d,"seq":%d}' % (answer.a, answer.b)
    quoted = json.dumps(batch_id, ensure_ascii=False).encode()  # Go's %q keeps printable characters
    if answer.kind == "ack":
        return b'%s%d,"batch":%s,"count":%d}' % (ack_prefix, answer.a, quoted, answer.b)
    if answer.kind == "dup":
        return b'%s%d,"duplicate": true,"batch":%s,"count":%d}' % (ack_prefix, answer.a, quoted, answer.b)
    assert answer.error is not None
    error = error_json(answer.error)
    if answer.kind == "err":
        return b'{"type":"err","seq":%d,"error":%s}' % (answer.a, error)
    return b'{"error":' + error + err_suffix


@dataclass(slots=True)
class _Batch:
    gap_ok: bool
    max_msgs: int  # the client's flow: the ack interval never grows past it
    msgs: int  # the current ack interval
    deadline_ns: int
    taken_seq: int = 0  # highest batch sequence taken
    persisted_seq: int = 0  # highest batch sequence persisted (or skipped)
    flow_acked_seq: int = 0  # batch sequence of the last flow ack
    last_stream_seq: int = 0  # last stream sequence stored for the batch
    pending: int = 0  # messages handed to the store and not reported back
    committing: bool = False  # ended; the closing pub ack waits for persisted_seq to reach taken_seq


@dataclass(slots=True)
class Inflight:
    """The open fast batches of every stream of one server (the 50,000 limit)."""

    registries: list[Batches] = field(default_factory=list)
    total: int = 0

    def prune(self, now_ns: int) -> None:
        for registry in self.registries:
            registry.prune(now_ns)


class Batches:
    """The open fast batches of one stream."""

    def __init__(self, inflight: Inflight | None = None) -> None:
        self._open: dict[str, _Batch] = {}
        self._inflight = inflight if inflight is not None else Inflight()
        self._inflight.registries.append(self)

    def __len__(self) -> int:
        return len(self._open)

    def close(self) -> None:
        """Forget every batch (allow_batched turned off, the stream stopped)."""
        self._inflight.total -= len(self._open)
        self._open.clear()
        if self in self._inflight.registries:
            self._inflight.registries.remove(self)

    def prune(self, now_ns: int) -> None:
        for batch_id in [k for k, b in self._open.items() if b.deadline_ns <= now_ns]:
            self._drop(batch_id)

    def _drop(self, batch_id: str) -> None:
        if self._open.pop(batch_id, None) is not None:
            self._inflight.total -= 1

    def receive(self, ref: Ref, now_ns: int, api_level_ok: bool = True) -> tuple[list[Answer], bool]:
        """A message of batch `ref` arrived (after the stream's own checks): the answers now and whether to
        store it. Raises ApiError for a pub ack error (sent only when the stream acks)."""
        if len(ref.id) > MAX_ID_LEN:
            raise errors.BATCH_PUBLISH_INVALID_BATCH_ID()
        batch = self._open.get(ref.id)
        if batch is not None and batch.deadline_ns <= now_ns:
            self._drop(ref.id)
            batch = None
        if batch is None:
            batch = self._start(ref, now_ns)
        if not api_level_ok:
            self._drop(ref.id)
            raise errors.REQUIRED_API_LEVEL()
        if not batch.committing:
            batch.deadline_ns = now_ns + TIMEOUT_NS
        if ref.op == PING:
            return self._ping(ref, batch), False
        if batch.committing:  # the client waits for the pub ack; nothing more is taken
            return [], False
        batch.taken_seq += 1
        out: list[Answer] = []
        if batch.taken_seq != ref.seq:
            out.append(Answer("gap", batch.taken_seq, ref.seq))
            if not (batch.gap_ok and ref.seq > batch.taken_seq):
                batch.taken_seq -= 1
                return out + self._commit(ref.id, batch), False
            batch.taken_seq = ref.seq
        if ref.op == EOB:
            batch.taken_seq -= 1
            if batch.pending == 0:
                batch.persisted_seq = batch.taken_seq
            return out + self._commit(ref.id, batch), False
        if ref.op == COMMIT:
            out += self._commit(ref.id, batch)  # the pub ack once this message is stored
        if ref.seq == 1 and ref.op != COMMIT:
            out.append(Answer("flow", 0, batch.msgs, needs_acks=True))
        batch.pending += 1
        return out, True

    def _start(self, ref: Ref, now_ns: int) -> _Batch:
        if ref.seq != 1 or ref.op == PING:  # a ping never opens a batch
            raise errors.BATCH_PUBLISH_UNKNOWN_BATCH_ID()
        self.prune(now_ns)
        if len(self._open) + 1 > MAX_INFLIGHT_PER_STREAM:
            raise errors.BATCH_PUBLISH_TOO_MANY_INFLIGHT()
        if self._inflight.total + 1 > MAX_INFLIGHT_TOTAL:
            self._inflight.prune(now_ns)
            if self._inflight.total + 1 > MAX_INFLIGHT_TOTAL:
                raise errors.BATCH_PUBLISH_TOO_MANY_INFLIGHT()
        batch = _Batch(ref.gap_ok, ref.flow, 1 if self._open else min(_MAX_ACK_INTERVAL, ref.flow), now_ns + TIMEOUT_NS)
        self._open[ref.id] = batch
        self._inflight.total += 1
        return batch

    def _ping(self, ref: Ref, batch: _Batch) -> list[Answer]:
        """A ping names the highest sequence the client sent: a gap up to it is reported (and ends a `fail`
        batch); otherwise the last flow ack is sent again."""
        if ref.seq <= batch.taken_seq:
            return [Answer("flow", batch.flow_acked_seq, batch.msgs)]
        out = [Answer("gap", batch.taken_seq + 1, ref.seq + 1)]
        if not batch.gap_ok:
            return out + self._commit(ref.id, batch)
        batch.taken_seq = ref.seq
        if batch.pending == 0:
            batch.persisted_seq = batch.taken_seq
        flow = self._flow(batch)
        return out + (flow or [Answer("flow", batch.flow_acked_seq, batch.msgs)])

    def _commit(self, batch_id: str, batch: _Batch) -> list[Answer]:
        """End the batch: the closing pub ack once every message taken was persisted (at once unless a
        message is still to be stored, or one was refused while storing: then never, as on nats-server)."""
        batch.committing = True
        batch.deadline_ns = _NEVER
        if batch.persisted_seq != batch.taken_seq:
            return []
        self._drop(batch_id)
        return [Answer("ack", batch.last_stream_seq, batch.taken_seq)]

    def stored(self, ref: Ref, stream_seq: int) -> list[Answer]:
        """The message `receive` let through was stored (or skipped for lack of interest) at `stream_seq`."""
        batch = self._open.get(ref.id)
        if batch is None:
            return []
        batch.pending = max(0, batch.pending - 1)
        batch.last_stream_seq = stream_seq
        batch.persisted_seq = batch.taken_seq if batch.pending == 0 else ref.seq
        if batch.committing and batch.persisted_seq == batch.taken_seq:
            self._drop(ref.id)
            return [Answer("ack", batch.last_stream_seq, batch.taken_seq)]
        return self._flow(batch)

    def duplicate(self, ref: Ref, original_seq: int) -> list[Answer]:
        """The message was a duplicate (its Nats-Msg-Id is in the window): skipped, the batch goes on;
        a duplicate that commits ends it."""
        batch = self._open.get(ref.id)
        if batch is None:
            return []
        batch.pending -= 1
        out: list[Answer] = []
        if batch.pending == 0:
            batch.persisted_seq = ref.seq
            out = self._flow(batch)
        if ref.op != COMMIT:
            return out
        if not batch.gap_ok and batch.taken_seq == 1:
            self._drop(ref.id)
            return out + [Answer("dup", original_seq, ref.seq)]
        return out + self._commit(ref.id, batch)

    def refused(self, ref: Ref, error: errors.ApiError, late: bool) -> list[Answer]:
        """The stream refused the message. `late`: a check nats-server makes while storing (the pub ack error
        goes out as for a plain publish; the batch does not notice). Otherwise the first message of a `fail`
        batch is answered like a plain publish and ends it; later ones get an "err" answer, and end a
        `fail` batch or a commit."""
        batch = self._open.get(ref.id)
        if batch is None:
            return []
        if late:
            return [Answer("error", error=error, needs_acks=True)]
        batch.pending -= 1
        if not batch.gap_ok and batch.taken_seq == 1:
            self._drop(ref.id)
            return [Answer("error", error=error)]
        out = [Answer("err", ref.seq, error=error)]
        if batch.gap_ok and ref.op != COMMIT:
            return out
        batch.taken_seq -= 1
        if batch.pending == 0:
            batch.persisted_seq = batch.taken_seq
        return out + self._commit(ref.id, batch)

    def _flow(self, batch: _Batch) -> list[Answer]:
        """A flow ack when `msgs` more were handled since the last one (only the latest of several), with the
        interval moved towards 500 / open batches (at most the client's flow)."""
        if batch.persisted_seq < batch.flow_acked_seq + batch.msgs:
            return []
        batch.flow_acked_seq += (batch.persisted_seq - batch.flow_acked_seq) // batch.msgs * batch.msgs
        target = min(max(1, _MAX_ACK_INTERVAL // len(self._open)), batch.max_msgs)
        if batch.msgs < target:
            batch.msgs = min(batch.msgs * 2, target)
        elif batch.msgs > target:
            batch.msgs = max(batch.msgs // 2, target)
        return [Answer("flow", batch.flow_acked_seq, batch.msgs)]
