"""A streaming copy of a JetStream stream into a parquet folder, as its own process (the kill test's
victim): `python -m tests.spark.stream_job SERVERS STREAM CHECKPOINT OUT`, micro-batches of 40
sequences every 200 ms, until killed."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from jsspark import JetStreamDataSource


def query(spark: SparkSession, servers: str, stream: str, checkpoint: str, out: str, available_now: bool):  # noqa: ANN201
    writer = (spark.readStream.format("jetstream").option("servers", servers).option("stream", stream)
              .option("maxOffsetsPerTrigger", "40").load().select("seq", "data")
              .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="200 milliseconds")
    return writer.start()


if __name__ == "__main__":
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    session.dataSource.register(JetStreamDataSource)
    query(session, *sys.argv[1:5], available_now=False).awaitTermination()
