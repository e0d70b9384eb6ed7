"""The Syncer's promises (store/syncer.py): order within a stream's lane, group commit, answers in order,
failures before the answers that depend on them, lanes independent of each other, a clean close drains."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from jsbroker.store import (DELETED_MARK, Syncer, SyncPolicy, lanes, list_stream_dirs, open_consumer_store,
                           open_stream_store, save_meta, streams_root)
from jsbroker.store.base import StoreLimits


class Fsyncs:
    """A real fdatasync that also records which descriptors' files it synced, and can be held."""

    def __init__(self) -> None:
        self.synced: list[int] = []  # inode numbers
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def __call__(self, fd: int) -> None:
        self.entered.set()
        self.release.wait(10)
        os.fdatasync(fd)
        self.synced.append(os.fstat(fd).st_ino)


def stream_path(root: Path, stream: str, name: str) -> Path:
    path = streams_root(root) / stream / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


async def wait(syncer: Syncer, path: Path) -> None:
    done = asyncio.get_running_loop().create_future()
    syncer.when_durable(path, lambda: done.set_result(None))
    await asyncio.wait_for(done, 10)


async def test_requests_of_one_lane_run_in_order_and_an_fsync_asked_twice_runs_once(tmp_path):
    fsyncs = Fsyncs()
    syncer = Syncer(asyncio.get_running_loop(), fsyncs, lanes(tmp_path))
    a = stream_path(tmp_path, "S", "a")
    fd = os.open(a, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fsyncs.release.clear()  # the first batch waits in its fsync while the next ones gather
        syncer.fsync(fd, a, print)
        await asyncio.to_thread(fsyncs.entered.wait, 10)
        order: list[str] = []
        for _ in range(50):
            os.write(fd, b"x")
            syncer.fsync(fd, a, print)  # one more fsync for all fifty
        syncer.then(lambda: order.append("after"), a, print)
        fsyncs.release.set()
        await wait(syncer, a)
        assert fsyncs.synced == [os.fstat(fd).st_ino] * 2 and order == ["after"]
    finally:
        os.close(fd)
        await asyncio.to_thread(syncer.close)


async def test_answers_keep_their_order_and_a_failure_comes_before_them(tmp_path):
    syncer = Syncer(asyncio.get_running_loop(), Fsyncs(), lanes(tmp_path))
    a = stream_path(tmp_path, "S", "a")
    events: list[str] = []

    def fail() -> None:
        raise OSError(5, "Input/output error")

    syncer.then(fail, a, lambda e: events.append(f"error {e.errno}"))
    syncer.when_durable(a, lambda: events.append("first"))
    syncer.then(lambda: None, a, print)
    syncer.when_durable(a, lambda: events.append("second"))
    await wait(syncer, a)
    syncer.when_durable(a, lambda: events.append("idle"))  # nothing queued: the next loop turn, still after
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert events == ["error 5", "first", "second", "idle"]
    await asyncio.to_thread(syncer.close)


async def test_a_slow_lane_does_not_hold_back_another(tmp_path):
    held = threading.Event()
    syncer = Syncer(asyncio.get_running_loop(), Fsyncs(), lanes(tmp_path))
    slow, quick = stream_path(tmp_path, "SLOW", "a"), stream_path(tmp_path, "QUICK", "a")
    syncer.then(lambda: held.wait(10) and None, slow, print)
    await wait(syncer, quick)  # answered while SLOW's job still waits
    assert not held.is_set()
    held.set()
    await wait(syncer, slow)
    await asyncio.to_thread(syncer.close)


async def test_close_runs_everything_queued(tmp_path):
    syncer = Syncer(asyncio.get_running_loop(), Fsyncs(), lanes(tmp_path))
    done: list[int] = []
    for i in range(20):
        syncer.then(lambda i=i: done.append(i), stream_path(tmp_path, f"S{i % 3}", "a"), print)
    await asyncio.to_thread(syncer.close)
    assert sorted(done) == list(range(20))
    assert [i for i in done if i % 3 == 0] == list(range(0, 20, 3))  # each lane in order


async def test_a_consumer_compaction_cut_short_by_a_crash_loses_nothing(tmp_path):
    """The compaction switches to the next log at once and renames its snapshot later: a crash in between
    (here: the lane held, the store opened again as a restart would) replays both logs."""
    held = threading.Event()
    syncer = Syncer(asyncio.get_running_loop(), Fsyncs(), lanes(tmp_path))
    directory = stream_path(tmp_path, "S", "consumers") / "c"
    syncer.then(lambda: held.wait(10) and None, directory, print)
    store = open_consumer_store("file", directory, SyncPolicy(syncer=syncer))
    for seq in range(1, 101):
        store.update_delivered(seq, seq, 1, seq)
    store.update_acks(10, 10, ack_all=True)
    store.reset(store.load())  # a compaction, its snapshot's rename queued behind the held job
    store.update_acks(20, 20)
    store.update_delivered(101, 101, 1, 101)
    store.flush()
    assert not (directory / "state.snap").exists()
    reopened = open_consumer_store("file", directory, SyncPolicy())
    assert reopened.load() == store.load()
    reopened.close()
    held.set()
    await asyncio.to_thread(syncer.close)


async def test_a_delete_cut_short_leaves_nothing_a_start_would_restore(tmp_path):
    """A stream delete renames the directory out of the listing at once; what a crash leaves of it before
    the syncer removed it is removed by the next listing (a start), never restored, and the name is free."""
    held = threading.Event()
    syncer = Syncer(asyncio.get_running_loop(), Fsyncs(), lanes(tmp_path))
    policy = SyncPolicy(syncer=syncer)
    directory = streams_root(tmp_path) / "S"
    save_meta(directory, b"{}", policy)
    store = open_stream_store("file", directory, StoreLimits(), policy)
    store.store_msg("a", b"", b"x")
    syncer.then(lambda: held.wait(10) and None, directory, print)
    store.delete()
    [trash] = streams_root(tmp_path).iterdir()  # a short name of its own: a stream's may be 255 bytes long
    assert not directory.exists() and trash.name.startswith(".") and DELETED_MARK in trash.name
    assert list_stream_dirs(tmp_path) == [] and list(streams_root(tmp_path).iterdir()) == []
    held.set()
    await wait(syncer, directory)
    await asyncio.to_thread(syncer.close)
