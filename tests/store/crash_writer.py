"""Child process for the crash tests: appends (and sometimes deletes) forever with SyncPolicy(always=True),
printing "S <seq>" after each store_msg returned, "R <seq>" before and "D <seq>" after each remove_msg.

Usage: python crash_writer.py <stream_dir> <seed> always|interval
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from jsbroker.store import SyncPolicy
from jsbroker.store.base import StoreLimits
from jsbroker.store.file import FileStore

BLOCK = 64 * 1024


def payload(seq: int) -> bytes:
    """Deterministic content for a seq, 0..2 KiB, so the parent can check it byte for byte."""
    return (b"%d:" % seq) * (seq * 7919 % 400)


def main() -> None:
    directory, seed = Path(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    sync = SyncPolicy(always=sys.argv[3] == "always")
    store = FileStore(directory, StoreLimits(), sync, block_size=BLOCK)
    alive = [m.seq for m in store.messages()]
    out = sys.stdout
    while True:
        if alive and rng.random() < 0.1:
            seq = alive.pop(rng.randrange(len(alive)))
            out.write(f"R {seq}\n")  # about to remove: after a kill it may or may not be gone
            out.flush()
            assert store.remove_msg(seq)
            out.write(f"D {seq}\n")
        else:
            seq = store.state().last_seq + 1
            got, _ = store.store_msg(f"crash.{seq % 7}", b"", payload(seq))
            assert got == seq, (got, seq)
            alive.append(seq)
            out.write(f"S {seq}\n")
        out.flush()


if __name__ == "__main__":
    main()
