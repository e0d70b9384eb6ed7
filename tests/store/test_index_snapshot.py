"""The file store's index snapshot (`msgs/index.snap`): a clean close and every checkpoint write it; the
next open loads it and replays only the records appended since (after a crash too), which must give exactly
what a full scan of the same files gives; a stale, damaged or unknown snapshot is ignored (full scan); a
broker killed after a snapshot keeps every acknowledged message."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import struct
import time
import zlib
from array import array
from pathlib import Path

import nats
import pytest

from jsbroker.store import SyncPolicy, index_snapshot, record
from jsbroker.store.base import StoreLimits
from jsbroker.store.file import BLOCK_INDEX, SNAPSHOT, FileStore

from tests.polling import poll
from tests.servers import JSBROKER, launch

SEC = 1_000_000_000
BLOCK = 4096
SUBJECTS = [f"s.{i}" for i in range(8)] + ["t.x.1", "t.y.2", "kv.a", "kv.b"]
FILTERS = [None, ["s.*"], ["s.1"], ["t.>"], ["s.3", "kv.*"], ["t.x.1", "s.2", "s.5"], ["nothing"]]
LOADED = "index loaded from its snapshot"
EXACT = "replayed 0 bytes appended since, 0 emptied block(s) gone"


def open_store(directory: Path, limits: StoreLimits = StoreLimits(), block_size: int = BLOCK) -> FileStore:
    return FileStore(directory, limits, SyncPolicy(), block_size=block_size)


def snapshot_path(directory: Path) -> Path:
    return directory / "msgs" / SNAPSHOT


def random_ops(store: FileStore, rng: random.Random, n: int) -> StoreLimits:
    """`n` random writes of every kind (stores with headers and TTLs, removals with and without erase,
    purges, skips, expiry, limit changes); returns the limits last set."""
    limits = StoreLimits()
    for _ in range(n):
        r = rng.random()
        st = store.state()
        if r < 0.62:
            hdr = b"NATS/1.0\r\nK: v\r\n\r\n" if rng.random() < 0.3 else b""
            ttl = rng.choice([0, 0, 0, -1, 50 * SEC, 3600 * SEC])
            store.store_msg(rng.choice(SUBJECTS), hdr, rng.randbytes(rng.randint(0, 400)), ttl)
        elif r < 0.8:
            if st.msgs:
                store.remove_msg(rng.randint(st.first_seq, st.last_seq), erase=rng.random() < 0.1)
        elif r < 0.84:
            store.purge(rng.choice(["s.1", "t.*.*", "s.>", "kv.a"]), keep=rng.randint(0, 3))
        elif r < 0.87:
            store.purge(up_to_seq=st.first_seq + rng.randint(0, 15))
        elif r < 0.9:
            store.skip_msgs(st.last_seq + rng.randint(1, 5))
        elif r < 0.905:
            store.purge()
        elif r < 0.93:
            store.expire(time.time_ns() + rng.choice([0, 60 * SEC]))  # +60 s: the 50 s TTLs are due
        else:
            limits = StoreLimits(max_msgs=rng.choice([-1, 400]), max_bytes=rng.choice([-1, 60_000]),
                                 max_age_ns=rng.choice([0, 3600 * SEC]),
                                 max_msgs_per_subject=rng.choice([-1, rng.randint(2, 40)]))
            store.update_limits(limits)
    return limits


def observe(store: FileStore) -> tuple:
    """Everything a reader can see: state, messages through every read path, subjects, expiry, counts."""
    st = store.state(deleted_details=True)
    reads = []
    for filters in FILTERS:
        for start in (0, st.first_seq + 7, st.last_seq // 2, st.last_seq):
            got = store.load_next_msgs(start, filters, 50)
            reads.append([tuple(m) for m in got])
            reads.append(store.num_pending(start, filters))
    times = [store.first_seq_at_or_after_time(st.first_ts + k * 1_000_000) for k in range(0, 50, 7)]
    return (st, reads, [tuple(m) for m in store.messages()], store.subjects_state(">"), store.subjects_state("s.*"),
            store.next_expiry(), times, [store.load_last_msg(s) for s in ("s.1", ">", "t.*.*")])


def untimed(store: FileStore) -> tuple:
    st = store.state(deleted_details=True)
    return ([m[:4] for m in store.messages()], store.subjects_state(">"), st.msgs, st.bytes, st.first_seq,
            st.last_seq, st.deleted)


def accounting(store: FileStore) -> dict[int, tuple[int, int, int]]:
    """Per block: bytes on disk (as the store knows them), live messages, live bytes; and the files."""
    files = {int(p.stem): p.stat().st_size for p in (store._dir / "msgs").glob("*.blk")}
    assert files == {no: b.size for no, b in store._blocks.items()}
    return {no: (b.size, b.live, b.live_bytes) for no, b in store._blocks.items()}


def live_accounting(store: FileStore) -> dict[int, tuple[int, int]]:
    """Per block: live messages and bytes. After a crash, block sizes may differ by the tombstones the open
    re-appends: block indexes keep every tombstone (and the location of removed rows), a scan only those
    it saw remove a message."""
    return {no: (live, live_bytes) for no, (_, live, live_bytes) in accounting(store).items()}


def crash(store: FileStore) -> None:
    """What a SIGKILL leaves: the files as written so far, no close (no snapshot written, nothing synced)."""
    store._closed = True
    os.close(store._wfd)
    for fd in store._rfds.values():
        os.close(fd)


def scan_copy(directory: Path, to: Path) -> Path:
    """A copy of the stream directory without its snapshot and block indexes: opening it is a full scan."""
    shutil.copytree(directory, to)
    snapshot_path(to).unlink(missing_ok=True)
    for path in (to / "msgs").glob(f"*{BLOCK_INDEX}"):
        path.unlink()
    return to


@pytest.mark.parametrize("seed", range(8))
def test_a_store_opened_from_its_snapshot_equals_a_full_scan(tmp_path, seed, caplog):
    """Random writes, a clean close, then the snapshot open and a full-scan open of the same files give the
    same everything (and the same block accounting); the same writes on both afterwards the same content.
    (Their block files may then differ: the store re-appends tombstones a scan no longer knows of.)"""
    caplog.set_level(logging.DEBUG, logger="jsbroker.store.file")
    rng = random.Random(seed)
    directory = tmp_path / "a"
    s = open_store(directory)
    limits = StoreLimits()
    for _ in range(3):  # several sessions: later snapshots describe stores that were loaded from one
        limits = random_ops(s, rng, 700)
        s.close()
        assert snapshot_path(directory).is_file()
        scanned = open_store(scan_copy(directory, tmp_path / f"b{rng.random()}"), limits)
        caplog.clear()
        s = open_store(directory, limits)
        assert EXACT in caplog.text and "scanning" not in caplog.text
        assert observe(s) == observe(scanned)
        assert s.state().lost is None
        assert live_accounting(s) == live_accounting(scanned)  # (sizes: see live_accounting)
        for no, blk in s._blocks.items():  # a snapshot keeps every tombstone a scan finds (and stale ones)
            assert set(scanned._blocks[no].tombs) <= set(blk.tombs), no
        after = rng.randrange(1 << 30)  # the same writes on both (their new timestamps differ)
        random_ops(s, random.Random(after), 300)
        random_ops(scanned, random.Random(after), 300)
        assert untimed(s) == untimed(scanned)
        scanned.close()
    s.close()
    # max_age removes everything but the messages whose TTL is "never", which both must know
    scanned = open_store(scan_copy(directory, tmp_path / "last"), limits)
    s = open_store(directory, limits)
    for store in (s, scanned):
        store.update_limits(StoreLimits(max_age_ns=SEC))
        store.expire(time.time_ns() + 10 * SEC)
    assert untimed(s) == untimed(scanned) and s.state().msgs > 0
    s.close()
    scanned.close()


def test_a_store_killed_after_a_checkpoint_replays_what_came_after_and_equals_a_full_scan(tmp_path, caplog):
    """Random writes, a checkpoint, more random writes (new blocks, emptied blocks removed, rewrites,
    erasures, purges), a kill (sometimes with a torn last record): opening from the checkpoint gives exactly
    what a full scan of the same files gives. Most rounds replay; rewrites of listed blocks make it stale."""
    caplog.set_level(logging.INFO, logger="jsbroker.store.file")
    outcomes = {"replayed": 0, "stale": 0}
    for seed in range(16):
        rng = random.Random(seed)
        directory = tmp_path / f"a{seed}"
        s = open_store(directory)
        random_ops(s, rng, rng.randint(100, 900))
        s.checkpoint()
        assert snapshot_path(directory).is_file()
        limits = random_ops(s, rng, rng.randint(0, 300))
        crash(s)
        if rng.random() < 0.3:  # a torn last record
            last = max((directory / "msgs").glob("*.blk"))
            os.truncate(last, max(last.stat().st_size - rng.randint(1, 40), 0))
        scanned = open_store(scan_copy(directory, tmp_path / f"b{seed}"), limits)
        caplog.clear()
        s = open_store(directory, limits)
        outcomes["stale" if "stale index snapshot" in caplog.text else "replayed"] += 1
        assert "scanning" not in caplog.text or "stale index snapshot" in caplog.text, caplog.text
        assert observe(s) == observe(scanned), seed
        assert s.state().lost == scanned.state().lost, seed
        assert live_accounting(s) == live_accounting(scanned), seed
        after = rng.randrange(1 << 30)  # and both go on alike
        random_ops(s, random.Random(after), 200)
        random_ops(scanned, random.Random(after), 200)
        assert untimed(s) == untimed(scanned), seed
        s.close()
        scanned.close()
    assert outcomes["replayed"] >= 8, outcomes


@pytest.mark.parametrize("checkpoint", ["none", "before the purge", "after the purge"])
def test_a_purged_never_used_store_keeps_first_seq_1_after_a_crash(tmp_path, checkpoint, caplog):
    """A purge of a store that never held anything makes first_seq 1 (nats-server's): a crash keeps it
    whether the open scans (the floor record), loads a snapshot and replays the purge, or loads a snapshot
    written after it."""
    caplog.set_level(logging.INFO, logger="jsbroker.store.file")
    directory = tmp_path / "a"
    s = open_store(directory)
    if checkpoint == "before the purge":
        s.checkpoint()
    s.purge()
    if checkpoint == "after the purge":
        s.checkpoint()
    crash(s)
    scanned = open_store(scan_copy(directory, tmp_path / "b"))
    s = open_store(directory)
    assert (LOADED in caplog.text) == (checkpoint != "none")
    for store in (s, scanned):
        assert (store.state().first_seq, store.state().last_seq) == (1, 0)
    s.close()
    assert open_store(directory).state().first_seq == 1  # and from the snapshot of the clean close


def test_a_store_killed_before_any_checkpoint_reads_closed_blocks_from_their_indexes(tmp_path, caplog):
    """No snapshot at all: every closed block has its index file (written when it was closed, rewritten or
    erased in), so the open after a kill scans only the active block, and gives exactly what a full scan
    gives. A damaged block (a flipped byte) or a damaged index file means that block is scanned instead,
    and the open writes a fresh index of every closed block that had none."""
    caplog.set_level(logging.INFO, logger="jsbroker.store.file")
    used = damaged = 0
    for seed in range(16):
        rng = random.Random(100 + seed)
        directory = tmp_path / f"a{seed}"
        s = open_store(directory)
        limits = random_ops(s, rng, rng.randint(200, 1200))
        crash(s)
        assert not snapshot_path(directory).exists()
        blocks = sorted((directory / "msgs").glob("*.blk"))
        indexes = sorted((directory / "msgs").glob(f"*{BLOCK_INDEX}"))
        assert [p.stem for p in indexes] == [p.stem for p in blocks[:-1] if s._blocks[int(p.stem)].live]
        harm = rng.choice(["none", "none", "block", "index"]) if indexes else "none"
        if harm != "none":
            victim = rng.choice(indexes) if harm == "index" else rng.choice(indexes).with_suffix(".blk")
            raw = bytearray(victim.read_bytes())
            raw[rng.randrange(len(raw))] ^= 0x5A
            victim.write_bytes(bytes(raw))
        scanned = open_store(scan_copy(directory, tmp_path / f"b{seed}"), limits)
        caplog.clear()
        s = open_store(directory, limits)
        if harm == "none" and indexes:  # (after a damaged block, the next one is scanned to tell what was lost)
            assert f"{len(indexes)} of {len(blocks)} block(s) read from their indexes" in caplog.text
            used += 1
        if harm != "none":
            assert "ignoring the index of block" in caplog.text
            damaged += 1
        if harm == "block":
            # Both scan the damaged block, but they need not agree: a tombstone or floor record destroyed in
            # it brings back a removed message in a scan of the older blocks, not in their indexes (which
            # already had it removed). The store opens and reads whole messages; the rest is the scan's.
            assert s.state().msgs == len(list(s.messages())), seed
            s.close()
            scanned.close()
            continue
        assert observe(s) == observe(scanned), seed
        assert s.state().lost == scanned.state().lost, seed
        assert live_accounting(s) == live_accounting(scanned), seed
        for store in (s, scanned):  # the open indexed what it scanned: the next crash need not scan it again
            assert sorted(int(p.stem) for p in (store._dir / "msgs").glob(f"*{BLOCK_INDEX}")) == \
                sorted(no for no, b in store._blocks.items() if b.live and b is not store._active), seed
        after = rng.randrange(1 << 30)
        random_ops(s, random.Random(after), 200)
        random_ops(scanned, random.Random(after), 200)
        assert untimed(s) == untimed(scanned), seed
        s.close()
        scanned.close()
    assert used >= 6 and damaged >= 3, (used, damaged)


def test_subject_seq_lists_widen_past_2_to_the_32(tmp_path, caplog):
    """Per-subject seq lists hold 4-byte seqs until a stream passes seq 2^32: then that subject's list
    widens, reads and limits go on alike, and snapshots and block indexes (8-byte seqs then) load back."""
    caplog.set_level(logging.INFO, logger="jsbroker.store.file")
    directory = tmp_path / "w"
    s = open_store(directory)
    s.skip_msgs(2**32 - 40)
    payload = b"p" * 300  # a few records fill a 4 KB block: closed blocks (and their indexes) on both sides
    for k in range(80):  # seqs 2^32-40 .. 2^32+39, subjects a, b, c
        s.store_msg("abc"[k % 3], b"", payload + b"%d" % k)
    assert {e.subject: e.seqs.typecode for e in s._subjects.matching(None)} == {"a": "Q", "b": "Q", "c": "Q"}
    s.store_msg("d", b"", b"new")  # a new subject past 2^32 starts wide
    want = observe(s)
    assert want[0].msgs == 81 and want[0].last_seq == 2**32 + 40
    assert [m.seq for m in s.load_next_msgs(2**32 + 30, ["a"], 10)] == [2**32 + 32, 2**32 + 35, 2**32 + 38]
    s.checkpoint()
    crash(s)
    s = open_store(directory)  # from the snapshot (8-byte seqs)
    assert LOADED in caplog.text and observe(s) == want
    crash(s)
    snapshot_path(directory).unlink()
    caplog.clear()
    s = open_store(directory)  # from the block indexes
    assert "read from their indexes" in caplog.text and observe(s) == want
    s.close()


def as_version_2(data: bytes) -> bytes:
    """A snapshot as version 2 wrote it: no seq_width in the head, every subject seq 8 bytes."""
    index, blocks = index_snapshot.decode(data)
    index.subject_seqs = [array("Q", seqs) for seqs in index.subject_seqs]
    v3 = index_snapshot.encode(index, blocks)
    head_end = 20 + 13 * 8  # preamble (magic, version, length), then the 13 head fields
    body = v3[:head_end - 8] + v3[head_end:-4]
    body = body[:8] + struct.pack("<IQ", 2, len(body) + 4) + body[20:]
    return body + struct.pack("<I", zlib.crc32(body))


def test_a_version_2_snapshot_still_loads(tmp_path, caplog):
    """Snapshots written before 4-byte subject seqs (version 2) load as they are: an upgrade does not scan."""
    directory = tmp_path / "v2"
    s = open_store(directory)
    random_ops(s, random.Random(7), 600)
    want = observe(s)
    s.close()
    path = snapshot_path(directory)
    path.write_bytes(as_version_2(path.read_bytes()))
    assert struct.unpack_from("<I", path.read_bytes(), 8) == (2,)
    caplog.set_level(logging.INFO, logger="jsbroker.store.file")
    s = open_store(directory)
    assert EXACT in caplog.text and "scanning" not in caplog.text
    assert observe(s) == want
    s.store_msg("s.1", b"", b"after")  # a loaded 8-byte list takes new seqs too
    assert s.load_last_msg("s.1").data == b"after"
    s.close()


def test_a_checkpoint_is_written_only_when_the_store_changed(tmp_path):
    directory = tmp_path / "s"
    s = open_store(directory)
    s.store_msg("a", b"", b"1")
    s.checkpoint()
    written = snapshot_path(directory).stat().st_mtime_ns
    snapshot_path(directory).unlink()
    s.checkpoint()  # nothing changed: nothing written
    assert not snapshot_path(directory).exists()
    s.remove_msg(1)
    s.checkpoint()
    assert snapshot_path(directory).stat().st_mtime_ns >= written
    s.close()


@pytest.mark.parametrize("change, stale", [
    ("append", ""), ("extra_block", ""), ("drop_block", ""),
    ("truncate_tail", "no longer starts with"), ("rewrite_tail", "no longer starts with"),
    ("truncate_older", "the snapshot says"), ("unlisted_older_block", "older than the snapshot but not in it"),
    ("active_gone", "its active block"),
])
def test_blocks_changed_since_the_snapshot_are_replayed_or_scanned(tmp_path, change, stale, caplog):
    """Changes the store makes itself (appends, new blocks, emptied blocks removed) are replayed on top of
    the snapshot; anything else makes it stale (full scan). Either way the result is a full scan's."""
    directory = tmp_path / "s"
    s = open_store(directory)
    for i in range(200):
        s.store_msg(f"s.{i % 3}", b"", b"%d" % i * 10)
    s.remove_msg(5)
    s.close()
    blocks = sorted((directory / "msgs").glob("*.blk"))
    assert len(blocks) > 3
    if change == "append":  # a record written after the close (by hand, or an old broker)
        with open(blocks[-1], "ab") as f:
            f.write(record.encode_msg(201, 1, 0, b"s.9", b"", b"late"))
    elif change == "truncate_tail":
        blocks[-1].write_bytes(blocks[-1].read_bytes()[:-3])
    elif change == "truncate_older":
        blocks[1].write_bytes(blocks[1].read_bytes()[:-1])
    elif change == "drop_block":
        blocks[0].unlink()
    elif change == "extra_block":
        blocks[-1].with_name(f"{int(blocks[-1].stem) + 1:08d}.blk").write_bytes(record.encode_floor(200, 1, 1))
    elif change == "unlisted_older_block":
        blocks[0].with_name(f"{int(blocks[0].stem) - 1:08d}.blk").write_bytes(record.encode_floor(0, 1, 1))
    elif change == "active_gone":
        blocks[-1].unlink()
    else:  # same size, different last record: a block replaced behind the store's back
        raw = bytearray(blocks[-1].read_bytes())
        raw[-1] ^= 0x55
        blocks[-1].write_bytes(bytes(raw))
    scanned = open_store(scan_copy(directory, tmp_path / "scan"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jsbroker.store.file"):
        s = open_store(directory)
    if stale:
        assert "stale index snapshot" in caplog.text and stale in caplog.text
    else:
        assert LOADED in caplog.text and EXACT not in caplog.text and "scanning" not in caplog.text
    assert observe(s) == observe(scanned)
    if change == "append":
        assert s.load_msg(201).data == b"late"
    s.close()
    scanned.close()


def _tamper(data: bytes, how: str) -> bytes:
    if how == "flip":
        raw = bytearray(data)
        raw[len(raw) // 2] ^= 0x01
        return bytes(raw)
    if how == "truncate":
        return data[: len(data) - 100]
    if how == "empty":
        return b""
    if how == "garbage":
        return random.Random(3).randbytes(len(data))
    if how == "version":  # a whole, checksummed snapshot of a version this broker does not know
        body = data[:8] + struct.pack("<I", index_snapshot.VERSION + 1) + data[12:-4]
        return body + struct.pack("<I", zlib.crc32(body))
    # Whole, checksummed snapshots that do not hold together (encoder bugs): "counts" disagree, or
    # "duplicate" lists one subject twice.
    index, blocks = index_snapshot.decode(data)
    if how == "counts":
        index.msgs += 1
    else:
        index.subjects[1] = index.subjects[0]
    return index_snapshot.encode(index, blocks)


@pytest.mark.parametrize("how, reason", [("flip", "checksum mismatch"), ("truncate", "header says"),
                                         ("empty", "too short"), ("garbage", "bad magic"),
                                         ("version", "unknown index snapshot version"), ("counts", "disagree"),
                                         ("duplicate", "listed twice")])
def test_a_damaged_or_unknown_snapshot_is_ignored(tmp_path, how, reason, caplog):
    directory = tmp_path / "s"
    s = open_store(directory, StoreLimits(max_msgs_per_subject=20))
    rng = random.Random(5)
    for i in range(300):
        s.store_msg(rng.choice(SUBJECTS), b"", rng.randbytes(50), rng.choice([0, -1, 60 * SEC]))
    want = observe(s)
    s.close()
    path = snapshot_path(directory)
    path.write_bytes(_tamper(path.read_bytes(), how))
    with caplog.at_level(logging.INFO, logger="jsbroker.store.file"):
        s = open_store(directory, StoreLimits(max_msgs_per_subject=20))
    assert reason in caplog.text and "scanning the blocks" in caplog.text and LOADED not in caplog.text
    assert not path.exists()  # removed; the closed blocks have indexes: the next crash scans only the last
    assert sorted(int(p.stem) for p in (directory / "msgs").glob(f"*{BLOCK_INDEX}")) == sorted(s._blocks)[:-1]
    assert observe(s) == want
    s.close()


def test_no_snapshot_when_reads_found_damage_and_reopening_reports_it(tmp_path):
    """A read that finds a record other than the index expects marks the store damaged: the close writes
    no snapshot, so the next open scans and reports the damage in `lost`."""
    directory = tmp_path / "s"
    s = open_store(directory, block_size=64 * 1024)
    for i in range(1, 21):
        s.store_msg("a", b"", b"payload %d" % i)
    block = next((directory / "msgs").glob("*.blk"))
    raw = bytearray(block.read_bytes())
    at = raw.index(b"payload 7") - record.HEADER.size - 1
    raw[at + record.KIND_OFFSET + 1 : at + record.SEQ_END] = (99).to_bytes(8, "big")  # seq 7 now says 99
    block.write_bytes(bytes(raw))
    assert s.load_msg(7) is None
    s.close()
    assert not snapshot_path(directory).exists()
    s = open_store(directory, block_size=64 * 1024)
    assert s.state().lost == [7] and s.state().msgs == 19
    s.close()


def test_an_unwritable_directory_costs_only_the_snapshot(tmp_path, caplog):
    """A close that cannot write the snapshot (here: a directory where its temp file would go) still
    closes; the next open scans."""
    directory = tmp_path / "s"
    s = open_store(directory)
    for i in range(50):
        s.store_msg("a", b"", b"%d" % i)
    (directory / "msgs" / (SNAPSHOT + ".tmp")).mkdir()
    with caplog.at_level(logging.WARNING, logger="jsbroker.store.file"):
        s.close()
    assert "no index snapshot written" in caplog.text and not snapshot_path(directory).exists()
    (directory / "msgs" / (SNAPSHOT + ".tmp")).rmdir()
    s = open_store(directory)
    assert [m.data for m in s.messages()] == [b"%d" % i for i in range(50)]
    s.close()


async def _publish(url: str, stream: str, first: int, count: int) -> dict[int, bytes]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        acked = {}
        for i in range(first, first + count):
            ack = await js.publish(f"{stream}.{i % 5}", b"m%d" % i)
            acked[ack.seq] = b"m%d" % i
        return acked
    finally:
        await nc.close()


@pytest.mark.slow
async def test_a_broker_killed_after_opening_from_a_snapshot_replays_and_loses_nothing(tmp_path):
    """Clean stop (snapshot written), start (loaded, kept), publish, SIGKILL, start: the restart loads the
    snapshot, replays what was appended since, and every acknowledged message is there, old and new."""
    store_dir = tmp_path / "store"
    broker = launch(JSBROKER, store_dir=store_dir)
    stream = "SNAP"
    snap = store_dir / "jetstream" / "$G" / "streams" / stream / "msgs" / SNAPSHOT
    try:
        nc = await nats.connect(broker.url)
        await nc.jetstream().add_stream(name=stream, subjects=[stream + ".>"], storage="file")
        await nc.close()
        acked = await _publish(broker.url, stream, 0, 300)
        assert broker.stop() == 0
        assert snap.is_file()  # the clean stop wrote it
        broker.start()
        acked |= await _publish(broker.url, stream, 300, 200)
        broker.kill()
        assert snap.is_file()
        broker.start()
        assert "replayed" in broker.log_tail()
        nc = await nats.connect(broker.url)
        try:
            js = nc.jetstream()
            state = (await js.stream_info(stream)).state
            assert (state.messages, state.first_seq, state.last_seq) == (500, 1, 500)
            for seq, data in acked.items():
                assert (await js.get_msg(stream, seq)).data == data, seq
            ack = await js.publish(stream + ".x", b"after")
            assert ack.seq == 501
        finally:
            await nc.close()
    finally:
        broker.close()


@pytest.mark.slow
async def test_the_broker_checkpoints_on_its_sync_timer_and_a_kill_replays_from_there(tmp_path):
    """No clean stop at all: the sync tick (here 0.3 s) writes the snapshot, a SIGKILL after more publishes
    leaves it behind, and the restart replays from it with every acknowledged message."""
    store_dir = tmp_path / "store"
    config = tmp_path / "broker.json"
    config.write_text(json.dumps({"jetstream": {"sync": "300ms"}}))
    broker = launch(JSBROKER, store_dir=store_dir, extra_args=["-c", str(config)])
    snap = store_dir / "jetstream" / "$G" / "streams" / "TICK" / "msgs" / SNAPSHOT
    try:
        nc = await nats.connect(broker.url)
        await nc.jetstream().add_stream(name="TICK", subjects=["TICK.>"], storage="file")
        await nc.close()
        acked = await _publish(broker.url, "TICK", 0, 300)
        poll(snap.is_file, timeout=15, what="a checkpoint by the sync timer")  # the broker is another process
        acked |= await _publish(broker.url, "TICK", 300, 100)
        broker.kill()
        broker.start()
        assert "index loaded from its snapshot" in broker.log_tail(), broker.log_tail()
        nc = await nats.connect(broker.url)
        try:
            js = nc.jetstream()
            state = (await js.stream_info("TICK")).state
            assert (state.messages, state.first_seq, state.last_seq) == (400, 1, 400)
            for seq, data in acked.items():
                assert (await js.get_msg("TICK", seq)).data == data, seq
        finally:
            await nc.close()
    finally:
        broker.close()


def test_a_close_cut_short_before_the_rename_leaves_only_a_temp_file_that_the_open_removes(tmp_path, caplog):
    """What a kill in the middle of writing the snapshot leaves: a partial temp file and no snapshot."""
    directory = tmp_path / "s"
    s = open_store(directory)
    for i in range(100):
        s.store_msg(f"s.{i % 4}", b"", b"%d" % i)
    s.close()
    snap = snapshot_path(directory)
    partial = snap.with_name(SNAPSHOT + ".tmp")
    partial.write_bytes(snap.read_bytes()[:200])
    snap.unlink()
    with caplog.at_level(logging.INFO, logger="jsbroker.store.file"):
        s = open_store(directory)
    assert "no index snapshot" in caplog.text and not partial.exists()
    assert [m.data for m in s.messages()] == [b"%d" % i for i in range(100)]
    s.close()
