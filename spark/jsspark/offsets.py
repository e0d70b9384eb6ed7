"""Stream sequences as the source's offsets: where a read starts and ends, how a range is split.

An offset is the next stream sequence to read, `{"<stream>": <seq>}` in Spark's checkpoint (as Kafka's
source keeps per-partition offsets). A batch or micro-batch reads the sequences in [start, end).
"""

from __future__ import annotations

import logging
import math

from .options import Offsets
from .reader import StreamBounds

log = logging.getLogger("jsspark")


class DataLossError(RuntimeError):
    """The read would start below the stream's first sequence (those messages were removed)."""


def resolve(offset: Offsets, bounds: StreamBounds) -> int:
    """A starting or ending option as the next sequence to read."""
    if offset == "earliest":
        return max(bounds.first_seq, 1)
    if offset == "latest":
        return bounds.last_seq + 1
    return int(offset)


def check_start(stream: str, start: int, bounds: StreamBounds, fail_on_data_loss: bool) -> int:
    """`start`, or the first sequence still stored when the ones from `start` on were removed."""
    first = max(bounds.first_seq, 1)
    if start >= first or start > bounds.last_seq:
        return start
    message = (f"stream {stream}: sequences {start}..{first - 1} are gone (purged, or removed by the "
               f"stream's limits); the first stored sequence is {first}")
    if fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to skip them")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
    return first


def split(start: int, end: int, min_partitions: int, max_records: int | None) -> list[tuple[int, int]]:
    """[start, end) as inclusive (first, last) ranges of nearly equal size."""
    count = end - start
    if count <= 0:
        return []
    parts = max(min_partitions, math.ceil(count / max_records) if max_records else 1)
    parts = min(parts, count)
    size, extra = divmod(count, parts)
    ranges, first = [], start
    for i in range(parts):
        last = first + size + (1 if i < extra else 0) - 1
        ranges.append((first, last))
        first = last + 1
    return ranges
