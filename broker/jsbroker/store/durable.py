"""Durable file writes shared by the file stores: whole writes, directory fsyncs, and atomic replacement
(temp file, fsync, rename), so after a crash a reader finds the old file or the new one, never a mix."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Sequence
from pathlib import Path


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write until every byte is written (a write may take fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_IOV_MAX = 1024  # parts per writev (Linux's IOV_MAX)


def write_parts(fd: int, parts: Sequence[bytes | memoryview]) -> None:
    """Write the parts one after the other, up to _IOV_MAX per writev (a snapshot has one per subject)."""
    for i in range(0, len(parts), _IOV_MAX):
        batch = parts[i : i + _IOV_MAX]
        done = os.writev(fd, batch)
        for part in batch:  # a short writev: the rest part by part
            if done >= len(part):
                done -= len(part)
                continue
            write_all(fd, memoryview(part)[done:])
            done = 0


def fsync_dir(path: Path) -> None:
    """Make renames, creations and removals in `path` durable (a directory removed since has nothing left
    to make durable)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_temp_names = itertools.count()


def write_temp(path: Path, data: bytes | Sequence[bytes | memoryview], unique: bool = False) -> Path:
    """Write `data` (or its parts one after the other) to `<name>.tmp` beside `path`, not fsynced. `unique`:
    `<name>.<n>.tmp`, so a replacement still waiting for its fsync is never overwritten by the next one."""
    tmp = path.with_name(f"{path.name}.{next(_temp_names)}.tmp" if unique else f"{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if isinstance(data, bytes):
                write_all(fd, data)
            else:
                write_parts(fd, data)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return tmp


def commit_temp(tmp: Path, path: Path, sync_dir: bool = True, sync: bool = True) -> None:
    """Rename a `write_temp` file over `path`, fsynced first (with `sync`), then the directory's fsync
    (with `sync_dir` and `sync`); a failure removes the temp file and leaves the old one."""
    try:
        if sync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    if sync_dir and sync:
        fsync_dir(path.parent)


def replace_file(path: Path, data: bytes | Sequence[bytes | memoryview], sync_dir: bool = True,
                 sync: bool = True) -> None:
    """Replace `path` by `data` (or its parts one after the other) atomically: a temp file written and
    fsynced, then renamed over it (and removed again if that fails). With `sync_dir` the directory is
    fsynced too; callers that change more files there pass False and call `fsync_dir` once themselves.
    Without `sync` nothing is fsynced: for files whose loss or tearing by a machine crash only costs time
    (their reader checks a CRC)."""
    commit_temp(write_temp(path, data), path, sync_dir, sync)
