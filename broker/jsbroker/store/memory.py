"""MemoryStore: a StreamStore whose bodies live in a dict (storage: memory). Lost on restart by design.

All bookkeeping (index, limits, purge rules) is `IndexedStore`'s; this module only keeps the bodies.
"""

from __future__ import annotations

from .base import StoreLimits
from .indexed import IndexedStore


class MemoryStore(IndexedStore):
    def __init__(self, limits: StoreLimits) -> None:
        super().__init__(limits)
        self._bodies: dict[int, tuple[bytes, bytes]] = {}

    def _put(self, seq: int, ts: int, ttl: int, subject: bytes, hdr: bytes, data: bytes) -> int:
        self._bodies[seq] = (bytes(hdr), bytes(data))
        return 0

    def _get(self, seq: int, loc: int, size: int) -> tuple[bytes, bytes] | None:
        return self._bodies.get(seq)

    def _drop(self, seq: int, loc: int, size: int) -> None:
        del self._bodies[seq]

    def _drop_all(self) -> None:
        self._bodies.clear()

    def sync(self) -> None:
        self._check_open()

    def close(self) -> None:
        self._closed = True
        self._bodies.clear()

    def delete(self) -> None:
        self.close()
