"""Reading a range of stream sequences, deterministically, from inside a Spark task.

Each range is read by its own short-lived consumer: ephemeral, ack none, in memory, starting at the
range's first sequence, with the source's subject filters. Delivery is in stream order, so the rows of a
range are the same however often Spark runs the task; deleted and purged sequences are simply absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field

import nats
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


async def read_range(conn: Connection, stream: str, subjects: tuple[str, ...], first: int, last: int,
                     batch: int, with_headers: bool) -> list[Rows]:
    """Messages with first <= seq <= last, in chunks of at most `batch` rows."""
    nc = await nats.connect(**conn.connect_kwargs())
    js = nc.jetstream()
    name = f"jsspark-{uuid.uuid4().hex[:16]}"
    config = ConsumerConfig(
        name=name, deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first, ack_policy=AckPolicy.NONE,
        mem_storage=True, inactive_threshold=60.0, max_ack_pending=-1, filter_subjects=list(subjects) or None)
    chunks: list[Rows] = []
    try:
        await js.add_consumer(stream, config)
        psub = await js.pull_subscribe_bind(durable=name, stream=stream)
        done = False
        while not done:
            try:
                msgs = await psub.fetch(batch, timeout=5)
            except asyncio.TimeoutError:
                break  # nothing left that matches
            rows = Rows()
            for msg in msgs:
                meta = msg.metadata
                if meta.sequence.stream > last:
                    done = True
                    break
                rows.subjects.append(msg.subject)
                rows.seqs.append(meta.sequence.stream)
                rows.data.append(msg.data)
                rows.micros.append(int(meta.timestamp.timestamp() * 1_000_000))
                if with_headers:
                    rows.headers.append(_headers(msg.header) if msg.header else None)
                if meta.sequence.stream == last or meta.num_pending == 0:
                    done = True
                    break
            if rows:
                chunks.append(rows)
        with contextlib.suppress(Exception):  # best effort: its inactive threshold removes it anyway
            await asyncio.wait_for(js.delete_consumer(stream, name), 5)
    finally:
        await nc.close()
    return chunks


def _headers(header: dict[str, str]) -> dict[str, list[str]]:
    # nats-py keeps the last value of a repeated header; the column's type has room for all of them.
    return {k: [v] for k, v in header.items()}
