"""The sink: `df.write.format("jetstream")` and `writeStream.format("jetstream")`.

Columns: `subject` (or the `subject` option), `data` (binary or string), optional `headers`
(map<string, array<string>> or map<string, string>) and optional `msgId`. Every message carries
`Nats-Msg-Id`, so the stream's duplicate window drops a replayed write: the `msgId` column when given,
else `<prefix>:<partition>:<row>`, where the prefix is the streaming query's id and batch id (stable when
a micro-batch is replayed from the checkpoint), or for a batch write `idPrefix` (give one to make
re-running the same job idempotent) or an id made once per write job (task retries reuse it).

The writers take Arrow record batches (no Spark Row per message) and publish with at most `maxInFlight`
messages awaiting their ack, a sliding window: each ack frees a slot. Acks come back to one wildcard
inbox, one reply subject per message; an ack is parsed only when it is not a plain success. A missing
ack (no answer within ackTimeout, the connection lost) or JetStream's 503 is transient: the publishing
goes on over a new connection (jsspark.client.retrying), first sending again, with the same message ids,
every message not acknowledged yet, so the stream stores each once. A refused publish (no stream takes
the subject, a limit) fails the task at once.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from nats.aio.msg import Msg
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from . import client
from .options import OptionsError, SinkOptions


class PublishError(client.JetStreamError):
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


Message = tuple[str, bytes, dict[str, str]]  # subject, payload, headers (with Nats-Msg-Id)


class _Acks:
    """The publishing window: the messages awaiting their ack by row (sent again, with the same ids,
    after a transient failure), the acks by kind, and the first failure."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.unacked: dict[int, Message] = {}
        self.acked = self.duplicates = 0
        self.failure = ""
        self.failure_transient = False  # JetStream's 503 (temporarily unavailable): asking again may succeed
        self.no_stream = ""  # the subject of a publish no stream answered (503)
        self.room = asyncio.Event()
        self.room.set()

    def start(self) -> None:
        """A new connection: what is unacknowledged is sent again, and earlier failures were transient."""
        self.failure = self.no_stream = ""
        self.failure_transient = False
        self.room.set()

    async def on_ack(self, msg: Msg) -> None:
        row = int(msg.subject.rpartition(".")[2])
        message = self.unacked.pop(row, None)
        if message is None:
            return  # not awaited (an ack for a message sent twice on one connection cannot happen)
        data = msg.data
        if not data:  # a status: 503, no stream answered for the subject
            self.no_stream = self.no_stream or message[0]
            self._fail(f"no stream answered for subject {message[0]} (status {(msg.headers or {}).get('Status')})")
        elif b'"duplicate"' in data or b'"error"' in data:  # else a plain success: not worth parsing
            ack = json.loads(data)
            if "error" in ack:
                error = ack["error"]
                self._fail(f"{error.get('description')} (err_code {error.get('err_code')})", error.get("code") == 503)
            elif ack.get("duplicate"):
                self.duplicates += 1
        self.acked += 1
        if len(self.unacked) < self.window:
            self.room.set()

    def _fail(self, failure: str, transient: bool = False) -> None:
        if not self.failure:
            self.failure, self.failure_transient = failure, transient
        self.room.set()

    async def slot(self, timeout: float) -> bool:
        """Room for one more message (False: a failure, or no ack within `timeout`)."""
        if len(self.unacked) >= self.window:
            self.room.clear()
            return await self._wait(timeout)
        return not self.failure

    async def settled(self, timeout: float) -> bool:
        while self.unacked and not self.failure:
            self.room.clear()
            if not await self._wait(timeout):
                return False
        return not self.failure

    async def _wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.room.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return not self.failure


async def _publish(opts: SinkOptions, prefix: str, batches: Iterator[pa.RecordBatch]) -> Written:
    acks = _Acks(opts.max_in_flight)
    messages = _rows(opts, prefix, batches)

    async def attempt(nc: client.NatsClient) -> Written:
        acks.start()
        inbox = nc.new_inbox()
        await nc.subscribe(f"{inbox}.*", cb=acks.on_ack, pending_msgs_limit=-1, pending_bytes_limit=-1)
        for row, (subject, data, headers) in sorted(acks.unacked.items()):
            await nc.publish(subject, data, reply=f"{inbox}.{row}", headers=headers)
        for row, message in messages:
            acks.unacked[row] = message  # before it is sent: a failure below sends it again
            await nc.publish(message[0], message[1], reply=f"{inbox}.{row}", headers=message[2])
            if not await acks.slot(opts.ack_timeout):
                await _failed(nc, opts, acks)
        if not await acks.settled(opts.ack_timeout):
            await _failed(nc, opts, acks)
        return Written(acks.acked - acks.duplicates, acks.duplicates)

    return await client.retrying(opts, f"publishing to {opts.servers}", attempt)


async def _failed(nc: client.NatsClient, opts: SinkOptions, acks: _Acks) -> None:
    """Raise why the window stopped: a refused publish (at once), or a transient failure (retried)."""
    url = client.server_url(nc)
    if acks.no_stream and await client.no_stream_takes(nc, opts, acks.no_stream):
        raise PublishError(f"a publish was not acknowledged: no stream on {url} takes subject {acks.no_stream}: "
                           "create one, or fix the subject")
    if acks.failure:
        raise PublishError(f"a publish was not acknowledged: {acks.failure}",
                           transient=bool(acks.no_stream) or acks.failure_transient)
    raise client.unanswered(nc, f"publishing to {url}",
                            f"{len(acks.unacked)} publishes were not acknowledged within ackTimeout={opts.ack_timeout:g} s "
                            "(is the stream's server overloaded or gone?)")


def _rows(opts: SinkOptions, prefix: str, batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, Message]]:
    """(row, message) of every row of every batch, numbered from 0."""
    row = 0
    for batch in batches:
        for message in _messages(opts, prefix, batch, row):
            yield row, message
            row += 1


def _messages(opts: SinkOptions, prefix: str, batch: pa.RecordBatch,
              row: int) -> Iterator[Message]:
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
