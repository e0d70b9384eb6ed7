"""How much a file stream may still append before its volume is full (`DiskRoom`).

A write that meets a full disk (ENOSPC) leaves a store's index ahead of its files, and the store stops
until a restart. So new messages are refused before that: while the volume's free space (statvfs, as
an unprivileged process sees it) is below a reserve kept for what must still be written when it is full:
consumer acks, the tombstones of removals and purges (which free space), block indexes and snapshots.
Publishes get nats-server's answer for exhausted storage (`StoreFull` -> 10023 insufficient resources)
and go through again as soon as space is back; no restart.

The OS is asked at most once per `reserve // 4` bytes appended, so the check costs nothing measurable per
message; with several streams on one volume each may overshoot into the reserve by that much.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("jsbroker.store")

RESERVE_SHARE = 20  # the reserve is 1/20 (5 %) of the volume ...
RESERVE_MIN = 1 << 20  # ... at least 1 MiB ...
RESERVE_MAX = 256 << 20  # ... and at most 256 MiB


def reserve_for(total: int) -> int:
    """The bytes kept free on a volume of `total` bytes."""
    return min(max(total // RESERVE_SHARE, RESERVE_MIN), RESERVE_MAX)


class DiskRoom:
    """The room left for new messages on the volume of `path`; the store counts its appends against what
    `grant` returned (a plain int on its hot path) and asks again when that runs out."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self.full = False  # the last answer was "no room" (logged once per change)

    def grant(self, size: int) -> int:
        """The bytes that may be appended from now on, at least `size`; -1 when `size` does not fit."""
        try:
            st = os.statvfs(self._path)
        except OSError:
            return max(size, RESERVE_MIN)  # nothing to go by: the write itself will tell
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        reserve = reserve_for(total)
        fits = free - reserve >= size
        if fits == self.full:
            self.full = not fits
            if fits:
                log.warning(f"free space is back on the volume of {self._path} ({free} bytes free): "
                            "file streams store messages again")
            else:
                log.error(f"JetStream file resource limits exceeded for server: the volume of {self._path} has "
                          f"{free} bytes free, {reserve} are kept for acks and removals; publishes to its file "
                          "streams are refused until space is freed (purge or delete messages, or grow the volume)")
        return min(free - reserve, max(reserve // 4, size)) if fits else -1
