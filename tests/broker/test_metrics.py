"""/metrics on the monitoring port: prometheus-nats-exporter's names and labels, values computed from a
known workload (core messages, a stream, a consumer with deliveries in every state)."""

from __future__ import annotations

import urllib.request

import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import JSBROKER, launch

pytestmark = pytest.mark.xdist_group("broker-core")


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name: str, **labels: str) -> float:
    found = [v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items()]
    assert len(found) == 1, f"{name} {labels}: {len(found)} samples"
    return found[0]


async def test_metrics_after_a_known_workload(server_factory):
    handle = server_factory(JSBROKER, jetstream=True, http=True)
    nc = await nats.connect(handle.url)
    sub = await nc.subscribe("core.m")
    for _ in range(10):
        await nc.publish("core.m", b"0123456789")
    for _ in range(10):
        await sub.next_msg(timeout=5)
    js = nc.jetstream()
    await js.add_stream(name="METERED", subjects=["metered.*"])
    for i in range(5):
        await js.publish(f"metered.{i % 2}", b"x" * 100)
    psub = await js.pull_subscribe("metered.*", durable="WORKER", config=nats.js.api.ConsumerConfig(
        description="the worker"))
    msgs = await psub.fetch(3, timeout=5)
    for m in msgs[:2]:
        await m.ack_sync()

    samples = scrape(handle.http_url)
    assert value(samples, "gnatsd_varz_connections") == 1
    assert value(samples, "gnatsd_varz_slow_consumers") == 0
    assert value(samples, "gnatsd_varz_in_msgs") >= 15  # 10 core + 5 JetStream publishes
    assert value(samples, "gnatsd_varz_out_msgs") >= 10
    assert value(samples, "jetstream_server_total_streams") == 1
    assert value(samples, "jetstream_server_total_consumers") == 1
    assert value(samples, "jetstream_server_total_messages") == 5
    stream = {"stream_name": "METERED", "account": "$G", "is_stream_leader": "true"}
    assert value(samples, "jetstream_stream_total_messages", **stream) == 5
    assert value(samples, "jetstream_stream_last_seq", **stream) == 5
    assert value(samples, "jetstream_stream_consumer_count", **stream) == 1
    consumer = {**stream, "consumer_name": "WORKER", "consumer_desc": "the worker"}
    assert value(samples, "jetstream_consumer_num_pending", **consumer) == 2
    assert value(samples, "jetstream_consumer_num_ack_pending", **consumer) == 1
    assert value(samples, "jetstream_consumer_delivered_stream_seq", **consumer) == 3
    assert value(samples, "jetstream_consumer_ack_floor_stream_seq", **consumer) == 2
    assert value(samples, "jsbroker_jetstream_api_requests_total") >= 3
    await nc.close()


async def test_store_fsyncs_and_recovery_time(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text('[jetstream]\nsync = "always"\n')
    with launch(JSBROKER, store_dir=tmp_path / "store", http=True, extra_args=["-c", str(config)]) as handle:
        nc = await nats.connect(handle.url)
        js = nc.jetstream()
        await js.add_stream(name="SYNCED", subjects=["synced"])
        for _ in range(5):
            await js.publish("synced", b"x")
        await nc.close()
        samples = scrape(handle.http_url)
        fsyncs, seconds = value(samples, "jsbroker_store_fsyncs_total"), value(samples, "jsbroker_store_fsync_seconds_total")
        assert fsyncs >= 5  # one per acknowledged publish at least
        assert 0 < value(samples, "jsbroker_store_fsync_max_seconds") <= seconds
        handle.restart()  # a store with a stream to recover
        recovery = value(scrape(handle.http_url), "jsbroker_jetstream_recovery_seconds")
    assert 0 < recovery < 30


def test_metrics_without_jetstream_are_the_core_ones(server_factory):
    handle = server_factory(JSBROKER, jetstream=False, http=True)
    names = {name for name, _ in scrape(handle.http_url)}
    assert "gnatsd_varz_connections" in names and not [n for n in names if n.startswith("jetstream_")]
