"""The sink: `df.write.format("jetstream")` and `writeStream.format("jetstream")`.

Columns: `subject` (or the `subject` option), `data` (binary or string), optional `headers`
(map<string, array<string>> or map<string, string>) and optional `msgId`. Every message carries
`Nats-Msg-Id`, so the stream's duplicate window drops a replayed write: the `msgId` column when given,
else `<prefix>:<partition>:<row>`, where the prefix is the streaming query's id and batch id (stable when
a micro-batch is replayed from the checkpoint), or for a batch write `idPrefix` (give one to make
re-running the same job idempotent) or an id made once per write job (task retries reuse it). Acks are
awaited with at most `maxInFlight` outstanding; a failed or missing ack fails the task.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import nats
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

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
    if not value:
        return {}
    return {k: (v[-1] if isinstance(v, list) else v) for k, v in dict(value).items() if v is not None}


@dataclass(frozen=True)
class Columns:
    """Where the sink's columns are in a row (looked up once, on the driver)."""

    data: int
    subject: int | None
    headers: int | None
    msg_id: int | None

    @classmethod
    def of(cls, schema: StructType) -> "Columns":
        names = schema.fieldNames()
        index = {name: i for i, name in enumerate(names)}
        return cls(index["data"], index.get("subject"), index.get("headers"), index.get("msgId"))


async def _settle(pending: list[Any], timeout: float) -> int:
    """Wait for every ack; the number of duplicates. A missing or failed ack fails the task."""
    try:
        acks = await asyncio.wait_for(asyncio.gather(*pending), timeout)
    except asyncio.TimeoutError:
        raise PublishError(f"{len(pending)} publishes were not acknowledged within {timeout:g} s") from None
    except Exception as exc:
        raise PublishError(f"a publish was not acknowledged: {exc!r}") from exc
    return sum(1 for ack in acks if ack.duplicate)


async def _publish(opts: SinkOptions, prefix: str, columns: Columns, rows: Iterator[Row]) -> Written:
    nc = await nats.connect(**opts.connect_kwargs())
    js = nc.jetstream(publish_async_max_pending=opts.max_in_flight)
    published = duplicates = 0
    pending: list[Any] = []
    try:
        for i, row in enumerate(rows):
            data = row[columns.data]
            payload = data.encode() if isinstance(data, str) else bytes(data or b"")
            subject = (row[columns.subject] if columns.subject is not None else None) or opts.subject
            if not subject:
                raise PublishError(f"row {i} has no subject (set the subject column or the subject option)")
            msg_id = (row[columns.msg_id] if columns.msg_id is not None else None) or f"{prefix}:{i}"
            headers = {**_headers(row[columns.headers] if columns.headers is not None else None), "Nats-Msg-Id": msg_id}
            pending.append(await js.publish_async(subject, payload, headers=headers))
            if len(pending) >= opts.max_in_flight:
                duplicates += await _settle(pending, opts.ack_timeout)
                published, pending = published + len(pending), []
        duplicates += await _settle(pending, opts.ack_timeout)
        published += len(pending)
    finally:
        await nc.close()
    return Written(published, duplicates)


def _partition() -> int:
    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class BatchWriter(DataSourceWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check_columns(opts, schema)
        self.opts, self.columns = opts, Columns.of(schema)
        self.job = opts.id_prefix or uuid.uuid4().hex  # made on the driver: every task (and retry) shares it

    def write(self, iterator: Iterator[Row]) -> Written:
        return asyncio.run(_publish(self.opts, f"{self.job}:{_partition()}", self.columns, iterator))


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check_columns(opts, schema)
        self.opts, self.columns = opts, Columns.of(schema)

    def write(self, iterator: Iterator[Row]) -> Written:
        context = TaskContext.get()
        query = (context.getLocalProperty("sql.streaming.queryId") if context else None) or "query"
        batch = (context.getLocalProperty("streaming.sql.batchId") if context else None) or "0"
        prefix = f"{self.opts.id_prefix or query}:{batch}:{_partition()}"
        return asyncio.run(_publish(self.opts, prefix, self.columns, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every message was acknowledged by the stream before its task ended."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: a replay of the batch is de-duplicated by its message ids."""
