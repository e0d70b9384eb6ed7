"""End to end: migrating from NACK. NACK's resources (test_nack.resources(): its examples and every mapped
field) on the envtest apiserver under NACK's own CRDs (tests/operator/nack/crds.yml, so the apiserver fills
in their defaults as in a cluster running NACK), their server objects made first as NACK makes them (jsm.go's
templates and NACK's spec -> config rules for streams and consumers, nats.go through the `nats` CLI for
buckets), then `jsoperator import --from-nack` from the cluster, the manifests applied, and the running
operator: every resource Ready, Synced and Adopted ("it matches the spec"), no Created/Updated/DriftRepaired
Event, the server's configs byte for byte as before (JSON-normalised) but for the ownership marks adoption
writes, and the report on stdout lists exactly the unmapped fields.
Bad input (a Consumer whose stream is not imported, a Secret missing, a file of an unknown version) exits 2
and writes nothing.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from jsoperator import nack
from tests.operator.conftest import GROUP, PLURALS, REPO, VERSION, condition, install_crds, on_broker, poll
from tests.operator.test_buckets import nats_cli
from tests.operator.test_e2e_import import _api, _snapshot
from tests.operator.test_nack import UNMAPPED, resources

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(300)]

S = 1_000_000_000
YEAR = 8760 * 3600 * S
# jsm.go's templates NACK creates from (DefaultStream, DefaultConsumer), the CRDs' defaults applied over them.
JSM_STREAM = {"retention": "limits", "discard": "old", "max_consumers": -1, "max_msgs": -1, "max_msgs_per_subject": -1,
              "max_bytes": -1, "max_age": YEAR, "max_msg_size": -1, "num_replicas": 1, "storage": "memory"}
JSM_CONSUMER = {"deliver_policy": "all", "ack_policy": "none", "ack_wait": 1, "replay_policy": "instant"}
FULL = {  # NACK's Stream "full" as it sends it
    "name": "FULL", "description": "every field", "subjects": ["full.>"], "max_consumers": 10,
    "max_msgs_per_subject": 100, "max_msgs": 10000, "max_bytes": 1048576, "max_age": 24 * 3600 * S,
    "max_msg_size": 65536, "storage": "file", "discard": "new", "discard_new_per_subject": True,
    "duplicate_window": 60 * S, "compression": "s2", "allow_direct": True, "allow_rollup_hdrs": True,
    "deny_delete": True, "first_seq": 100, "metadata": {"team": "shop"},
    "consumer_limits": {"inactive_threshold": 3600 * S, "max_ack_pending": 500}, "allow_msg_ttl": True,
    "subject_delete_marker_ttl": 300 * S, "allow_atomic": True,
    "republish": {"src": "full.>", "dest": "repub.>", "headers_only": True}}
STREAMS = [
    {"name": "mystream", "subjects": ["orders.*"], "storage": "file", "max_age": 3600 * S},
    FULL,
    {"name": "QUIET", "subjects": ["in.>"], "no_ack": True, "deny_purge": True, "storage": "file",
     "subject_transform": {"src": "in.>", "dest": "quiet.>"}, "persist_mode": "async"},
    {"name": "COUNTER", "subjects": ["count.>"], "allow_msg_counter": True, "storage": "file"},
    {"name": "LATER", "subjects": ["later.>"], "allow_msg_schedules": True, "allow_rollup_hdrs": True,
     "placement": {"cluster": "c1", "tags": ["NODE_0"]}},
    {"name": "ARCHIVE", "subjects": ["archive.>"]},  # sealed below, as NACK's update seals it
    {"name": "mystream-mirror", "storage": "file", "mirror_direct": True,
     "mirror": {"name": "mystream", "opt_start_seq": 2}},
    {"name": "mystream-sources", "storage": "file", "sources": [
        {"name": "mystream", "filter_subject": "orders.new"},
        {"name": "FULL", "opt_start_time": "2025-01-01T00:00:00Z",
         "subject_transforms": [{"src": "full.>", "dest": "from-full.>"}]},
        {"name": "REMOTE", "external": {"api": "$JS.hub.API", "deliver": "deliver.hub"}}]},
]
CONSUMERS = [
    ("mystream", {"durable_name": "my-pull-consumer", "filter_subject": "orders.received", "max_deliver": 20,
                  "ack_policy": "explicit"}),
    ("mystream", {"durable_name": "my-push-consumer", "deliver_subject": "my-push-consumer.orders",
                  "deliver_policy": "last", "description": "my consumer description", "flow_control": True,
                  "idle_heartbeat": S}),
    ("mystream", {"durable_name": "workers", "description": "pull, every pull option", "ack_policy": "explicit",
                  "ack_wait": 45 * S, "deliver_policy": "by_start_sequence", "opt_start_seq": 3,
                  "filter_subjects": ["orders.new", "orders.paid"], "max_ack_pending": 100, "max_deliver": 5,
                  "backoff": [S, 5 * S], "max_waiting": 64, "replay_policy": "original", "sample_freq": "50%",
                  "max_batch": 10, "max_expires": 30 * S, "max_bytes": 1024, "inactive_threshold": 24 * 3600 * S,
                  "num_replicas": 1, "mem_storage": True, "metadata": {"owner": "ops"},
                  "pause_until": "2099-01-01T00:00:00Z", "priority_policy": "pinned_client",
                  "priority_timeout": 60 * S, "priority_groups": ["jobs"]}),
    ("mystream", {"durable_name": "audit", "deliver_subject": "audit.deliver", "deliver_group": "auditors",
                  "deliver_policy": "by_start_time", "opt_start_time": "2025-01-01T00:00:00Z", "ack_policy": "all",
                  "rate_limit_bps": 1000000, "headers_only": True}),
    ("FULL", {"durable_name": "overflow", "ack_policy": "explicit", "priority_policy": "overflow",
              "priority_groups": ["batch"]}),
    ("FULL", {"durable_name": "pinned", "ack_policy": "explicit"}),
]


async def _as_nack_makes_them(js: Any) -> None:
    for config in STREAMS:
        await _api(js, f"STREAM.CREATE.{config['name']}", {**JSM_STREAM, **config})
    archive = next(config for config in STREAMS if config["name"] == "ARCHIVE")
    await _api(js, "STREAM.UPDATE.ARCHIVE", {**JSM_STREAM, **archive, "sealed": True})
    for stream, config in CONSUMERS:
        body = {"stream_name": stream, "config": {**JSM_CONSUMER, **config}}
        await _api(js, f"CONSUMER.CREATE.{stream}.{config['durable_name']}", body)
    for i in range(4):
        await js.publish(f"orders.{'paid' if i % 2 else 'new'}", f"o{i}".encode())


def _buckets_as_nack_makes_them(url: str, home: Path) -> None:
    """NACK's KeyValue and ObjectStore through nats.go's CreateKeyValue / CreateObjectStore (the `nats` CLI)."""
    nats_cli(url, home, "kv", "add", "settings", "--description", "app settings", "--max-value-size", "1024",
             "--history", "5", "--ttl", "1h", "--max-bucket-size", "1048576", "--storage", "memory", "--replicas", "1",
             "--compress", "--republish-source", ">", "--republish-destination", "kvrepub.>", "--marker-ttl", "1m", "--cluster", "c1")
    nats_cli(url, home, "kv", "add", "settings_copy", "--mirror", "settings")
    nats_cli(url, home, "kv", "add", "all_settings", "--source", "settings")
    nats_cli(url, home, "object", "add", "blobs", "--description", "uploads", "--ttl", "24h", "--max-bucket-size",
             "1048576", "--storage", "memory", "--replicas", "1", "--compress", "--metadata", "team:web",
             "--tags", "NODE_0")


@pytest.fixture(scope="session")
def nack_crds(envtest: Any) -> list[str]:
    with envtest.api_client() as client:
        return install_crds(client, [REPO / "tests" / "operator" / "nack" / "crds.yml"])


def _nack_resources(kube: Any, url: str) -> list[dict[str, Any]]:
    given = resources(url)
    for resource in given:
        resource["metadata"]["namespace"] = kube.namespace
    return given


def _apply_nack(kube: Any, given: list[dict[str, Any]]) -> None:
    secret = kubernetes.client.V1Secret(metadata=kubernetes.client.V1ObjectMeta(name="nats-user"), data={
        "username": base64.b64encode(b"app").decode(), "pass": base64.b64encode(b"secret").decode()})
    kube.core.create_namespaced_secret(kube.namespace, secret)
    for resource in given:
        kube.api.create_namespaced_custom_object(nack.GROUP, nack.VERSION, kube.namespace,
                                                 nack.PLURALS[resource["kind"]], resource)


def _import(envtest: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jsoperator", "import", "--from-nack", *args], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, KUBECONFIG=str(envtest.kubeconfig)))


def test_migration_from_nack_adopts_everything_unchanged(kube, broker, envtest, nack_crds, tmp_path: Path) -> None:
    on_broker(broker.url, _as_nack_makes_them)
    _buckets_as_nack_makes_them(broker.url, tmp_path)
    before = poll(lambda: (lambda s: s if s["mystream-mirror"]["messages"] == 3 else None)(
        _snapshot(broker.url, marks=False)), timeout=20, what="the mirror caught up")
    _apply_nack(kube, _nack_resources(kube, broker.url))

    out = tmp_path / "manifests"
    done = _import(envtest, "-n", kube.namespace, "-o", f"{out}/")
    assert done.returncode == 0, done.stderr
    table = done.stdout.splitlines()
    assert table[0].split()[:3] == ["RESOURCE", "FIELD", "VALUE"]
    rows = [line.split()[:3] for line in table[1:]]
    assert [(f"{kind} {where}", field) for kind, where, field in rows] == [
        (resource.replace("shop/", f"{kube.namespace}/"), field) for resource, field, _ in UNMAPPED]
    assert ("1 JetStreamConnection, 8 Stream, 3 KeyValue, 1 ObjectStore, 6 Consumer manifests written to "
            f"{out}/; {len(UNMAPPED)} NACK fields not mapped") in done.stderr

    docs = [yaml.safe_load(path.read_text()) for path in sorted(out.glob("*.yaml"))]
    assert len(docs) == 19
    order = ["JetStreamConnection", "Stream", "KeyValue", "ObjectStore", "Consumer"]
    for doc in sorted(docs, key=lambda d: order.index(d["kind"])):
        plural = PLURALS.get(doc["kind"]) or "jetstreamconnections"
        kube.api.create_namespaced_custom_object(GROUP, VERSION, kube.namespace, plural, doc)
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "JetStreamConnection":
            kube.wait_condition(kind, name, "Ready", timeout=60)
            continue
        obj = kube.wait_condition(kind, name, "Ready", timeout=60)
        assert [(condition(obj, type_) or {}).get("status") for type_ in ("Synced", "Adopted")] == ["True", "True"], (
            name, obj["status"])
        adopted = kube.wait_events(name, "Adopted")
        assert adopted[0].message.endswith("it matches the spec"), (name, adopted[0].message)
    for doc in docs:
        reasons = {event.reason for event in kube.events(doc["metadata"]["name"])}
        assert not reasons & {"Updated", "Created", "DriftRepaired", "ReconcileFailed"}, (doc["metadata"], reasons)
    assert _snapshot(broker.url, marks=False) == before  # but for the ownership marks adopting wrote


def test_bad_nack_input_writes_nothing(kube, broker, envtest, nack_crds, tmp_path: Path) -> None:
    given = _nack_resources(kube, broker.url)
    _apply_nack(kube, [r for r in given if r["kind"] == "Account"])
    out = tmp_path / "out.yaml"

    lost = [r for r in given if (r["kind"], r["metadata"]["name"]) == ("Consumer", "overflow")]
    kube.api.create_namespaced_custom_object(nack.GROUP, nack.VERSION, kube.namespace, "consumers", lost[0])
    done = _import(envtest, "-n", kube.namespace, "-o", str(out))
    assert (done.returncode, done.stdout) == (2, "")
    assert (f"jsoperator import --from-nack: Consumer {kube.namespace}/overflow: its stream 'FULL' is not imported: "
            "import the NACK Stream, KeyValue or ObjectStore that makes it too; nothing written") in done.stderr
    assert not out.exists()
    kube.api.delete_namespaced_custom_object(nack.GROUP, nack.VERSION, kube.namespace, "consumers", "overflow")

    kube.core.delete_namespaced_secret("nats-user", kube.namespace)
    done = _import(envtest, "-n", kube.namespace, "-o", str(out))
    assert done.returncode == 2 and not out.exists()
    assert (f"Account {kube.namespace}/a: spec.user: Secret {kube.namespace}/nats-user not found; create it or fix "
            "the name; nothing written") in done.stderr

    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump_all([{**given[1], "apiVersion": "jetstream.nats.io/v1beta1"}, given[2]]))
    done = _import(envtest, "-f", str(old), "-o", str(out))
    assert done.returncode == 2 and not out.exists()
    assert "apiVersion jetstream.nats.io/v1beta1 kind Stream is not a NACK resource this import reads" in done.stderr


def test_files_give_what_the_cluster_gives_and_strict_fails(tmp_path: Path) -> None:
    """`-f` (as written by hand: NACK's CRD defaults missing) to stdout: the table as YAML comments first, the
    manifests after it still one YAML stream; --strict exits 1 on the unmapped fields."""
    source = tmp_path / "nack.yaml"
    source.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": resources()}))
    done = subprocess.run([sys.executable, "-m", "jsoperator", "import", "--from-nack", "-f", str(source), "--strict"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    comments = [line for line in done.stdout.splitlines() if line.startswith("# ")]
    assert len(comments) == 1 + len(UNMAPPED)
    docs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    expected = nack.migrate(resources(), nack.Options(), None).manifests
    assert docs == expected
    assert "the Accounts' Secrets were not checked (read from files)" in done.stderr
