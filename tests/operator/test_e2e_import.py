"""End to end: `jsoperator import` against a server that already has streams, buckets and consumers, its
manifests applied to the envtest apiserver and adopted by the running operator with no change on the server.

The round trip, against nats-server and jsbroker: objects made with nats-py (limits, retention and storage
kinds, filters, a mirror and a source, a sealed stream, consumer limits, pull and push consumers, metadata,
a paused consumer, KeyValue and ObjectStore buckets, an ephemeral consumer that is skipped) and with the Go
client (`nats kv add`, `nats object add`: natscli, nats.go) -> `jsoperator import -o DIR/` -> created
through the Kubernetes API -> every resource Ready and Adopted ("it matches the spec"), no
Updated/Created/DriftRepaired Event -> the server's stream and consumer configs byte for byte as before
(JSON-normalised), but for the ownership marks each resource wrote into its object's metadata -> deleting the
resources (deletionPolicy retain, the import's default) leaves the server objects and their messages, their
marks removed: byte for byte as before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jsoperator import mapping
from jsoperator.models import ConsumerSpec
from tests import servers
from tests.operator.conftest import GROUP, PLURALS, VERSION, condition, on_broker, poll
from tests.operator.test_buckets import nats_cli
from tests.operator.test_importer import BUCKET_CASES, SERVER_BUCKET_CASES, _bucket_origins, create_bucket_case
from tests.operator.test_mapping import (
    CONSUMER_CASES,
    SEALED_CASE,
    STREAM_CASES,
    _consumer_subjects,
    _stream_spec,
    ensure_origins,
    ok,
)

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(240)]

NS = 1_000_000_000


async def _api(js: Any, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    reply = await js._nc.request(f"$JS.API.{subject}", json.dumps(body).encode() if body is not None else b"",
                                 timeout=5)
    data: dict[str, Any] = json.loads(reply.data)
    assert "error" not in data, f"{subject}: {data['error']}"
    return data


async def _populate(js: Any) -> None:
    """What a platform team might already run, made with nats-py as an application would."""
    await js.add_stream(name="ORDERS", subjects=["orders.>"], description="shop orders", max_age=3600,
                        max_msgs=10_000, max_bytes=1 << 20, discard="new", metadata={"team": "shop"})
    await js.add_stream(name="Events_v2", subjects=["events.>"], storage="memory", retention="interest",
                        max_msgs_per_subject=5, duplicate_window=30)
    limits = {"max_ack_pending": 5000, "inactive_threshold": 7200 * NS}
    await _api(js, "STREAM.CREATE.WORK", {"name": "WORK", "subjects": ["work.*"], "retention": "workqueue",
                                          "max_consumers": 4, "allow_rollup_hdrs": True, "deny_delete": True,
                                          "consumer_limits": limits})
    await _api(js, "STREAM.CREATE.ORDERS_COPY", {"name": "ORDERS_COPY", "mirror": {"name": "ORDERS"}})
    await _api(js, "STREAM.CREATE.PAID", {"name": "PAID", "sources": [{"name": "ORDERS",
                                                                        "filter_subject": "orders.paid"}]})
    await _api(js, "STREAM.CREATE.ARCHIVE", {"name": "ARCHIVE", "subjects": ["archive.>"], "max_age": 3600 * NS})
    await js.publish("archive.2025", b"closed books")
    await _api(js, "STREAM.UPDATE.ARCHIVE", {"name": "ARCHIVE", "subjects": ["archive.>"], "sealed": True})
    for i in range(5):
        await js.publish(f"orders.{'paid' if i % 2 else 'new'}", f"o{i}".encode())
        await js.publish("work.a", f"w{i}".encode())
    settings = await js.create_key_value(bucket="settings", history=3)  # allow_direct off: imported as a Stream
    await settings.put("theme", b"dark")
    cache = await js.create_key_value(bucket="cache", direct=True, ttl=600, max_value_size=4096)
    await cache.put("k", b"v")
    blobs = await js.create_object_store("blobs", description="uploads")
    await blobs.put("a.txt", b"hello")

    await _api(js, "CONSUMER.CREATE.ORDERS.billing", {"stream_name": "ORDERS", "config": {
        "durable_name": "billing", "ack_policy": "explicit", "max_deliver": 5, "backoff": [NS, 10 * NS, 60 * NS],
        "filter_subjects": ["orders.paid", "orders.refunded"], "max_ack_pending": 200,
        "metadata": {"owner": "billing"}}})
    await _api(js, "CONSUMER.CREATE.ORDERS.audit", {"stream_name": "ORDERS", "config": {
        "durable_name": "audit", "deliver_subject": "audit.deliver", "deliver_group": "auditors",
        "ack_policy": "all", "idle_heartbeat": 5 * NS, "flow_control": True, "deliver_policy": "new"}})
    await _api(js, "CONSUMER.CREATE.ORDERS.nightly", {"stream_name": "ORDERS", "config": {
        "durable_name": "nightly", "ack_policy": "explicit", "deliver_policy": "by_start_sequence",
        "opt_start_seq": 2, "replay_policy": "original", "inactive_threshold": 3600 * NS}})
    await _api(js, "CONSUMER.PAUSE.ORDERS.nightly", {"pause_until": "2099-01-01T00:00:00Z"})
    await _api(js, "CONSUMER.CREATE.WORK.workers", {"stream_name": "WORK", "config": {
        "durable_name": "workers", "ack_policy": "explicit", "ack_wait": 45 * NS, "max_waiting": 16}})
    await _api(js, "CONSUMER.CREATE.Events_v2.Tail_1", {"stream_name": "Events_v2", "config": {
        "durable_name": "Tail_1", "deliver_policy": "last_per_subject", "filter_subject": "events.>"}})
    await _api(js, "CONSUMER.CREATE.KV_settings.watcher", {"stream_name": "KV_settings", "config": {
        "durable_name": "watcher", "deliver_policy": "last_per_subject", "ack_policy": "explicit",
        "filter_subject": "$KV.settings.>"}})
    await _api(js, "CONSUMER.CREATE.ORDERS", {"stream_name": "ORDERS", "config": {  # ephemeral
        "ack_policy": "explicit", "inactive_threshold": 600 * NS}})


def _snapshot(url: str, *, marks: bool = True) -> dict[str, Any]:
    """Every stream's config and message count, every consumer's config, by name (JSON-normalised); `marks`
    False leaves the ownership marks out of the metadata."""

    def shown(config: dict[str, Any]) -> str:
        if not marks:
            kept = {k: v for k, v in (config.get("metadata") or {}).items() if not k.startswith("jsoperator.io/")}
            config = {**config, "metadata": kept}
        return json.dumps(config, sort_keys=True)

    async def read(js: Any) -> dict[str, Any]:
        streams = (await _api(js, "STREAM.LIST", {}))["streams"]
        out: dict[str, Any] = {}
        for info in streams:
            name = info["config"]["name"]
            consumers = (await _api(js, f"CONSUMER.LIST.{name}", {}))["consumers"]
            out[name] = {"config": shown(info["config"]), "messages": info["state"]["messages"],
                         "consumers": {c["name"]: shown(c["config"]) for c in consumers}}
        return out

    return on_broker(url, read)


def _import(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jsoperator", "import", *args], capture_output=True, text=True,
                          timeout=60)


def _populate_with_go(url: str, home: Path) -> None:
    """Buckets as the Go client makes them (nats.go's CreateKeyValue / CreateObjectStore)."""
    nats_cli(url, home, "kv", "add", "prefs", "--history", "5", "--ttl", "1h", "--description", "user prefs",
             "--metadata", "team:web")
    nats_cli(url, home, "kv", "put", "prefs", "lang", "en")
    nats_cli(url, home, "object", "add", "files", "--max-bucket-size", "1048576", "--storage", "memory")
    on_broker(url, lambda js: _api(js, "CONSUMER.CREATE.KV_prefs.audit", {"stream_name": "KV_prefs", "config": {
        "durable_name": "audit", "ack_policy": "explicit", "filter_subject": "$KV.prefs.>"}}))


def test_import_apply_adopts_with_no_change(kube, broker, tmp_path: Path) -> None:
    on_broker(broker.url, _populate)
    _populate_with_go(broker.url, tmp_path)
    before = poll(lambda: (lambda s: s if (s["ORDERS_COPY"]["messages"], s["PAID"]["messages"]) == (5, 2) else None)(
        _snapshot(broker.url)), timeout=20, what="the mirror and the source caught up")

    out = tmp_path / "manifests"
    done = _import("--servers", broker.url, "-n", kube.namespace, "--connection-servers", broker.url,
                   "-o", f"{out}/")
    assert done.returncode == 0, done.stderr
    notes = done.stderr.splitlines()
    assert ("jsoperator import: bucket settings imported as the Stream kv-settings, which adopts it with no change: "
            "as a KeyValue, it would change allowDirect (server: false, KeyValue: true)") in notes
    assert sum("of stream ORDERS skipped: it is ephemeral" in note for note in notes) == 1
    assert (f"7 Stream, 2 KeyValue, 2 ObjectStore and 7 Consumer manifests from {broker.url} written to {out}/"
            in done.stderr)

    docs = {path.name: yaml.safe_load(path.read_text()) for path in sorted(out.glob("*.yaml"))}
    assert sorted(docs) == [
        "consumer-events-v2-tail-1.yaml", "consumer-kv-prefs-audit.yaml", "consumer-kv-settings-watcher.yaml",
        "consumer-orders-audit.yaml", "consumer-orders-billing.yaml", "consumer-orders-nightly.yaml",
        "consumer-work-workers.yaml", "keyvalue-cache.yaml", "keyvalue-prefs.yaml", "objectstore-blobs.yaml",
        "objectstore-files.yaml", "stream-archive.yaml", "stream-events-v2.yaml", "stream-kv-settings.yaml",
        "stream-orders-copy.yaml", "stream-orders.yaml", "stream-paid.yaml", "stream-work.yaml"]
    policies = {"adoptionPolicy": "adopt", "deletionPolicy": "retain", "connection": {"servers": [broker.url]}}
    assert docs["keyvalue-prefs.yaml"]["spec"] == {  # nats.go's bucket: only what `nats kv add` was told
        "description": "user prefs", "history": 5, "ttl": "1h", "metadata": {"team": "web"}, **policies}
    assert docs["keyvalue-cache.yaml"]["spec"] == {  # nats-py's, made with direct=True: its allow_msg_ttl too
        "ttl": "10m", "maxValueSize": 4096, "allowMsgTtl": True, **policies}
    assert docs["objectstore-files.yaml"]["spec"] == {"maxBytes": 1048576, "storage": "memory", **policies}
    assert docs["objectstore-blobs.yaml"]["spec"] == {"description": "uploads", **policies}
    assert docs["stream-kv-settings.yaml"]["spec"]["name"] == "KV_settings"
    assert docs["consumer-kv-prefs-audit.yaml"]["spec"]["streamName"] == "KV_prefs"
    assert docs["stream-events-v2.yaml"]["spec"] == {
        "name": "Events_v2", "subjects": ["events.>"], "retention": "interest", "maxMsgsPerSubject": 5,
        "storage": "memory", "duplicateWindow": "30s", "adoptionPolicy": "adopt", "deletionPolicy": "retain",
        "connection": {"servers": [broker.url]}}
    assert docs["consumer-work-workers.yaml"]["spec"] == {  # its limits are the stream's: left out
        "streamName": "WORK", "durableName": "workers", "ackPolicy": "explicit", "ackWait": "45s", "maxWaiting": 16,
        "adoptionPolicy": "adopt", "deletionPolicy": "retain", "connection": {"servers": [broker.url]}}
    nightly = docs["consumer-orders-nightly.yaml"]["spec"]
    assert nightly["pauseUntil"] == "2099-01-01T00:00:00Z" and nightly["deliverPolicy"] == "byStartSequence"

    for doc in docs.values():
        kube.api.create_namespaced_custom_object(GROUP, VERSION, kube.namespace, PLURALS[doc["kind"]], doc)
    for doc in docs.values():
        kind, name = doc["kind"], doc["metadata"]["name"]
        obj = kube.wait_condition(kind, name, "Ready", timeout=60)
        assert (condition(obj, "Adopted") or {}).get("status") == "True", obj["status"]
        adopted = kube.wait_events(name, "Adopted")
        assert adopted[0].message.endswith("it matches the spec"), adopted[0].message
    for doc in docs.values():
        reasons = {event.reason for event in kube.events(doc["metadata"]["name"])}
        assert not reasons & {"Updated", "Created", "DriftRepaired", "ReconcileFailed"}, (doc["metadata"], reasons)
    assert _snapshot(broker.url, marks=False) == before
    marked = json.loads(_snapshot(broker.url)["ORDERS"]["config"])["metadata"]
    assert marked["jsoperator.io/name"] == "orders" and marked["jsoperator.io/namespace"] == kube.namespace

    for doc in docs.values():
        kube.delete(doc["kind"], doc["metadata"]["name"])
    for doc in docs.values():
        kube.wait_gone(doc["kind"], doc["metadata"]["name"])
    assert _snapshot(broker.url) == before  # retain: the server objects and their messages stay


def test_the_crds_accept_every_imported_field(kube, tmp_path: Path) -> None:
    """Every case of test_mapping and every bucket case of test_importer, made on nats-server and imported,
    passes the apiserver's validation (the CRDs' OpenAPI schema and CEL rules: durations, sizes, times as the
    importer writes them)."""
    async def populate(js: Any) -> None:
        nc = js._nc
        await _bucket_origins(nc)
        for index in SERVER_BUCKET_CASES:
            await create_bucket_case(nc, index)
        for index, (case, _) in enumerate(STREAM_CASES + [SEALED_CASE]):
            config = mapping.stream_config(_stream_spec(index, case), f"case{index}")
            sealed = config.pop("sealed", False)
            await ok(nc, f"STREAM.CREATE.{config['name']}", config)
            if sealed:
                await ok(nc, f"STREAM.UPDATE.{config['name']}", {**config, "sealed": True})
        for index, (case, _) in enumerate(CONSUMER_CASES):
            stream = f"CSTREAM{index}"
            subjects = [f"c{index}.things.>", f"c{index}.x"]
            await ok(nc, f"STREAM.CREATE.{stream}", {"name": stream, "subjects": subjects})
            spec = ConsumerSpec.model_validate({"streamName": stream, **_consumer_subjects(case, index)})
            config = mapping.consumer_config(spec, f"c{index}")
            body = {"stream_name": stream, "config": config}
            await ok(nc, f"CONSUMER.CREATE.{stream}.{config['durable_name']}", body)

    with servers.launch(servers.NATS_SERVER) as server:
        on_broker(server.url, populate)
        done = _import("--servers", server.url, "-n", kube.namespace, "-o", str(tmp_path / "all.yaml"))
    assert done.returncode == 0, done.stderr
    docs = [doc for doc in yaml.safe_load_all((tmp_path / "all.yaml").read_text()) if doc]
    kinds = [doc["kind"] for doc in docs]
    assert len(docs) == 2 + len(STREAM_CASES) + 1 + 2 * len(CONSUMER_CASES) + 2 + len(SERVER_BUCKET_CASES)
    assert (kinds.count("KeyValue"), kinds.count("ObjectStore")) == (
        2 + sum(BUCKET_CASES[i][0] == "KeyValue" for i in SERVER_BUCKET_CASES),
        sum(BUCKET_CASES[i][0] == "ObjectStore" for i in SERVER_BUCKET_CASES))
    for doc in docs:
        kube.api.create_namespaced_custom_object(GROUP, VERSION, kube.namespace, PLURALS[doc["kind"]], doc,
                                                 dry_run="All")
