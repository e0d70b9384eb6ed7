"""Stream positions as the source's offsets: what a checkpoint records, where a read resumes, how a range
is split. Pure: the stream's state comes in as a value.

An offset is `{"<stream>": {"seq": <next sequence to read>, "created": "<the stream's created time>"}}`
in Spark's checkpoint. A sequence alone does not say which stream it counts: a stream deleted and
re-created under the same name starts again at sequence 1. The `created` time (from STREAM.INFO, set
once when the stream is created) tells them apart, so a checkpoint of the old stream is never applied to
the new one. Checkpoints written before the identity was recorded hold `{"<stream>": <seq>}`; they load
with an unknown identity, and the next micro-batch's offset records it.

A batch or micro-batch reads the sequences in [start, end).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from .options import Offsets


class DataLossError(RuntimeError):
    """Messages the query has not read are gone, or the checkpoint belongs to another stream."""


@dataclass(frozen=True)
class StreamState:
    """What STREAM.INFO says about a stream: its stored sequences and its identity."""

    first_seq: int
    last_seq: int
    created: str  # the server's creation time of the stream (RFC 3339): a re-created stream has another


@dataclass(frozen=True)
class Position:
    """A micro-batch boundary: the next sequence to read, in the stream created at `created`."""

    seq: int
    created: str | None  # None: a checkpoint written before jsspark recorded the stream's identity

    def to_offset(self, stream: str) -> dict[str, Any]:
        return {stream: {"seq": self.seq, "created": self.created}}

    @classmethod
    def from_offset(cls, stream: str, offset: dict[str, Any]) -> "Position":
        value = offset[stream]
        if isinstance(value, int):  # the format before the identity
            return cls(value, None)
        return cls(int(value["seq"]), value.get("created"))


@dataclass
class SequenceRange(InputPartition):
    """One task's part of a read: the stream sequences first..last, both included."""

    first: int
    last: int


def resolve(offset: Offsets, state: StreamState) -> int:
    """A starting or ending option as the next sequence to read."""
    if offset == "earliest":
        return max(state.first_seq, 1)
    if offset == "latest":
        return state.last_seq + 1
    return int(offset)


_WHAT_TO_DO = "start the query with a new checkpointLocation, or set failOnDataLoss=false to continue"


def check_start(stream: str, start: int, state: StreamState, fail_on_data_loss: bool) -> tuple[int, str | None]:
    """`start`, or the first sequence still stored when the ones from `start` on were removed; with the
    warning to log when messages were skipped. DataLossError when failOnDataLoss is on."""
    first = max(state.first_seq, 1)
    if start >= first or start > state.last_seq:
        return start, None
    message = (f"stream {stream}: sequences {start}..{first - 1} are gone (purged, or removed by the "
               f"stream's limits); the first stored sequence is {first}")
    if fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to skip them")
    return first, message + "; skipping them (failOnDataLoss=false)"


def resume(stream: str, position: Position, state: StreamState, fail_on_data_loss: bool) -> tuple[int, str | None]:
    """Where reading continues after `position` in the stream as it is now, and the warning to log when
    that is not `position.seq` (failOnDataLoss=false). DataLossError, saying what happened and what to
    do, when the checkpoint belongs to a re-created stream or points beyond the stream's end."""
    if position.created is not None and position.created != state.created:
        problem = (f"stream {stream} was deleted and re-created since the checkpoint (the checkpoint counts the "
                   f"stream created {position.created}, next sequence {position.seq}; the stream now was created "
                   f"{state.created} and holds sequences {state.first_seq}..{state.last_seq})")
        return _lost(problem, max(state.first_seq, 1), fail_on_data_loss)
    if position.seq > state.last_seq + 1:
        if position.created is None:
            problem = (f"stream {stream}: the checkpoint's next sequence {position.seq} is beyond the stream's last "
                       f"sequence {state.last_seq}; the stream was probably deleted and re-created (this checkpoint "
                       "predates jsspark recording the stream's identity)")
            return _lost(problem, max(state.first_seq, 1), fail_on_data_loss)
        problem = (f"stream {stream}: the checkpoint's next sequence {position.seq} is beyond the stream's last "
                   f"sequence {state.last_seq} (the server lost its last messages)")
        return _lost(problem, state.last_seq + 1, fail_on_data_loss)
    return check_start(stream, position.seq, state, fail_on_data_loss)


def _lost(problem: str, resume_at: int, fail_on_data_loss: bool) -> tuple[int, str | None]:
    if fail_on_data_loss:
        raise DataLossError(f"{problem}; {_WHAT_TO_DO} from sequence {resume_at}")
    return resume_at, f"{problem}; continuing from sequence {resume_at} (failOnDataLoss=false)"


def split(start: int, end: int, min_partitions: int, max_records: int | None) -> list[SequenceRange]:
    """[start, end) as ranges of nearly equal size."""
    count = end - start
    if count <= 0:
        return []
    parts = max(min_partitions, math.ceil(count / max_records) if max_records else 1)
    parts = min(parts, count)
    size, extra = divmod(count, parts)
    ranges, first = [], start
    for i in range(parts):
        last = first + size + (1 if i < extra else 0) - 1
        ranges.append(SequenceRange(first, last))
        first = last + 1
    return ranges
