"""The data source `format("jetstream")`: batch and streaming reads keyed by stream sequence, and the sink.

Driver side (options, stream bounds, offsets, partitions) and executor side (`read`: one range per task,
its own NATS connection and event loop) are kept apart: nothing a task needs comes from driver state
except the picklable partition and options.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter,
                                    DataSourceWriter, InputPartition)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from . import arrow, offsets, options, reader, sink

log = logging.getLogger("jsspark")


class JetStreamDataSource(DataSource):
    """`spark.read.format("jetstream")`, `readStream`, `write` and `writeStream`; options in spark/README.md."""

    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> str:
        return arrow.schema(str(self.options.get("includeHeaders", "false")).lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(options.parse(options.SourceOptions, self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(options.parse(options.SourceOptions, self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return sink.BatchWriter(options.parse(options.SinkOptions, self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return sink.StreamWriter(options.parse(options.SinkOptions, self.options), schema)


def _bounds(opts: options.SourceOptions) -> reader.StreamBounds:
    return asyncio.run(reader.bounds(opts, opts.stream))


def _start(opts: options.SourceOptions, bounds: reader.StreamBounds) -> int:
    if opts.starting_timestamp is not None:
        return int(asyncio.run(reader.seq_at_time(opts, opts.stream, opts.starting_timestamp)))
    return offsets.resolve(opts.starting_offsets, bounds)


def _end(opts: options.SourceOptions, bounds: reader.StreamBounds) -> int:
    if opts.ending_timestamp is not None:
        return int(asyncio.run(reader.seq_at_time(opts, opts.stream, opts.ending_timestamp)))
    return offsets.resolve(opts.ending_offsets, bounds)


def _partitions(opts: options.SourceOptions, start: int, end: int) -> list[InputPartition]:
    return [InputPartition(r) for r in offsets.split(start, end, opts.min_partitions, opts.max_records_per_partition)]


def _read(opts: options.SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if partition.value is None:
        return  # Spark reads one empty partition of its own when there are none
    first, last = partition.value
    chunks = asyncio.run(reader.read_range(opts, opts.stream, opts.subjects, first, last, opts.fetch_batch_size,
                                           opts.include_headers))
    for rows in chunks:
        yield arrow.record_batch(opts.stream, rows, opts.include_headers)


class BatchReader(DataSourceReader):
    def __init__(self, opts: options.SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        bounds = _bounds(self.opts)
        start = offsets.check_start(self.opts.stream, _start(self.opts, bounds), bounds, self.opts.fail_on_data_loss)
        end = min(_end(self.opts, bounds), bounds.last_seq + 1)
        return _partitions(self.opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of stream sequences; the checkpointed offsets are the only record of progress."""

    def __init__(self, opts: options.SourceOptions) -> None:
        self.opts = opts
        self._until: int | None = None  # availableNow: the last sequence when the run started

    def initialOffset(self) -> dict[str, Any]:
        return {self.opts.stream: _start(self.opts, _bounds(self.opts))}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = _bounds(self.opts).last_seq

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = int(start[self.opts.stream])
        end = _bounds(self.opts).last_seq + 1
        if self._until is not None:
            end = min(end, self._until + 1)
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return {self.opts.stream: max(end, begin)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        bounds = _bounds(self.opts)
        begin = offsets.check_start(self.opts.stream, int(start[self.opts.stream]), bounds,
                                    self.opts.fail_on_data_loss)
        return _partitions(self.opts, begin, int(end[self.opts.stream]))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark's checkpoint holds the progress (and commit trails a batch behind); with `consumer`, the
        durable mirrors it for `nats consumer info` and the operator. Correctness never depends on it."""
        if not self.opts.consumer:
            return
        try:
            asyncio.run(reader.mirror_progress(self.opts, self.opts.stream, self.opts.consumer,
                                               int(end[self.opts.stream])))
        except Exception as exc:  # noqa: BLE001 - a display aid must not fail the query
            log.warning("could not mirror progress to consumer %s of stream %s: %r", self.opts.consumer,
                        self.opts.stream, exc)
