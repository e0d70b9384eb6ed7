"""record.py: the stream and consumer record formats round-trip and reject damaged bytes."""

from __future__ import annotations

import pytest

from jsbroker.store import record


def test_message_record_round_trip_and_layout():
    rec = record.encode_msg(7, 123, -1, b"a.b", b"NATS/1.0\r\n\r\n", b"payload")
    assert len(rec) == record.OVERHEAD + 3 + 12 + 7
    assert int.from_bytes(rec[:4], "big") == len(rec) and rec[record.KIND_OFFSET : record.KIND_OFFSET + 1] == b"M"
    got = record.decode(rec)
    assert (got.kind, got.seq, got.ts, got.aux, got.subject, got.hdr, got.data) == (
        b"M", 7, 123, -1, b"a.b", b"NATS/1.0\r\n\r\n", b"payload")
    assert record.decode_msg(rec, 7) == (b"NATS/1.0\r\n\r\n", b"payload")
    assert record.file_size(3, 12, 7) == 22 + 3 + 4 + 12 + 7 + 8  # nats-server's fileStoreMsgSize
    assert record.file_size(3, 0, 7) == 22 + 3 + 7 + 8
    assert record.memory_size(3, 12, 7) == 3 + 12 + 7 + 16
    assert record.record_len_from_file_size(record.file_size(3, 12, 7), True) == len(rec)
    plain = record.encode_msg(7, 123, 0, b"a.b", b"", b"payload")
    assert record.record_len_from_file_size(record.file_size(3, 0, 7), False) == len(plain)


def test_fixed_records():
    floor = record.decode(record.encode_floor(10, 99, 5))
    assert (floor.kind, floor.seq, floor.ts, floor.aux) == (b"F", 10, 99, 5)
    assert record.decode(record.encode_delete(3)).seq == 3
    erased = record.encode_erased(4, 100)
    assert len(erased) == 100 and record.decode(erased).kind == b"D"


@pytest.mark.parametrize("damage", range(0, 60, 3))
def test_any_flipped_byte_is_detected(damage):
    rec = bytearray(record.encode_msg(1, 2, 0, b"s", b"", b"x" * 20))
    rec[damage] ^= 0x40
    with pytest.raises(record.RecordError):
        record.decode(bytes(rec))


def test_short_and_wrong_records():
    rec = record.encode_msg(1, 2, 0, b"s", b"", b"abc")
    with pytest.raises(record.RecordError, match="short"):
        record.check(rec[:10])
    with pytest.raises(record.RecordError, match="truncated"):
        record.check(rec[:-1])
    with pytest.raises(record.RecordError):
        record.decode_msg(rec, 2)  # another seq
    assert record.check(rec + b"more", 0)[0] == len(rec)  # a record followed by others


def test_consumer_frames():
    frame = record.encode_frame(record.KIND_ACK, record.ACK.pack(1, 2, True))
    assert record.decode_frame(frame + b"x") == (b"a", record.ACK.pack(1, 2, True), len(frame))
    with pytest.raises(record.RecordError):
        record.decode_frame(frame[:-1])
    with pytest.raises(record.RecordError):
        record.decode_frame(frame[:5] + bytes([frame[5] ^ 1]) + frame[6:])


def test_consumer_batch_frames():
    updates = [(b"d", record.DELIVERED.pack(1, 5, 1, 99)), (b"a", record.ACK.pack(1, 5, False)),
               (b"d", record.DELIVERED.pack(2, 6, 2, 100))]
    frame = record.encode_frame(record.KIND_BATCH, b"".join(k + p for k, p in updates))
    kind, payload, _ = record.decode_frame(frame)
    assert kind == record.KIND_BATCH and list(record.batch_updates(payload)) == updates
    with pytest.raises(record.RecordError, match="bad update"):
        list(record.batch_updates(payload[:-1]))  # a cut-off update
    with pytest.raises(record.RecordError, match="bad update"):
        list(record.batch_updates(b"x" + payload))  # an unknown kind
