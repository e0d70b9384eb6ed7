"""models.py and units.py: YAML shapes, unit parsing, connection rules."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jsoperator import units
from jsoperator.mapping import consumer_config, stream_config
from jsoperator.models import (
    ConnectionSpec, ConsumerSpec, SpecError, StreamSpec, StreamStatus, parse_spec, recreates,
)

NS = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "ns"),
    [("0", 0), ("0s", 0), ("1ns", 1), ("1us", 1000), ("500ms", 500_000_000), ("30s", 30 * NS), ("5m", 300 * NS),
     ("1h30m", 5400 * NS), ("1.5h", 5400 * NS), ("2h45m30.5s", (2 * 3600 + 45 * 60 + 30) * NS + NS // 2),
     ("1m1m", 120 * NS)],
)
def test_parse_duration(text: str, ns: int) -> None:
    assert units.parse_duration(text) == ns


@pytest.mark.parametrize("text", ["", "1", "-1s", "1 h", "1d", "1H", "s", "1.s", ".5s", 5])
def test_bad_durations_say_the_format(text: object) -> None:
    with pytest.raises(ValueError, match="use a Go-style duration such as 500ms, 30s, 5m, 1h30m"):
        units.parse_duration(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ns", "text"),
    [(0, "0s"), (1, "1ns"), (1500, "1500ns"), (2000, "2us"), (5_000_000, "5ms"), (30 * NS, "30s"),
     (5400 * NS, "1h30m"), (3600 * NS + NS // 2, "1h0.5s"), (120 * NS, "2m"), (-30 * NS, "-30s"),
     (3600 * NS + 1, "1h0.000000001s")],
)
def test_format_duration(ns: int, text: str) -> None:
    assert units.format_duration(ns) == text


def test_format_parse_round_trip() -> None:
    for ns in (1, 999, 1_000_000, 61 * NS, 3661 * NS, 86400 * NS, 1234567890123, 60 * NS + 100):
        assert units.parse_duration(units.format_duration(ns)) == ns


@pytest.mark.parametrize(
    ("value", "size"),
    [(0, 0), (-1, -1), (1024, 1024), ("1024", 1024), ("1k", 1000), ("1K", 1000), ("1Ki", 1024),
     ("512Mi", 512 * 2**20), ("1Gi", 2**30), ("1G", 10**9), ("2Ti", 2 * 2**40), ("1E", 10**18)],
)
def test_parse_size(value: int | str, size: int) -> None:
    assert units.parse_size(value) == size


@pytest.mark.parametrize("value", ["1GB", "1.5Gi", "-1Gi", " 1Gi", "Gi", "", True, 1.5])
def test_bad_sizes_say_the_format(value: object) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        units.parse_size(value)  # type: ignore[arg-type]


def test_yaml_is_camel_case_and_python_is_snake_case() -> None:
    spec = StreamSpec.model_validate({"maxMsgsPerSubject": 3, "allowRollupHdrs": True})
    assert (spec.max_msgs_per_subject, spec.allow_rollup_hdrs) == (3, True)
    assert StreamSpec(max_msgs_per_subject=3).max_msgs_per_subject == 3  # populate_by_name
    assert spec.model_dump(by_alias=True, exclude_none=True) == {"maxMsgsPerSubject": 3, "allowRollupHdrs": True}


def test_units_are_parsed_at_the_boundary() -> None:
    spec = ConsumerSpec.model_validate({"streamName": "S", "ackWait": "1m", "backoff": ["1s", "2s"],
                                        "maxBytes": "1Ki"})
    assert (spec.ack_wait, spec.backoff, spec.max_bytes) == (60 * NS, [NS, 2 * NS], 1024)


def test_unset_fields_are_none_so_the_server_applies_defaults() -> None:
    spec = StreamSpec.model_validate({})
    assert all(getattr(spec, name) is None for name in StreamSpec.model_fields)


@pytest.mark.parametrize("model", [StreamSpec, ConnectionSpec])
def test_unknown_fields_are_refused(model: type) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        model.model_validate({"bogus": 1})  # type: ignore[attr-defined]


def test_status_models_tolerate_unknown_fields() -> None:
    assert StreamStatus.model_validate({"messages": 3, "somethingNew": 1}).messages == 3


def test_connection_secret_refs() -> None:
    conn = ConnectionSpec.model_validate({
        "servers": ["nats://a:4222", "nats://b:4222"], "jsDomain": "hub",
        "userSecretRef": {"name": "nats-user"},
        "tlsSecretRef": {"name": "nats-tls", "caKey": "ca.pem"},
    })
    assert conn.user_secret_ref is not None and conn.tls_secret_ref is not None
    assert (conn.user_secret_ref.user_key, conn.user_secret_ref.password_key) == ("user", "password")
    assert (conn.tls_secret_ref.ca_key, conn.tls_secret_ref.cert_key, conn.tls_secret_ref.key_key) == (
        "ca.pem", "tls.crt", "tls.key")
    creds = ConnectionSpec.model_validate({"credentialsSecretRef": {"name": "c", "key": "nats.creds"}})
    assert creds.credentials_secret_ref is not None and creds.credentials_secret_ref.key == "nats.creds"


def test_connection_takes_one_auth_method() -> None:
    with pytest.raises(ValidationError, match="set at most one of credentialsSecretRef, tokenSecretRef"):
        ConnectionSpec.model_validate({"tokenSecretRef": {"name": "t", "key": "token"},
                                       "userSecretRef": {"name": "u"}})
    with pytest.raises(ValidationError, match="key"):
        ConnectionSpec.model_validate({"tokenSecretRef": {"name": "t"}})


def test_parse_spec_names_each_problem_by_its_yaml_path() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(StreamSpec, {"maxAge": "1 hour", "maxAg": 1, "sources": [{"name": "a.b"}]})
    problems = str(info.value).split("; ")
    assert problems[0].startswith("spec.maxAge: invalid duration '1 hour': use a Go-style duration")
    assert "spec.sources[0].name: String should match pattern" in problems[1]
    assert problems[2] == "spec.maxAg: unknown field (check its spelling against operator/README.md)"


def test_parse_spec_model_rules_and_success() -> None:
    with pytest.raises(SpecError, match=r"^spec: optStartSeq and deliverPolicy byStartSequence go together"):
        parse_spec(ConsumerSpec, {"streamName": "S", "optStartSeq": 4})
    assert parse_spec(StreamSpec, None) == StreamSpec()
    assert parse_spec(ConsumerSpec, {"streamName": "S"}).stream_name == "S"


@pytest.mark.parametrize(
    "spec",
    [{"subjectDeleteMarkerTtl": "1m"}, {"subjectDeleteMarkerTtl": "0s", "denyPurge": True},
     {"allowMsgSchedules": False, "denyPurge": True}, {"allowMsgSchedules": True, "allowRollupHdrs": True}],
)
def test_valid_rollup_combinations_are_accepted(spec: dict) -> None:
    assert StreamSpec.model_validate(spec).model_dump(by_alias=True, exclude_none=True).keys() == spec.keys()


@pytest.mark.parametrize(
    ("deletion_policy", "prevent_delete", "effective"),
    [(None, None, "delete"), (None, True, "retain"), (None, False, "delete"), ("retain", None, "retain"),
     ("delete", False, "delete"), ("retain", True, "retain")],
)
def test_deletion_policy_folds_in_the_deprecated_prevent_delete(deletion_policy, prevent_delete, effective) -> None:
    from jsoperator.models import effective_deletion_policy

    spec = {"deletionPolicy": deletion_policy, "preventDelete": prevent_delete}
    parsed = StreamSpec.model_validate({k: v for k, v in spec.items() if v is not None})
    assert effective_deletion_policy(parsed.deletion_policy, parsed.prevent_delete) == effective


@pytest.mark.parametrize("model, extra", [(StreamSpec, {}), (ConsumerSpec, {"streamName": "S"})])
def test_prevent_delete_contradicting_deletion_policy_is_refused(model, extra) -> None:
    with pytest.raises(SpecError, match="contradicts deletionPolicy: delete; remove preventDelete"):
        parse_spec(model, {**extra, "preventDelete": True, "deletionPolicy": "delete"})
    with pytest.raises(SpecError, match="spec.adoptionPolicy: Input should be 'never', 'adopt' or 'adoptOrCreate'"):
        parse_spec(model, {**extra, "adoptionPolicy": "sometimes"})



@pytest.mark.parametrize("model", [StreamSpec, ConsumerSpec])
def test_recreate_on_immutable_change_needs_accept_data_loss(model):
    base = {"streamName": "S"} if model is ConsumerSpec else {}
    with pytest.raises(SpecError, match="needs acceptDataLoss: true"):
        parse_spec(model, {**base, "recreateOnImmutableChange": True})
    spec = parse_spec(model, {**base, "recreateOnImmutableChange": True, "acceptDataLoss": True})
    assert recreates(spec) and not recreates(parse_spec(model, {**base, "acceptDataLoss": True}))
    config = consumer_config(spec, "c") if model is ConsumerSpec else stream_config(spec, "s")
    assert not {"recreate_on_immutable_change", "accept_data_loss"} & set(config), "operator fields are never sent"
