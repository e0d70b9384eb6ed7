"""jsspark benchmark: the Spark source and sink beside the cheapest honest baseline, a plain nats-py client.

One stream of N messages (128 B, default 1M) on one server (jsbroker by default, `--server nats-server`),
then, each timed on its own:
- nats-py ordered consumer: one process reads every message (the baseline for reads);
- Spark batch read with 1 and 2 partitions, every column materialised (`noop` sink);
- Spark streaming read, `availableNow` in micro-batches of `--trigger` sequences, into the `noop` sink;
- nats-py async publish of `--writes` messages (default N/10) with acks and a Nats-Msg-Id (the
  baseline for writes); jsspark's publisher alone, in this process, on one Arrow batch (the sink
  without Spark); and the Spark sink writing the same number of rows with 1 and 2 partitions (job
  start-up included);
- where a sink task's time goes besides publishing: Arrow columns to Python values, and building each
  message's headers (Nats-Msg-Id), timed alone on the same rows.
Spark runs `local[2]` on this machine's 2 cores; the session is started (and warmed by one small read
and one small write) before anything is timed. The writes run `--reps` times, interleaved, so a busy
machine slows each alike (medians). Rows/s; ratios against the baseline.

    python3 bench/spark_connector.py                 # 1M messages
    python3 bench/spark_connector.py --quick         # 200k messages
    python3 bench/spark_connector.py --only write --writes 200000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
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


def nats_py_publish(url: str, n: int, rep: int = 0) -> float:
    async def main() -> None:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name="BENCHOUT1", subjects=["benchout1.>"])
        for i in range(n):
            await js.publish_async("benchout1.x", b"x" * 128, headers={"Nats-Msg-Id": f"p{rep}:{i}"})
        await js.publish_async_completed()
        await nc.close()

    start = time.perf_counter()
    run_async(main())
    return time.perf_counter() - start


def jsspark_publish(url: str, n: int, rep: int = 0) -> tuple[float, float, float]:
    """jsspark's publisher on one Arrow batch of n rows, without Spark: (publish, to_pylist, headers) s."""
    import pyarrow as pa

    from jsspark import client, sink
    from jsspark.options import SinkOptions, parse

    batch = pa.RecordBatch.from_pydict({"subject": ["benchout3.x"] * n, "data": [b"x" * 128] * n})
    opts = parse(SinkOptions, {"servers": url})
    run_async(_stream(url, "BENCHOUT3", "benchout3.>"))
    start = time.perf_counter()
    client.run(sink._publish(opts, f"bench{rep}", iter([batch])))
    publish = time.perf_counter() - start
    start = time.perf_counter()
    batch.column("data").cast(pa.binary()).to_pylist(), batch.column("subject").to_pylist()
    columns = time.perf_counter() - start
    start = time.perf_counter()
    for _ in sink._messages(opts, "bench", batch, 0):
        pass
    messages = time.perf_counter() - start
    return publish, columns, messages - columns


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
    ap.add_argument("--writes", type=int, help="messages written (default N/10)")
    ap.add_argument("--only", choices=("read", "write"), help="only the reads or only the writes")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the writes (medians; default 3)")
    args = ap.parse_args()
    n = 200_000 if args.quick else args.n
    writes = args.writes or n // 10
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from jsspark import JetStreamDataSource

    rows: list[tuple[str, int, float, str]] = []
    breakdown = (0.0, 0.0)
    with launch(args.server) as server, tempfile.TemporaryDirectory() as tmp:
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(JetStreamDataSource)
        if args.only != "write":
            read_rows(spark, server.url, n, args.trigger, tmp, rows)
        if args.only != "read":
            breakdown = write_rows(spark, server.url, writes, args.reps, rows)
        spark.stop()

    base = {kind: count / seconds for name, count, seconds, kind in rows if "baseline" in name}
    print(f"\n{args.server}, 128 B messages, local[2] on {os.cpu_count()} cores\n")
    print("| workload | messages | seconds | rows/s | vs nats-py |")
    print("|---|---:|---:|---:|---:|")
    for name, count, seconds, kind in rows:
        rate = count / seconds
        print(f"| {name} | {count:,} | {seconds:.1f} | {rate:,.0f} | {rate / base[kind]:.2f}x |")
    if args.only != "read":
        columns, headers = breakdown
        print(f"\nA sink task's work besides publishing, per message: Arrow columns to Python values "
              f"{columns / writes * 1e6:.2f} µs, headers (Nats-Msg-Id) {headers / writes * 1e6:.2f} µs; "
              f"publishing with acks {base['write'] and 1e6 / base['write']:.2f} µs in the nats-py baseline.")


def read_rows(spark, url: str, n: int, trigger: int, tmp: str, rows: list) -> None:  # noqa: ANN001
    run_async(_stream(url))
    fill_stream(url, STREAM, n)
    print(f"{n:,} messages stored in {STREAM}", flush=True)
    rows.append(("nats-py ordered consumer (baseline)", n, nats_py_ordered_read(url, n), "read"))

    def reader(partitions: int, **extra: str):  # noqa: ANN202 - a DataFrameReader
        r = (spark.read.format("jetstream").option("servers", url).option("stream", STREAM)
             .option("minPartitions", str(partitions)))
        for k, v in extra.items():
            r = r.option(k, v)
        return r

    reader(1, endingOffsets=f'{{"{STREAM}": 1000}}').load().write.format("noop").mode("overwrite").save()
    for partitions in (1, 2):
        seconds = timed(lambda: reader(partitions).load().write.format("noop").mode("overwrite").save())
        rows.append((f"Spark batch read, {partitions} partition(s)", n, seconds, "read"))

    def stream() -> None:
        query = (spark.readStream.format("jetstream").option("servers", url).option("stream", STREAM)
                 .option("maxOffsetsPerTrigger", str(trigger)).option("minPartitions", "2").load()
                 .writeStream.format("noop").option("checkpointLocation", f"{tmp}/ckpt")
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    rows.append((f"Spark streaming read (availableNow, {trigger:,}/batch)", n, timed(stream), "read"))


def write_rows(spark, url: str, writes: int, reps: int, rows: list) -> tuple[float, float]:  # noqa: ANN001
    """The write workloads `reps` times, interleaved (a busy machine slows them alike); medians."""
    run_async(_stream(url, "BENCHOUT2", "benchout2.>"))

    def sink(count: int, partitions: int) -> None:
        frame = spark.range(count).selectExpr("'benchout2.x' AS subject", "repeat('x', 128) AS data")
        frame.repartition(partitions).write.format("jetstream").mode("append").option("servers", url).save()

    sink(100, 2)  # warm: the Python workers start
    times: dict[str, list[float]] = {}
    for rep in range(reps):
        times.setdefault("nats-py async publish with acks (baseline)", []).append(nats_py_publish(url, writes, rep))
        publish, columns, headers = jsspark_publish(url, writes, rep)
        times.setdefault("jsspark publisher without Spark (one Arrow batch)", []).append(publish)
        for partitions in (1, 2):
            seconds = timed(lambda: sink(writes, partitions))
            times.setdefault(f"Spark sink, {partitions} partition(s)", []).append(seconds)
    rows.extend((name, writes, statistics.median(ts), "write") for name, ts in times.items())
    return columns, headers


async def _stream(url: str, name: str = STREAM, subjects: str = f"{STREAM}.>") -> None:
    import nats

    nc = await nats.connect(url)
    await nc.jetstream().add_stream(name=name, subjects=[subjects])
    await nc.close()


if __name__ == "__main__":
    main()
