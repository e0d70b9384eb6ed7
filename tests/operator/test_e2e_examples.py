"""End to end: the resources in deploy/examples/ as a user applies them (plus the test broker's address),
Ready on both brokers, and doing what their scenarios say: ORDERS; the buckets example used by nats-py's
KeyValue and Object Store clients; sources and a mirror."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.operator.conftest import PROMPT, fetch, on_broker, publish, server_consumer, server_stream

SOURCING_WAIT = 60.0  # s: nats-server sets its sourcing consumers up with a back-off

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(120)]

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "orders.yaml"
BUCKETS = EXAMPLE.with_name("buckets.yaml")
SOURCING = EXAMPLE.with_name("sourcing.yaml")


def test_the_orders_example_becomes_ready_and_works(kube, broker):
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Stream", "orders"), ("Consumer", "new"), ("Consumer", "dispatch"), ("Consumer", "monitor")]
    for doc in docs:
        kube.create(doc["kind"], doc["metadata"]["name"], {**doc["spec"], "connection": {"servers": [broker.url]}})
    for doc in docs:
        kube.wait_condition(doc["kind"], doc["metadata"]["name"], "Ready", timeout=PROMPT * 3)

    stream = server_stream(broker.url, "ORDERS").config
    assert (stream.subjects, str(stream.storage), stream.max_age) == (["ORDERS.*"], "file", 365 * 24 * 3600)
    monitor = server_consumer(broker.url, "ORDERS", "MONITOR").config
    assert (monitor.deliver_subject, str(monitor.ack_policy), str(monitor.deliver_policy)) == (
        "monitor.ORDERS", "none", "last")

    assert publish(broker.url, "ORDERS.received", 2) == [1, 2]
    assert publish(broker.url, "ORDERS.processed", 1) == [3]
    assert fetch(broker.url, "ORDERS", "NEW", 2) == [(1, 1), (2, 2)]
    assert fetch(broker.url, "ORDERS", "DISPATCH") == [(3, 1)]


def test_the_buckets_example_becomes_ready_and_works(kube, broker):
    docs = [d for d in yaml.safe_load_all(BUCKETS.read_text()) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("KeyValue", "settings"), ("ObjectStore", "assets")]
    for doc in docs:
        kube.create(doc["kind"], doc["metadata"]["name"], {**doc["spec"], "connection": {"servers": [broker.url]}})
    for doc in docs:
        kube.wait_condition(doc["kind"], doc["metadata"]["name"], "Ready", timeout=PROMPT * 3)
    kv = server_stream(broker.url, "KV_settings").config
    assert (kv.max_msgs_per_subject, kv.max_age, kv.max_msg_size) == (5, 30 * 24 * 3600, 64 * 1024)
    assert server_stream(broker.url, "OBJ_assets").config.max_bytes == 1 << 30

    async def use(js):
        settings, assets = await js.key_value("settings"), await js.object_store("assets")
        await settings.put("color", b"blue")
        await assets.put("logo.png", b"png" * 1000)
        return (await settings.get("color")).value, len((await assets.get("logo.png")).data)

    assert on_broker(broker.url, use) == (b"blue", 3000)


def test_the_sourcing_example_becomes_ready_and_shows_its_links(kube, broker):
    docs = [d for d in yaml.safe_load_all(SOURCING.read_text()) if d]
    assert [d["metadata"]["name"] for d in docs] == ["orders-east", "orders-west", "orders-all", "orders-all-mirror"]
    for doc in docs:
        kube.create(doc["kind"], doc["metadata"]["name"], {**doc["spec"], "connection": {"servers": [broker.url]}})
    for doc in docs:
        kube.wait_condition(doc["kind"], doc["metadata"]["name"], "Ready", timeout=PROMPT * 3)
    assert publish(broker.url, "orders.east.received", 2) == [1, 2]
    assert publish(broker.url, "orders.west.received", 1) == [1]

    def caught_up(obj):  # the status refresh shows the copies and links that reached their origins
        links = [obj["status"]["mirror"]] if "mirror" in obj["status"] else obj["status"].get("sources", [])
        return obj["status"].get("messages") == 3 and links and all(link["active"] for link in links) \
            and obj["status"].get("lag") == 0
    aggregate = kube.wait("Stream", "orders-all", caught_up, timeout=SOURCING_WAIT, what="aggregate caught up")
    assert aggregate["status"]["sources"] == [{"name": "ORDERS_EAST", "lag": 0, "active": True},
                                              {"name": "ORDERS_WEST", "lag": 0, "active": True}]
    mirror = kube.wait("Stream", "orders-all-mirror", caught_up, timeout=SOURCING_WAIT, what="mirror caught up")
    assert mirror["status"]["mirror"] == {"name": "ORDERS_ALL", "lag": 0, "active": True}
    assert "sources" not in mirror["status"] and mirror["status"]["lastSeq"] == 3
    assert server_stream(broker.url, "ORDERS_ALL_MIRROR").config.mirror.name == "ORDERS_ALL"
