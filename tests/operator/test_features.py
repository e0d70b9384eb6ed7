"""jsoperator.features: the release table, the check of a config against a server's release, and the server fields
this operator does not know. Pure; the releases themselves are run in test_e2e_releases.py."""

from __future__ import annotations

import pytest

from jsoperator import buckets, features, mapping, models

V2_10 = features.Server("2.10.26", 0)
V2_11 = features.Server("2.11.11", 1)
V2_12 = features.Server("2.12.8", 3)
V2_14 = features.Server("2.14.6", 4)
V2_15 = features.Server("2.15.1", 5)


@pytest.mark.parametrize("text, release", [
    ("2.10.26", (2, 10, 26)), ("v2.11.0", (2, 11, 0)), ("2.12.0-RC.1", (2, 12, 0)), ("unknown", None), ("2.x", None),
])
def test_parse_release(text, release):
    assert features.parse_release(text) == release


def test_a_feature_needs_both_the_version_and_the_api_level():
    ttl = next(f for f in features.FEATURES if f.key == "allow_msg_ttl")
    assert ttl.release == (2, 11, 0) and ttl.api_level == 1
    assert not V2_10.honours(ttl) and V2_11.honours(ttl)
    # A 2.15 server in front of a JetStream that answers with level 0 (a leaf node, a rolling upgrade): refused.
    assert not features.Server("2.15.1", 0).honours(ttl)
    # A version that is no release number: the API level alone decides.
    assert features.Server("unknown", 1).honours(ttl) and not features.Server("unknown", 0).honours(ttl)


def test_the_issue_table_is_refused_on_the_releases_that_lack_it():
    """Issue #33's four cases: each names the field, the release it needs and the server's."""
    cases = [
        ("stream", {"name": "TTLS", "allow_msg_ttl": True}, "spec.allowMsgTtl", "2.11", [V2_10]),
        ("stream", {"name": "A", "allow_atomic": True}, "spec.allowAtomicPublish", "2.12", [V2_10, V2_11]),
        ("consumer", {"durable_name": "c", "priority_policy": "pinned_client", "priority_groups": ["g"]},
         "spec.priorityPolicy", "2.11", [V2_10]),
        ("stream", {"name": "C", "allow_msg_counter": True}, "spec.allowMsgCounter", "2.12", [V2_10, V2_11]),
    ]
    for scope, config, field, needs, old in cases:
        for server in old:
            _, refused = features.check(scope, config, server)
            message = features.refusal_message(refused, server, scope)
            assert field in [r.field for r in refused], (field, server)
            assert f"{field} needs nats-server {needs} or newer" in message
            assert f"The server is nats-server {server.version} (JetStream API level {server.api_level})" in message
        for server in (V2_12, V2_14, V2_15):
            assert features.check(scope, config, server) == (config, [])


def test_value_rows_name_the_value_and_the_higher_need_once():
    config = {"durable_name": "c", "priority_policy": "prioritized", "priority_groups": ["g"]}
    assert [r.field for r in features.check("consumer", config, V2_11)[1]] == ["spec.priorityPolicy: prioritized"]
    refused = features.check("consumer", config, V2_10)[1]
    assert [(r.field, r.feature.release) for r in refused] == [
        ("spec.priorityGroups", (2, 11, 0)), ("spec.priorityPolicy: prioritized", (2, 12, 0))]
    flow = {"durable_name": "c", "ack_policy": "flow_control", "deliver_subject": "d"}
    assert [r.field for r in features.check("consumer", flow, V2_12)[1]] == ["spec.ackPolicy: flowControl"]
    assert features.check("consumer", {**flow, "ack_policy": "explicit"}, V2_10) == ({**flow, "ack_policy": "explicit"}, [])


def test_off_values_of_unknown_keys_are_left_out_not_refused():
    """2.12 refuses a key it does not know even when false; off values mean what the server assumes anyway."""
    config = {"name": "S", "allow_batched": False, "persist_mode": "default", "allow_msg_ttl": False, "max_msgs": 5}
    assert features.check("stream", config, V2_10) == ({"name": "S", "max_msgs": 5}, [])
    without_batched = {key: value for key, value in config.items() if key != "allow_batched"}
    assert features.check("stream", config, V2_12) == (without_batched, [])
    assert features.check("stream", config, V2_15) == (config, [])


def test_buckets_name_their_own_fields():
    _, config = buckets.desired("KeyValue", {"limitMarkerTtl": "1m", "compression": True}, "b")
    refused = features.check("stream", config, V2_10, buckets.labels("KeyValue"))[1]
    assert {r.field for r in refused} == {"spec.allowMsgTtl", "spec.limitMarkerTtl"}
    assert features.check("stream", config, V2_11, buckets.labels("KeyValue"))[1] == []
    _, store = buckets.desired("ObjectStore", {"compression": True, "metadata": {"a": "b"}}, "o")
    assert features.check("stream", store, V2_10, buckets.labels("ObjectStore")) == (store, [])


def test_annotations_are_checked_only_while_their_request_is_pending():
    reset, unpin = "jsoperator.io/reset-to-sequence", "jsoperator.io/unpin"
    config = {"durable_name": "c"}
    refused = features.check("consumer", config, V2_11, annotations_used=[reset, unpin])[1]
    assert [(r.field, r.feature.via) for r in refused] == [(reset, "$JS.API.CONSUMER.RESET")]
    assert "jsoperator.io/reset-to-sequence needs nats-server 2.14 or newer" in features.refusal_message(
        refused, V2_11, "consumer")
    assert [r.field for r in features.check("consumer", config, V2_10, annotations_used=[unpin])[1]] == [unpin]
    assert features.check("consumer", config, V2_14, annotations_used=[reset, unpin])[1] == []


def test_every_row_is_a_field_the_operator_sends():
    """The table's keys are config keys of the specs (or annotations): a renamed field cannot leave a stale row."""
    stream_keys = {mapping.wire_name(name) for name in models.StreamSpec.model_fields}
    consumer_keys = {mapping.wire_name(name) for name in models.ConsumerSpec.model_fields}
    for feature in features.FEATURES:
        known = {"stream": stream_keys, "consumer": consumer_keys}.get(feature.scope)
        assert known is None or feature.key in known, feature
        assert feature.release[:2] in features.API_LEVELS


def test_rows_and_requirements_as_users_read_them():
    rows = {(row.kind, row.field, row.value): row.feature.release for row in features.rows()}
    assert rows[("KeyValue", "limitMarkerTtl", "")] == (2, 11, 0)
    assert rows[("Consumer", "priorityPolicy", "prioritized")] == (2, 12, 0)
    assert rows[("Consumer", "jsoperator.io/reset-to-time", "")] == (2, 14, 0)
    assert rows[("ObjectStore", "compression", "true")] == (2, 10, 0)
    assert features.requirement("Consumer", "priorityPolicy") == "Needs nats-server 2.11+, prioritized: nats-server 2.12+."
    assert features.requirement("Stream", "allowBatchPublish") == "Needs nats-server 2.14+."
    assert features.requirement("Stream", "maxMsgs") == features.requirement("Stream", "metadata") == ""


def test_unknown_server_fields_are_named_when_set():
    observed = {"name": "S", "subjects": ["s"], "max_msgs": -1, "allow_msg_ttl": False, "future_knob": 3,
                "future_flag": False, "future_list": []}
    assert features.unknown_fields("stream", observed) == ["future_knob"]
    note = features.unknown_note(["future_knob"])
    assert "future_knob" in note and "not compared" in note
    assert features.unknown_note([]) == ""
    consumer = {"name": "c", "durable_name": "c", "ack_wait": 30, "max_waiting": 512, "inactive_threshold": 5}
    assert features.unknown_fields("consumer", consumer) == []
