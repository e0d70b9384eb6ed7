"""The image as testcontainers-python's NATS module runs it, unchanged: its wait strategy (the "Server is
ready" log line, which jsbroker prints as nats-server does) and its ports (4222 for clients, 8222 for
monitoring, both the image's defaults). JetStream is on in the image's command already: `NatsContainer(image)`,
not `jetstream=True`, which replaces the command with nats-server's bare `-js` (the image has no entry point:
the operator's Deployment runs `jsoperator run` from it).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import nats
import pytest

pytestmark = [pytest.mark.xdist_group("image"), pytest.mark.docker, pytest.mark.timeout(900)]


async def _stream_round_trip(url: str) -> int:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="TC", subjects=["tc.>"])
        return (await js.publish("tc.1", b"x")).seq
    finally:
        await nc.close()


def test_the_image_runs_as_testcontainers_nats_container(image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ryuk, testcontainers' reaper, is an image from a registry; the `with` block removes the container itself.
    monkeypatch.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.community.nats import NatsContainer

    with NatsContainer(image) as container:
        assert asyncio.run(_stream_round_trip(container.nats_uri())) == 1
        host, port = container.get_container_host_ip(), container.get_exposed_port(container.management_port)
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=10) as reply:
            assert json.load(reply) == {"status": "ok"}
