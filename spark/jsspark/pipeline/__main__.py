"""`python -m jsspark.pipeline`: run the ORDERS pipeline once, end to end, and print the report."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from . import generator, jobs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def nats_servers(servers: str | None, work: Path) -> Iterator[str]:
    """The given servers, or a jsbroker started here (and stopped by its process id at the end)."""
    if servers:
        yield servers
        return
    port = _free_port()
    args = [sys.executable, "-m", "jsbroker", "-a", "127.0.0.1", "-p", str(port), "--store_dir", str(work / "store")]
    with (work / "jsbroker.log").open("ab") as log:
        broker = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            if time.monotonic() > deadline or broker.poll() is not None:
                raise RuntimeError(f"jsbroker did not start; see {work / 'jsbroker.log'}")
            time.sleep(0.1)  # polling the broker's port until it accepts
        yield f"nats://127.0.0.1:{port}"
    finally:
        broker.terminate()
        broker.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jsspark.pipeline", description=__doc__)
    p.add_argument("--orders", type=int, default=1000, help="orders to generate (default 1000; 0: none)")
    p.add_argument("--servers", help="NATS servers (default: start a jsbroker)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*]; or spark://host:7077)")
    p.add_argument("--work", type=Path, help="checkpoints and logs (default: a temporary folder)")
    p.add_argument("--svg", type=Path, help="also write the revenue chart to this SVG file")
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="orders-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)

    from pyspark.sql import SparkSession

    from jsspark import JetStreamDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with nats_servers(args.servers, work) as servers:
        if args.orders:
            print(f"==> publishing {args.orders} orders to ORDERS.received on {servers}", file=sys.stderr)
            asyncio.run(generator.publish_orders(servers, args.orders))
        spark = (SparkSession.builder.master(args.master).appName("orders-pipeline")
                 .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "4")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(JetStreamDataSource)
        try:
            print("==> processing: ORDERS.received -> ORDERS.processed / ORDERS.rejected", file=sys.stderr)
            jobs.processing(spark, servers, str(work / "checkpoints" / "processing"))
            print("==> completion: ORDERS.processed -> ORDERS.completed", file=sys.stderr)
            jobs.completion(spark, servers, str(work / "checkpoints" / "completion"))
            print("==> report: the whole stream", file=sys.stderr)
            result = jobs.report(spark, servers)
        finally:
            spark.stop()
    print(jobs.as_table(result))
    if args.svg:
        args.svg.write_text(jobs.revenue_svg(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
