"""The ownership marks (ownership.py), pure: what they hold, how a resource stands towards a marked object, and
that neither they nor the server's `_nats.*` keys count as drift of the user's `spec.metadata`."""

from __future__ import annotations

import pytest

from jsoperator import features, mapping, ownership, plan
from tests.operator.test_mapping import SERVER_STREAM

EAST = ownership.Owner("east", "Stream", "team-a", "orders", "uid-1")
NS = 10**9


def test_marks_name_the_cluster_and_the_resource() -> None:
    assert EAST.marks() == {"jsoperator.io/cluster": "east", "jsoperator.io/kind": "Stream",
                            "jsoperator.io/namespace": "team-a", "jsoperator.io/name": "orders",
                            "jsoperator.io/uid": "uid-1"}
    config = ownership.marked({"name": "ORDERS", "metadata": {"team": "a", "_nats.ver": "2.15.1"}}, EAST)
    assert config["metadata"] == {"team": "a", "_nats.ver": "2.15.1", **EAST.marks()}
    assert ownership.read(config) == EAST and ownership.carries(config, EAST)
    assert ownership.unmarked(config)["metadata"] == {"team": "a", "_nats.ver": "2.15.1"}
    assert ownership.read(ownership.unmarked(config)) is None
    assert ownership.read(None) is None and ownership.read({"metadata": None}) is None


def test_a_mark_without_a_uid_is_no_mark() -> None:
    assert ownership.read({"metadata": {"jsoperator.io/cluster": "east", "jsoperator.io/name": "x"}}) is None


@pytest.mark.parametrize(("mark", "alive", "expected"), [
    (None, False, "unmarked"),
    (EAST, False, "ours"),
    (ownership.Owner("east", "Stream", "team-a", "orders", "uid-0"), False, "stale"),
    (ownership.Owner("west", "Stream", "team-a", "orders", "uid-9"), True, "foreign"),
])
def test_standing(mark: ownership.Owner | None, alive: bool, expected: str) -> None:
    assert ownership.standing(mark, EAST, alive) == expected


def test_only_the_own_clusters_marks_can_be_looked_up() -> None:
    assert ownership.same_cluster(ownership.Owner("east", "Stream", "b", "c", "u2"), EAST)
    assert not ownership.same_cluster(ownership.Owner("west", "Stream", "team-a", "orders", "u2"), EAST)
    assert not ownership.same_cluster(ownership.Owner("", "Stream", "team-a", "orders", "u2"), EAST)


def test_marks_are_no_drift_but_the_users_keys_are() -> None:
    observed = {**SERVER_STREAM, "metadata": {"_nats.ver": "2.15.1", "team": "a", **EAST.marks()}}
    assert mapping.stream_drift({"name": "S", "metadata": {"team": "a"}}, observed) == []
    assert mapping.stream_drift({"name": "S"}, observed) == ["metadata"]  # the user's key added by hand
    consumer = {"durable_name": "c", "ack_policy": "explicit", "ack_wait": 30 * NS, "max_waiting": 512,
                "metadata": EAST.marks()}
    assert mapping.consumer_drift({"durable_name": "c", "ack_policy": "explicit"}, consumer) == []


def test_a_stamp_only_update_of_a_sealed_stream_repeats_what_sealing_forced() -> None:
    observed = {"name": "S", "sealed": True, "deny_delete": True, "deny_purge": True, "discard": "new",
                "max_age": 0, "allow_rollup_hdrs": False}
    update = plan.stream_update({"name": "S", "sealed": True}, observed)
    assert update["deny_delete"] and update["deny_purge"] and update["discard"] == "new"
    assert plan.stream_update({"name": "S"}, {"name": "S"}) == {"name": "S"}


def test_marks_need_a_server_that_keeps_metadata() -> None:
    assert features.honours_key(features.Server("2.10.26", 0), "stream", "metadata")
    assert not features.honours_key(features.Server("2.9.25", 0), "stream", "metadata")
    assert not features.honours_key(features.Server("2.9.25", 0), "consumer", "metadata")
