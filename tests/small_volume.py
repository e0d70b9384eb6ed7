"""A small tmpfs for full-disk tests (tests/jetstream/test_full_disk.py, tests/operator/test_e2e_full_disk.py):
mounted for the test, filled by the test with a file, unmounted after."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

VOLUME = 32 << 20


@contextlib.contextmanager
def small_volume(path: Path, size: int = VOLUME) -> Iterator[Path]:
    """A tmpfs of `size` bytes at `path` (skips where it cannot be mounted: not root, no mount)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(volume: Path, leave: int) -> Path:
    """Write a file that leaves `leave` bytes free on `volume`; returns it (unlink it to free the space)."""
    room = os.statvfs(volume)
    filler = volume / "filler"
    with filler.open("ab") as out:
        out.write(b"\0" * (room.f_bavail * room.f_frsize - leave))
    return filler
