"""Durable writes: `write_parts` (many parts in writev batches) and `replace_file` without fsync."""

from __future__ import annotations

import os
import random
from array import array

from jsbroker.store.durable import replace_file, write_parts


def test_write_parts_writes_every_part_in_order_across_writev_batches(tmp_path):
    rng = random.Random(3)
    parts = [rng.randbytes(rng.randint(0, 300)) for _ in range(2500)]  # more than two writev batches
    parts += [memoryview(array("Q", range(1000))).cast("B"), b"", b"end"]
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        write_parts(fd, parts)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(parts)


def test_replace_file_without_sync_still_replaces_whole(tmp_path):
    path = tmp_path / "x.idx"
    path.write_bytes(b"old")
    replace_file(path, [b"a", memoryview(b"bc"), b"d"], sync_dir=False, sync=False)
    assert path.read_bytes() == b"abcd" and not (tmp_path / "x.idx.tmp").exists()
