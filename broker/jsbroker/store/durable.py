"""Durable file writes shared by the file stores: whole writes, directory fsyncs, and atomic replacement
(temp file, fsync, rename), so after a crash a reader finds the old file or the new one, never a mix."""

from __future__ import annotations

import contextlib
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
    """Make renames, creations and removals in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes | Sequence[bytes | memoryview], sync_dir: bool = True,
                 sync: bool = True) -> None:
    """Replace `path` by `data` (or its parts one after the other) atomically: `<name>.tmp` written and
    fsynced, then renamed over it (and removed again if that fails). With `sync_dir` the directory is
    fsynced too; callers that change more files there pass False and call `fsync_dir` once themselves.
    Without `sync` nothing is fsynced: for files whose loss or tearing by a machine crash only costs time
    (their reader checks a CRC)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if isinstance(data, bytes):
                write_all(fd, data)
            else:
                write_parts(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a failed replace leaves the old file and no temp file
            tmp.unlink(missing_ok=True)
        raise
    if sync_dir and sync:
        fsync_dir(path.parent)
