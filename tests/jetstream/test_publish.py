"""Differential tests of the publish path: pub acks and every publish header check, against nats-server.

Each case is a list of raw requests (stream API calls and publishes with headers) sent to both servers;
the acks, errors and resulting stream state must be the same.
"""

import asyncio

import nats
import pytest
from nats.js.errors import NoStreamResponseError

from tests.jetstream.conftest import raw_publishes
from tests.jetstream.test_stream_api import C, D, G, I, P, U, cfg, on_storage, pub  # noqa: E741

CASES = {
    # nats-server stores a publish without a reply asynchronously: the acked one after it (same stream,
    # processed in order) is what INFO waits behind, or a loaded machine sees 1 message there.
    "plain_acks_and_no_reply": [(C, cfg()), pub("{S}.a"), pub("{S}.b", ""), pub("{S}.c"), (I, ""), (D, "")],
    "expected_stream": [(C, cfg()), pub("{S}.a", Nats_Expected_Stream="{S}"),
                        pub("{S}.a", Nats_Expected_Stream="other"), (D, "")],
    "expected_last_sequence": [(C, cfg()), pub("{S}.a", Nats_Expected_Last_Sequence="0"),
                               pub("{S}.a", Nats_Expected_Last_Sequence="0"),
                               pub("{S}.b", Nats_Expected_Last_Sequence="1"),
                               pub("{S}.b", Nats_Expected_Last_Sequence="x"), (D, "")],
    "expected_last_subject_sequence": [(C, cfg()), pub("{S}.k", Nats_Expected_Last_Subject_Sequence="0"),
                                       pub("{S}.k", Nats_Expected_Last_Subject_Sequence="0"),
                                       pub("{S}.j", Nats_Expected_Last_Subject_Sequence="0"),
                                       pub("{S}.k", Nats_Expected_Last_Subject_Sequence="1"),
                                       pub("{S}.k", Nats_Expected_Last_Subject_Sequence="1"),
                                       pub("{S}.x", Nats_Expected_Last_Subject_Sequence="2",
                                           Nats_Expected_Last_Subject_Sequence_Subject="{S}.j"),
                                       pub("{S}.x", Nats_Expected_Last_Subject_Sequence="3",
                                           Nats_Expected_Last_Subject_Sequence_Subject="{S}.*"),
                                       pub("{S}.x", Nats_Expected_Last_Subject_Sequence_Subject="{S}.j"),
                                       (D, "")],
    "msg_id_dedupe": [(C, cfg()), pub("{S}.a", Nats_Msg_Id="m1"), pub("{S}.a", Nats_Msg_Id="m1"),
                      pub("{S}.b", Nats_Msg_Id="m2"), pub("{S}.c", Nats_Msg_Id="m1"), (I, ""), (D, "")],
    "msg_id_duplicate_wins_over_later_checks": [(C, cfg()), pub("{S}.a", Nats_Msg_Id="m1"),
                                                pub("{S}.a", Nats_Msg_Id="m1", Nats_Expected_Last_Msg_Id="zz"),
                                                pub("{S}.a", Nats_Msg_Id="m1", Nats_Expected_Last_Sequence="7"),
                                                (D, "")],
    "expected_last_msg_id": [(C, cfg()), pub("{S}.a", Nats_Expected_Last_Msg_Id="none"),
                             pub("{S}.a", Nats_Msg_Id="first"), pub("{S}.a", Nats_Expected_Last_Msg_Id="first"),
                             pub("{S}.a", Nats_Expected_Last_Msg_Id="first"), (D, "")],
    "rollup_not_permitted_and_invalid": [(C, cfg()), pub("{S}.a", Nats_Rollup="sub"),
                                         ("$JS.API.STREAM.CREATE.{S}r", {"name": "{S}r", "subjects": ["{S}r.>"],
                                                                         "storage": "memory",
                                                                         "allow_rollup_hdrs": True}),
                                         pub("{S}r.a", Nats_Rollup="bogus"),
                                         ("$JS.API.STREAM.DELETE.{S}r", ""), (D, "")],
    # nats-server compares the value in lower case (Nats-Schedule-Rollup stays case-sensitive)
    "rollup_values_in_any_case": [(C, cfg(allow_rollup_hdrs=True, allow_msg_schedules=True)),
                                  *[pub(f"{{S}}.{s}") for s in "aabb"], pub("{S}.a", Nats_Rollup="SUB"),
                                  (I, {"subjects_filter": "{S}.>"}), pub("{S}.b", Nats_Rollup="Sub"),
                                  pub("{S}.c", Nats_Rollup="BOGUS"), pub("{S}.c", Nats_Rollup="All"),
                                  (I, {"subjects_filter": "{S}.>"}),
                                  pub("{S}.s", Nats_Schedule="@at 2099-01-01T00:00:00Z", Nats_Schedule_Target="{S}.t",
                                      Nats_Rollup="SUB"),
                                  pub("{S}.s", Nats_Schedule="@at 2099-01-01T00:00:00Z", Nats_Schedule_Target="{S}.t",
                                      Nats_Schedule_Rollup="SUB"),
                                  (G, {"last_by_subj": "{S}.s"}), (I, {"subjects_filter": "{S}.>"}), (D, "")],
    "rollup_sub_and_all": [(C, cfg(allow_rollup_hdrs=True)), *[pub(f"{{S}}.{s}") for s in "aabbab"],
                           pub("{S}.a", Nats_Rollup="sub"), (I, {"subjects_filter": "{S}.>"}),
                           pub("{S}.c", Nats_Rollup="all"), (I, {"subjects_filter": "{S}.>"}), (D, "")],
    "max_msg_size": [(C, cfg(max_msg_size=10)), pub("{S}.a", "x" * 10), pub("{S}.a", "x" * 11),
                     pub("{S}.a", "x", Nats_Msg_Id="0123456789"), (D, "")],
    "discard_new_max_msgs": [(C, cfg(discard="new", max_msgs=2)), pub("{S}.a"), pub("{S}.b"), pub("{S}.c"),
                             (I, ""), (D, "")],
    "discard_new_max_bytes": [(C, cfg(discard="new", max_bytes=100)), pub("{S}.a", "x" * 40),
                              pub("{S}.a", "x" * 40), pub("{S}.a", "x" * 5), (D, "")],
    "discard_new_per_subject": [(C, cfg(discard="new", max_msgs_per_subject=1, discard_new_per_subject=True,
                                        allow_rollup_hdrs=True)),
                                pub("{S}.a"), pub("{S}.a"), pub("{S}.b"), pub("{S}.a", Nats_Rollup="sub"), (I, ""),
                                (D, "")],
    "discard_new_subject_limit_replaces": [(C, cfg(discard="new", max_msgs=2, max_msgs_per_subject=1)),
                                           pub("{S}.a"), pub("{S}.b"), pub("{S}.a"), pub("{S}.c"), (I, ""), (D, "")],
    "discard_old_limits": [(C, cfg(max_msgs=3, max_msgs_per_subject=2)), *[pub(f"{{S}}.{s}") for s in "aaabcd"],
                           (I, {"subjects_filter": ">"}), (D, "")],
    "ttl_disabled_and_invalid": [(C, cfg()), pub("{S}.a", Nats_TTL="5s"), pub("{S}.a", Nats_TTL="bogus"),
                                 (U, cfg(allow_msg_ttl=True)), pub("{S}.a", Nats_TTL="bogus"),
                                 pub("{S}.a", Nats_TTL="500ms"), pub("{S}.a", Nats_TTL="-3"),
                                 pub("{S}.a", Nats_TTL="10"), pub("{S}.a", Nats_TTL="1m"),
                                 pub("{S}.a", Nats_TTL="never"), (I, ""), (D, "")],
    "interest_without_consumers_skips": [(C, cfg(retention="interest")), pub("{S}.a"), pub("{S}.a", Nats_Msg_Id="i1"),
                                         pub("{S}.a", Nats_Msg_Id="i1"), pub("{S}.b"), (G, {"seq": 1}),
                                         (G, {"last_by_subj": "{S}.>"}), (D, "")],
    "interest_skip_sets_last_ts": [(C, cfg(retention="interest")), (I, ""), pub("{S}.a"), (I, ""),
                                   pub("{S}.a", Nats_Msg_Id="i1"), (I, ""), (D, "")],
    "first_seq": [(C, cfg(first_seq=100)), (I, ""), pub("{S}.a"), (I, ""), (D, "")],
    "no_ack_stream": [(C, cfg(no_ack=True)), pub("{S}.a"), (I, ""), (D, "")],
    "sealed_rejects": [(C, cfg()), pub("{S}.a"), (U, cfg(sealed=True)), pub("{S}.a", Nats_Msg_Id="q"), (D, "")],
    "purge_then_publish_continues_sequence": [(C, cfg()), pub("{S}.a"), pub("{S}.a"), (P, ""), pub("{S}.a"),
                                              (I, ""), (D, "")],
    "header_order_expected_stream_before_sequence": [(C, cfg()), pub("{S}.a"),
                                                     pub("{S}.a", Nats_Expected_Stream="zz",
                                                         Nats_Expected_Last_Sequence="9", Nats_TTL="bad"),
                                                     pub("{S}.a", Nats_Expected_Last_Sequence="9", Nats_TTL="5"),
                                                     pub("{S}.a", Nats_Expected_Last_Subject_Sequence="5",
                                                         Nats_Expected_Last_Sequence="9"),
                                                     (D, "")],
}


@pytest.mark.parametrize("storage", ["memory", "file"])
@pytest.mark.parametrize("name", sorted(CASES))
async def test_publish_matches_nats_server(differential, name, storage):
    ours, theirs = await differential(on_storage(CASES[name], storage))
    assert ours == theirs


async def test_trailing_blanks_in_header_values_like_nats_server(nats_server, jsbroker_server, unique):
    """nats-server drops only the spaces before a header value (nats-py strips both sides: raw HPUBs): a
    trailing blank makes another message id, no sequence, another stream name, no TTL; digits are ASCII."""
    name = unique("BLANK")
    stream = {"name": name, "subjects": [f"{name}.>"], "storage": "memory", "allow_msg_ttl": True,
              "allow_rollup_hdrs": True}
    sends = [(f"{name}.a", b"NATS/1.0\r\n" + line + b"\r\n\r\n") for line in (
        b"Nats-Msg-Id: m1", b"Nats-Msg-Id: m1 ", b"Nats-Msg-Id:   m1 ", b"Nats-Msg-Id:m1", b"Nats-Msg-Id: \tm1",
        b"Nats-Expected-Last-Sequence: 3 ", "Nats-Expected-Last-Sequence: \u0663".encode(),  # an Arabic-Indic 3
        b"Nats-Expected-Last-Sequence:  3",
        b"Nats-Expected-Last-Subject-Sequence: 3 ", b"Nats-Expected-Last-Msg-Id: m1 ",
        b"Nats-Expected-Stream: " + name.encode() + b" ", b"Nats-TTL: 5s ", b"Nats-TTL:  5s", b"Nats-TTL: 10 ",
        b"Nats-TTL: never ", "Nats-TTL: \u0661\u0660".encode(), b"Nats-Rollup: sub ")]
    theirs = await raw_publishes(nats_server.port, stream, sends)
    ours = await raw_publishes(jsbroker_server.port, stream, sends)
    assert ours == theirs
    assert [ack.get("duplicate", False) for ack in ours[:4]] == [False, False, True, True]
    assert ours[5]["error"]["err_code"] == ours[6]["error"]["err_code"] == 10071 and ours[7]["seq"] == 4


async def test_publish_without_stream_gets_no_responders(server, unique):
    nc = await nats.connect(server.url)
    try:
        with pytest.raises(NoStreamResponseError):
            await nc.jetstream().publish(unique("nostream") + ".x", b"x", timeout=2)
    finally:
        await nc.close()


async def test_max_age_expires_on_a_timer_without_new_publishes(server, unique):
    """Expiry runs on a timer: the messages go even though nothing else is published."""
    nc = await nats.connect(server.url)
    name = unique("AGE")
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[name + ".>"], max_age=0.3, storage="memory")
        for i in range(3):
            await js.publish(f"{name}.x", str(i).encode())
        assert (await js.stream_info(name)).state.messages == 3
        deadline = asyncio.get_running_loop().time() + 5
        while (await js.stream_info(name)).state.messages and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)  # poll interval while waiting for the server's own timer
        state = (await js.stream_info(name)).state
        assert (state.messages, state.first_seq, state.last_seq) == (0, 4, 3)
        await js.delete_stream(name)
    finally:
        await nc.close()


async def test_per_message_ttl_expires(server, unique):
    nc = await nats.connect(server.url)
    name = unique("TTL")
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[name + ".>"], allow_msg_ttl=True, storage="memory")
        await js.publish(f"{name}.short", b"1", headers={"Nats-TTL": "1s"})
        await js.publish(f"{name}.long", b"2", headers={"Nats-TTL": "1h"})
        deadline = asyncio.get_running_loop().time() + 6
        while (await js.stream_info(name)).state.messages > 1 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)  # poll interval while waiting for the server's own timer
        state = (await js.stream_info(name)).state
        assert (state.messages, state.first_seq) == (1, 2)
        await js.delete_stream(name)
    finally:
        await nc.close()


async def test_publish_without_reply_is_stored_silently(server, unique):
    nc = await nats.connect(server.url)
    name = unique("NR")
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[name + ".>"], storage="memory")
        await nc.publish(f"{name}.x", b"fire-and-forget")
        await nc.flush()
        deadline = asyncio.get_running_loop().time() + 5
        while (await js.stream_info(name)).state.messages < 1 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)  # poll interval; the publish has no ack to wait for
        assert (await js.get_msg(name, 1)).data == b"fire-and-forget"
        await js.delete_stream(name)
    finally:
        await nc.close()


async def test_near_max_payload_message_round_trips(server, unique):
    """A message just under max_payload is stored and read back whole (MSG.GET answers beyond 1 MiB)."""
    nc = await nats.connect(server.url)
    name = unique("BIG")
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[name + ".>"], storage="file")
        body = bytes(range(256)) * ((nc.max_payload - 1024) // 256)
        ack = await js.publish(f"{name}.big", body, headers={"Nats-Msg-Id": "big"})
        assert (await js.get_msg(name, ack.seq)).data == body
        assert (await js.get_last_msg(name, f"{name}.big")).headers["Nats-Msg-Id"] == "big"
        await js.delete_stream(name)
    finally:
        await nc.close()


def _accounted(storage: str, subject: str, hdr: bytes, data: bytes) -> int:
    """nats-server's per-message byte accounting (filestore / memstore)."""
    if storage == "memory":
        return len(subject) + len(hdr) + len(data) + 16
    return 22 + len(subject) + (4 + len(hdr) if hdr else 0) + len(data) + 8


@pytest.mark.parametrize("storage", ["memory", "file"])
@pytest.mark.parametrize("discard", ["new", "old"])
async def test_max_bytes_boundary_matches_nats_server(nats_server, jsbroker_server, unique, storage, discard):
    """max_bytes set to exactly two messages' accounted size (one with a header): the third publish is
    refused (discard new) or pushes the first out (discard old); `bytes` is the same on both servers."""
    from tests.jetstream.conftest import replay

    name = unique("MB")
    sub = name + ".a"
    hdr = {"Nats-Msg-Id": "m1"}
    wire_hdr = b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n"
    limit = _accounted(storage, sub, wire_hdr, b"x" * 20) + _accounted(storage, sub, b"", b"y" * 30)
    create = {"name": "{S}", "subjects": ["{S}.>"], "storage": storage, "discard": discard, "max_bytes": limit}
    steps = [("$JS.API.STREAM.CREATE.{S}", create), ("{S}.a", "x" * 20, hdr), ("{S}.a", "y" * 30),
             ("$JS.API.STREAM.INFO.{S}", ""), ("{S}.a", "z"), ("$JS.API.STREAM.INFO.{S}", ""),
             ("$JS.API.STREAM.DELETE.{S}", "")]
    ours, theirs = await asyncio.gather(replay(jsbroker_server.url, steps, name),
                                        replay(nats_server.url, steps, name, retry_store_race=True))
    assert ours == theirs
    assert ours[3]["state"]["bytes"] == limit


async def test_publishes_then_stream_delete_in_one_read_are_all_acked(jsbroker_server, unique):
    """Publishes into a file stream and a STREAM.DELETE in one socket read: every publish is acked as
    stored (jsbroker holds file-stream acks until the read's records are written, and handles a read in
    order). jsbroker only: nats-server stores asynchronously and may answer 10077 when the delete wins."""
    from tests.broker.raw import CONNECT, Raw

    server = jsbroker_server
    name = unique("DEL")
    nc = await nats.connect(server.url)
    try:
        await nc.jetstream().add_stream(name=name, subjects=[name + ".>"], storage="file")
    finally:
        await nc.close()
    raw = Raw(int(server.url.rsplit(":", 1)[1]))
    pubs = b"".join(b"PUB %s.x ack.%d 1\r\nx\r\n" % (name.encode(), i) for i in range(3))
    raw.send(CONNECT + b"SUB ack.* 1\r\n" + pubs + b"PUB $JS.API.STREAM.DELETE.%s ack.9 0\r\n\r\nPING\r\n" % name.encode())
    got = b""
    deadline = asyncio.get_running_loop().time() + 5
    while got.count(b"MSG ack.") < 4 and asyncio.get_running_loop().time() < deadline:
        got += await asyncio.to_thread(raw.read_until, b"}\r\n", 1.0)
    raw.sock.close()
    for i in range(3):
        assert b'MSG ack.%d 1' % i in got and b'"seq":%d}' % (i + 1) in got
    assert got.count(b'"success":true') == 1 and b"error" not in got
