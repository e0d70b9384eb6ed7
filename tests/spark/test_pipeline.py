"""The ORDERS pipeline end to end, as its one command runs it: in local mode against nats-server, and on
a Spark standalone cluster (a master and a worker started from the installed PySpark, executors in
processes of their own) against the jsbroker it starts itself, so nothing may depend on driver state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import NATS_SERVER, free_port

pyspark = pytest.importorskip("pyspark")
pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(900)]

ORDERS = 100  # every tenth is invalid


def pipeline(*args: str, timeout: float = 600) -> dict[str, dict[str, str]]:
    done = subprocess.run([sys.executable, "-m", "jsspark.pipeline", "--orders", str(ORDERS), *args],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-4000:]
    tables: dict[str, dict[str, str]] = {}
    for block in done.stdout.strip().split("\n\n"):
        lines = [line.strip("|").split("|") for line in block.splitlines()]
        tables[lines[0][0].strip()] = {k.strip(): v.strip() for k, v in lines[2:]}
    return tables


def check(report: dict[str, dict[str, str]]) -> None:
    assert report["stage"] == {"received": "100", "processed": "90", "rejected": "10", "completed": "90"}
    assert set(report["latency received -> completed"]) == {"p50", "p95", "p99"}
    assert len(report["customer"]) == 5 and all(float(v) > 0 for v in report["customer"].values())


def test_the_pipeline_in_local_mode_against_nats_server(server_factory, tmp_path):
    handle = server_factory(NATS_SERVER)
    report = pipeline("--servers", handle.url, "--master", "local[2]", "--work", str(tmp_path),
                      "--svg", str(tmp_path / "revenue.svg"))
    check(report)
    svg = (tmp_path / "revenue.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<rect") == 5


class Standalone:
    """A Spark master and one worker as processes, stopped by process id."""

    def __init__(self, work: Path) -> None:
        home = Path(pyspark.__file__).parent
        self.env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1",
                        SPARK_NO_DAEMONIZE="1", PYSPARK_PYTHON=sys.executable)
        self.work = work
        port, ui = free_port(), free_port()
        self.url, self.ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}/json/"
        spark_class = str(home / "bin" / "spark-class")
        self.procs = [self._start("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host",
                                             "127.0.0.1", "--port", str(port), "--webui-port", str(ui)])]
        self.procs.append(self._start("worker", [
            spark_class, "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--cores", "2",
            "--memory", "2g", "--webui-port", str(free_port()), "--work-dir", str(work / "worker")]))

    def _start(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (self.work / f"{name}.log").open("ab") as log:
            return subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_for_worker(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.ui, timeout=2) as r:
                    if json.loads(r.read()).get("aliveworkers", 0) >= 1:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"no Spark worker registered:\n{(self.work / 'worker.log').read_text()[-3000:]}")
            time.sleep(0.5)  # polling the master's status page

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    cluster = Standalone(tmp_path)
    try:
        cluster.wait_for_worker()
        yield cluster
    finally:
        cluster.stop()


def test_the_pipeline_on_a_standalone_cluster_with_its_own_jsbroker(standalone, tmp_path):
    check(pipeline("--master", standalone.url, "--work", str(tmp_path / "pipeline")))
    executors = list((tmp_path / "worker").glob("app-*/*/stderr"))
    assert executors, "no executor ran in the worker (its work dir holds one folder per executor)"
