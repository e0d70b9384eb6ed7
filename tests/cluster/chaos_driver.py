"""The chaos run's Spark driver, on the host as its own process (the victim of the driver kills):

    python -m tests.cluster.chaos_driver SERVERS TOKEN WORK

Two streaming queries of the ORDERS pipeline, each from its checkpoint under WORK/checkpoints:
`processing` (jsspark.pipeline.jobs: ORDERS.received -> the de-duplicating sink, ORDERS.processed or
ORDERS.rejected with msgId processed:<order id>) and `archive` (those two subjects -> parquet in
WORK/out). Both wait for the broker while it is away (reconnectAttempts -1). A failed query ends the
process with its error; the chaos run restarts it, as a supervisor would.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from jsspark import JetStreamDataSource
from jsspark.pipeline import jobs

TRIGGER = "1 second"
MAX_PER_TRIGGER = "5000"


def start(spark: SparkSession, servers: str, token: str, work: Path) -> list:  # type: ignore[type-arg]
    connection = {"token": token, "reconnectAttempts": "-1", "reconnectWait": "0.5", "requestTimeout": "10"}
    checkpoints = work / "checkpoints"
    processing = (jobs.processed_orders(spark, servers, maxOffsetsPerTrigger=MAX_PER_TRIGGER, **connection)
                  .writeStream.format("jetstream").option("servers", servers).options(**connection)
                  .option("checkpointLocation", str(checkpoints / "processing")).trigger(processingTime=TRIGGER)
                  .queryName("processing").start())
    # One query at a time through its start: two sources starting at once had their Python workers time
    # out connecting back to the JVM.
    while processing.lastProgress is None and not processing.awaitTermination(1):
        pass
    archive = (spark.readStream.format("jetstream").option("servers", servers).option("stream", jobs.STREAM)
               .option("subjects", f"{jobs.STREAM}.processed,{jobs.STREAM}.rejected")
               .option("maxOffsetsPerTrigger", MAX_PER_TRIGGER).options(**connection).load()
               .select("seq", "subject", "data")
               .writeStream.format("parquet").option("path", str(work / "out"))
               .option("checkpointLocation", str(checkpoints / "archive")).trigger(processingTime=TRIGGER)
               .queryName("archive").start())
    return [processing, archive]


def main(servers: str, token: str, work: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # local[2,4]: two task threads, a task retried up to 4 times (a publish refused while the broker
    # restarts is retried with the same message ids, which the stream de-duplicates).
    spark = (SparkSession.builder.master("local[2,4]").appName("chaos-orders").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "768m")
             # Python workers connecting back to the JVM: 15 s by default, too short on a loaded machine.
             .config("spark.python.authenticate.socketTimeout", "120s").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(JetStreamDataSource)
    start(spark, servers, token, Path(work))
    spark.streams.awaitAnyTermination()  # raises the failed query's error: the process exits non-zero


if __name__ == "__main__":
    main(*sys.argv[1:4])
