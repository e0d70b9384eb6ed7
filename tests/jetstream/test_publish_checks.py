"""A stream's publish checks, the pure part (`jsbroker.jetstream.publish_checks`): one message against a real
memory store, a msg-id window and a config, no server. End to end, against nats-server, in test_publish.py,
test_dedupe.py, test_stream_limits.py, test_delete_markers.py and the batch tests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jsbroker.jetstream import errors, headers
from jsbroker.jetstream.dedupe import MsgIdWindow
from jsbroker.jetstream.publish_checks import (MAX_HEADER_SIZE, check_batch, check_discard_new, check_headers,
                                               check_resources, check_size, check_ttl, header_ttl)
from jsbroker.jetstream.stream_config import StreamConfig
from jsbroker.store.memory import MemoryStore

S = 1_000_000_000
NOW = 1_700_000_000 * S
CONFIG = StreamConfig(name="ORDERS", subjects=("orders.>",), duplicate_window=120 * S)


def stored(*msgs: tuple[str, bytes]) -> MemoryStore:
    store = MemoryStore(CONFIG.store_limits())
    for subject, hdr in msgs:
        store.store_msg(subject, hdr, b"x")
    return store


def hdr(**pairs: str) -> bytes:
    names = {"expected_stream": headers.EXPECTED_STREAM, "ttl": headers.TTL, "msg_id": headers.MSG_ID,
             "last_seq": headers.EXPECTED_LAST_SEQ, "last_subj_seq": headers.EXPECTED_LAST_SUBJ_SEQ,
             "last_subj": headers.EXPECTED_LAST_SUBJ_SEQ_SUBJ, "last_msg_id": headers.EXPECTED_LAST_MSG_ID,
             "rollup": headers.ROLLUP, "source": headers.STREAM_SOURCE}
    return headers.build((names[k], v) for k, v in pairs.items())


def check(h: bytes, config: StreamConfig = CONFIG, store: MemoryStore | None = None, ids: MsgIdWindow | None = None,
          last_seq: int = 0, last_msg_id: str = "", **flags: bool) -> tuple[str, str, int, int, bytes]:
    store = store if store is not None else stored()
    return tuple(check_headers("orders.1", h, config, store, ids or MsgIdWindow(config.duplicate_window), last_seq,
                               last_msg_id, NOW, **flags))  # type: ignore[return-value]


def refused(kind: errors.ErrorKind, call: object, *args: object, **kw: object) -> errors.ApiError:
    with pytest.raises(errors.ApiError) as caught:
        call(*args, **kw)  # type: ignore[operator]
    assert caught.value.kind == kind, caught.value.to_dict()
    return caught.value


def test_plain_headers_pass_and_name_the_msg_id() -> None:
    h = hdr(msg_id="a1")
    assert check(h) == ("a1", "", 0, 0, h)


def test_expected_stream_must_be_this_one() -> None:
    assert check(hdr(expected_stream="ORDERS"))[3] == 0
    refused(errors.STREAM_NOT_MATCH, check, hdr(expected_stream="OTHER"))


def test_ttl_needs_allow_msg_ttl_except_on_a_sourced_copy() -> None:
    refused(errors.MESSAGE_TTL_DISABLED, check, hdr(ttl="5s"))
    assert check(hdr(ttl="5s"), sourced=True)[2] == 0  # kept as a header, never expires the copy
    allowed = replace(CONFIG, allow_msg_ttl=True)
    assert check(hdr(ttl="5s"), allowed)[2] == 5
    assert check(hdr(ttl="never"), allowed)[2] == -1
    assert check(hdr(ttl="soon"), CONFIG)[2] == -2  # invalid: refused later, by check_ttl


def test_expected_last_subject_sequence_reads_the_store() -> None:
    store = stored(("orders.1", b""), ("orders.2", b""), ("orders.1", b""))
    assert check(hdr(last_subj_seq="3"), store=store)[3] == 0
    err = refused(errors.STREAM_WRONG_LAST_SEQUENCE, check, hdr(last_subj_seq="1"), store=store)
    assert err.description == "wrong last sequence: 3"
    assert check(hdr(last_subj_seq="2", last_subj="orders.2"), store=store)[3] == 0  # another subject's
    refused(errors.STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID, check, hdr(last_subj="orders.2"), store=store)


def test_expected_last_sequence_is_the_streams() -> None:
    assert check(hdr(last_seq="7"), last_seq=7)[3] == 0
    err = refused(errors.STREAM_WRONG_LAST_SEQUENCE, check, hdr(last_seq="6"), last_seq=7)
    assert err.description == "wrong last sequence: 7"


def test_a_duplicate_inside_the_window_names_the_original_before_later_checks() -> None:
    ids = MsgIdWindow(CONFIG.duplicate_window)
    ids.add("old", 1, NOW - 121 * S)
    ids.add("a1", 4, NOW - 10 * S)
    # the duplicate is answered although its Expected-Last-Msg-Id would be wrong
    assert check(hdr(msg_id="a1", last_msg_id="zz"), ids=ids)[3] == 4
    assert check(hdr(msg_id="old"), ids=ids)[3] == 0  # outside the window
    assert check(hdr(msg_id="a1"), replace(CONFIG, duplicate_window=0), ids=ids)[3] == 0


def test_expected_last_msg_id_is_the_newest_messages() -> None:
    assert check(hdr(last_msg_id="a1"), last_msg_id="a1")[3] == 0
    err = refused(errors.STREAM_WRONG_LAST_MSG_ID, check, hdr(last_msg_id="a1"), last_msg_id="b2")
    assert err.description == "wrong last msg ID: b2"


def test_rollup_needs_the_permission_and_a_known_value() -> None:
    allowed = replace(CONFIG, allow_rollup_hdrs=True)
    assert check(hdr(rollup="sub"), allowed)[1] == "sub"
    refused(errors.STREAM_ROLLUP_FAILED, check, hdr(rollup="sub"))
    refused(errors.STREAM_ROLLUP_FAILED, check, hdr(rollup="sub"), replace(allowed, deny_purge=True))
    err = refused(errors.STREAM_ROLLUP_FAILED, check, hdr(rollup="some"), allowed)
    assert err.description == 'rollup value invalid: "some"'
    assert check(hdr(rollup="all"), sourced=True)[1] == ""  # a sourced one is not refused: it purges nothing


def test_a_stream_source_header_only_on_a_sourced_copy() -> None:
    h = hdr(source="ORIGIN 1 > >")
    refused(errors.MESSAGE_SOURCE_HDR_NOT_ALLOWED, check, h)
    assert check(h, sourced=True)[4] == h


def test_size_checks_the_message_then_the_header_block() -> None:
    check_size(b"h" * 10, b"p" * 10, 20)
    check_size(b"h" * MAX_HEADER_SIZE, b"", -1)
    refused(errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM, check_size, b"h" * 10, b"p" * 11, 20)
    refused(errors.STREAM_HEADER_EXCEEDS_MAXIMUM, check_size, b"h" * (MAX_HEADER_SIZE + 1), b"", -1)
    refused(errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM, check_size, b"h" * (MAX_HEADER_SIZE + 1), b"", 1000)


def test_ttl_value_and_the_delete_marker_floor() -> None:
    assert check_ttl(5, b"", 0, -1) == (5, b"")
    assert check_ttl(-1, b"", 10, -1) == (-1, b"")
    refused(errors.MESSAGE_TTL_INVALID, check_ttl, -2, b"", 0, -1)
    h = hdr(ttl="5")
    ttl, raised = check_ttl(5, h, 10, -1)
    assert (ttl, headers.get(raised, headers.TTL)) == (10, "10")
    assert check_ttl(5, h, 10, 1) == (5, h)  # one message per subject: no marker replaces it


def test_header_ttl_counts_an_invalid_value_as_none() -> None:
    assert [header_ttl(hdr(ttl=t)) for t in ("30", "1m", "never", "soon")] == [30, 60, -1, 0]
    assert header_ttl(hdr(msg_id="a")) == 0


def test_discard_new_limits() -> None:
    store = stored(("orders.1", b""), ("orders.1", b""), ("orders.2", b""))
    new = replace(CONFIG, discard="new")
    check_discard_new("orders.3", b"", b"x", "", replace(new, max_msgs=4), store)
    err = refused(errors.STREAM_STORE_FAILED, check_discard_new, "orders.3", b"", b"x", "", replace(new, max_msgs=3),
                  store)
    assert err.description == "maximum messages exceeded"
    room = store.state().bytes + store.accounted_size("orders.3", b"", b"x")
    check_discard_new("orders.3", b"", b"x", "", replace(new, max_bytes=room), store)
    err = refused(errors.STREAM_STORE_FAILED, check_discard_new, "orders.3", b"", b"x", "",
                  replace(new, max_bytes=room - 1), store)
    assert err.description == "maximum bytes exceeded"
    per_subject = replace(new, max_msgs_per_subject=2, discard_new_per_subject=True, max_msgs=3)
    err = refused(errors.STREAM_STORE_FAILED, check_discard_new, "orders.1", b"", b"x", "", per_subject, store)
    assert err.description == "maximum messages per subject exceeded"
    check_discard_new("orders.1", b"", b"x", "sub", per_subject, store)  # a rollup makes room
    # at its subject's limit without discard_new_per_subject: its oldest goes, max_msgs does not refuse it
    check_discard_new("orders.1", b"", b"x", "", replace(per_subject, discard_new_per_subject=False), store)


def test_batch_checks_in_nats_servers_order() -> None:
    full = lambda storage: errors.INSUFFICIENT_RESOURCES if storage == "file" else None  # noqa: E731
    check_batch(b"", b"x" * 10, replace(CONFIG, storage="memory", max_msg_size=10), full)  # memory has room
    refused(errors.STREAM_SEALED, check_batch, b"", b"x" * 11, replace(CONFIG, sealed=True, storage="file",
                                                                       max_msg_size=10), full)
    refused(errors.INSUFFICIENT_RESOURCES, check_batch, b"", b"x" * 11, replace(CONFIG, storage="file",
                                                                                max_msg_size=10), full)
    refused(errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM, check_batch, b"", b"x" * 11, replace(CONFIG, max_msg_size=10),
            None)
    check_resources("file", None)
    refused(errors.INSUFFICIENT_RESOURCES, check_resources, "file", full)
