"""Batch reads (`load_next_msgs`) give exactly what repeated `load_next_msg` gives, for every way the store
picks and reads them (all subjects, a few, many; runs across gaps and blocks), and what reads check."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from jsbroker.store import SyncPolicy, record
from jsbroker.store.base import StoreLimits
from jsbroker.store.file import FileStore

from .helpers import StoreFactory

HDR = b"NATS/1.0\r\nK: v\r\n\r\n"


@pytest.fixture(params=["memory", "file"])
def factory(request, tmp_path):
    return StoreFactory(request.param, tmp_path / "stream")


def reference(store, start: int, filters: list[str] | None, count: int, max_bytes: int, factory) -> list[tuple]:
    """What load_next_msgs must return, from one load_next_msg call per message."""
    out: list[tuple] = []
    total = 0
    while len(out) < count:
        found = [m for f in (filters or [None]) if (m := store.load_next_msg(start, f)) is not None]
        if not found:
            break
        m = min(found, key=lambda m: m.seq)
        out.append((m.seq, m.subject, m.hdr, m.data, m.ts))
        total += factory.size(m.subject, m.hdr, m.data)
        if max_bytes and total >= max_bytes:
            break
        start = m.seq + 1
    return out


def fill(store, rng: random.Random, n: int, subjects: list[str]) -> None:
    for i in range(n):
        big = rng.random() < 0.05  # bodies above the read-through gap split a file store's runs
        data = rng.randbytes(rng.randrange(6000, 9000) if big else rng.randrange(200))
        store.store_msg(rng.choice(subjects), HDR if rng.random() < 0.2 else b"", data)


# 40 subjects: "k.a.*" matches 20 of them (more than the few merged per subject, fewer than all).
SUBJECTS = [f"k.{p}.{i}" for p in "ab" for i in range(20)]
FILTERS = [None, [">"], ["k.a.3"], ["k.a.3", "k.b.7"], ["k.a.*"], ["k.*.1"], ["k.>"], ["k.a.*", "k.b.0"],
           ["k.a.1", ">"], ["nope"], ["k.a.3", "nope"]]


@pytest.mark.parametrize("seed", range(3))
def test_batch_reads_equal_one_by_one(factory, seed):
    rng = random.Random(seed)
    s = factory.open()
    fill(s, rng, 1200, SUBJECTS)
    for seq in rng.sample(range(1, 1201), 300):
        s.remove_msg(seq)
    for seq in range(400, 700):  # a long gap: the all-subjects walk has to jump it
        s.remove_msg(seq)
    s.store_deferred("k.a.3", b"", b"pending")  # read before its flush
    last = s.state().last_seq
    assert [m.data for m in s.load_next_msgs(last - 1, ["k.a.3"], 5)][-1] == b"pending"
    for filters in FILTERS:
        for _ in range(12):
            start = rng.choice([0, 1, rng.randrange(1, last + 2), 390, last, last + 1])
            count = rng.choice([1, 3, 8, 64, 300, 2000])
            max_bytes = rng.choice([0, 0, 1, 500, 20_000])
            want = reference(s, start, filters, count, max_bytes, factory)
            got = [tuple(m) for m in s.load_next_msgs(start, filters, count, max_bytes)]
            assert got == want, (filters, start, count, max_bytes)
    s = factory.reopen(s)
    assert [tuple(m) for m in s.load_next_msgs(0, ["k.a.*"], 10_000)] == reference(s, 0, ["k.a.*"], 10_000, 0, factory)


def test_batch_reads_of_many_subjects_each_with_one_message(factory):
    """A KV-like store: every row is another subject; a wildcard matching half of them."""
    s = factory.open()
    for i in range(3000):
        s.store_msg(f"kv.{'ab'[i % 2]}.{i}", b"", b"v%d" % i)
    got = [m.seq for m in s.load_next_msgs(100, ["kv.b.*"], 64)]
    assert got == list(range(100, 100 + 128, 2))
    assert [m.seq for m in s.load_next_msgs(0, ["kv.a.*", "kv.b.7"], 5)] == [1, 3, 5, 7, 8]
    assert s.load_next_msgs(3000, ["kv.a.*"], 10) == [] and s.load_next_msgs(0, ["kv.c.*"], 10) == []
    # Subjects removed and reused (freed subject ids go to new subjects) keep reads right.
    for seq in range(1, 3001, 3):
        s.remove_msg(seq)
    s.store_msg("kv.b.new", b"", b"n")
    want = reference(s, 0, ["kv.b.*"], 5000, 0, factory)
    assert [tuple(m) for m in s.load_next_msgs(0, ["kv.b.*"], 5000)] == want and want[-1][1] == "kv.b.new"


def test_batch_reads_of_large_messages_span_several_reads(tmp_path):
    """Runs longer than a read's cap are split (each message whole, in order, across blocks too)."""
    from jsbroker.store import file

    s = FileStore(tmp_path / "stream", StoreLimits(), SyncPolicy(), block_size=4 << 20)
    bodies = [bytes([i]) * (file._READ_MAX // 3 + i) for i in range(20)]
    for body in bodies:
        s.store_msg("big", b"", body)
    s.store_msg("big", b"", bytes(file._READ_MAX * 2))  # one record longer than the cap
    got = s.load_next_msgs(0, None, 100)
    assert [m.data for m in got] == bodies + [bytes(file._READ_MAX * 2)]
    s.close()


def test_batch_reads_stop_at_max_bytes_including_the_message_that_reaches_it(factory):
    s = factory.open()
    for i in range(10):
        s.store_msg("a", b"", bytes(10 * i))
    sizes = [factory.size("a", b"", bytes(10 * i)) for i in range(10)]
    assert [m.seq for m in s.load_next_msgs(0, None, 100, max_bytes=sizes[0] + sizes[1])] == [1, 2]
    assert [m.seq for m in s.load_next_msgs(0, None, 100, max_bytes=sizes[0] + 1)] == [1, 2]
    assert [m.seq for m in s.load_next_msgs(3, ["a"], 2, max_bytes=10**9)] == [3, 4]
    assert s.load_next_msgs(0, None, 0) == []


def _record_at(directory: Path, seq: int) -> tuple[Path, int]:
    """(block path, offset) of the record of message `seq`."""
    for path in sorted((directory / "msgs").glob("*.blk")):
        raw = path.read_bytes()
        at = 0
        while at < len(raw):
            rec = record.decode(raw, at)
            if rec.kind == record.MSG and rec.seq == seq:
                return path, at
            at += rec.length
    raise AssertionError(f"seq {seq} not on disk")


def test_reads_check_the_frame_and_the_next_open_checks_the_crc(tmp_path):
    """Reads compare each record's length, kind and seq with the index (a misplaced or overwritten record
    is left out and logged); a body damaged while the store is open is caught by the CRC check at the
    next open, which reports it lost."""
    directory = tmp_path / "stream"
    s = FileStore(directory, StoreLimits(), SyncPolicy(), block_size=64 * 1024)
    for i in range(1, 51):
        s.store_msg("a", b"", b"payload %d" % i)
    (path, at20), (_, at30), (_, at40), (_, at50) = (_record_at(directory, seq) for seq in (20, 30, 40, 50))
    length = int.from_bytes(path.read_bytes()[at50 : at50 + 4], "big")  # all records are this long
    with open(path, "r+b") as f:
        f.seek(at20 + record.KIND_OFFSET + 1)  # seq 20's seq field now says 99
        f.write((99).to_bytes(8, "big"))
        f.seek(at30 + record.HEADER.size + len("a") + 3)  # one payload byte of seq 30
        f.write(b"X")
        f.seek(at40)  # a record in the middle of a run claims to be shorter, the last one too
        f.write((length - 5).to_bytes(4, "big"))
        f.seek(at50)
        f.write((length - 1).to_bytes(4, "big"))
    got = [m.seq for m in s.load_next_msgs(0, None, 100)]
    assert got == [i for i in range(1, 50) if i not in (20, 40)]
    assert all(m.data == b"payload %d" % m.seq for m in s.load_next_msgs(21, None, 100) if m.seq != 30)
    assert [m.seq for m in s.load_next_msgs(45, None, 100)] == [45, 46, 47, 48, 49]
    assert s.load_msg(20) is None and s.load_next_msg(20).seq == 21 and s.load_msg(50) is None
    s.close()
    s = FileStore(directory, StoreLimits(), SyncPolicy(), block_size=64 * 1024)
    st = s.state()
    assert st.lost == [20, 30, 40, 50] and st.msgs == 46
    assert [m.seq for m in s.load_next_msgs(0, None, 100)] == [i for i in range(1, 50) if i not in (20, 30, 40)]
    assert all(m.data == b"payload %d" % m.seq for m in s.messages())
    s.close()


def test_reads_leave_out_records_missing_from_a_truncated_block(tmp_path):
    """A block cut short behind the store's back: the messages still whole are read, the rest are left out."""
    directory = tmp_path / "stream"
    s = FileStore(directory, StoreLimits(), SyncPolicy(), block_size=64 * 1024)
    for i in range(1, 21):
        s.store_msg("a", b"", b"payload %d" % i)
    path, at15 = _record_at(directory, 15)
    os.truncate(path, at15 + 10)  # seq 15's header cut, 16.. gone
    assert [m.seq for m in s.load_next_msgs(0, None, 100)] == list(range(1, 15))
    os.truncate(path, at15 - 3)  # seq 14's CRC cut
    assert [m.seq for m in s.load_next_msgs(10, None, 100)] == list(range(10, 14))
    s.close()


def _messages_in(records: bytes) -> list[tuple]:
    """The messages of a `load_records` run, its tombstone and floor records skipped."""
    out, at = [], 0
    while at < len(records):
        rec = record.decode(records, at)
        assert rec.kind in record.KINDS
        if rec.kind == record.MSG:
            out.append((rec.seq, rec.subject.decode(), rec.hdr, rec.data, rec.ts))
        at += rec.length
    return out


def test_record_reads_give_the_batch_reads_messages(factory):
    """`load_records` (a backup's read: the records as they lie on disk) holds exactly the messages
    `load_next_msgs` gives, up to its last seq: across blocks (floor records at their heads), tombstones
    written between messages, gaps, large bodies, a pending record, and after a reopen."""
    rng = random.Random(7)
    s = factory.open()
    fill(s, rng, 900, SUBJECTS)
    for seq in [*rng.sample(range(1, 901), 150), *range(300, 420)]:
        s.remove_msg(seq)
    s.store_deferred("k.a.3", HDR, b"pending")
    last = s.state().last_seq
    for _ in range(2):
        for start, bound, count in [(0, last, 10_000), (1, last - 5, 64), (250, 500, 7), (last, last, 3),
                                    (last + 1, last + 5, 10), (0, 0, 10)]:
            want = [tuple(m) for m in s.load_next_msgs(start, None, 10_000) if m.seq <= bound]
            got, seq = [], start
            while True:
                run, seq = s.load_records(seq, bound, count)
                got += _messages_in(run)
                assert not seq or seq <= bound + 1
                if not seq:
                    break
            assert got == want, (start, bound, count)
        s = factory.reopen(s)
    s.close()
