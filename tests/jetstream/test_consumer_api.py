"""Differential tests of the consumer API: each case is a list of raw requests sent to jsbroker and to
nats-server; every answer (JSON, error, status or silence) must be the same after normalisation.

`{S}` is a stream name unique to the test; its subjects are `{S}.>`.
"""

import pytest

from tests.broker.raw import CONNECT, Raw

SC = "$JS.API.STREAM.CREATE.{S}"
C = "$JS.API.CONSUMER.CREATE.{S}"
DC = "$JS.API.CONSUMER.DURABLE.CREATE.{S}"
I = "$JS.API.CONSUMER.INFO.{S}"  # noqa: E741
N = "$JS.API.CONSUMER.NAMES.{S}"
L = "$JS.API.CONSUMER.LIST.{S}"
D = "$JS.API.CONSUMER.DELETE.{S}"
P = "$JS.API.CONSUMER.PAUSE.{S}"
U = "$JS.API.CONSUMER.UNPIN.{S}"
R = "$JS.API.CONSUMER.RESET.{S}"
NEXT = "$JS.API.CONSUMER.MSG.NEXT.{S}"


def stream(**kw):
    return (SC, {"name": "{S}", "subjects": ["{S}.>"], **kw})


def create(name, **cfg):
    return (f"{C}.{name}", {"stream_name": "{S}", "config": {"name": name, **cfg}})


def pub(n, subject="{S}.a"):
    return [(subject, f"m{i}") for i in range(n)]


CASES = {
    "pull_defaults_info_names_list_delete": [
        stream(), *pub(3), create("C1"), (f"{I}.C1", ""), (N, ""), (L, ""), (f"{D}.C1", ""), (f"{I}.C1", ""),
        (f"{D}.C1", ""), (N, "")],
    "durable_explicit_and_push": [
        stream(), (f"{DC}.D1", {"stream_name": "{S}", "config": {"durable_name": "D1", "ack_policy": "explicit"}}),
        create("P1", deliver_subject="{S}-deliver", ack_policy="all", backoff=[1_000_000_000, 2_000_000_000],
               max_deliver=5), (L, "")],
    "filtered_create_subject_forms": [
        stream(), *pub(2, "{S}.a"), *pub(3, "{S}.b"),
        (f"{C}.F1.{{S}}.b", {"stream_name": "{S}", "config": {"name": "F1", "filter_subject": "{S}.b"}}),
        (f"{C}.F2.{{S}}.b", {"stream_name": "{S}", "config": {"name": "F2", "filter_subject": "{S}.a"}}),
        (f"{C}.F3.{{S}}.b", {"stream_name": "{S}", "config": {"name": "F3", "filter_subjects": ["{S}.a"]}}),
        create("F4", filter_subjects=["{S}.a", "{S}.b"], deliver_policy="last_per_subject")],
    "name_and_durable_rules": [
        stream(),
        (f"{DC}.X", {"stream_name": "{S}", "config": {}}),
        (f"{DC}.X", {"stream_name": "{S}", "config": {"durable_name": "Y"}}),
        (f"{C}.X", {"stream_name": "{S}", "config": {"durable_name": "Y"}}),
        (C, {"stream_name": "{S}", "config": {"durable_name": "Y"}}),
        (f"{C}.X", {"stream_name": "other", "config": {}}),
        ("$JS.API.CONSUMER.CREATE.nosuch.X", {"stream_name": "nosuch", "config": {}}),
        (f"{C}.X", {"stream_name": "{S}", "config": {"num_replicas": 3}}),
    ],
    "validation_errors": [
        stream(),
        create("V", deliver_subject="a.*"), create("V", deliver_subject="x", max_waiting=3),
        create("V", deliver_subject="x", idle_heartbeat=1000), create("V", deliver_subject="x", flow_control=True),
        create("V", idle_heartbeat=1_000_000_000), create("V", flow_control=True), create("V", rate_limit_bps=10),
        create("V", ack_policy="explicit", backoff=[1, 2, 3], max_deliver=2),
        create("V", filter_subject="{S}.a", filter_subjects=["{S}.b"]),
        create("V", filter_subjects=["{S}.*", "{S}.a"]), create("V", filter_subjects=[""]),
        create("V", opt_start_seq=4), create("V", deliver_policy="by_start_sequence"),
        create("V", deliver_policy="by_start_time"), create("V", deliver_policy="last_per_subject"),
        create("V", deliver_policy="new", opt_start_time="2024-01-01T00:00:00Z"),
        create("V", ack_wait=-5, ack_policy="explicit"), create("V", max_expires=10),
        create("V", priority_groups=["g"]), create("V", description="x" * 5000),
        create("V", deliver_policy="sometimes"), create("V", ack_wait="5s"),
    ],
    "actions_and_updates": [
        stream(), create("A", description="one"),
        (f"{C}.A", {"stream_name": "{S}", "config": {"name": "A", "description": "two"}, "action": "create"}),
        (f"{C}.B", {"stream_name": "{S}", "config": {"name": "B"}, "action": "update"}),
        create("A", description="two", max_batch=10), create("A", ack_policy="explicit"),
        create("A", deliver_policy="new"), create("A", deliver_subject="{S}-x"),
        create("A", max_waiting=20), (f"{I}.A", "")],
    "workqueue_rules": [
        stream(retention="workqueue"), create("W0", ack_policy="none"),
        create("W1", ack_policy="all"), create("W1", ack_policy="explicit", deliver_policy="new"),
        create("W1", ack_policy="explicit"), create("W2", ack_policy="explicit"),
        create("W2", ack_policy="explicit", filter_subject="{S}.a")],
    "info_errors": [stream(), (f"{I}.nosuch", ""), ("$JS.API.CONSUMER.INFO.nosuch.C", ""),
                    create("C"), (f"{I}.C", "{\"x\":1}"), (f"{D}.C", "junk")],
    "pause_resume": [
        stream(), create("PZ"), (f"{P}.PZ", {"pause_until": "2999-01-01T00:00:00Z"}), (f"{I}.PZ", ""),
        (f"{P}.PZ", ""), (f"{I}.PZ", ""), (f"{P}.PZ", {"pause_until": "1970-01-01T00:00:00Z"}), (f"{I}.PZ", ""),
        (f"{P}.PZ", {"pause_until": "2000-01-01T00:00:00Z"}), (f"{I}.PZ", "")],
    "pause_errors": [("$JS.API.CONSUMER.PAUSE.nosuch.C", {"pause_until": "2999-01-01T00:00:00Z"}), stream(),
                     (f"{P}.nosuch", {"pause_until": "2999-01-01T00:00:00Z"}), (f"{P}.nosuch", "")],
    "unpin_errors": [stream(), create("UP"), (f"{U}.UP", ""), (f"{U}.UP", {"group": "bad group!"}),
                     (f"{U}.UP", {"group": "g"}), (f"{U}.nosuch", {"group": "g"})],
    "next_errors": [stream(), create("PS", deliver_subject="{S}-push"), (f"{NEXT}.PS", ""), (f"{NEXT}.nosuch", ""),
                    create("PL", max_batch=5, max_expires=1_000_000_000, max_bytes=100),
                    (f"{NEXT}.PL", {"batch": 6}), (f"{NEXT}.PL", {"batch": 1, "expires": 2_000_000_000}),
                    (f"{NEXT}.PL", {"batch": 1, "max_bytes": 200}),
                    (f"{NEXT}.PL", {"batch": 1, "expires": 100_000_000, "idle_heartbeat": 80_000_000}),
                    (f"{NEXT}.PL", {"batch": 1, "no_wait": True}),
                    (f"{NEXT}.PL", {"batch": 1, "min_pending": 5})],
    "reset_missing_and_bad_json": [stream(), (f"{R}.nosuch", ""), create("RS"), (f"{R}.RS", "{nope")],
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_consumer_api_matches_nats_server(case, differential):
    ours, theirs = await differential(CASES[case], timeout=0.5)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, f"step {i} {CASES[case][i][0]}: jsbroker {a!r} != nats-server {b!r}"


def _no_responders_frame(port: int, subject: str) -> bytes:
    with Raw(port) as raw:
        raw.send(CONNECT + f"SUB _I.nr 1\r\nPUB {subject} _I.nr 2\r\n{{}}\r\nPING\r\n".encode())
        return raw.read_until(b"PONG\r\n")


@pytest.mark.parametrize("subject", ["$JS.API.CONSUMER.MSG.NEXT.nosuch.C", "$JS.API.CONSUMER.MSG.NEXT.KV_x.nosuch"])
def test_no_responders_status_names_the_subject(subject, nats_server, jsbroker_server):
    """A JetStream API request nobody answers gets the 503 with the Nats-Subject header nats-server sends
    (the fuzzer's pull on a stream that does not exist)."""
    ours, theirs = (_no_responders_frame(h.port, subject) for h in (jsbroker_server, nats_server))
    assert ours == theirs == (f"HMSG _I.nr 1 {len(subject) + 32} {len(subject) + 32}\r\n"
                              f"NATS/1.0 503\r\nNats-Subject: {subject}\r\n\r\n\r\nPONG\r\n").encode()
