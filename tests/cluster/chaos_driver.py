"""The chaos run's Spark driver, on the host as its own process (the victim of the driver kills):

    python -m tests.cluster.chaos_driver SERVERS TOKEN WORK

One streaming query of the ORDERS pipeline from its checkpoint WORK/checkpoint: the processing stage
(jsspark.pipeline.jobs: ORDERS.received -> subject ORDERS.processed or ORDERS.rejected, msgId
processed:<order id>), each micro-batch written to the de-duplicating sink (the stream drops a replayed
batch's messages by their ids) and to parquet in WORK/out/batch=<id> (overwritten when a batch is
replayed), so both outputs hold each order once. The source waits for the broker while it is away
(reconnectAttempts -1). A failed query ends the process with its error; the chaos run restarts it, as a
supervisor would.

One query, not two: Spark gives the Python worker of a streaming source a fixed 10 s to connect back to
the JVM at the query's start, and on the loaded 2-core machine a second query's start beside the first
one's batches missed it every time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jsspark import JetStreamDataSource
from jsspark.pipeline import jobs

TRIGGER = "1 second"
MAX_PER_TRIGGER = "5000"


def start(spark: SparkSession, servers: str, token: str, work: Path) -> Any:
    connection = {"token": token, "reconnectAttempts": "-1", "reconnectWait": "0.5", "requestTimeout": "10"}

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        batch.write.format("jetstream").mode("append").option("servers", servers).options(**connection).save()
        batch.write.mode("overwrite").parquet(str(work / "out" / f"batch={batch_id}"))
        batch.unpersist()

    return (jobs.processed_orders(spark, servers, maxOffsetsPerTrigger=MAX_PER_TRIGGER, **connection)
            .writeStream.foreachBatch(write).option("checkpointLocation", str(work / "checkpoint"))
            .trigger(processingTime=TRIGGER).queryName("processing").start())


def main(servers: str, token: str, work: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # local[2,4]: two task threads, a task retried up to 4 times (a publish refused while the broker
    # restarts is retried with the same message ids, which the stream de-duplicates).
    spark = (SparkSession.builder.master("local[2,4]").appName("chaos-orders").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "768m").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(JetStreamDataSource)
    start(spark, servers, token, Path(work)).awaitTermination()  # raises the query's error: exits non-zero


if __name__ == "__main__":
    main(*sys.argv[1:4])
