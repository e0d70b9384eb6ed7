"""Message counters (ADR-49) against nats-server: counter stream configs, `Nats-Incr` publishes (the
pub ack's "val", the stored `{"val":"N"}` and its headers), every refusal, the totals across SIGTERM and
kill -9 restarts, and counters summed from other counter streams through sources (Nats-Counter-Sources)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest

from jsbroker.jetstream import counters, errors
from tests.jetstream.conftest import raw_publishes
from tests.jetstream.test_stream_api import C, D, DG, G, I, P, U, cfg, on_storage, pub
from tests.polling import poll_async


def incr(subject: str, value: str, body: str = "", **headers: str) -> tuple[str, str, dict[str, str]]:
    return pub(subject, body, Nats_Incr=value, **headers)  # type: ignore[no-any-return]


def counter(**kw: Any) -> dict[str, Any]:
    return cfg(allow_msg_counter=True, **kw)


CASES = {
    "config_combinations": [(C, counter(discard="new")), (C, counter(allow_msg_ttl=True)),
                            (C, counter(retention="interest")), (C, counter(retention="workqueue")),
                            (C, {"name": "{S}", "mirror": {"name": "{S}o"}, "allow_msg_counter": True}),
                            (C, counter(allow_rollup_hdrs=True, max_msgs_per_subject=3)), (I, ""),
                            (U, cfg(allow_rollup_hdrs=True, max_msgs_per_subject=3)),
                            (U, counter(max_msgs=10)), (D, ""),
                            (C, cfg()), (U, counter()), (D, "")],
    "increments": [(C, counter()), incr("{S}.a", "1"), incr("{S}.a", "+5"), incr("{S}.a", "-10"),
                   incr("{S}.a", "007"), incr("{S}.a", "-0"), incr("{S}.b", "3"),
                   incr("{S}.a", "123456789012345678901234567890123456789"), incr("{S}.a", " 2"),
                   (G, {"last_by_subj": "{S}.a"}), (G, {"seq": 1}), (I, ""), (D, "")],
    "refusals": [(C, counter()), incr("{S}.a", "1"), incr("{S}.a", "1e3"), incr("{S}.a", "0x10"),
                 incr("{S}.a", "1_000"), incr("{S}.a", "1.5"), incr("{S}.a", "+"), incr("{S}.a", "--1"),
                 incr("{S}.a", "1", "body"), incr("{S}.a", "x", "body"), pub("{S}.a", ""), pub("{S}.a", "x"),
                 incr("{S}.a", ""), pub("{S}.a", "", Foo="bar"),
                 incr("{S}.a", "1", Nats_Rollup="sub"), incr("{S}.a", "1", Nats_Expected_Stream="{S}"),
                 incr("{S}.a", "1", Nats_Expected_Last_Sequence="1"),
                 incr("{S}.a", "1", Nats_Expected_Last_Subject_Sequence="1"),
                 incr("{S}.a", "1", Nats_Expected_Last_Msg_Id="x"),
                 incr("{S}.a", "1", Nats_Expected_Last_Subject_Sequence_Subject="{S}.a"),
                 incr("{S}.a", "1", Nats_TTL="5s"), incr("{S}.a", "1", Nats_Stream_Source="X 1 > > {S}.a"),
                 (I, ""), (D, "")],
    "not_a_counter_stream": [(C, cfg()), incr("{S}.a", "1"), incr("{S}.a", "x"), incr("{S}.a", "1", "body"),
                             incr("{S}.a", "x", "body"), pub("{S}.a", "y"), (I, ""), (D, "")],
    "msg_ids_and_duplicates": [(C, counter()), incr("{S}.a", "1", Nats_Msg_Id="m1"),
                               incr("{S}.a", "2", Nats_Msg_Id="m1"), incr("{S}.a", "x", Nats_Msg_Id="m1"),
                               incr("{S}.a", "4", Nats_Msg_Id="m2"), (G, {"last_by_subj": "{S}.a"}), (D, "")],
    "purge_and_limits_restart_the_total": [(C, counter(max_msgs_per_subject=1)), incr("{S}.a", "4"),
                                           incr("{S}.a", "4"), (P, {"filter": "{S}.a"}), incr("{S}.a", "1"),
                                           ("$JS.API.STREAM.MSG.DELETE.{S}", {"seq": 3}), incr("{S}.a", "1"),
                                           (I, ""), (D, "")],
    "rollup_without_increment": [(C, counter(allow_rollup_hdrs=True)), incr("{S}.a", "2"),
                                 pub("{S}.a", "", Nats_Rollup="sub"), pub("{S}.a", "", Nats_Rollup="bad"), (D, "")],
    "message_size_limit": [(C, counter(max_msg_size=40)), incr("{S}.a", "1"), incr("{S}.a", "9" * 12),
                           incr("{S}.a", "9" * 20), (I, ""), (D, "")],
    "sealed": [(C, counter()), incr("{S}.a", "1"), (U, counter(sealed=True)), incr("{S}.a", "x"), (D, "")],
    "transform_and_direct_get": [(C, counter(subject_transform={"src": "{S}.in.*", "dest": "{S}.c.{{wildcard(1)}}"},
                                             allow_direct=True)),
                                   incr("{S}.in.x", "2"), incr("{S}.in.x", "3"),
                                   (DG, {"last_by_subj": "{S}.c.x"}), ("$JS.API.DIRECT.GET.{S}.{S}.c.x", ""),
                                   (D, "")],
}


@pytest.mark.parametrize("storage", ["memory", "file"])
@pytest.mark.parametrize("name", sorted(CASES))
async def test_counters_match_nats_server(differential, name, storage):
    ours, theirs = await differential(on_storage(CASES[name], storage))
    assert ours == theirs


async def test_subject_delete_markers_are_refused_on_counter_streams(jsbroker_server, unique):
    """nats-server accepts them and then fails to store every marker (it has no Nats-Incr), keeping the
    expired counter and retrying every 2 s; jsbroker refuses the combination instead."""
    nc = await nats.connect(jsbroker_server.url)
    try:
        with pytest.raises(nats.js.errors.APIError) as refused:
            await nc.jetstream().add_stream(name=unique("SDM"), allow_msg_counter=True, max_age=60,
                                            subject_delete_marker_ttl=5)
        assert refused.value.err_code == 10052
        assert refused.value.description.startswith("subject_delete_marker_ttl: ")
    finally:
        await nc.close()


async def test_blanks_around_the_increment_like_nats_server(nats_server, jsbroker_server, unique):
    """Increments with blanks around the value, which nats-py strips (nats-server skips spaces before a
    header value, nothing after it)."""
    name = unique("RAW")
    stream = {"name": name, "subjects": [f"{name}.>"], "storage": "memory", "allow_msg_counter": True}
    sends = [(f"{name}.a", b"NATS/1.0\r\nNats-Incr:" + value + b"\r\n\r\n")
             for value in (b" 4", b"  4", b"4 ", b"\t4", b"4\t")]
    theirs = await raw_publishes(nats_server.port, stream, sends)
    ours = await raw_publishes(jsbroker_server.port, stream, sends)
    assert ours == theirs


async def test_the_stored_message_and_ack_hold_the_total(jsbroker_server, unique):
    """What the differential cases compare, spelled out once: the ack's val, the stored body and header."""
    nc = await nats.connect(jsbroker_server.url)
    name = unique("CNT")
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[f"{name}.>"], allow_msg_counter=True)
        acks = [await js.publish(f"{name}.hits", b"", headers={"Nats-Incr": n}) for n in ("5", "-2", "10")]
        assert [(a.seq, a.val) for a in acks] == [(1, "5"), (2, "3"), (3, "13")]
        msg = await js.get_msg(name, 3)
        assert json.loads(msg.data) == {"val": "13"} and msg.headers == {"Nats-Incr": "10"}
        with pytest.raises(nats.js.errors.BadRequestError) as refused:
            await js.publish(f"{name}.hits", b"")
        assert refused.value.err_code == errors.MESSAGE_INCR_MISSING.err_code
        await js.delete_stream(name)
    finally:
        await nc.close()


def test_totals_are_exact_at_any_size():
    big = "9" * 5000  # past Python's int/str conversion limit: Go's big.Int has none
    hdr, body, total = counters.apply(counters.increment(b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n", b"", True, False),
                                      (b"", b'{"val":"%s"}' % big.encode()), b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n", b"",
                                      1024 * 1024)
    assert total == "1" + "0" * 5000 and body == b'{"val":"1' + b"0" * 5000 + b'"}'
    with pytest.raises(errors.ApiError) as too_big:
        counters.apply(counters.increment(b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n", b"", True, False),
                       (b"", b'{"val":"%s"}' % big.encode()), b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n", b"", 4000)
    assert too_big.value.err_code == 10054


@pytest.mark.parametrize("stored", [b"not json", b'{"val": 5}', b'{"val":"x"}', b"[1]"])
def test_a_broken_stored_total_is_refused(stored):
    with pytest.raises(errors.ApiError) as broken:
        counters.apply(counters.increment(b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n", b"", True, False), (b"", stored),
                       b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n", b"", 1024)
    assert broken.value.err_code == errors.MESSAGE_COUNTER_BROKEN.err_code


# -- restarts ---------------------------------------------------------------------------------------


async def _restart_transcript(handle: Any) -> list[Any]:
    out: list[Any] = []

    async def bump(values: list[tuple[str, str]]) -> None:
        nc = await nats.connect(handle.url)
        js = nc.jetstream()
        for subject, value in values:
            ack = await js.publish(subject, b"", headers={"Nats-Incr": value})
            out.append((subject, ack.seq, ack.val))
        await nc.close()

    nc = await nats.connect(handle.url)
    await nc.jetstream().add_stream(name="CNT", subjects=["cnt.>"], allow_msg_counter=True, max_msgs_per_subject=2)
    await nc.close()
    await bump([("cnt.a", "1"), ("cnt.b", "7"), ("cnt.a", "41"), ("cnt.a", "-2")])
    handle.restart()  # SIGTERM
    await bump([("cnt.a", "2"), ("cnt.b", "1")])
    handle.kill()  # kill -9
    handle.start()
    await bump([("cnt.a", "10"), ("cnt.b", "-8"), ("cnt.c", "1")])
    nc = await nats.connect(handle.url)
    info = await nc.jetstream().stream_info("CNT")
    out.append((info.config.allow_msg_counter, info.state.messages, info.state.last_seq))
    await nc.close()
    return out


@pytest.mark.slow
async def test_totals_continue_after_sigterm_and_kill_like_nats_server(server_factory):
    theirs = await _restart_transcript(server_factory("nats-server"))
    ours = await _restart_transcript(server_factory("jsbroker"))
    assert ours == theirs
    assert ours[-4:-1] == [("cnt.a", 7, "52"), ("cnt.b", 8, "0"), ("cnt.c", 9, "1")]


# -- sources ----------------------------------------------------------------------------------------


async def _sourced_counters(nc: Any, name: str) -> list[Any]:
    """Two counter streams summed into a third through sources mapping both onto one subject, the third
    also counting on its own; a plain stream sourcing a counter stream keeps its messages as they are."""
    js = nc.jetstream()
    a, b, total, plain = f"{name}A", f"{name}B", f"{name}T", f"{name}P"
    for origin in (a, b):
        await js.add_stream(name=origin, subjects=[f"{origin}.>"], allow_msg_counter=True)

    def source(origin: str) -> dict[str, Any]:
        return {"name": origin, "subject_transforms": [{"src": f"{origin}.>", "dest": f"{total}.>"}]}

    await nc.request(f"$JS.API.STREAM.CREATE.{total}", json.dumps(
        {"name": total, "subjects": [f"{total}.>"], "allow_msg_counter": True,
         "sources": [source(a), source(b)]}).encode(), timeout=5)
    await nc.request(f"$JS.API.STREAM.CREATE.{plain}", json.dumps(
        {"name": plain, "subjects": [f"{plain}.>"], "sources": [{"name": a}]}).encode(), timeout=5)

    async def settled(stream: str, last_seq: int) -> None:
        async def reached() -> bool:
            return (await js.stream_info(stream)).state.last_seq >= last_seq
        await poll_async(reached, timeout=30, what=f"{stream} at seq {last_seq}")

    out: list[Any] = []
    steps = [(a, "x", "1", 1), (a, "x", "2", 2), (b, "x", "10", 3), (total, "x", "100", 4), (b, "y", "5", 5),
             (a, "x", "-4", 6)]
    for origin, key, value, seq in steps:
        ack = await js.publish(f"{origin}.{key}", b"", headers={"Nats-Incr": value})
        out.append((origin[len(name):], ack.val))
        await settled(total, seq)
    await settled(plain, 3)
    for stream, last in ((total, 6), (plain, 3)):
        for seq in range(1, last + 1):
            msg = await js.get_msg(stream, seq)
            hdrs = msg.headers or {}
            out.append((stream[len(name):], seq, msg.subject[len(name):], json.loads(msg.data),
                        hdrs.get("Nats-Incr"), (hdrs.get("Nats-Counter-Sources") or "").replace(name, "")))
    for stream in (a, b, total, plain):
        await js.delete_stream(stream)
    return out


async def test_sources_sum_counters_like_nats_server(on_both):
    ours, theirs = await on_both(_sourced_counters, "SC")
    assert ours == theirs
    assert ("T", 6, "T.x", {"val": "109"}, "-4", '{"A":{"A.x":"-1"},"B":{"B.x":"10"}}') in ours
