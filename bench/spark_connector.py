"""jsspark benchmark: the Spark source and sink beside the cheapest honest baseline, a plain nats-py client.

One stream of N messages (128 B, default 1M) on one server (jsbroker by default, `--server nats-server`),
then, each timed on its own:
- nats-py ordered consumer: one process reads every message (the baseline for reads);
- Spark batch read with 1 and 2 partitions, every column materialised (`noop` sink);
- Spark streaming read, `availableNow` in micro-batches of `--trigger` sequences, into the `noop` sink;
- nats-py async publish of N/10 messages with acks (the baseline for writes), and the Spark sink
  writing the same number of rows.
Spark runs `local[2]` on this machine's 2 cores; the session is started (and warmed by one small read)
before anything is timed. Rows/s; ratios against the baseline.

    python3 bench/spark_connector.py                 # 1M messages
    python3 bench/spark_connector.py --quick         # 200k messages
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable

from common import fill_stream, run_async
from tests.servers import JSBROKER, KINDS, launch

STREAM = "BENCH"


def nats_py_ordered_read(url: str, n: int) -> float:
    async def main() -> None:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        done = asyncio.Event()
        got = 0

        async def count(msg: object) -> None:
            nonlocal got
            got += 1
            if got >= n:
                done.set()

        await js.subscribe(f"{STREAM}.>", ordered_consumer=True, cb=count, pending_msgs_limit=-1,
                           pending_bytes_limit=-1)
        await asyncio.wait_for(done.wait(), 600)
        await nc.close()

    start = time.perf_counter()
    run_async(main())
    return time.perf_counter() - start


def nats_py_publish(url: str, n: int) -> float:
    async def main() -> None:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name="BENCHOUT1", subjects=["benchout1.>"])
        for i in range(n):
            await js.publish_async("benchout1.x", b"x" * 128, headers={"Nats-Msg-Id": f"p{i}"})
        await js.publish_async_completed()
        await nc.close()

    start = time.perf_counter()
    run_async(main())
    return time.perf_counter() - start


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200k messages")
    ap.add_argument("-n", type=int, default=1_000_000, help="messages in the stream (default 1M)")
    ap.add_argument("--server", choices=KINDS, default=JSBROKER)
    ap.add_argument("--trigger", type=int, default=200_000, help="streaming: sequences per micro-batch")
    args = ap.parse_args()
    n = 200_000 if args.quick else args.n
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from jsspark import JetStreamDataSource

    rows: list[tuple[str, int, float, str]] = []
    with launch(args.server) as server, tempfile.TemporaryDirectory() as tmp:
        run_async(_stream(server.url))
        fill_stream(server.url, STREAM, n)
        print(f"{n:,} messages stored in {STREAM} on {args.server}", flush=True)
        baseline_read = nats_py_ordered_read(server.url, n)
        rows.append(("nats-py ordered consumer (baseline)", n, baseline_read, "read"))

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(JetStreamDataSource)

        def reader(partitions: int, **extra: str):  # noqa: ANN202 - a DataFrameReader
            r = (spark.read.format("jetstream").option("servers", server.url).option("stream", STREAM)
                 .option("minPartitions", str(partitions)))
            for k, v in extra.items():
                r = r.option(k, v)
            return r

        reader(1, endingOffsets=f'{{"{STREAM}": 1000}}').load().write.format("noop").mode("overwrite").save()
        for partitions in (1, 2):
            seconds = timed(lambda: reader(partitions).load().write.format("noop").mode("overwrite").save())
            rows.append((f"Spark batch read, {partitions} partition(s)", n, seconds, "read"))

        def stream() -> None:
            query = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", STREAM)
                     .option("maxOffsetsPerTrigger", str(args.trigger)).option("minPartitions", "2").load()
                     .writeStream.format("noop").option("checkpointLocation", f"{tmp}/ckpt")
                     .trigger(availableNow=True).start())
            query.awaitTermination()

        rows.append((f"Spark streaming read (availableNow, {args.trigger:,}/batch)", n, timed(stream), "read"))

        writes = n // 10
        baseline_write = nats_py_publish(server.url, writes)
        rows.append(("nats-py async publish with acks (baseline)", writes, baseline_write, "write"))
        run_async(_stream(server.url, "BENCHOUT2", "benchout2.>"))
        frame = spark.range(writes).selectExpr("'benchout2.x' AS subject", "repeat('x', 128) AS data").repartition(2)
        seconds = timed(lambda: frame.write.format("jetstream").mode("append").option("servers", server.url).save())
        rows.append(("Spark sink, 2 partitions", writes, seconds, "write"))
        spark.stop()

    base = {"read": n / baseline_read, "write": writes / baseline_write}
    print(f"\n{args.server}, 128 B messages, local[2] on {os.cpu_count()} cores\n")
    print("| workload | messages | seconds | rows/s | vs nats-py |")
    print("|---|---:|---:|---:|---:|")
    for name, count, seconds, kind in rows:
        rate = count / seconds
        print(f"| {name} | {count:,} | {seconds:.1f} | {rate:,.0f} | {rate / base[kind]:.2f}x |")


async def _stream(url: str, name: str = STREAM, subjects: str = f"{STREAM}.>") -> None:
    import nats

    nc = await nats.connect(url)
    await nc.jetstream().add_stream(name=name, subjects=[subjects])
    await nc.close()


if __name__ == "__main__":
    main()
