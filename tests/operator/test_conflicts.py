"""conflicts.py: which of two resources keeps a server object, subject overlap, connection keys."""

from __future__ import annotations

import pytest

from jsoperator import conflicts


def body(resource_name, created, namespace="a", status=None, **spec):
    return {"metadata": {"name": resource_name, "namespace": namespace, "creationTimestamp": created}, "spec": spec,
            "status": status or {}}


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [("a.b", "a.b", True), ("a.*", "a.b", True), ("a.>", "a.b.c", True), ("a.>", "a", False), ("a.b", "a.c", False),
     (">", "x", True), ("a.*", "a.b.c", False), ("*.b", "a.*", True), ("a.b.>", "a.*", False),
     ("a.b.>", "a.*.c", True), ("a", "a.b", False), ("a.*.>", "a.b", False)],
)
def test_subjects_overlap_is_symmetric_and_token_wise(a, b, overlap):
    assert conflicts.subjects_overlap(a, b) is overlap and conflicts.subjects_overlap(b, a) is overlap


def test_the_earlier_stream_keeps_its_name_and_subjects():
    first = conflicts.claim("Stream", body("one", "2026-01-01T00:00:00Z", name="S"))
    later = conflicts.claim("Stream", body("two", "2026-01-01T00:00:05Z", namespace="b", name="S"))
    assert conflicts.conflict(first, [first, later]) == ""
    assert conflicts.conflict(later, [first, later]) == "Stream a/one (first) already manages stream S on the same server"
    overlapping = conflicts.claim("Stream", body("three", "2026-01-01T00:00:09Z", subjects=["S", "x.*"]))
    assert conflicts.conflict(overlapping, [first, overlapping]).startswith("subject S overlaps S of stream S")
    assert conflicts.conflict(overlapping, [first, overlapping], subjects=False) == ""


def test_a_resource_driving_its_object_wins_over_an_older_newcomer():
    old = conflicts.claim("Consumer", body("old", "2026-01-01T00:00:00Z", streamName="S", durableName="d"))
    driving = conflicts.claim("Consumer", body("new", "2026-01-01T00:00:00Z", streamName="S",
                                               durableName="d", status={"consumerName": "d"}))
    assert conflicts.conflict(driving, [old, driving]) == ""
    assert "Consumer a/new (first) already manages consumer d of stream S" in conflicts.conflict(old, [old, driving])


def test_connection_keys_follow_servers_domain_and_secrets():
    key = conflicts.connection_key
    assert key("a", {}) == key("b", {})  # the operator's own connection
    assert key("a", {"connection": {"servers": ["nats://x:4222"]}}) != key("a", {})
    assert key("a", {"connection": {"jsDomain": "hub"}}) != key("a", {})
    secret = {"connection": {"tokenSecretRef": {"name": "t", "key": "k"}}}
    assert key("a", secret) == key("a", secret) and key("a", secret) != key("b", secret)


def test_a_bucket_claims_its_stream_and_subjects():
    kv = conflicts.claim("KeyValue", body("settings", "2026-01-01T00:00:00Z"))
    assert (kv.stream, kv.consumer, kv.subjects) == ("KV_settings", None, ("$KV.settings.>",))
    same_stream = conflicts.claim("Stream", body("later", "2026-01-02T00:00:00Z", name="KV_settings", subjects=["x"]))
    assert "KeyValue a/settings (first) already manages stream KV_settings" in conflicts.conflict(same_stream, [kv])
    overlapping = conflicts.claim("Stream", body("wide", "2026-01-02T00:00:00Z", subjects=["$KV.>"]))
    assert "subject $KV.> overlaps $KV.settings.>" in conflicts.conflict(overlapping, [kv])
    obj = conflicts.claim("ObjectStore", body("files", "2026-01-01T00:00:00Z", bucket="f"))
    assert (obj.stream, obj.subjects) == ("OBJ_f", ("$O.f.C.>", "$O.f.M.>"))


def test_connection_keys_follow_the_connection_object_named():
    key = conflicts.connection_key
    mine = {"connectionRef": {"name": "main"}}
    assert key("a", mine) == key("a", {"connectionRef": {"kind": "JetStreamConnection", "name": "main"}})
    assert key("a", mine) != key("b", mine)  # a namespaced connection per namespace
    shared = {"connectionRef": {"kind": "ClusterJetStreamConnection", "name": "main"}}
    assert key("a", shared) == key("b", shared) != key("a", mine)
    assert key("a", shared) != key("a", {})


def test_our_own_status_write_counts_before_kopfs_index_sees_it():
    """The race CI met: kopf's index still had the first Stream as a newcomer when a second one, created the
    same second and earlier by name, was reconciled; the second won, found the stream owned and stalled."""
    from jsoperator import scheduler
    from jsoperator.handlers import common

    owner = body("owner", "2026-01-01T00:00:00Z", name="BATON")
    heir = body("heir", "2026-01-01T00:00:00Z", name="BATON")
    key = conflicts.connection_key("a", owner["spec"])
    stale = {common.claims_index("Stream"): {key: [conflicts.claim("Stream", owner), conflicts.claim("Stream", heir)]}}
    sched = scheduler.Scheduler(drift_interval=60)
    assert common.conflict("Stream", heir, stale, sched) == ""  # what kopf's index alone says: heir < owner
    sched.wrote(sched.seen("Stream", owner), {"streamName": "BATON"})
    assert common.conflict("Stream", heir, stale, sched) == (
        "Stream a/owner (first) already manages stream BATON on the same server")
    assert common.conflict("Stream", sched.entries["Stream", "a", "owner"].body, stale, sched) == ""
