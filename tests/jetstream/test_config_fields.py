"""Nothing accepted and ignored: every StreamConfig, ConsumerConfig and StreamSource field nats-server 2.15 knows is
either honoured by jsbroker (a differential scenario shows its effect), stored where a single server
has nothing to do with it, or refused with an error naming the field.

The field lists are the JSON tags of nats-server's `server/stream.go` StreamConfig and
`server/consumer.go` ConsumerConfig (v2.15). A field added to jsbroker's config classes without an
entry here fails `test_*_table_covers_jsbroker`; an entry's evidence must name a test or a case that exists.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import re
import time
from typing import Any

import nats
import pytest

from jsbroker.jetstream import consumer_config, stream_config
from tests.jetstream.conftest import stream_with
from tests.servers import KINDS, ServerHandle, launch

HONOURED, STORED, REFUSED = "honoured", "stored", "refused"
# field -> (HONOURED | STORED, "module::test_function" or "module::DICT[case]" showing it) or (REFUSED, a value)
STREAM_FIELDS: dict[str, tuple[str, Any]] = {
    "name": (HONOURED, "test_stream_api::CASES[create_full_config]"),
    "description": (HONOURED, "test_stream_api::CASES[create_full_config]"),
    "subjects": (HONOURED, "test_stream_api::CASES[subjects_overlap_other_stream]"),
    "retention": (HONOURED, "test_ack_semantics::test_interest_retention"),
    "max_consumers": (HONOURED, "test_config_fields::SCENARIOS[max_consumers_and_consumer_limits]"),
    "max_msgs": (HONOURED, "test_publish::CASES[discard_old_limits]"),
    "max_bytes": (HONOURED, "test_publish::test_max_bytes_boundary_matches_nats_server"),
    "max_age": (HONOURED, "test_publish::test_max_age_expires_on_a_timer_without_new_publishes"),
    "max_msgs_per_subject": (HONOURED, "test_publish::CASES[discard_new_subject_limit_replaces]"),
    "max_msg_size": (HONOURED, "test_publish::CASES[max_msg_size]"),
    "discard": (HONOURED, "test_publish::CASES[discard_new_max_msgs]"),
    "storage": (HONOURED, "test_crash_publish::test_acknowledged_messages_survive_sigkill"),
    "num_replicas": (HONOURED, "test_stream_api::CASES[create_bad_limits]"),  # 1 only; more is nats-server's 10074
    "no_ack": (HONOURED, "test_publish::CASES[no_ack_stream]"),
    "duplicate_window": (HONOURED, "test_publish::CASES[msg_id_dedupe]"),
    "placement": (STORED, "test_config_fields::SCENARIOS[placement_and_compression_stored]"),
    "mirror": (HONOURED, "test_sourcing::test_mirror_matches_nats_server"),
    "sources": (HONOURED, "test_sourcing::test_sources_match_nats_server"),
    "compression": (STORED, "test_config_fields::SCENARIOS[placement_and_compression_stored]"),
    "first_seq": (HONOURED, "test_publish::CASES[first_seq]"),
    "subject_transform": (HONOURED, "test_subject_transform::test_transformed_subjects_are_stored_counted_and_filtered_as_nats_server"),
    "republish": (HONOURED, "test_republish::test_republished_messages_carry_nats_server_headers"),
    "allow_direct": (HONOURED, "test_stream_api::CASES[direct_get_variants]"),
    "mirror_direct": (HONOURED, "test_sourcing::test_mirror_direct_matches_nats_server"),
    "discard_new_per_subject": (HONOURED, "test_publish::CASES[discard_new_per_subject]"),
    "sealed": (HONOURED, "test_publish::CASES[sealed_rejects]"),
    "deny_delete": (HONOURED, "test_stream_api::CASES[msg_delete_denied]"),
    "deny_purge": (HONOURED, "test_stream_api::CASES[purge_denied_and_missing]"),
    "allow_rollup_hdrs": (HONOURED, "test_publish::CASES[rollup_sub_and_all]"),
    "consumer_limits": (HONOURED, "test_config_fields::SCENARIOS[max_consumers_and_consumer_limits]"),
    "allow_msg_ttl": (HONOURED, "test_publish::test_per_message_ttl_expires"),
    "subject_delete_marker_ttl": (HONOURED, "test_delete_markers::test_max_age_leaves_a_marker_for_each_subject_as_nats_server"),
    "allow_msg_counter": (HONOURED, "test_counters::test_counters_match_nats_server"),
    "allow_atomic": (HONOURED, "test_atomic_batch::CASES[commit_and_eob]"),
    "allow_msg_schedules": (HONOURED, "test_schedules::test_schedules_fire_like_nats_server"),
    "persist_mode": (HONOURED, "test_persist_mode::test_sync_always_leaves_async_streams_to_the_interval"),
    "allow_batched": (HONOURED, "test_fast_batch::CASES[disabling_drops_open_batches]"),
    "metadata": (HONOURED, "test_stream_api::CASES[create_full_config]"),
}
CONSUMER_FIELDS: dict[str, tuple[str, Any]] = {
    "durable_name": (HONOURED, "test_consumer_api::CASES[durable_explicit_and_push]"),
    "name": (HONOURED, "test_consumer_api::CASES[name_and_durable_rules]"),
    "description": (HONOURED, "test_consumer_api::CASES[actions_and_updates]"),
    "deliver_policy": (HONOURED, "test_consumer_policies::test_start_positions"),
    "opt_start_seq": (HONOURED, "test_consumer_policies::POLICIES[by_start_sequence]"),
    "opt_start_time": (HONOURED, "test_reset::test_reset_constraint_on_start_time"),
    "ack_policy": (HONOURED, "test_ack_semantics::test_interest_retention"),
    "ack_wait": (HONOURED, "test_ack_semantics::test_progress_extends_ack_wait"),
    "max_deliver": (HONOURED, "test_ack_semantics::test_max_deliver_advisory"),
    "backoff": (HONOURED, "test_ack_semantics::test_backoff_timing"),
    "filter_subject": (HONOURED, "test_consumer_policies::POLICIES[filter_wildcard]"),
    "filter_subjects": (HONOURED, "test_consumer_policies::POLICIES[filter_multi]"),
    "replay_policy": (HONOURED, "test_push_delivery::test_replay_original_keeps_spacing"),
    "rate_limit_bps": (HONOURED, "test_config_fields::test_rate_limit_lets_a_burst_through_then_spaces_deliveries"),
    "sample_freq": (HONOURED, "test_config_fields::test_sampled_acks_are_reported_like_nats_server"),
    "max_waiting": (HONOURED, "test_pull_delivery::test_max_waiting_and_push_heartbeat_free_pull"),
    "max_ack_pending": (HONOURED, "test_pull_delivery::test_max_ack_pending_and_requests_pending"),
    "flow_control": (HONOURED, "test_push_delivery::test_flow_control_stalls_until_answered"),
    "headers_only": (HONOURED, "test_push_delivery::test_headers_only_keeps_original_headers"),
    "max_batch": (HONOURED, "test_consumer_api::CASES[next_errors]"),
    "max_expires": (HONOURED, "test_consumer_api::CASES[next_errors]"),
    "max_bytes": (HONOURED, "test_pull_delivery::test_max_bytes_statuses"),
    "deliver_subject": (HONOURED, "test_config_fields::SCENARIOS[deliver_subject_in_the_stream_is_a_cycle]"),
    "deliver_group": (HONOURED, "test_config_fields::test_deliver_group_needs_a_queue_subscriber"),
    "idle_heartbeat": (HONOURED, "test_push_delivery::test_headers_only_and_idle_heartbeat"),
    "inactive_threshold": (HONOURED, "test_consumer_policies::test_ephemeral_pull_removed_when_inactive"),
    "num_replicas": (HONOURED, "test_consumer_api::CASES[name_and_durable_rules]"),
    "mem_storage": (HONOURED, "test_config_fields::test_mem_storage_consumer_is_gone_after_a_restart"),
    "direct": (REFUSED, True),
    "sourcing": (REFUSED, True),
    "metadata": (HONOURED, "test_consumer_api::CASES[actions_and_updates]"),
    "pause_until": (HONOURED, "test_consumer_policies::test_pause_holds_delivery"),
    "priority_groups": (HONOURED, "test_priority::test_pinned_client_matches_nats_server"),
    "priority_policy": (HONOURED, "test_priority::test_overflow_matches_nats_server"),
    "priority_timeout": (HONOURED, "test_priority::test_pinned_client_matches_nats_server"),
}
# The fields of a `mirror` / `sources` entry (nats-server's StreamSource): none refused. `external` is
# stored: on one server nats-server's link through another JetStream's prefixes never copies, nor does ours.
SOURCE_FIELDS: dict[str, tuple[str, Any]] = {
    "name": (HONOURED, "test_sourcing::test_sources_match_nats_server"),
    "opt_start_seq": (HONOURED, "test_sourcing::test_mirror_matches_nats_server"),
    "opt_start_time": (HONOURED, "test_sourcing::test_mirror_matches_nats_server"),
    "filter_subject": (HONOURED, "test_sourcing::test_sources_match_nats_server"),
    "subject_transforms": (HONOURED, "test_sourcing::test_subject_transforms_in_sources_and_mirrors_match_nats_server"),
    "external": (STORED, "test_sourcing::test_external_origins_match_nats_server"),
    "consumer": (HONOURED, "test_sourcing::test_durable_sourcing_matches_nats_server"),
}
# What a refused consumer field needs beside it to get past nats-server's own validation.
_CONSUMER_COMPANIONS: dict[str, dict[str, Any]] = {
    "direct": {"deliver_subject": "direct.deliver"},
    "sourcing": {"deliver_subject": "sourcing.deliver"},
}


def _status(table: dict[str, tuple[str, Any]], status: str) -> set[str]:
    return {name for name, (kind, _) in table.items() if kind == status}


def test_stream_table_covers_jsbroker() -> None:
    ours = {f.name for f in dataclasses.fields(stream_config.StreamConfig)}
    assert ours - set(STREAM_FIELDS) == set(), "a StreamConfig field without an entry in STREAM_FIELDS"
    assert ours <= _status(STREAM_FIELDS, HONOURED) | _status(STREAM_FIELDS, STORED)
    assert _status(STREAM_FIELDS, REFUSED) == set(), "jsbroker refuses no stream field any more"


def test_consumer_table_covers_jsbroker() -> None:
    ours = {f.name for f in dataclasses.fields(consumer_config.ConsumerConfig)}
    assert ours - set(CONSUMER_FIELDS) == set(), "a ConsumerConfig field without an entry in CONSUMER_FIELDS"
    assert set(consumer_config.UNSUPPORTED) == _status(CONSUMER_FIELDS, REFUSED)


def test_source_table_covers_jsbroker() -> None:
    assert {f.name for f in dataclasses.fields(stream_config.SourceConfig)} == set(SOURCE_FIELDS)


@pytest.mark.parametrize("evidence", sorted({e for t in (STREAM_FIELDS, CONSUMER_FIELDS, SOURCE_FIELDS)
                                             for k, e in t.values()
                                             if k != REFUSED}))
def test_evidence_exists(evidence: str) -> None:
    module_name, _, target = evidence.partition("::")
    module = importlib.import_module(f"tests.jetstream.{module_name}")
    case = re.fullmatch(r"(\w+)\[(\w+)\]", target)
    if case:
        assert case.group(2) in getattr(module, case.group(1)), evidence
    else:
        assert callable(getattr(module, target, None)), evidence


async def _api(nc: Any, subject: str, body: Any = None) -> dict[str, Any]:
    reply = await nc.request(subject, b"" if body is None else json.dumps(body).encode(), timeout=5)
    return json.loads(reply.data)  # type: ignore[no-any-return]


@pytest.mark.parametrize("field", sorted(_status(CONSUMER_FIELDS, REFUSED)))
async def test_refused_consumer_field(jsbroker_server: ServerHandle, unique: Any, field: str) -> None:
    name = unique("F")
    nc = await nats.connect(jsbroker_server.url)
    try:
        await _api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"]})
        config = {"name": "C", field: CONSUMER_FIELDS[field][1], **_CONSUMER_COMPANIONS.get(field, {})}
        answer = await _api(nc, f"$JS.API.CONSUMER.CREATE.{name}.C", {"stream_name": name, "config": config})
        names = await _api(nc, f"$JS.API.CONSUMER.NAMES.{name}", {})
        await _api(nc, f"$JS.API.STREAM.DELETE.{name}")
    finally:
        await nc.close()
    assert answer["error"]["err_code"] == 10012, answer
    description = answer["error"]["description"]
    assert field in description and "not supported by jsbroker" in description or "which jsbroker does not" in description
    assert names["consumers"] == []


# -- differential scenarios of the fields no other test shows (see tests/jetstream/conftest.py) ---------

SC = "$JS.API.STREAM.CREATE.{S}"
CC = "$JS.API.CONSUMER.CREATE.{S}"
SCENARIOS = {
    "max_consumers_and_consumer_limits": [
        (SC, {"name": "{S}", "subjects": ["{S}.>"], "max_consumers": 2,
              "consumer_limits": {"max_ack_pending": 5, "inactive_threshold": 60_000_000_000}}),
        (f"{CC}.A", {"stream_name": "{S}", "config": {"name": "A", "ack_policy": "explicit"}}),  # limits applied
        (f"{CC}.B", {"stream_name": "{S}", "config": {"name": "B", "ack_policy": "explicit", "max_ack_pending": 6}}),
        (f"{CC}.B", {"stream_name": "{S}", "config": {"name": "B", "inactive_threshold": 120_000_000_000}}),
        (f"{CC}.B", {"stream_name": "{S}", "config": {"name": "B", "ack_policy": "explicit", "max_ack_pending": 4}}),
        (f"{CC}.C", {"stream_name": "{S}", "config": {"name": "C"}}),  # a third consumer: max_consumers
        ("$JS.API.STREAM.DELETE.{S}", ""),
    ],
    "deliver_subject_in_the_stream_is_a_cycle": [
        (SC, {"name": "{S}", "subjects": ["{S}.>"]}),
        (f"{CC}.A", {"stream_name": "{S}", "config": {"name": "A", "deliver_subject": "{S}.out"}}),
        (f"{CC}.A", {"stream_name": "{S}", "config": {"name": "A", "deliver_subject": "{S}-out"}}),
        ("$JS.API.STREAM.DELETE.{S}", ""),
    ],
    "placement_and_compression_stored": [
        (SC, {"name": "{S}", "subjects": ["{S}.>"], "compression": "s2", "placement": {"tags": []}}),
        ("{S}.a", "x" * 200), ("$JS.API.STREAM.MSG.GET.{S}", {"seq": 1}),
        ("$JS.API.STREAM.DELETE.{S}", ""),
    ],
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_scenario_matches_nats_server(differential: Any, name: str) -> None:
    ours, theirs = await differential(SCENARIOS[name])
    assert ours == theirs


async def _deliver_group(nc: Any, name: str) -> list[Any]:
    """A push consumer with a deliver group, a plain subscriber, then a queue subscriber in the group."""
    js = await stream_with(nc, name, 3)
    plain = await nc.subscribe(f"{name}-deliver")
    await _api(nc, f"$JS.API.CONSUMER.CREATE.{name}.D", {"stream_name": name, "config": {
        "name": "D", "deliver_subject": f"{name}-deliver", "deliver_group": "G", "ack_policy": "none"}})
    out: list[Any] = []
    try:
        out.append((await plain.next_msg(0.5)).data)
    except nats.errors.TimeoutError:
        out.append("plain subscriber alone: nothing")
    info = await _api(nc, f"$JS.API.CONSUMER.INFO.{name}.D")
    out.append((info.get("push_bound", False), info["delivered"]["stream_seq"]))
    queue = await nc.subscribe(f"{name}-deliver", queue="G")
    out.append([(await queue.next_msg(5)).data for _ in range(3)])
    await js.delete_stream(name)
    return out


async def test_deliver_group_needs_a_queue_subscriber(on_both: Any) -> None:
    ours, theirs = await on_both(_deliver_group, "G")
    assert ours == theirs == ["plain subscriber alone: nothing", (False, 0), [b"m0", b"m1", b"m2"]]


def test_mem_storage_consumer_is_gone_after_a_restart() -> None:
    """A memory consumer on a file stream keeps no state on disk: after a clean restart it is gone, the stream
    and its file consumer are not."""

    async def before(url: str) -> None:
        nc = await nats.connect(url)
        await _api(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m.>"]})
        for durable, mem in (("MEM", True), ("FILE", False)):
            await _api(nc, f"$JS.API.CONSUMER.CREATE.M.{durable}",
                       {"stream_name": "M", "config": {"durable_name": durable, "mem_storage": mem}})
        await nc.close()

    async def after(url: str) -> list[Any]:
        nc = await nats.connect(url)
        names = await _api(nc, "$JS.API.CONSUMER.NAMES.M", {})
        await nc.close()
        return sorted(names["consumers"])

    out = {}
    for kind in KINDS:
        with launch(kind) as handle:
            asyncio.run(before(handle.url))
            handle.restart()
            out[kind] = asyncio.run(after(handle.url))
    assert out == {kind: ["FILE"] for kind in KINDS}


async def _rate_limited(nc: Any, name: str) -> list[float]:
    """Six 50 KB messages to a push consumer limited to 100 KB/s on a stream with 100 KB max messages:
    the arrival time of each (s)."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], max_msg_size=100_000)
    for _ in range(6):
        await js.publish(f"{name}.a", bytes(50_000))
    sub = await nc.subscribe(f"{name}-deliver")
    start = time.monotonic()
    await _api(nc, f"$JS.API.CONSUMER.CREATE.{name}.R", {"stream_name": name, "config": {
        "name": "R", "deliver_subject": f"{name}-deliver", "rate_limit_bps": 800_000}})
    arrivals = []
    for _ in range(6):
        await sub.next_msg(10)
        arrivals.append(time.monotonic() - start)
    await js.delete_stream(name)
    return arrivals


async def test_rate_limit_lets_a_burst_through_then_spaces_deliveries(on_both: Any) -> None:
    """nats-server's bucket holds one max message (100 KB) and starts full: two 50 KB messages go at once,
    then one every 0.5 s. Only lower bounds are asserted (a busy machine only makes things later)."""
    for arrivals in await on_both(_rate_limited, "R"):
        gaps = [b - a for a, b in zip(arrivals[1:], arrivals[2:])]
        assert all(gap > 0.4 for gap in gaps), arrivals
        assert arrivals[-1] > 1.9, arrivals


async def _sampled_acks(nc: Any, name: str) -> list[Any]:
    """A pull consumer sampling every ack (100%): three messages fetched, two acked, one nak'ed then
    acked on its redelivery, one terminated; the ack metrics, without their ids, times and durations."""
    js = await stream_with(nc, name, 4)
    metrics = await nc.subscribe(f"$JS.EVENT.METRIC.CONSUMER.ACK.{name}.C")
    await _api(nc, f"$JS.API.CONSUMER.CREATE.{name}.C", {"stream_name": name, "config": {
        "durable_name": "C", "ack_policy": "explicit", "sample_freq": "100%"}})
    sub = await js.pull_subscribe_bind("C", name)
    first = await sub.fetch(4, timeout=5)
    await first[0].ack_sync()
    await first[1].ack_sync()
    await first[2].nak()
    await first[3].term()
    again = await sub.fetch(1, timeout=5)
    await again[0].ack_sync()
    out = []
    for _ in range(3):
        body = json.loads((await metrics.next_msg(5)).data)
        assert body.pop("ack_time") > 0 and body.pop("id") and body.pop("timestamp")
        out.append(body)
    await js.delete_stream(name)
    return out


async def test_sampled_acks_are_reported_like_nats_server(on_both: Any) -> None:
    ours, theirs = await on_both(_sampled_acks, "M")
    common = {"type": "io.nats.jetstream.metric.v1.consumer_ack", "consumer": "C"}
    assert [{k: v for k, v in m.items() if k != "stream"} for m in ours] == [
        {**common, "consumer_seq": 1, "stream_seq": 1, "deliveries": 1},
        {**common, "consumer_seq": 2, "stream_seq": 2, "deliveries": 1},
        {**common, "consumer_seq": 5, "stream_seq": 3, "deliveries": 2}]  # the redelivery; the term is not sampled
    assert ours == theirs
