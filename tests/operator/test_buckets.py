"""buckets.py: a KeyValue / ObjectStore spec is the stream nats.go creates for that bucket. Checked as a table,
and against the Go client itself: `nats kv add` / `nats object add` (natscli, nats.go) create the bucket on
nats-server and jsbroker, and the stream config we derive from the same settings has no difference from it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jsoperator import buckets, models, plan, status
from tests.chart import go_tools

MINUTE = 60_000_000_000


def kv(spec: dict[str, Any], name: str = "orders") -> dict[str, Any]:
    return buckets.key_value_config(models.KeyValueSpec.model_validate(spec), name)


def obj(spec: dict[str, Any], name: str = "files") -> dict[str, Any]:
    return buckets.object_store_config(models.ObjectStoreSpec.model_validate(spec), name)


def test_a_default_key_value_bucket_is_the_clients_stream() -> None:
    assert kv({}) == {
        "name": "KV_orders", "subjects": ["$KV.orders.>"], "retention": "limits", "max_consumers": -1,
        "max_msgs": -1, "max_bytes": -1, "max_age": 0, "max_msgs_per_subject": 1, "max_msg_size": -1,
        "discard": "new", "storage": "file", "num_replicas": 1, "duplicate_window": 2 * MINUTE,
        "compression": "none", "allow_rollup_hdrs": True, "deny_delete": True, "allow_direct": True,
    }


def test_key_value_settings_map_to_their_stream_fields() -> None:
    config = kv({"bucket": "b", "history": 5, "ttl": "30s", "maxValueSize": "1Ki", "maxBytes": "1Mi",
                 "storage": "memory", "replicas": 1, "compression": True, "limitMarkerTtl": "1m",
                 "description": "d", "metadata": {"team": "x"}, "republish": {"src": ">", "dest": "r.>"}})
    assert config["name"] == "KV_b" and config["subjects"] == ["$KV.b.>"]
    assert (config["max_msgs_per_subject"], config["max_age"], config["max_msg_size"], config["max_bytes"]) == (
        5, 30_000_000_000, 1024, 1024 * 1024)
    assert config["duplicate_window"] == 30_000_000_000  # the ttl, when below 2m
    assert (config["storage"], config["compression"], config["allow_msg_ttl"]) == ("memory", "s2", True)
    assert config["subject_delete_marker_ttl"] == MINUTE
    assert (config["description"], config["metadata"], config["republish"]) == ("d", {"team": "x"},
                                                                               {"src": ">", "dest": "r.>"})
    assert kv({"ttl": "1h"})["duplicate_window"] == 2 * MINUTE
    assert "allow_msg_ttl" not in kv({}) and kv({"allowMsgTtl": True})["allow_msg_ttl"] is True


def test_a_key_value_mirror_and_sources_name_buckets_as_nats_go_does() -> None:
    mirror = kv({"mirror": {"name": "origin", "filterSubject": "$KV.origin.a"}})
    assert mirror["mirror"] == {"name": "KV_origin", "filter_subject": "$KV.origin.a"}
    assert mirror["mirror_direct"] is True and "subjects" not in mirror
    assert kv({"mirror": {"name": "KV_origin"}})["mirror"] == {"name": "KV_origin"}
    sourced = kv({"sources": [{"name": "a"}, {"name": "KV_b"}, {"name": "S", "subjectTransforms": [
        {"src": "s.>", "dest": "$KV.orders.s.>"}]}]})
    assert sourced["subjects"] == ["$KV.orders.>"]
    assert sourced["sources"] == [
        {"name": "KV_a", "subject_transforms": [{"src": "$KV.a.>", "dest": "$KV.orders.>"}]},
        {"name": "KV_b", "subject_transforms": [{"src": "$KV.b.>", "dest": "$KV.orders.>"}]},
        {"name": "S", "subject_transforms": [{"src": "s.>", "dest": "$KV.orders.s.>"}]},  # full control: as is
    ]
    # The same bucket in another domain needs no transform.
    external = kv({"sources": [{"name": "orders", "external": {"apiPrefix": "$JS.hub.API"}}]})
    assert external["sources"] == [{"name": "KV_orders", "external": {"api": "$JS.hub.API"}}]


def test_an_object_store_is_the_clients_stream() -> None:
    assert obj({}) == {
        "name": "OBJ_files", "subjects": ["$O.files.C.>", "$O.files.M.>"], "max_age": 0, "max_bytes": -1,
        "storage": "file", "num_replicas": 1, "discard": "new", "allow_rollup_hdrs": True, "allow_direct": True,
        "compression": "none",
    }
    assert obj({"bucket": "x", "ttl": "1h", "maxBytes": "1Gi", "compression": True})["max_bytes"] == 1 << 30


def test_bad_bucket_input_is_refused_with_what_to_do() -> None:
    with pytest.raises(models.SpecError, match="not a valid bucket name.*set spec.bucket"):
        buckets.desired("KeyValue", {}, "my.bucket")
    with pytest.raises(models.SpecError, match="spec.bucket"):
        buckets.desired("ObjectStore", {"bucket": "a b"}, "x")
    with pytest.raises(models.SpecError, match="spec.history"):
        buckets.desired("KeyValue", {"history": 65}, "x")
    with pytest.raises(models.SpecError, match="mirror cannot also set sources"):
        buckets.desired("KeyValue", {"mirror": {"name": "a"}, "sources": [{"name": "b"}]}, "x")
    with pytest.raises(models.SpecError, match="spec.preventDelete: unknown field"):
        buckets.desired("KeyValue", {"preventDelete": True}, "x")


def test_names_and_subjects_of_stream_backed_resources() -> None:
    assert buckets.stream_of("KeyValue", {}, "a") == "KV_a"
    assert buckets.stream_of("ObjectStore", {"bucket": "b"}, "a") == "OBJ_b"
    assert buckets.stream_of("Stream", {"name": "S"}, "a") == "S"
    assert buckets.subjects_of("KeyValue", {}, "a") == ("$KV.a.>",)
    assert buckets.subjects_of("ObjectStore", {}, "a") == ("$O.a.C.>", "$O.a.M.>")
    assert buckets.subjects_of("KeyValue", {"mirror": {"name": "o"}}, "a") == ()


def test_drift_and_immutable_changes_are_named_by_the_bucket_fields() -> None:
    desired = kv({"history": 5, "ttl": "1h"})
    observed = {**desired, "max_msgs_per_subject": 2, "max_age": 0, "storage": "memory"}
    p = plan.plan_stream(desired, observed, buckets.labels("KeyValue"))
    assert set(p.drift) == {"history", "ttl", "storage"}
    assert "storage cannot change (server: \"memory\", spec: \"file\")" in p.message("key-value bucket")


def test_status_reads_like_the_clients_bucket_status() -> None:
    info = {"config": {"name": "KV_orders", "max_msgs_per_subject": 5}, "state": {"messages": 7, "bytes": 300}}
    assert status.key_value_state(info) == {"bucket": "orders", "streamName": "KV_orders", "values": 7,
                                            "bytes": 300, "history": 5}
    assert status.object_store_state({"config": {"name": "OBJ_f"}, "state": {"bytes": 9}}) == {
        "bucket": "f", "streamName": "OBJ_f", "bytes": 9, "sealed": False}


# -- against the Go client (natscli, nats.go) on both servers -----------------------------------------

# (KeyValue spec, the same settings as `nats kv add` flags)
KV_CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({}, []),
    ({"history": 10, "ttl": "1h", "maxValueSize": 1024, "maxBytes": 1048576, "storage": "memory",
      "description": "orders", "compression": True},
     ["--history", "10", "--ttl", "1h", "--max-value-size", "1024", "--max-bucket-size", "1048576",
      "--storage", "memory", "--description", "orders", "--compress"]),
    ({"ttl": "30s"}, ["--ttl", "30s"]),
    ({"limitMarkerTtl": "5m"}, ["--marker-ttl", "5m"]),
    ({"republish": {"src": ">", "dest": "repub.>", "headersOnly": True}, "metadata": {"team": "a"}},
     ["--republish-source", ">", "--republish-destination", "repub.>", "--republish-headers", "--metadata",
      "team:a"]),
    ({"sources": [{"name": "origin"}]}, ["--source", "origin"]),
    ({"mirror": {"name": "origin"}}, ["--mirror", "origin"]),
]
OBJ_CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({}, []),
    ({"ttl": "2h", "maxBytes": 1048576, "storage": "memory", "description": "files", "compression": True,
      "metadata": {"team": "a"}},
     ["--ttl", "2h", "--max-bucket-size", "1048576", "--storage", "memory", "--description", "files",
      "--compress", "--metadata", "team:a"]),
]


def nats_cli(url: str, home: Path, *args: str) -> str:
    cli = str(go_tools.NATS_CLI.for_test())
    done = subprocess.run([cli, "--server", url, "--timeout", "5s", *args], capture_output=True, text=True,
                          timeout=60, env={"HOME": str(home)})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("index", range(len(KV_CASES)))
def test_nats_kv_add_makes_the_stream_a_key_value_resource_wants(server: Any, tmp_path: Path, index: int) -> None:
    spec, flags = KV_CASES[index]
    bucket = f"kvcase{index}_{server.kind.replace('-', '')}"
    for key in ("sources", "mirror"):
        if spec.get(key):  # a bucket of this server to gather from
            nats_cli(server.url, tmp_path, "kv", "add", f"origin{bucket}")
            flags = [f"--{key.removesuffix('s')}", f"origin{bucket}"]
            spec = {key: [{"name": f"origin{bucket}"}] if key == "sources" else {"name": f"origin{bucket}"}}
    nats_cli(server.url, tmp_path, "kv", "add", bucket, *flags)
    try:
        observed = json.loads(nats_cli(server.url, tmp_path, "stream", "info", f"KV_{bucket}", "--json"))["config"]
        desired = kv(spec, bucket)
        p = plan.plan_stream(desired, observed, buckets.labels("KeyValue"))
        assert p.action == "none", p.message("key-value bucket")
    finally:
        nats_cli(server.url, tmp_path, "kv", "del", bucket, "--force")
        if flags[:1] in (["--source"], ["--mirror"]):
            nats_cli(server.url, tmp_path, "kv", "del", f"origin{bucket}", "--force")


@pytest.mark.parametrize("index", range(len(OBJ_CASES)))
def test_nats_object_add_makes_the_stream_an_object_store_resource_wants(server: Any, tmp_path: Path,
                                                                          index: int) -> None:
    spec, flags = OBJ_CASES[index]
    bucket = f"objcase{index}_{server.kind.replace('-', '')}"
    nats_cli(server.url, tmp_path, "object", "add", bucket, *flags)
    try:
        observed = json.loads(nats_cli(server.url, tmp_path, "stream", "info", f"OBJ_{bucket}", "--json"))["config"]
        p = plan.plan_stream(obj(spec, bucket), observed, buckets.labels("ObjectStore"))
        assert p.action == "none", p.message("object store")
    finally:
        nats_cli(server.url, tmp_path, "object", "del", bucket, "--force")
