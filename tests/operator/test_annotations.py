"""annotations.py: names, value parsing with clear errors, and the executed-once decision."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jsoperator import annotations as ann

SEQ, TIME = ann.RESET_TO_SEQUENCE, ann.RESET_TO_TIME


def test_names_live_under_our_prefix() -> None:
    assert (ann.PAUSE, ann.MANAGED, SEQ, TIME) == (
        "jsoperator.io/pause-reconciliation", "jsoperator.io/managed",
        "jsoperator.io/reset-to-sequence", "jsoperator.io/reset-to-time",
    )


@pytest.mark.parametrize(("value", "paused"), [(None, False), ("true", True), ("True ", True), ("false", False)])
def test_pause(value: str | None, paused: bool) -> None:
    assert ann.is_paused({} if value is None else {ann.PAUSE: value}) is paused


@pytest.mark.parametrize(("value", "managed"), [(None, True), ("false", False), ("FALSE", False), ("true", True)])
def test_managed(value: str | None, managed: bool) -> None:
    assert ann.is_managed({} if value is None else {ann.MANAGED: value}) is managed


@pytest.mark.parametrize("name", [ann.PAUSE, ann.MANAGED])
def test_flag_typo_is_an_error(name: str) -> None:
    with pytest.raises(ann.AnnotationError, match=f'{name} must be "true" or "false", not \'yes\''):
        ann.is_paused({name: "yes"}) if name == ann.PAUSE else ann.is_managed({name: "yes"})


@pytest.mark.parametrize(
    ("value", "sequence", "token"),
    [("42", 42, None), ("0", 0, None), ("42@again", 42, "again"), (" 7@x.y_z-1 ", 7, "x.y_z-1"),
     ("18446744073709551615", 2**64 - 1, None)],
)
def test_reset_to_sequence(value: str, sequence: int, token: str | None) -> None:
    request = ann.reset_request({SEQ: value})
    assert request is not None
    assert (request.kind, request.sequence, request.token, request.time) == ("sequence", sequence, token, None)
    assert request.request == f"reset-to-sequence={value.strip()}"


@pytest.mark.parametrize(
    ("value", "when", "token"),
    [
        ("2026-01-02T15:04:05Z", datetime(2026, 1, 2, 15, 4, 5, tzinfo=timezone.utc), None),
        ("2026-01-02T16:04:05+01:00@b", datetime(2026, 1, 2, 15, 4, 5, tzinfo=timezone.utc), "b"),
        ("2026-01-02T15:04:05.123456789Z", datetime(2026, 1, 2, 15, 4, 5, 123456, tzinfo=timezone.utc), None),
    ],
)
def test_reset_to_time(value: str, when: datetime, token: str | None) -> None:
    request = ann.reset_request({TIME: value})
    assert request is not None and request.kind == "time"
    assert (request.time, request.token, request.sequence) == (when, token, None)
    assert request.request == f"reset-to-time={value}"


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({SEQ: "-1"}, 'must be a stream sequence number such as "42"'),
        ({SEQ: "abc"}, "not 'abc'"),
        ({SEQ: ""}, 'must be a stream sequence number'),
        ({SEQ: "18446744073709551616"}, "must be a stream sequence number"),
        ({SEQ: "5@"}, "the part after @"),
        ({SEQ: "5@a b"}, "the part after @"),
        ({TIME: "2026-01-02"}, "must be an RFC 3339 time with a zone"),
        ({TIME: "2026-01-02T15:04:05"}, "with a zone"),
        ({TIME: "2026-13-02T15:04:05Z"}, "RFC 3339"),
        ({TIME: "yesterday@x"}, "not 'yesterday@x'"),
        ({SEQ: "1", TIME: "2026-01-02T15:04:05Z"}, "set only one of"),
    ],
)
def test_bad_reset_values_say_what_to_write(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(ann.AnnotationError, match=message.replace("(", r"\(")):
        ann.reset_request(annotations)


def test_no_reset_annotation() -> None:
    assert ann.reset_request({"other": "x"}) is None
    assert ann.pending_reset(None, None) is None


def test_each_distinct_value_is_executed_once() -> None:
    first = {SEQ: "42"}
    todo = ann.pending_reset(first, None)
    assert todo is not None and todo.sequence == 42
    done = {"request": todo.request, "result": "Succeeded"}
    assert ann.pending_reset(first, done) is None  # Git re-applies the same value: nothing happens
    again = ann.pending_reset({SEQ: "42@2"}, done)  # same target, new token: runs again
    assert again is not None and again.sequence == 42
    assert ann.pending_reset({SEQ: "43"}, done) is not None


def test_failed_reset_is_not_retried_but_a_new_value_is() -> None:
    failed = {"request": "reset-to-sequence=1", "result": "Failed"}
    assert ann.pending_reset({SEQ: "1"}, failed) is None
    switched = ann.pending_reset({TIME: "2026-01-02T15:04:05Z"}, failed)
    assert switched is not None and switched.kind == "time"


@pytest.mark.parametrize(("value", "group", "token"), [("jobs", "jobs", None), (" jobs@again ", "jobs", "again"),
                                                       ("a/b_c=d-e@t.1", "a/b_c=d-e", "t.1")])
def test_unpin_names_a_group_and_an_optional_token(value: str, group: str, token: str | None) -> None:
    request = ann.unpin_request({ann.UNPIN: value})
    assert request == ann.UnpinRequest(f"unpin={value.strip()}", group, token)
    assert ann.UNPIN == "jsoperator.io/unpin"


@pytest.mark.parametrize(("value", "message"), [
    ("", "jsoperator.io/unpin must name one of the consumer's priority groups (spec.priorityGroups)"),
    ("@again", "jsoperator.io/unpin must name one of the consumer's priority groups"),
    ("jobs@", "jsoperator.io/unpin: the part after @ in 'jobs@' must be 1-63 letters"),
])
def test_malformed_unpin_says_what_to_write(value: str, message: str) -> None:
    with pytest.raises(ann.AnnotationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ann.unpin_request({ann.UNPIN: value})


def test_each_unpin_value_runs_once_and_a_token_makes_it_run_again() -> None:
    asked = {ann.UNPIN: "jobs"}
    assert ann.pending_unpin(asked, None) == ann.UnpinRequest("unpin=jobs", "jobs")
    assert ann.pending_unpin(asked, {"request": "unpin=jobs", "result": "Failed"}) is None
    assert ann.pending_unpin({ann.UNPIN: "jobs@2"}, {"request": "unpin=jobs"}) == ann.UnpinRequest(
        "unpin=jobs@2", "jobs", "2")
    # Resets and unpins are recorded apart: one never stands for the other.
    assert ann.pending_unpin(asked, {"request": "reset-to-sequence=1"}) is not None
    assert ann.pending_unpin({}, None) is None
