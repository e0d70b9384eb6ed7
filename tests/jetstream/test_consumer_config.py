"""ConsumerConfig defaults, validation and update rules (pure; the same cases are checked against the
real nats-server in test_consumer_api.py)."""

from __future__ import annotations

import pytest

from jsbroker.jetstream import errors
from jsbroker.jetstream.consumer_config import (
    ConsumerConfig,
    StreamFacts,
    check_workqueue,
    fill_defaults,
    stamp_ephemeral_threshold,
    update_refusal,
    validate,
)

S = StreamFacts(name="S")


def make(stream: StreamFacts = S, **fields: object) -> ConsumerConfig:
    cfg = ConsumerConfig.from_json(fields)
    fill_defaults(cfg, stream)
    validate(cfg, stream)
    stamp_ephemeral_threshold(cfg)
    return cfg


def test_pull_defaults_match_nats_server() -> None:
    cfg = make(name="C1")
    assert cfg.to_json() == {
        "name": "C1", "deliver_policy": "all", "ack_policy": "none", "max_deliver": -1,
        "replay_policy": "instant", "max_waiting": 512, "inactive_threshold": 5_000_000_000, "num_replicas": 0,
    }


def test_explicit_ack_defaults_and_backoff_sets_ack_wait() -> None:
    cfg = make(durable_name="D", ack_policy="explicit")
    assert (cfg.ack_wait, cfg.max_ack_pending, cfg.inactive_threshold) == (30_000_000_000, 1000, 0)
    cfg = make(deliver_subject="foo", ack_policy="all", backoff=[10**9, 2 * 10**9], max_deliver=5)
    assert cfg.ack_wait == 10**9 and cfg.max_waiting == 0 and "max_waiting" not in cfg.to_json()


def test_unknown_fields_ignored_and_wrong_types_are_invalid_json() -> None:
    assert ConsumerConfig.from_json({"bogus": 1, "name": "x"}).name == "x"
    with pytest.raises(errors.ApiError) as e:
        ConsumerConfig.from_json({"ack_wait": "5s"})
    assert e.value.err_code == 10025
    with pytest.raises(errors.ApiError) as e:
        ConsumerConfig.from_json({"deliver_policy": "sometimes"})
    assert e.value.err_code == 10025


@pytest.mark.parametrize(
    ("fields", "stream", "err_code"),
    [
        ({"deliver_subject": "a.*"}, S, 10079),
        ({"deliver_subject": "a", "max_waiting": 5}, S, 10080),
        ({"deliver_subject": "a", "idle_heartbeat": 50_000_000}, S, 10083),
        ({"deliver_subject": "a", "flow_control": True}, S, 10108),
        ({"idle_heartbeat": 10**9}, S, 10088),
        ({"flow_control": True}, S, 10089),
        ({"rate_limit_bps": 5}, S, 10086),
        ({}, StreamFacts(name="W", retention="workqueue"), 10084),
        ({"backoff": [1, 2, 3], "max_deliver": 2, "ack_policy": "explicit"}, S, 10116),
        ({"filter_subject": "a", "filter_subjects": ["b"]}, S, 10136),
        ({"filter_subjects": ["a.*", "a.b"]}, S, 10138),
        ({"filter_subjects": [""]}, S, 10139),
        ({"deliver_policy": "all", "opt_start_seq": 3}, S, 10094),
        ({"deliver_policy": "by_start_sequence"}, S, 10094),
        ({"deliver_policy": "last_per_subject"}, S, 10094),
        ({"name": "a.b"}, S, 10052),
        ({"durable_name": "x", "name": "y"}, S, 10132),
        ({"priority_groups": ["g"]}, S, 10196),
    ],
)
def test_validation_errors(fields: dict[str, object], stream: StreamFacts, err_code: int) -> None:
    with pytest.raises(errors.ApiError) as e:
        make(stream, **fields)
    assert e.value.err_code == err_code


def test_invalid_policy_text() -> None:
    with pytest.raises(errors.ApiError) as e:
        make(deliver_policy="new", opt_start_seq=2)
    assert e.value.description == "consumer delivery policy is deliver new, but optional start sequence is also set"


def test_workqueue_rules() -> None:
    cfg = make(ack_policy="explicit")
    check_workqueue(cfg, [])
    with pytest.raises(errors.ApiError) as e:
        check_workqueue(cfg, [["a"]])
    assert e.value.err_code == 10099
    with pytest.raises(errors.ApiError) as e:
        check_workqueue(make(ack_policy="explicit", filter_subject="a.>"), [["a.b"]])
    assert e.value.err_code == 10100
    check_workqueue(make(ack_policy="explicit", filter_subject="a.>"), [["b.>"]])
    with pytest.raises(errors.ApiError) as e:
        check_workqueue(make(ack_policy="all"), [])
    assert e.value.err_code == 10098


def test_update_refusals() -> None:
    old = make(name="C", deliver_policy="by_start_sequence", opt_start_seq=2)
    assert update_refusal(old, make(name="C"), False) == "deliver policy can not be updated"
    assert update_refusal(old, make(name="C", deliver_policy="by_start_sequence", opt_start_seq=3), False) == (
        "start sequence can not be updated"
    )
    new = make(name="C", deliver_policy="by_start_sequence", opt_start_seq=2, description="d", max_batch=5)
    assert update_refusal(old, new, False) is None
    assert update_refusal(old, make(name="C", deliver_policy="by_start_sequence", opt_start_seq=2,
                                    deliver_subject="x"), False) == "can not update pull consumer to push based"
