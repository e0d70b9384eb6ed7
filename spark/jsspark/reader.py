"""Reading a range of stream sequences, deterministically, from inside a Spark task.

Each range is read by its own short-lived consumer: ephemeral, ack none, in memory, starting at the
range's first sequence, with the source's subject filters, pulled in requests of `fetchBatchSize`. Delivery is in stream order, so the rows of a
range are the same however often Spark runs the task; deleted and purged sequences are simply absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

import nats
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from .options import Connection


@dataclass(frozen=True)
class StreamBounds:
    first_seq: int
    last_seq: int


@dataclass
class Rows:
    """One range's messages, column by column (what `arrow.record_batch` turns into a RecordBatch)."""

    subjects: list[str] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    micros: list[int] = field(default_factory=list)
    headers: list[dict[str, list[str]] | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.seqs)


async def bounds(conn: Connection, stream: str) -> StreamBounds:
    nc = await nats.connect(**conn.connect_kwargs())
    try:
        state = (await nc.jetstream().stream_info(stream)).state
        return StreamBounds(state.first_seq, state.last_seq)
    finally:
        await nc.close()


async def mirror_progress(conn: Connection, stream: str, consumer: str, next_seq: int) -> None:
    """Move a durable consumer's ack floor to `next_seq - 1` ($JS.API.CONSUMER.RESET), so its info (and the
    operator's Consumer status) shows what a streaming query has committed and what is left."""
    nc = await nats.connect(**conn.connect_kwargs())
    try:
        await nc.jsm().reset_consumer(stream, consumer, seq=max(next_seq, 1), timeout=5)
    finally:
        await nc.close()


async def seq_at_time(conn: Connection, stream: str, epoch_ms: int) -> int:
    """The first stream sequence stored at or after `epoch_ms` (the server finds it: a consumer with
    deliver policy by_start_time), or the one after the last when there is none."""
    nc = await nats.connect(**conn.connect_kwargs())
    try:
        js = nc.jetstream()
        name = f"jsspark-time-{uuid.uuid4().hex[:12]}"
        start = datetime.fromtimestamp(epoch_ms / 1000, timezone.utc)
        await js.add_consumer(stream, ConsumerConfig(
            name=name, deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start, ack_policy=AckPolicy.NONE,
            mem_storage=True, inactive_threshold=30.0))
        try:
            psub = await js.pull_subscribe_bind(durable=name, stream=stream)
            msgs = await psub.fetch(1, timeout=2)
            return int(msgs[0].metadata.sequence.stream)
        except nats.errors.TimeoutError:
            return (await js.stream_info(stream)).state.last_seq + 1
        finally:
            with contextlib.suppress(Exception):
                await js.delete_consumer(stream, name)
    finally:
        await nc.close()


async def read_range(conn: Connection, stream: str, subjects: tuple[str, ...], first: int, last: int,
                     batch: int, with_headers: bool) -> list[Rows]:
    """Messages with first <= seq <= last, in chunks of at most `batch` rows.

    Pull requests go to the consumer and its messages come back to one inbox subscription whose callback
    fills the columns: no per-message queue or metadata objects (the stream sequence, time and pending
    count are read straight from the ack subject)."""
    nc = await nats.connect(**conn.connect_kwargs())
    name = f"jsspark-{uuid.uuid4().hex[:16]}"
    config = ConsumerConfig(
        name=name, deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first, ack_policy=AckPolicy.NONE,
        mem_storage=True, inactive_threshold=60.0, max_ack_pending=-1, filter_subjects=list(subjects) or None)
    pull = _Pull(batch, last, with_headers)
    try:
        js = nc.jetstream()
        await js.add_consumer(stream, config)
        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=pull.on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
        request = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"
        while not pull.done.is_set():
            pull.asked = 0
            pull.batch_done.clear()
            await nc.publish(request, json.dumps({"batch": batch, "expires": _EXPIRES_NS}).encode(), reply=inbox)
            await asyncio.wait_for(pull.batch_done.wait(), _EXPIRES_NS / 1e9 + 30)
        with contextlib.suppress(Exception):  # best effort: its inactive threshold removes it anyway
            await asyncio.wait_for(js.delete_consumer(stream, name), 5)
    finally:
        await nc.close()
    if pull.error:
        raise RuntimeError(f"stream {stream}, sequences {first}..{last}: {pull.error}")
    return pull.chunks


_EXPIRES_NS = 5_000_000_000  # a pull request that finds nothing more ends the range after this long


class _Pull:
    """The inbox side of `read_range`: fills `chunks` until the range's end (or nothing more matches)."""

    def __init__(self, batch: int, last: int, with_headers: bool) -> None:
        self.batch, self.last, self.with_headers = batch, last, with_headers
        self.chunks: list[Rows] = []
        self.rows = Rows()
        self.asked = 0
        self.error = ""
        self.done = asyncio.Event()
        self.batch_done = asyncio.Event()

    def _finish(self, everything: bool) -> None:
        if self.rows:
            self.chunks.append(self.rows)
            self.rows = Rows()
        if everything:
            self.done.set()
        self.batch_done.set()

    async def on_msg(self, msg: Msg) -> None:
        if self.done.is_set():
            return
        reply = msg.reply
        if not reply:  # a status: 404/408 (nothing more matches within the request) ends the range
            status = (msg.headers or {}).get("Status", "")
            if status not in ("404", "408"):
                self.error = f"the server ended the read with status {status} {(msg.headers or {}).get('Description', '')}"
            self._finish(everything=True)
            return
        tokens = reply.split(".")
        base = 2 if len(tokens) == 9 else 4  # $JS.ACK.<stream>... or $JS.ACK.<domain>.<account>.<stream>...
        seq = int(tokens[base + 3])
        if seq > self.last:
            self._finish(everything=True)
            return
        rows = self.rows
        rows.subjects.append(msg.subject)
        rows.seqs.append(seq)
        rows.data.append(msg.data)
        rows.micros.append(int(tokens[base + 5]) // 1000)
        if self.with_headers:
            rows.headers.append(_headers(msg.headers) if msg.headers else None)
        self.asked += 1
        if seq == self.last or tokens[base + 6] == "0":
            self._finish(everything=True)
        elif self.asked >= self.batch:
            self._finish(everything=False)


def _headers(header: dict[str, str]) -> dict[str, list[str]]:
    # nats-py keeps the last value of a repeated header; the column's type has room for all of them.
    return {k: [v] for k, v in header.items()}
