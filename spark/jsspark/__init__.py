"""jsspark: Apache Spark (PySpark >= 4.2) Data Source `format("jetstream")` for NATS JetStream.

    from jsspark import JetStreamDataSource
    spark.dataSource.register(JetStreamDataSource)
    spark.read.format("jetstream").option("stream", "ORDERS").load()

PySpark is imported only when the data source is first used, so `import jsspark` works without it
(install the `spark` extra to use it).
"""

from __future__ import annotations

from typing import Any

from ._version import __version__ as __version__

__all__ = ["JetStreamDataSource"]


def __getattr__(name: str) -> Any:
    if name == "JetStreamDataSource":
        from .source import JetStreamDataSource

        return JetStreamDataSource
    raise AttributeError(f"module 'jsspark' has no attribute {name!r}")
