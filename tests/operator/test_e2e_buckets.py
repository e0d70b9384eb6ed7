"""End to end: KeyValue and ObjectStore resources on the envtest apiserver and real brokers, read and written
with nats-py's own KeyValue and Object Store clients (put/get/history/watch, per-key TTLs, objects),
status counters, spec updates, the policies (deletion, adoption), the annotations, bad input, conflicts
with a Stream naming the same stream."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes.client.rest import ApiException

from tests.operator.conftest import PROMPT, condition, has_condition, on_broker, server_stream

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]


def conn(broker):
    return {"servers": [broker.url]}


def ready_at(generation):
    return lambda o: (o.get("status") or {}).get("observedGeneration") == generation and has_condition(o, "Ready")


def test_key_value_bucket_serves_nats_py_and_follows_the_spec(kube, broker):
    kube.create("KeyValue", "settings", {"history": 3, "ttl": "1h", "storage": "memory", "connection": conn(broker)})
    obj = kube.wait_condition("KeyValue", "settings", "Ready")
    assert (obj["status"]["bucket"], obj["status"]["streamName"], obj["status"]["history"]) == (
        "settings", "KV_settings", 3)
    kube.wait_events("settings", "Created")

    async def use(js):
        kv = await js.key_value("settings")
        watcher = await kv.watchall()
        first = await watcher.updates(timeout=5)  # None marks the end of the initial values (there are none)
        revisions = [await kv.put("color", value) for value in (b"red", b"green", b"blue", b"black")]
        seen = []
        while len(seen) < 4:
            entry = await watcher.updates(timeout=5)
            if entry is not None:
                seen.append((entry.key, entry.value, entry.revision))
        await watcher.stop()
        history = [(e.value, e.revision) for e in await kv.history("color")]
        return first, revisions, seen, history, (await kv.get("color")).value

    first, revisions, seen, history, value = on_broker(broker.url, use)
    assert first is None and value == b"black"
    assert seen == [("color", v, r) for v, r in zip((b"red", b"green", b"blue", b"black"), revisions)]
    assert history == [(b"green", revisions[1]), (b"blue", revisions[2]), (b"black", revisions[3])]  # 3 kept
    # Status counters follow the bucket (the status refresh, within a few seconds).
    kube.wait("KeyValue", "settings", lambda o: o["status"].get("values") == 3 and o["status"].get("bytes", 0) > 0,
              timeout=15, what="values 3")

    kube.patch("KeyValue", "settings", {"spec": {"history": 5, "maxValueSize": 64}})
    kube.wait("KeyValue", "settings", ready_at(2), timeout=PROMPT, what="generation 2 Ready")
    config = server_stream(broker.url, "KV_settings").config
    assert (config.max_msgs_per_subject, config.max_msg_size) == (5, 64)
    [updated] = kube.wait_events("settings", "Updated")
    assert "history" in updated.message and "maxValueSize" in updated.message

    async def too_big(js):
        kv = await js.key_value("settings")
        with pytest.raises(Exception, match="message size exceeds maximum allowed"):
            await kv.put("big", b"x" * 100)

    on_broker(broker.url, too_big)

    kube.delete("KeyValue", "settings")  # deletionPolicy unset: delete
    kube.wait_gone("KeyValue", "settings")
    assert server_stream(broker.url, "KV_settings") is None


def test_per_key_ttls_and_limit_markers(kube, broker):
    kube.create("KeyValue", "sessions", {"allowMsgTtl": True, "storage": "memory", "connection": conn(broker)})
    kube.create("KeyValue", "plain", {"storage": "memory", "connection": conn(broker)})
    kube.create("KeyValue", "marked", {"limitMarkerTtl": "1m", "storage": "memory", "connection": conn(broker)})
    for name in ("sessions", "plain", "marked"):
        kube.wait_condition("KeyValue", name, "Ready")
    assert server_stream(broker.url, "KV_marked").config.subject_delete_marker_ttl == 60.0

    async def ttl_puts(js):
        sessions, plain = await js.key_value("sessions"), await js.key_value("plain")
        await sessions.create("token", b"t", msg_ttl=1)
        with pytest.raises(Exception, match="(?i)ttl"):
            await plain.create("token", b"t", msg_ttl=1)  # the bucket does not allow per-key TTLs
        for _ in range(100):
            try:
                await sessions.get("token")
            except Exception:  # KeyNotFoundError or KeyDeletedError: it expired
                return True
            await asyncio.sleep(0.1)  # polling interval for the expiry
        return False

    assert on_broker(broker.url, ttl_puts)
    # Turning per-key TTLs off is a change the server refuses: the apiserver refuses it first.
    with pytest.raises(ApiException) as err:
        kube.patch("KeyValue", "sessions", {"spec": {"allowMsgTtl": False}})
    assert err.value.status == 422 and "spec.allowMsgTtl cannot be turned off" in err.value.body


def test_object_store_serves_nats_py_and_is_retained_when_asked(kube, broker):
    kube.create("ObjectStore", "assets", {"storage": "memory", "deletionPolicy": "retain", "connection": conn(broker)})
    obj = kube.wait_condition("ObjectStore", "assets", "Ready")
    assert (obj["status"]["bucket"], obj["status"]["streamName"]) == ("assets", "OBJ_assets")
    data = bytes(range(256)) * 1000  # several chunks

    async def use(js):
        store = await js.object_store("assets")
        await store.put("logo.png", data)
        got = await store.get("logo.png")
        return got.data, got.info.size

    assert on_broker(broker.url, use) == (data, len(data))
    kube.wait("ObjectStore", "assets", lambda o: o["status"].get("bytes", 0) > len(data), timeout=15,
              what="bytes above the object's size")

    kube.delete("ObjectStore", "assets")
    kube.wait_gone("ObjectStore", "assets")
    assert server_stream(broker.url, "OBJ_assets") is not None  # retained, with its object

    async def still_there(js):
        return (await (await js.object_store("assets")).get("logo.png")).data

    assert on_broker(broker.url, still_there) == data
    assert "deletionPolicy is retain" in kube.wait_events("assets", "LeftOnServer")[0].message


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_adopting_a_bucket_made_by_the_clients(kube, broker):
    async def make(js):
        await js.create_key_value(bucket="legacy", history=2, storage="memory", direct=True)
        await (await js.key_value("legacy")).put("k", b"v")
        await js.create_key_value(bucket="theirs", storage="memory")
        await js.create_object_store("blobs", storage="memory")

    on_broker(broker.url, make)
    # nats-py sets allow_msg_ttl on every bucket: a resource adopting one says so (it cannot be turned off).
    kube.create("KeyValue", "legacy", {"history": 2, "storage": "memory", "allowMsgTtl": True, "connection": conn(broker)})
    obj = kube.wait_condition("KeyValue", "legacy", "Ready")
    assert condition(obj, "Adopted")["status"] == "True" and obj["status"]["values"] == 1
    assert "it matches the spec" in kube.wait_events("legacy", "Adopted")[0].message  # no change on the server
    # Without allowMsgTtl the resource would turn per-key TTLs off: Stalled, nothing sent.
    kube.create("KeyValue", "theirs", {"storage": "memory", "connection": conn(broker)})
    obj = kube.wait_condition("KeyValue", "theirs", "Stalled", "True", "ImmutableFieldChange")
    assert "allowMsgTtl cannot be turned off" in condition(obj, "Ready")["message"]
    # adoptionPolicy never: the existing object store is left alone.
    kube.create("ObjectStore", "blobs", {"storage": "memory", "adoptionPolicy": "never", "connection": conn(broker)})
    kube.wait_condition("ObjectStore", "blobs", "Stalled", "True", "AdoptionRefused")
    kube.patch("ObjectStore", "blobs", {"spec": {"adoptionPolicy": "adopt"}})
    kube.wait_condition("ObjectStore", "blobs", "Ready")
    kube.delete("ObjectStore", "blobs")
    kube.wait_gone("ObjectStore", "blobs")
    assert server_stream(broker.url, "OBJ_blobs") is None  # adopted, then deleted with the resource


@pytest.mark.parametrize("broker", ["nats-server"], indirect=True)
def test_annotations_conflicts_and_a_name_the_apiserver_refuses(kube, broker):
    kube.create("KeyValue", "flags", {"storage": "memory", "connection": conn(broker)})
    kube.wait_condition("KeyValue", "flags", "Ready")
    # A Stream naming the bucket's stream: the bucket was first, the Stream changes nothing.
    kube.create("Stream", "clash", {"name": "KV_flags", "subjects": ["x.>"], "storage": "memory",
                                    "connection": conn(broker)})
    obj = kube.wait_condition("Stream", "clash", "Stalled", "True", "Conflict")
    assert "KeyValue" in condition(obj, "Ready")["message"]
    assert server_stream(broker.url, "KV_flags").config.subjects == ["$KV.flags.>"]
    kube.delete("Stream", "clash")
    kube.wait_gone("Stream", "clash")
    assert server_stream(broker.url, "KV_flags") is not None  # left to the KeyValue
    kube.create("KeyValue", "flags-again", {"bucket": "flags", "history": 9, "connection": conn(broker)})
    obj = kube.wait_condition("KeyValue", "flags-again", "Stalled", "True", "Conflict")
    assert condition(obj, "Ready")["message"].endswith("or give this one another spec.bucket")
    kube.delete("KeyValue", "flags-again")
    kube.wait_gone("KeyValue", "flags-again")
    assert server_stream(broker.url, "KV_flags").config.max_msgs_per_subject == 1  # untouched, still there

    kube.annotate("KeyValue", "flags", {"jsoperator.io/pause-reconciliation": "true"})
    kube.patch("KeyValue", "flags", {"spec": {"history": 4}})
    kube.wait_condition("KeyValue", "flags", "ReconciliationPaused", timeout=PROMPT)
    assert server_stream(broker.url, "KV_flags").config.max_msgs_per_subject == 1
    kube.annotate("KeyValue", "flags", {"jsoperator.io/pause-reconciliation": None})
    kube.wait("KeyValue", "flags", ready_at(2), timeout=PROMPT, what="generation 2 Ready")
    assert server_stream(broker.url, "KV_flags").config.max_msgs_per_subject == 4

    kube.annotate("KeyValue", "flags", {"jsoperator.io/managed": "false"})
    kube.wait_condition("KeyValue", "flags", "Unmanaged", timeout=PROMPT)
    kube.delete("KeyValue", "flags")
    kube.wait_gone("KeyValue", "flags")
    assert server_stream(broker.url, "KV_flags") is not None  # unmanaged: left on the server

    with pytest.raises(ApiException) as err:
        kube.create("KeyValue", "my.bucket", {"connection": conn(broker)})
    assert err.value.status == 422 and "not a valid bucket name" in err.value.body


@pytest.mark.parametrize("how", ["SIGTERM", "kill -9"])
def test_buckets_across_a_broker_restart_and_a_deletion_by_hand(drift_kube, broker, how):
    kube = drift_kube  # the drift timer notices what a server without advisories cannot tell
    kube.create("KeyValue", "durable", {"storage": "file", "history": 2, "connection": conn(broker)})
    kube.create("KeyValue", "volatile", {"storage": "memory", "connection": conn(broker)})
    kube.create("ObjectStore", "blobs", {"storage": "file", "connection": conn(broker)})
    for kind, name in (("KeyValue", "durable"), ("KeyValue", "volatile"), ("ObjectStore", "blobs")):
        kube.wait_condition(kind, name, "Ready")

    async def write(js):
        await (await js.key_value("durable")).put("a", b"1")
        await (await js.key_value("durable")).put("a", b"2")
        await (await js.key_value("volatile")).put("a", b"1")
        await (await js.object_store("blobs")).put("o", b"x" * 300_000)

    on_broker(broker.url, write)
    if how == "kill -9":
        broker.kill()
        kube.wait_condition("KeyValue", "durable", "Ready", "False", "BrokerUnavailable", timeout=20)
    broker.restart()
    for kind, name in (("KeyValue", "durable"), ("KeyValue", "volatile"), ("ObjectStore", "blobs")):
        kube.wait_condition(kind, name, "Ready", timeout=40)
    # The memory bucket came back empty (recreated as drift); the file buckets kept their data.
    kube.wait_events("volatile", "DriftRepaired", timeout=20)

    async def read(js):
        durable = await js.key_value("durable")
        volatile = await js.key_value("volatile")
        with pytest.raises(Exception):  # KeyNotFoundError: a recreated, empty bucket
            await volatile.get("a")
        blob = await (await js.object_store("blobs")).get("o")
        return [e.value for e in await durable.history("a")], len(blob.data)

    assert on_broker(broker.url, read) == ([b"1", b"2"], 300_000)

    async def delete_by_hand(js):
        await js.delete_key_value("durable")

    on_broker(broker.url, delete_by_hand)
    kube.wait_events("durable", "DriftRepaired", timeout=20)
    assert server_stream(broker.url, "KV_durable").config.max_msgs_per_subject == 2


def test_sealing_an_object_store_from_the_spec_or_by_a_client(kube, broker):
    kube.create("ObjectStore", "archive", {"storage": "memory", "connection": conn(broker)})
    kube.create("ObjectStore", "sealed-by-hand", {"storage": "memory", "connection": conn(broker)})
    kube.wait_condition("ObjectStore", "archive", "Ready")
    kube.wait_condition("ObjectStore", "sealed-by-hand", "Ready")

    async def put(js):
        await (await js.object_store("archive")).put("report", b"final")
        await (await js.object_store("sealed-by-hand")).seal()

    on_broker(broker.url, put)
    kube.patch("ObjectStore", "archive", {"spec": {"sealed": True}})
    obj = kube.wait("ObjectStore", "archive", ready_at(2), timeout=PROMPT, what="generation 2 Ready")
    assert obj["status"]["sealed"] is True

    async def after(js):
        store = await js.object_store("archive")
        with pytest.raises(Exception):  # a sealed stream takes no more messages
            await store.put("more", b"x")
        return (await store.get("report")).data

    assert on_broker(broker.url, after) == b"final"
    with pytest.raises(ApiException) as err:
        kube.patch("ObjectStore", "archive", {"spec": {"sealed": False}})
    assert err.value.status == 422 and "spec.sealed cannot be turned off" in err.value.body
    # Sealed by a client behind the resource's back: the spec would unseal it, which the server cannot do.
    kube.patch("ObjectStore", "sealed-by-hand", {"spec": {"description": "touch"}})
    obj = kube.wait_condition("ObjectStore", "sealed-by-hand", "Stalled", "True", "ImmutableFieldChange",
                              timeout=PROMPT)
    assert "sealed cannot be turned off" in condition(obj, "Ready")["message"]
    kube.patch("ObjectStore", "sealed-by-hand", {"spec": {"sealed": True}})
    kube.wait("ObjectStore", "sealed-by-hand", ready_at(3), timeout=PROMPT, what="generation 3 Ready")


def test_a_mirror_and_a_sourcing_bucket_follow_their_origin(kube, broker):
    kube.create("KeyValue", "origin", {"history": 2, "storage": "memory", "connection": conn(broker)})
    kube.wait_condition("KeyValue", "origin", "Ready")
    kube.create("KeyValue", "replica", {"mirror": {"name": "origin"}, "history": 2, "storage": "memory",
                                        "connection": conn(broker)})
    kube.create("KeyValue", "merged", {"sources": [{"name": "origin"}], "storage": "memory", "connection": conn(broker)})
    for name in ("replica", "merged"):
        kube.wait_condition("KeyValue", name, "Ready")
    replica = server_stream(broker.url, "KV_replica").config
    assert (replica.mirror.name, replica.mirror_direct, replica.subjects) == ("KV_origin", True, None)

    async def put(js):
        origin = await js.key_value("origin")
        await origin.put("color", b"red")
        await origin.put("color", b"blue")

    on_broker(broker.url, put)

    async def merged_value(js):  # the source's transform puts origin's keys under the merged bucket
        for _ in range(100):
            try:
                return (await (await js.key_value("merged")).get("color")).value
            except Exception:  # KeyNotFoundError until the source has caught up
                await asyncio.sleep(0.1)  # polling interval for the source
        return None

    assert on_broker(broker.url, merged_value) == b"blue"
    kube.wait("KeyValue", "replica", lambda o: o["status"].get("values") == 2, timeout=15,
              what="the mirror holds both values (its own history: 2)")
    # Nothing to repair: a later reconciliation (a spec touch) finds both as the spec says.
    kube.patch("KeyValue", "replica", {"spec": {"description": "read-only copy"}})
    kube.wait("KeyValue", "replica", ready_at(2), timeout=PROMPT, what="generation 2 Ready")
    [updated] = kube.wait_events("replica", "Updated")
    assert updated.message == "updated key-value bucket replica: description"


def test_the_go_client_uses_the_buckets_the_operator_made(kube, broker, tmp_path):
    """natscli (nats.go) reads and writes a KeyValue and an ObjectStore made by the operator, as its own."""
    from tests.operator.test_buckets import nats_cli

    kube.create("KeyValue", "goconf", {"history": 4, "storage": "memory", "connection": conn(broker)})
    kube.create("ObjectStore", "gofiles", {"storage": "memory", "connection": conn(broker)})
    kube.wait_condition("KeyValue", "goconf", "Ready")
    kube.wait_condition("ObjectStore", "gofiles", "Ready")
    nats_cli(broker.url, tmp_path, "kv", "put", "goconf", "color", "red")
    nats_cli(broker.url, tmp_path, "kv", "put", "goconf", "color", "green")
    assert nats_cli(broker.url, tmp_path, "kv", "get", "goconf", "color", "--raw").strip() == "green"
    info = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                                                   nats_cli(broker.url, tmp_path, "kv", "info", "goconf").splitlines())}
    assert (info["History Kept"], info["Values Stored"], info["JetStream Stream"]) == ("4", "2", "KV_goconf")
    source = tmp_path / "report.txt"
    source.write_bytes(b"quarterly\n" * 5000)
    nats_cli(broker.url, tmp_path, "object", "put", "gofiles", str(source), "--name", "report.txt", "--force")
    out = tmp_path / "out.txt"
    nats_cli(broker.url, tmp_path, "object", "get", "gofiles", "report.txt", "--output", str(out), "--force")
    assert out.read_bytes() == source.read_bytes()
