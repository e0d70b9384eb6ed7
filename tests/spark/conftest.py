"""One SparkSession (local[2], real executors' Python workers) shared by every Spark test of a worker, with
`format("jetstream")` registered. All Spark tests share one xdist group, so one worker starts Spark."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from jsspark import JetStreamDataSource

    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need this venv (pyarrow, nats-py, jsspark)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (SparkSession.builder.master("local[2]").appName("jsspark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(JetStreamDataSource)
    yield session
    session.stop()
