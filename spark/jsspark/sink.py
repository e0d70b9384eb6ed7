"""The sink: `df.write.format("jetstream")` and `writeStream.format("jetstream")`.

Columns: `subject` (or the `subject` option), `data` (binary or string), optional `headers`
(map<string, array<string>> or map<string, string>) and optional `msgId`. Every message carries
`Nats-Msg-Id`, so the stream's duplicate window drops a replayed write: the `msgId` column when given,
else `<prefix>:<partition>:<row>`, where the prefix is the streaming query's id and batch id (stable when
a micro-batch is replayed from the checkpoint), or for a batch write `idPrefix` (give one to make
re-running the same job idempotent) or an id made once per write job (task retries reuse it).

The writers take Arrow record batches (no Spark Row per message) and publish with at most `maxInFlight`
messages awaiting their ack, a sliding window: each ack frees a slot. Acks come back to one wildcard
inbox, one reply subject per message; an ack is parsed only when it is not a plain success. A failed or
missing ack fails the task.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import nats
import pyarrow as pa
from nats.aio.msg import Msg
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from . import client
from .options import OptionsError, SinkOptions


class PublishError(RuntimeError):
    """A message was not acknowledged by the stream; the task fails rather than lose it silently."""


@dataclass
class Written(WriterCommitMessage):
    published: int
    duplicates: int


def _check_columns(opts: SinkOptions, schema: StructType) -> None:
    names = set(schema.fieldNames())
    if "data" not in names:
        raise OptionsError("format jetstream needs a `data` column (binary or string) to write")
    if "subject" not in names and not opts.subject:
        raise OptionsError("format jetstream needs a `subject` column or the `subject` option")


def _headers(value: Any) -> dict[str, str]:
    """A map cell (Arrow gives a list of (key, value) pairs) as nats-py headers: the last of a list."""
    return {k: (v[-1] if isinstance(v, list) else v) for k, v in value if v is not None and v != []}


class _Acks:
    """The publishing window: counts acks by kind and remembers the first failure."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.in_flight = 0
        self.acked = self.duplicates = 0
        self.failure = ""
        self.room = asyncio.Event()
        self.room.set()

    async def on_ack(self, msg: Msg) -> None:
        data = msg.data
        if not data:  # a status: 503, no stream takes the subject
            self._fail(f"no stream answered (status {(msg.headers or {}).get('Status')})")
        elif b'"duplicate"' in data or b'"error"' in data:  # else a plain success: not worth parsing
            ack = json.loads(data)
            if "error" in ack:
                self._fail(f"{ack['error'].get('description')} (err_code {ack['error'].get('err_code')})")
            elif ack.get("duplicate"):
                self.duplicates += 1
        self.acked += 1
        self.in_flight -= 1
        if self.in_flight < self.window:
            self.room.set()

    def _fail(self, failure: str) -> None:
        self.failure = self.failure or failure
        self.room.set()

    async def slot(self, timeout: float) -> None:
        if self.failure:
            raise PublishError(f"a publish was not acknowledged: {self.failure}")
        self.in_flight += 1
        if self.in_flight >= self.window:
            self.room.clear()
            await self._wait(timeout)

    async def settled(self, timeout: float) -> None:
        while self.in_flight and not self.failure:
            self.room.clear()
            await self._wait(timeout)

    async def _wait(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.room.wait(), timeout)
        except asyncio.TimeoutError:
            raise PublishError(f"{self.in_flight} publishes were not acknowledged within ackTimeout={timeout:g} s "
                               "(is the stream's server overloaded or gone?)") from None
        if self.failure:
            raise PublishError(f"a publish was not acknowledged: {self.failure}")


async def _publish(opts: SinkOptions, prefix: str, batches: Iterator[pa.RecordBatch]) -> Written:
    nc = await client.connect(opts)
    url = client.server_url(nc)
    acks = _Acks(opts.max_in_flight)
    inbox = nc.new_inbox()
    try:
        await nc.subscribe(f"{inbox}.*", cb=acks.on_ack, pending_msgs_limit=-1, pending_bytes_limit=-1)
        row = 0
        for batch in batches:
            for subject, data, headers in _messages(opts, prefix, batch, row):
                await acks.slot(opts.ack_timeout)
                try:
                    await nc.publish(subject, data, reply=f"{inbox}.{row}", headers=headers)
                except nats.errors.ConnectionClosedError:
                    raise PublishError(f"lost the connection to {url} after {acks.acked} acknowledged "
                                       "publishes (reconnectAttempts allows reconnecting)") from None
                row += 1
        await acks.settled(opts.ack_timeout)
        if acks.failure:
            raise PublishError(f"a publish was not acknowledged: {acks.failure}")
    finally:
        await nc.close()
    return Written(acks.acked - acks.duplicates, acks.duplicates)


def _messages(opts: SinkOptions, prefix: str, batch: pa.RecordBatch,
              row: int) -> Iterator[tuple[str, bytes, dict[str, str]]]:
    """(subject, payload, headers) of each row, column by column."""
    names = batch.schema.names
    n = batch.num_rows
    data = batch.column("data").cast(pa.binary()).to_pylist()
    subjects = batch.column("subject").to_pylist() if "subject" in names else [None] * n
    ids = batch.column("msgId").to_pylist() if "msgId" in names else [None] * n
    headers = batch.column("headers").to_pylist() if "headers" in names else [None] * n
    for i in range(n):
        subject = subjects[i] or opts.subject
        if not subject:
            raise PublishError(f"row {row + i} has no subject (set the subject column or the subject option)")
        header = _headers(headers[i]) if headers[i] else {}
        header["Nats-Msg-Id"] = ids[i] or f"{prefix}:{row + i}"
        yield subject, data[i] or b"", header


def _partition() -> int:
    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class JetStreamBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check_columns(opts, schema)
        self.opts = opts
        self.job = opts.id_prefix or uuid.uuid4().hex  # made on the driver: every task (and retry) shares it

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return client.run(_publish(self.opts, f"{self.job}:{_partition()}", iterator))


class JetStreamStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check_columns(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        context = TaskContext.get()
        query = (context.getLocalProperty("sql.streaming.queryId") if context else None) or "query"
        batch = (context.getLocalProperty("streaming.sql.batchId") if context else None) or "0"
        prefix = f"{self.opts.id_prefix or query}:{batch}:{_partition()}"
        return client.run(_publish(self.opts, prefix, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every message was acknowledged by the stream before its task ended."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: a replay of the batch is de-duplicated by its message ids."""
