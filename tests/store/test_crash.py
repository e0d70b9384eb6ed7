"""Crash safety of the file store: SIGKILL a writer at random moments, reopen, check every acknowledged
write; torn tails and corrupted blocks are dropped or skipped and the store still opens."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jsbroker.store import SyncPolicy, record
from jsbroker.store.base import StoreLimits
from jsbroker.store.file import FileStore

from .crash_writer import payload

WRITER = Path(__file__).with_name("crash_writer.py")


def open_store(directory: Path, block_size: int = 64 * 1024) -> FileStore:
    return FileStore(directory, StoreLimits(), SyncPolicy(always=True), block_size=block_size)


def _record(line: str, stored: set[int], removing: set[int], deleted: set[int]) -> None:
    kind, seq = line.split()
    {"S": stored, "R": removing, "D": deleted}[kind].add(int(seq))


@pytest.mark.slow
@pytest.mark.parametrize("policy, rounds", [("always", 20), ("interval", 8)])
def test_sigkill_never_loses_an_acknowledged_write(tmp_path, policy, rounds):
    """A killed process loses nothing acknowledged under either policy (write() is done before the ack);
    only a machine crash can lose what the interval policy has not fsynced yet."""
    rng = random.Random(7)
    directory = tmp_path / "stream"
    stored: set[int] = set()
    removing: set[int] = set()  # removal started; when a kill interrupts it, either outcome is fine
    deleted: set[int] = set()
    for round_ in range(rounds):
        errors = tmp_path / "writer.err"
        with open(errors, "wb") as err:
            child = subprocess.Popen(
                [sys.executable, str(WRITER), str(directory), str(round_), policy],
                stdout=subprocess.PIPE, stderr=err, text=True,
            )
        try:
            for _ in range(rng.randint(0, 300)):
                line = child.stdout.readline()
                if not line:
                    break
                _record(line, stored, removing, deleted)
            os.kill(child.pid, signal.SIGKILL)
            rest = child.stdout.read()  # acknowledged before the kill, still in the pipe or our buffer
            child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()
        assert child.returncode == -signal.SIGKILL, errors.read_text()
        for line in rest.splitlines():
            _record(line, stored, removing, deleted)
        store = open_store(directory)
        try:
            # a kill can cut a multi-page write() short: only an unacknowledged tail may be lost
            assert not set(store.state().lost or ()) & stored, f"round {round_}: lost an acknowledged seq"
            present = {m.seq: m for m in store.messages()}
            for seq in stored - deleted - removing:
                msg = present.get(seq)
                assert msg is not None, f"round {round_}: acknowledged seq {seq} is missing"
                assert (msg.subject, msg.data) == (f"crash.{seq % 7}", payload(seq))
            assert not (deleted & present.keys()), f"round {round_}: deleted seqs came back"
            # an interrupted removal either happened or not; the next writer sees which
            deleted |= removing - present.keys()
            removing.clear()
        finally:
            store.close()
    assert len(stored) > 20 * rounds and deleted


def _write(directory: Path, n: int, block_size: int = 64 * 1024) -> list[Path]:
    store = open_store(directory, block_size)
    for seq in range(1, n + 1):
        store.store_msg(f"t.{seq % 3}", b"", payload(seq))
    store.close()
    # The damage the tests then make is what a crash (or rot found by a scan) leaves: no index snapshot.
    (directory / "msgs" / "index.snap").unlink()
    return sorted((directory / "msgs").glob("*.blk"))


@pytest.mark.parametrize("damage", ["truncate", "flip_crc", "flip_payload", "cut_header"])
def test_torn_tail_drops_only_the_last_record(tmp_path, damage):
    directory = tmp_path / "stream"
    last_block = _write(directory, 50)[-1]
    raw = bytearray(last_block.read_bytes())
    start = 0
    while start + record.decode(bytes(raw), start).length < len(raw):  # find the last record
        start += record.decode(bytes(raw), start).length
    assert record.decode(bytes(raw), start).seq == 50
    if damage == "truncate":
        del raw[-7:]
    elif damage == "flip_crc":
        raw[-1] ^= 0xFF
    elif damage == "flip_payload":
        raw[-10] ^= 0x01
    else:
        del raw[start + 20 :]  # inside the header, after the seq
    last_block.write_bytes(bytes(raw))
    store = open_store(directory)
    st = store.state()
    assert (st.msgs, st.last_seq) == (49, 49)
    assert st.lost == [50]  # the header (with the seq) survived every damage here
    assert last_block.stat().st_size == start  # truncated to the last good record
    assert [m.data for m in store.messages()] == [payload(s) for s in range(1, 50)]
    assert store.store_msg("t.x", b"", b"again")[0] == 50  # the lost seq was never acknowledged durable
    store.close()
    store = open_store(directory)
    assert store.state().lost is None and store.load_msg(50).data == b"again"
    store.close()


def test_garbage_after_the_tail_is_dropped(tmp_path):
    directory = tmp_path / "stream"
    last_block = _write(directory, 10)[-1]
    size = last_block.stat().st_size
    with open(last_block, "ab") as f:
        f.write(b"\x00" * 100 + b"garbage")
    store = open_store(directory)
    assert store.state().msgs == 10 and store.state().lost is None
    assert last_block.stat().st_size == size
    store.close()


def test_corruption_inside_an_older_block_skips_only_the_damaged_records(tmp_path):
    directory = tmp_path / "stream"
    blocks = _write(directory, 300, block_size=16 * 1024)
    assert len(blocks) >= 3
    victim = blocks[1]
    raw = bytearray(victim.read_bytes())
    rec = record.decode(bytes(raw), 0)  # the block's head floor record
    second = record.decode(bytes(raw), rec.length)
    assert second.kind == record.MSG
    raw[rec.length + 50] ^= 0xFF  # inside the first message of the block
    victim.write_bytes(bytes(raw))
    store = open_store(directory, 16 * 1024)
    st = store.state()
    assert st.lost == [second.seq] and st.msgs == 299 and st.last_seq == 300
    present = {m.seq: m.data for m in store.messages()}
    assert second.seq not in present
    assert all(present[s] == payload(s) for s in range(1, 301) if s != second.seq)
    assert store.store_msg("t.x", b"", b"")[0] == 301
    store.close()
    store = open_store(directory, 16 * 1024)  # still opens; the damaged bytes are skipped again
    assert store.state().msgs == 300
    store.close()


def test_random_garbage_block_in_the_middle_still_opens(tmp_path):
    directory = tmp_path / "stream"
    blocks = _write(directory, 300, block_size=16 * 1024)
    victim = blocks[1]
    victim.write_bytes(random.Random(1).randbytes(victim.stat().st_size))
    store = open_store(directory, 16 * 1024)
    st = store.state()
    assert st.msgs < 300 and st.lost and st.last_seq == 300
    lost = set(st.lost)
    assert all(m.data == payload(m.seq) for m in store.messages())
    assert {m.seq for m in store.messages()} | lost == set(range(1, 301))
    store.close()


def test_a_write_error_stops_the_store_s_writes_reads_go_on_and_a_restart_recovers(tmp_path):
    from jsbroker.store.base import StoreError

    directory = tmp_path / "stream"
    store = open_store(directory)
    store.store_msg("a", b"", b"1")
    os.close(store._wfd)  # the device goes away under the store
    store._wfd = os.open(os.devnull, os.O_RDONLY)  # writes now fail with EBADF
    with pytest.raises(StoreError, match="restart the server"):
        store.store_msg("a", b"", b"2")
    with pytest.raises(StoreError, match="restart the server"):
        store.store_msg("a", b"", b"3")  # stopped: the index may be ahead of the disk
    assert store.load_msg(1).data == b"1"  # what reached the disk is still served (STREAM.INFO, fetches)
    assert store.load_msg(2) is None  # the message that never reached it reads as absent
    assert store.state().first_seq == 1
    store.close()
    store = open_store(directory)
    assert [(m.seq, m.data) for m in store.messages()] == [(1, b"1")]
    assert store.store_msg("a", b"", b"2")[0] == 2
    store.close()
