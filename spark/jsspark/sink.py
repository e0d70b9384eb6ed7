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


async def _publish(opts: SinkOptions, prefix: str, rows: Iterator[Row]) -> Written:
    nc = await nats.connect(**opts.connect_kwargs())
    js = nc.jetstream(timeout=opts.ack_timeout)
    published = duplicates = 0

    async def one(i: int, row: Row) -> bool:
        fields = row.asDict()
        data = fields["data"]
        payload = data.encode() if isinstance(data, str) else bytes(data or b"")
        subject = fields.get("subject") or opts.subject
        if not subject:
            raise PublishError(f"row {i} has no subject (set the subject column or the subject option)")
        headers = {**_headers(fields.get("headers")), "Nats-Msg-Id": fields.get("msgId") or f"{prefix}:{i}"}
        try:
            ack = await js.publish(subject, payload, headers=headers)
        except Exception as exc:
            raise PublishError(f"publish of row {i} to {subject!r} was not acknowledged: {exc!r}") from exc
        return bool(ack.duplicate)

    try:
        window: list[Any] = []
        for i, row in enumerate(rows):
            window.append(one(i, row))
            if len(window) >= opts.max_in_flight:
                results = await asyncio.gather(*window)
                published, duplicates = published + len(results), duplicates + sum(results)
                window = []
        results = await asyncio.gather(*window)
        published, duplicates = published + len(results), duplicates + sum(results)
    finally:
        await nc.close()
    return Written(published, duplicates)


def _partition() -> int:
    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class BatchWriter(DataSourceWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check_columns(opts, schema)
        self.opts = opts
        self.job = opts.id_prefix or uuid.uuid4().hex  # made on the driver: every task (and retry) shares it

    def write(self, iterator: Iterator[Row]) -> Written:
        return asyncio.run(_publish(self.opts, f"{self.job}:{_partition()}", iterator))


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check_columns(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator[Row]) -> Written:
        context = TaskContext.get()
        query = (context.getLocalProperty("sql.streaming.queryId") if context else None) or "query"
        batch = (context.getLocalProperty("streaming.sql.batchId") if context else None) or "0"
        prefix = f"{self.opts.id_prefix or query}:{batch}:{_partition()}"
        return asyncio.run(_publish(self.opts, prefix, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every message was acknowledged by the stream before its task ended."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: a replay of the batch is de-duplicated by its message ids."""
