"""The threads that wait on the disk (`Syncer`): fsyncs, and the renames and removals that must follow
them; and `SyncPolicy`, through which the stores ask for them (at once without a syncer).

The event loop writes (`write()` into the page cache is fast) and asks here for what makes the writes
durable; nothing on the loop waits for a disk flush, so one slow fsync (hundreds of ms on a loaded or
throttled disk) stalls no client that does not wait for that very write.

Order: every request names a path, and the paths of one stream (its directory, blocks, consumers, config)
share a *lane* (`lane_of`). A lane's requests run in the order they were made, in *batches*: whatever is
asked while a batch runs goes into the next one, and an fsync of a file already in the waiting batch is
not queued again, so a thousand `sync: always` publishes during one slow fsync cost one more fsync, not a
thousand (group commit). Lanes run side by side on a few threads, so one stream's slow layout work
(a create's fsyncs) does not hold back another stream's acks, and fsyncs of different files meet in
one journal commit of the file system (ext4 batches them).

Why threads of our own and not `asyncio.to_thread`: the order within a lane is the durability order (a
temp file fsynced before its rename, a block's re-appended tombstones before the old block's removal, a
stream's config before its delete), which a plain pool would not keep; and the loop's default executor
also reads whole stores at start and restores, which must not delay a publish ack.

Contract:
- `fsync(fd, path)` / `fsync_dir(path)` / `then(job, path)` queue work in `path`'s lane;
  `when_durable(path, cb)` calls `cb` on the loop once everything queued in that lane before it is done,
  after the callbacks of earlier calls (on the next loop turn when nothing is queued there).
- A failing request (EIO, ENOSPC) calls its `on_error(error)` on the loop before any `when_durable`
  callback of its batch or a later one, so a caller that checks its store in that callback sees the
  failure; the other requests of the batch still run.
- `take_touched()` names the lanes asked for anything since the last call (what an API answer waits for).
- `close()` runs everything queued, then stops the threads (a clean shutdown loses no sync).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Hashable

from . import durable
from .base import ErrorCallback, FsyncStats

log = logging.getLogger(__name__)
THREADS = 4  # lanes synced at once: parallel fsyncs share journal commits; more would only queue in the kernel


@dataclass(slots=True)
class _Batch:
    jobs: list[tuple[Callable[[], None], ErrorCallback]] = field(default_factory=list)
    keys: set[object] = field(default_factory=set)  # the files whose fsync is in `jobs`
    waiters: list[Callable[[], None]] = field(default_factory=list)
    started: bool = False


@dataclass(slots=True)
class _Lane:
    key: Hashable
    batches: deque[_Batch] = field(default_factory=deque)
    scheduled: bool = False  # in the ready queue or being run by a thread


class Syncer:
    """Runs durability work for the stores of one JetStream on a few threads, lane by lane (see the module)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fsync: Callable[[int], None],
                 lane_of: Callable[[Path], Hashable]) -> None:
        self._loop = loop
        self._fsync = fsync  # fdatasync, timed (SyncPolicy.fsync_now)
        self._lane_of = lane_of
        self._lanes: dict[Hashable, _Lane] = {}
        self._ready: deque[_Lane] = deque()
        self._touched: set[Hashable] = set()
        self._cond = threading.Condition()
        self._closing = False
        self._threads = [threading.Thread(target=self._run, name=f"jsbroker-syncer-{i}", daemon=True)
                         for i in range(THREADS)]
        for thread in self._threads:
            thread.start()

    # -- asked on the loop (or by a store opened in a worker thread) -------------------------------------

    def fsync(self, fd: int, path: Path, on_error: ErrorCallback) -> None:
        """fdatasync the file `path` open as `fd` (a duplicate is synced: the caller may close its own) with
        its lane's next batch; asking again before that batch starts costs nothing."""
        with self._cond:
            batch = self._tail(path)
            if path in batch.keys:
                return
            own = os.dup(fd)
            batch.keys.add(path)
            batch.jobs.append((lambda: self._fsync_closing(own), on_error))

    def fsync_dir(self, path: Path, on_error: ErrorCallback) -> None:
        """Make the creations, renames and removals in directory `path` durable with its lane's next batch."""
        with self._cond:
            batch = self._tail(path)
            if ("dir", path) not in batch.keys:
                batch.keys.add(("dir", path))
                batch.jobs.append((lambda: durable.fsync_dir(path), on_error))

    def then(self, job: Callable[[], None], path: Path, on_error: ErrorCallback) -> None:
        """Run `job` after everything asked before in `path`'s lane (a rename after its temp file's fsync);
        an OSError it raises goes to `on_error`."""
        with self._cond:
            self._tail(path).jobs.append((job, on_error))

    def when_durable(self, path: Path, callback: Callable[[], None]) -> None:
        """Call `callback` on the loop once everything asked so far in `path`'s lane is done."""
        self.when_lanes_durable([self._lane_of(path)], callback)

    def when_lanes_durable(self, lanes: list[Hashable], callback: Callable[[], None]) -> None:
        """Call `callback` on the loop once everything asked so far in all these lanes is done."""
        with self._cond:
            waiting = [lane for key in lanes if (lane := self._lanes.get(key)) is not None and lane.batches]
            if not waiting:
                self._loop.call_soon(callback)
                return
            if len(waiting) > 1:
                left = [len(waiting)]
                last = callback

                def callback() -> None:
                    left[0] -= 1
                    if left[0] == 0:
                        last()

            for lane in waiting:
                lane.batches[-1].waiters.append(callback)

    def take_touched(self) -> list[Hashable]:
        """The lanes asked for anything since the last call."""
        with self._cond:
            touched, self._touched = list(self._touched), set()
        return touched

    def close(self) -> None:
        """Run everything queued, then stop the threads (blocking: call it from a worker or at exit)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()

    def _tail(self, path: Path) -> _Batch:
        """The batch of `path`'s lane that takes new requests (under the lock)."""
        key = self._lane_of(path)
        self._touched.add(key)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(key)
        if not lane.batches or lane.batches[-1].started:
            lane.batches.append(_Batch())
        if not lane.scheduled:
            lane.scheduled = True
            self._ready.append(lane)
            self._cond.notify()
        return lane.batches[-1]

    # -- the threads -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._ready and not (self._closing and not self._lanes):
                    self._cond.wait()
                if not self._ready:
                    return
                lane = self._ready.popleft()
                batch = lane.batches[0]
                batch.started = True
            for job, on_error in batch.jobs:
                try:
                    job()
                except OSError as e:
                    log.error("durable write failed: %s", e)
                    self._call(on_error, e)
            with self._cond:  # waiters scheduled before `when_durable` can see the lane empty: the order holds
                lane.batches.popleft()
                for waiter in batch.waiters:
                    self._call(waiter)
                if lane.batches:
                    self._ready.append(lane)
                else:
                    del self._lanes[lane.key]
                self._cond.notify_all()

    def _fsync_closing(self, fd: int) -> None:
        try:
            self._fsync(fd)
        finally:
            os.close(fd)

    def _call(self, callback: Callable[..., None], *args: object) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed (the process is exiting): nobody is waiting any more
            pass


def _ignore(error: OSError) -> None:
    """Inline requests raise instead (see SyncPolicy)."""


@dataclass(frozen=True, slots=True)
class SyncPolicy:
    """When file stores fsync. `always`: before every write call returns (store_msg, remove, acks...).
    Otherwise whatever was written is fsynced when the owner calls `sync()`, every `interval` seconds
    (nats-server's sync_interval, default 2 minutes); a crash of the machine (not of the process) can
    lose what was written since the last sync. Every store of one JetStream shares the policy, so its
    `fsync` keeps their statistics.

    Who waits: without a `syncer` each request is done at once and raises OSError on failure (tests, tools,
    work already in a worker thread). With one (the broker's), `fsync`, `fsync_dir`, `replace`,
    `remove_dir` and `then` only queue the work for the syncer's thread (syncer.py) and report a failure
    to `on_error` on the loop; "before every write call returns" then means "before `when_durable` calls
    back", and whoever confirms a write to a client (a pub ack, an ack_sync reply, an API answer) waits
    for that."""

    always: bool = False
    interval: float = 120.0
    stats: FsyncStats = field(default_factory=FsyncStats, compare=False)
    syncer: Syncer | None = field(default=None, compare=False)

    def fsync_now(self, fd: int) -> None:
        """fdatasync (fsync where there is none) `fd`, timed."""
        start = time.perf_counter()
        (getattr(os, "fdatasync", None) or os.fsync)(fd)
        took = time.perf_counter() - start
        stats = self.stats
        stats.count += 1
        stats.seconds += took
        if took > stats.max_seconds:
            stats.max_seconds = took

    def fsync(self, fd: int, path: Path, on_error: ErrorCallback = _ignore) -> None:
        """Make what was written to `fd` (open on `path`) durable."""
        if self.syncer is None:
            self.fsync_now(fd)
        else:
            self.syncer.fsync(fd, path, on_error)

    def fsync_dir(self, path: Path, on_error: ErrorCallback = _ignore) -> None:
        """Make the creations, renames and removals in directory `path` durable."""
        if self.syncer is None:
            durable.fsync_dir(path)
        else:
            self.syncer.fsync_dir(path, on_error)

    def then(self, job: Callable[[], None], path: Path, on_error: ErrorCallback = _ignore) -> None:
        """Run `job` once everything asked before it for the stream of `path` is done (a removal after an fsync)."""
        if self.syncer is None:
            job()
        else:
            self.syncer.then(job, path, on_error)

    def replace(self, path: Path, data: bytes | Sequence[bytes | memoryview], on_error: ErrorCallback = _ignore,
                sync_dir: bool = True) -> None:
        """Replace `path` by `data` atomically (durable.replace_file): the temp file is written now (views in
        `data` may be released on return), its fsync, rename and the directory's fsync follow in order."""
        if self.syncer is None:
            durable.replace_file(path, data, sync_dir)
            return
        tmp = durable.write_temp(path, data, unique=True)
        self.syncer.then(lambda: durable.commit_temp(tmp, path, sync_dir), path, on_error)

    def remove_dir(self, directory: Path, on_error: ErrorCallback = _ignore) -> None:
        """Remove a stream's or consumer's directory with everything in it, durably (its parent fsynced).
        With a syncer it is renamed at once to a name no stream or consumer can have (`DELETED_MARK`: the
        name is free again, a listing skips it, a start removes a leftover), and removed in the thread."""
        parent = directory.parent
        if self.syncer is None:
            shutil.rmtree(directory, ignore_errors=True)
            durable.fsync_dir(parent)
            return
        # Not the directory's own name: a stream's may be as long as a file name can be (ENAMETOOLONG).
        trash = directory.with_name(f".{_run_token}{DELETED_MARK}{next(_deleted_names)}")
        try:
            os.rename(directory, trash)
        except FileNotFoundError:
            return

        def remove() -> None:
            shutil.rmtree(trash, ignore_errors=True)
            durable.fsync_dir(parent)

        self.syncer.then(remove, directory, on_error)

    def when_durable(self, path: Path, callback: Callable[[], None]) -> None:
        """Call `callback` once every request made so far for the stream of `path` is done (at once without
        a syncer)."""
        if self.syncer is None:
            callback()
        else:
            self.syncer.when_durable(path, callback)


DELETED_MARK = ".deleted."  # in the name of a directory being removed (".<run token>.deleted.<n>")
_deleted_names = itertools.count()
_run_token = os.urandom(6).hex()  # a leftover of an earlier run (removed at start) never has this run's names
