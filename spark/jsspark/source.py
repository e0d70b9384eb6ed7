"""The data source `format("jetstream")`: batch and streaming reads keyed by stream sequence, and the sink.

Driver side (options, the stream's state, offsets, partitions) and executor side (`read`: one range per
task, its own NATS connection and event loop) are kept apart: nothing a task needs comes from driver
state except the picklable partition and options.

Spark's Python Data Source API (4.2/4.3) has no source metrics (the JVM side of a Python stream does not
implement ReportsSourceMetrics), so Kafka's offsetsBehindLatest have no slot; `reportLatestOffset`
fills each progress's `latestOffset`, and the lag is its `seq` minus `endOffset`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter,
                                    DataSourceWriter, InputPartition)
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows,
                                              SupportsTriggerAvailableNow)
from pyspark.sql.types import StructType

from . import arrow, client, offsets, options, sink
from .offsets import Position, SequenceRange, StreamState
from .options import SourceOptions

log = logging.getLogger("jsspark")


class JetStreamDataSource(DataSource):
    """NATS JetStream as a Spark source and sink, `format("jetstream")` (options in spark/README.md).

    >>> spark.dataSource.register(JetStreamDataSource)
    >>> (spark.read.format("jetstream").option("servers", "nats://127.0.0.1:4222").option("stream", "ORDERS")
    ...  .load().select("subject", "seq", "data"))
    DataFrame[subject: string, seq: bigint, data: binary]
    """

    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> str:
        return arrow.schema(str(self.options.get("includeHeaders", "false")).lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return JetStreamBatchReader(options.parse(SourceOptions, self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return JetStreamStreamReader(options.parse(SourceOptions, self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return sink.JetStreamBatchWriter(options.parse(options.SinkOptions, self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return sink.JetStreamStreamWriter(options.parse(options.SinkOptions, self.options), schema)


def _state(opts: SourceOptions) -> StreamState:
    return client.run(client.stream_state(opts, opts.stream))


def _start(opts: SourceOptions, state: StreamState) -> int:
    if opts.starting_timestamp is not None:
        return client.run(client.seq_at_time(opts, opts.stream, opts.starting_timestamp))
    return offsets.resolve(opts.starting_offsets, state)


def _end(opts: SourceOptions, state: StreamState) -> int:
    if opts.ending_timestamp is not None:
        return client.run(client.seq_at_time(opts, opts.stream, opts.ending_timestamp))
    return offsets.resolve(opts.ending_offsets, state)


def _partitions(opts: SourceOptions, start: int, end: int) -> list[SequenceRange]:
    return offsets.split(start, end, opts.min_partitions, opts.max_records_per_partition)


def _read(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, SequenceRange):
        return  # Spark reads one empty partition of its own when there are none
    chunks = client.run(client.read_range(opts, opts.stream, opts.subjects, partition.first, partition.last,
                                           opts.fetch_batch_size, opts.include_headers))
    for rows in chunks:
        yield arrow.record_batch(opts.stream, rows, opts.include_headers)


def _warn(message: str | None) -> None:
    if message:
        log.warning("%s", message)


class JetStreamBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[SequenceRange]:
        state = _state(self.opts)
        start, skipped = offsets.check_start(self.opts.stream, _start(self.opts, state), state,
                                             self.opts.fail_on_data_loss)
        _warn(skipped)
        end = min(_end(self.opts, state), state.last_seq + 1)
        return _partitions(self.opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of stream sequences; the checkpointed offsets are the only record of progress.

    One Python process per query calls these methods on the driver (its state lasts across batches);
    `read` runs in executors on a pickled copy."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._until: int | None = None  # availableNow: the last sequence when the run started
        self._latest: Position | None = None  # the stream's end when latestOffset last looked
        self._last_trigger: float | None = None  # monotonic time of the last batch minOffsetsPerTrigger let through

    def initialOffset(self) -> dict[str, Any]:
        state = _state(self.opts)
        return Position(_start(self.opts, state), state.created).to_offset(self.opts.stream)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = _state(self.opts).last_seq

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        stream = self.opts.stream
        state = _state(self.opts)
        self._latest = Position(state.last_seq + 1, state.created)
        begin, warning = offsets.resume(stream, Position.from_offset(stream, start), state, self.opts.fail_on_data_loss)
        _warn(warning)
        end = state.last_seq + 1
        if self._until is not None:
            end = min(end, self._until + 1)
        if not isinstance(limit, ReadAllAvailable):
            if self._too_few(end - begin, limit):
                return start  # the same offset: Spark runs no batch this trigger
            if isinstance(limit, ReadMaxRows):
                end = min(end, begin + limit.max_rows)
        return Position(max(end, begin), state.created).to_offset(stream)

    def _too_few(self, available: int, limit: ReadLimit) -> bool:
        """minOffsetsPerTrigger: wait for that many sequences, at most maxTriggerDelay after the last
        batch (as Kafka's source). availableNow reads what there is: nothing more is coming."""
        least = limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_offsets_per_trigger
        now = time.monotonic()
        waited = now - self._last_trigger if self._last_trigger is not None else self.opts.max_trigger_delay
        if not least or self._until is not None or waited >= self.opts.max_trigger_delay:
            self._last_trigger = now
            return False
        if available < least:
            return True
        self._last_trigger = now
        return False

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The stream's end as the last latestOffset saw it: each progress's `latestOffset`."""
        return self._latest.to_offset(self.opts.stream) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[SequenceRange]:
        stream = self.opts.stream
        state = _state(self.opts)
        last = Position.from_offset(stream, end)
        if last.created is not None and last.created != state.created:
            # planned on a stream that has been re-created since (a replay after a restart, or a race)
            _, warning = offsets.resume(stream, last, state, self.opts.fail_on_data_loss)
            _warn(warning)
            return []
        begin, _ = offsets.resume(stream, Position.from_offset(stream, start), state, self.opts.fail_on_data_loss)
        return _partitions(self.opts, begin, last.seq)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark's checkpoint holds the progress (and commit trails a batch behind); with `consumer`, the
        durable mirrors it for `nats consumer info` and the operator. Correctness never depends on it."""
        if not self.opts.consumer:
            return
        try:
            client.run(client.mirror_progress(self.opts, self.opts.stream, self.opts.consumer,
                                               Position.from_offset(self.opts.stream, end).seq))
        except Exception as exc:  # noqa: BLE001 - a display aid must not fail the query
            log.warning("could not mirror progress to consumer %s of stream %s: %s", self.opts.consumer,
                        self.opts.stream, exc)
