"""status.py: conditions (kstatus-compatible), lastTransitionTime stability, error mapping, observed state."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from jsoperator import status
from tests.operator.test_mapping import api, nc, ok, server  # noqa: F401  (fixtures: real servers)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
T1 = T0 + timedelta(minutes=5)


def conditions(patch: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in patch["conditions"]}


def test_ready_status_is_kstatus_current() -> None:
    patch = status.build(None, generation=3, outcome=status.synced("stream matches the spec"), now=T0)
    assert patch["observedGeneration"] == 3
    assert conditions(patch) == {"Ready": ("True", "Synced"), "Reconciling": ("False", "Synced"),
                                 "Stalled": ("False", "Synced"), "Synced": ("True", "Synced")}
    ready = status.condition(patch, "Ready")
    assert ready is not None
    assert ready == {"type": "Ready", "status": "True", "reason": "Synced", "message": "stream matches the spec",
                     "lastTransitionTime": "2026-01-01T12:00:00Z", "observedGeneration": 3}


def test_last_transition_time_moves_only_when_status_changes() -> None:
    first = status.build(None, generation=1, outcome=status.synced("ok"), now=T0)
    same = status.build(first, generation=2, outcome=status.synced("still ok"), now=T1)
    assert status.condition(same, "Ready")["lastTransitionTime"] == "2026-01-01T12:00:00Z"  # type: ignore[index]
    assert status.condition(same, "Ready")["message"] == "still ok"  # type: ignore[index]
    down = status.build(same, generation=2, outcome=status.broker_unavailable("connection refused"), now=T1)
    assert status.condition(down, "Ready")["lastTransitionTime"] == "2026-01-01T12:05:00Z"  # type: ignore[index]
    assert status.condition(down, "Stalled")["lastTransitionTime"] == "2026-01-01T12:00:00Z"  # type: ignore[index]


def test_broker_unavailable_is_retrying_not_stalled() -> None:
    patch = status.build(None, generation=1, outcome=status.broker_unavailable("timeout"), now=T0)
    assert conditions(patch) == {"Ready": ("False", "BrokerUnavailable"),
                                 "Reconciling": ("True", "BrokerUnavailable"),
                                 "Stalled": ("False", "BrokerUnavailable"),
                                 "Synced": ("False", "BrokerUnavailable")}
    assert "nothing was changed or deleted" in status.condition(patch, "Ready")["message"]  # type: ignore[index]


def test_server_error_carries_err_code_description_and_hint() -> None:
    outcome = status.api_error(400, 10065, "subjects overlap with an existing stream", action="create stream")
    assert (outcome.ready, outcome.reason, outcome.stalled, outcome.reconciling) == (
        False, "JetStreamError", True, False)
    assert outcome.message == (
        "create stream: JetStream error 10065 (code 400): subjects overlap with an existing stream. "
        "another stream already stores some of these subjects; change spec.subjects"
    )


def test_transient_server_errors_are_retried() -> None:
    assert status.api_error(503, 10008, "JetStream system temporarily unavailable").reconciling
    missing = status.api_error(404, 10059, "stream not found", action="create consumer")
    assert (missing.reason, missing.reconciling, missing.stalled) == ("WaitingForStream", True, False)
    unknown = status.api_error(500, 10999, "something new")
    assert (unknown.reason, unknown.stalled, unknown.message) == (
        "JetStreamError", True, "JetStream error 10999 (code 500): something new")


def test_waiting_outcomes_are_retried_not_stalled() -> None:
    for outcome, reason in ((status.credentials_not_found("secret nats-creds not found"), "CredentialsNotFound"),
                            (status.deletion_blocked("waiting for Consumer resources ['c']"), "DeletionBlocked")):
        assert conditions(status.build(None, generation=1, outcome=outcome, now=T0)) == {
            "Ready": ("False", reason), "Reconciling": ("True", reason), "Stalled": ("False", reason),
            "Synced": ("False", reason)}


def test_immutable_change_and_invalid_spec_are_stalled() -> None:
    for outcome, reason in ((status.immutable_change("storage cannot change"), "ImmutableFieldChange"),
                            (status.invalid_spec("maxAge: invalid duration"), "InvalidSpec"),
                            (status.invalid_annotation("pause must be true or false"), "InvalidAnnotation")):
        patch = status.build(None, generation=4, outcome=outcome, now=T0)
        assert conditions(patch) == {"Ready": ("False", reason), "Reconciling": ("False", reason),
                                     "Stalled": ("True", reason), "Synced": ("False", reason),
                                     "Terminal": ("True", reason)}


def test_terminal_policy_retry_keeps_retrying_and_the_terminal_condition() -> None:
    held = status.immutable_change("storage cannot change")
    assert held.with_policy(None) == held.with_policy("hold") == held
    retried = held.with_policy("retry")
    assert (retried.reconciling, retried.stalled, retried.terminal) == (True, False, True)
    assert "terminalPolicy: retry" in retried.message
    patch = status.build(None, generation=1, outcome=retried, now=T0)
    assert conditions(patch) == {"Ready": ("False", "ImmutableFieldChange"), "Reconciling": (
        "True", "ImmutableFieldChange"), "Stalled": ("False", "ImmutableFieldChange"), "Synced": (
        "False", "ImmutableFieldChange"), "Terminal": ("True", "ImmutableFieldChange")}
    # A retryable outcome is not terminal and the policy leaves it alone; Terminal turns False once fixed.
    outage = status.broker_unavailable("refused")
    assert outage.with_policy("retry") == outage and not outage.terminal
    fixed = status.build(patch, generation=1, outcome=status.synced("ok"), now=T1)
    assert conditions(fixed)["Terminal"] == ("False", "Synced")
    assert "Terminal" not in conditions(status.build(None, generation=1, outcome=status.synced("ok"), now=T0))


def test_paused_keeps_ready_and_observed_generation() -> None:
    ready = status.build(None, generation=1, outcome=status.synced("ok"), now=T0)
    paused = status.build(ready, generation=2, outcome=status.synced("ignored"), now=T1, mode="paused")
    assert "observedGeneration" not in paused  # the new spec was not applied
    assert conditions(paused) == {"Ready": ("True", "Synced"), "Reconciling": ("False", "ReconciliationPaused"),
                                  "Stalled": ("False", "ReconciliationPaused"),
                                  "ReconciliationPaused": ("True", "ReconciliationPaused")}
    assert status.condition(paused, "Ready")["lastTransitionTime"] == "2026-01-01T12:00:00Z"  # type: ignore[index]
    resumed = status.build(paused, generation=2, outcome=status.synced("ok"), now=T1)
    assert "ReconciliationPaused" not in conditions(resumed) and resumed["observedGeneration"] == 2


def test_unmanaged_is_ready_and_says_why() -> None:
    patch = status.build(None, generation=1, outcome=status.synced("x"), now=T0, mode="unmanaged")
    assert conditions(patch)["Unmanaged"] == ("True", "Unmanaged")
    assert conditions(patch)["Ready"] == ("True", "Unmanaged")
    assert patch["observedGeneration"] == 1


def test_stream_state_from_stream_info() -> None:
    info = {"config": {"name": "ORDERS"}, "state": {"messages": 5, "bytes": 250, "first_seq": 3, "last_seq": 7,
                                                     "consumer_count": 2, "first_ts": "x"}}
    assert status.stream_state(info) == {"streamName": "ORDERS", "messages": 5, "bytes": 250, "firstSeq": 3,
                                         "lastSeq": 7, "consumerCount": 2, "lag": None, "mirror": None,
                                         "sources": None}  # null: a merge patch removes an old spec's links
    patch = status.build(None, generation=1, outcome=status.synced("ok"), now=T0, observed=status.stream_state(info))
    assert patch["messages"] == 5 and patch["streamName"] == "ORDERS"


def test_stream_state_shows_the_mirror_and_sources_links() -> None:
    """Each link's lag, whether it heard from its origin in the last 10 s, its error; sources in a fixed
    order (the server lists them in any), the lags summed for the printer column."""
    not_found = {"code": 404, "err_code": 10059, "description": "stream not found"}
    sources = [{"name": "WEST", "lag": 3, "active": 12_000_000_000, "seq": 9},
               {"name": "EAST", "lag": 0, "active": -1, "error": not_found},
               {"name": "EAST", "lag": 2, "active": 400_000_000, "filter_subject": "east.a"}]
    observed = status.stream_state({"config": {"name": "ALL"}, "state": {}, "sources": sources})
    assert (observed["lag"], observed["mirror"], observed["sources"]) == (5, None, [
        {"name": "EAST", "lag": 0, "active": False, "error": "stream not found"},
        {"name": "EAST", "lag": 2, "active": True}, {"name": "WEST", "lag": 3, "active": False}])
    assert status.stream_state({"config": {}, "sources": sources[::-1]})["sources"] == observed["sources"]
    mirror = status.stream_state({"config": {}, "mirror": {"name": "ALL", "lag": 7, "active": 1000}})
    assert (mirror["lag"], mirror["mirror"], mirror["sources"]) == (7, {"name": "ALL", "lag": 7, "active": True}, None)


def test_consumer_state_from_consumer_info() -> None:
    info = {"stream_name": "ORDERS", "name": "billing", "delivered": {"consumer_seq": 4, "stream_seq": 9},
            "ack_floor": {"consumer_seq": 2, "stream_seq": 6, "last_active": "x"}, "num_ack_pending": 2,
            "num_redelivered": 1, "num_waiting": 3, "num_pending": 10}
    assert status.consumer_state(info) == {
        "streamName": "ORDERS", "consumerName": "billing", "delivered": {"consumerSeq": 4, "streamSeq": 9},
        "ackFloor": {"consumerSeq": 2, "streamSeq": 6}, "numPending": 10, "numAckPending": 2,
        "numRedelivered": 1, "numWaiting": 3,
    }


def test_last_reset_record() -> None:
    ok = status.last_reset("reset-to-sequence=42", succeeded=True, now=T0, reset_seq=42, message="reset to 42")
    assert ok == {"request": "reset-to-sequence=42", "resetSeq": 42, "time": "2026-01-01T12:00:00Z",
                  "result": "Succeeded", "message": "reset to 42"}
    failed = status.last_reset("reset-to-sequence=1", succeeded=False, now=T0, message="invalid reset: below start seq")
    assert failed["result"] == "Failed" and "resetSeq" not in failed


def test_patches_fit_the_status_models_the_crd_is_generated_from() -> None:
    from jsoperator.models import ConsumerStatus, StreamStatus

    info = {"config": {"name": "S"}, "state": {"messages": 1}, "sources": [{"name": "O", "lag": 1, "active": 5}]}
    stream_patch = status.build(None, generation=1, outcome=status.synced("ok"), now=T0,
                                observed=status.stream_state(info))
    assert StreamStatus.model_validate(stream_patch).model_dump(by_alias=True, mode="json", exclude_none=True) == (
        {k: v for k, v in stream_patch.items() if v is not None})
    consumer_patch = status.build(None, generation=1, outcome=status.synced("ok"), now=T0,
                                  observed=status.consumer_state({"stream_name": "S", "name": "c"}))
    consumer_patch["lastReset"] = status.last_reset("reset-to-sequence=1", succeeded=True, now=T0, reset_seq=1)
    assert ConsumerStatus.model_validate(consumer_patch).model_dump(
        by_alias=True, mode="json", exclude_none=True) == consumer_patch


# -- server answers -> conditions, on nats-server and jsbroker --------------------------------------

ERROR_CASES = [
    # (requests made first, the failing request, err_code, reason, stalled, hint fragment)
    ([], ("STREAM.CREATE.R3", {"name": "R3", "subjects": ["r3"], "num_replicas": 3}), 10074, "JetStreamError", True,
     "set replicas: 1"),
    ([("STREAM.CREATE.A", {"name": "A", "subjects": ["shared.>"]})],
     ("STREAM.CREATE.B", {"name": "B", "subjects": ["shared.x"]}), 10065, "JetStreamError", True,
     "change spec.subjects"),
    ([], ("CONSUMER.CREATE.MISSING.c", {"stream_name": "MISSING", "config": {"durable_name": "c"}}), 10059,
     "WaitingForStream", False, "create the Stream first"),
    ([("STREAM.CREATE.WQ", {"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"})],
     ("CONSUMER.CREATE.WQ.c", {"stream_name": "WQ", "config": {"durable_name": "c", "ack_policy": "explicit",
                                                              "deliver_policy": "last"}}),
     10101, "JetStreamError", True, "deliverPolicy: all"),
]


@pytest.mark.parametrize(("setup", "request_", "err_code", "reason", "stalled", "hint"), ERROR_CASES)
async def test_server_errors_become_conditions(
    nc: Any, setup: list, request_: tuple, err_code: int, reason: str, stalled: bool, hint: str
) -> None:
    for subject, body in setup:
        await ok(nc, subject, body)
    try:
        error = (await api(nc, *request_)).get("error")
        assert error is not None and error["err_code"] == err_code, error
        outcome = status.api_error(error["code"], error["err_code"], error["description"], action="apply")
        patch = status.build(None, generation=1, outcome=outcome, now=T0)
        ready, stalled_condition = status.condition(patch, "Ready"), status.condition(patch, "Stalled")
        assert ready is not None and stalled_condition is not None
        assert (ready["status"], ready["reason"], stalled_condition["status"]) == (
            "False", reason, "True" if stalled else "False")
        assert f"JetStream error {err_code}" in ready["message"] and hint in ready["message"]
    finally:
        for subject, _ in setup:
            await api(nc, "STREAM.DELETE." + subject.rsplit(".", 1)[1])


async def test_a_config_jsbroker_refuses_stalls_the_resource_naming_it(jsbroker_server: Any) -> None:
    """A Stream spec jsbroker refuses with 10052 (async persistence on memory storage, as nats-server; no field
    is refused as unsupported any more): Stalled, the message naming what is wrong."""
    import nats

    from jsoperator import mapping
    from jsoperator.models import StreamSpec

    config = mapping.stream_config(StreamSpec.model_validate(
        {"subjects": ["tr.in.>"], "storage": "memory", "persistMode": "async"}), "TR")
    client = await nats.connect(jsbroker_server.url)
    try:
        error = (await api(client, "STREAM.CREATE.TR", config))["error"]
    finally:
        await client.close()
    outcome = status.api_error(error["code"], error["err_code"], error["description"], action="create stream")
    patch = status.build(None, generation=1, outcome=outcome, now=T0)
    assert conditions(patch) == {"Ready": ("False", "JetStreamError"), "Reconciling": ("False", "JetStreamError"),
                                 "Stalled": ("True", "JetStreamError"), "Synced": ("False", "JetStreamError"),
                                 "Terminal": ("True", "JetStreamError")}
    message = status.condition(patch, "Ready")["message"]  # type: ignore[index]
    assert "10052" in message and "async persist mode is only supported on file storage" in message


def test_adopted_says_how_the_server_object_came_and_stays() -> None:
    created = status.build(None, generation=1, outcome=status.synced("ok"), now=T0, adopted=False)
    assert conditions(created)["Adopted"] == ("False", "Created")
    later = status.build(created, generation=2, outcome=status.broker_unavailable("down"), now=T1)
    assert conditions(later)["Adopted"] == ("False", "Created")  # kept while nothing new is learnt
    adopted = status.build(None, generation=1, outcome=status.synced("ok"), now=T0, adopted=True)
    assert conditions(adopted)["Adopted"] == ("True", "Adopted") and conditions(adopted)["Synced"] == ("True", "Synced")
    for outcome, reason, stalled in ((status.stalled(status.CONFLICT, "Stream a/b (first) ..."), "Conflict", True),
                                     (status.stalled(status.ADOPTION_REFUSED, "exists"), "AdoptionRefused", True),
                                     (status.retrying(status.NOT_FOUND_ON_SERVER, "missing"), "NotFoundOnServer", False)):
        got = conditions(status.build(None, generation=1, outcome=outcome, now=T0))
        assert got["Ready"] == ("False", reason) and got["Stalled"] == (str(stalled), reason)


def test_storage_available_is_false_from_the_advisory_until_last_seq_moves() -> None:
    ready = status.build(None, generation=1, outcome=status.synced("ok"), now=T0, observed={"lastSeq": 7})
    assert "StorageAvailable" not in conditions(ready)
    full = {**ready, "conditions": status.out_of_storage(ready, "broker-0", "ORDERS", 1, T0)}
    assert conditions(full)["StorageAvailable"] == ("False", "OutOfStorage")
    message = status.condition(full, "StorageAvailable")["message"]  # type: ignore[index]
    assert "server broker-0 has no storage left for stream ORDERS" in message and "grow the volume" in message
    # a reconciliation keeps it while lastSeq stands, and sets it True once a message was stored
    same = status.build(full, generation=1, outcome=status.synced("ok"), now=T1, observed={"lastSeq": 7})
    assert conditions(same)["StorageAvailable"] == ("False", "OutOfStorage")
    assert status.storage_back(full, {"lastSeq": 7}, 1, T1) is None
    back = status.build(full, generation=1, outcome=status.synced("ok"), now=T1, observed={"lastSeq": 8})
    assert conditions(back)["StorageAvailable"] == ("True", "MessageStored")
    refreshed = status.storage_back(full, {"lastSeq": 8}, 1, T1)
    assert refreshed is not None and {c["type"]: c["status"] for c in refreshed} == {
        **{c["type"]: c["status"] for c in full["conditions"]}, "StorageAvailable": "True"}
    assert status.condition({"conditions": refreshed}, "StorageAvailable")["lastTransitionTime"] == "2026-01-01T12:05:00Z"  # type: ignore[index]
    # True stays True; a second advisory turns it False again
    assert conditions(status.build(back, generation=1, outcome=status.synced("ok"), now=T1,
                                   observed={"lastSeq": 9}))["StorageAvailable"] == ("True", "MessageStored")
    again = status.out_of_storage(back, "broker-0", "ORDERS", 1, T1)
    assert [c["type"] for c in again].count("StorageAvailable") == 1
