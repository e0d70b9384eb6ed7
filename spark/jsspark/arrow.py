"""The source's rows as Arrow record batches, built column by column (no per-row Python tuples), in the
exact types Spark expects for the schema (`string`, `int64`, `binary`, `timestamp[us, tz=UTC]`,
`map<string, list<string>>`)."""

from __future__ import annotations

import pyarrow as pa

from .client import Rows

SCHEMA = "stream STRING, subject STRING, seq BIGINT, data BINARY, timestamp TIMESTAMP"
HEADERS_SCHEMA = SCHEMA + ", headers MAP<STRING, ARRAY<STRING>>"
HEADERS_TYPE = pa.map_(pa.string(), pa.list_(pa.string()))


def schema(include_headers: bool) -> str:
    return HEADERS_SCHEMA if include_headers else SCHEMA


def record_batch(stream: str, rows: Rows, include_headers: bool) -> pa.RecordBatch:
    n = len(rows)
    columns = [
        pa.array([stream] * n, pa.string()),
        pa.array(rows.subjects, pa.string()),
        pa.array(rows.seqs, pa.int64()),
        pa.array(rows.data, pa.binary()),
        pa.array(rows.micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
    ]
    names = ["stream", "subject", "seq", "data", "timestamp"]
    if include_headers:
        columns.append(pa.array([list(h.items()) if h is not None else None for h in rows.headers], HEADERS_TYPE))
        names.append("headers")
    return pa.RecordBatch.from_arrays(columns, names=names)
