"""MemoryStore: a StreamStore whose bodies live in dicts (storage: memory). Lost on restart by design.

All bookkeeping (index, limits, purge rules) is `IndexedStore`'s; this module only keeps the bodies:
payloads by seq, and headers by seq only for messages that have one (most have none), so a batch read
is a few dict lookups mapped at C speed.
"""

from __future__ import annotations

from itertools import repeat
from typing import Callable, Iterable

from .base import StoreLimits
from .indexed import IndexedStore


class MemoryStore(IndexedStore):
    def __init__(self, limits: StoreLimits) -> None:
        super().__init__(limits)
        self._datas: dict[int, bytes] = {}
        self._hdrs: dict[int, bytes] = {}  # only non-empty headers

    def _put(self, seq: int, ts: int, ttl: int, subject: bytes, hdr: bytes, data: bytes) -> int:
        self._datas[seq] = bytes(data)
        if hdr:
            self._hdrs[seq] = bytes(hdr)
        return 0

    def _get(self, seq: int, loc: int, size: int) -> tuple[bytes, bytes] | None:
        data = self._datas.get(seq)
        return None if data is None else (self._hdrs.get(seq, b""), data)

    def _read_many(self, seqs: list[int], rows: list[int]) -> tuple[list[int], Iterable[bytes], Iterable[bytes]]:
        hdrs = map(self._hdrs.get, seqs, repeat(b"")) if self._hdrs else repeat(b"")
        return seqs, hdrs, map(self._datas.__getitem__, seqs)

    def _drop(self, seq: int, loc: int, size: int) -> None:
        del self._datas[seq]
        if self._hdrs:
            self._hdrs.pop(seq, None)

    def _drop_all(self) -> None:
        self._datas.clear()
        self._hdrs.clear()

    def when_durable(self, callback: Callable[[], None]) -> None:
        callback()

    def sync(self) -> None:
        self._check_open()

    def checkpoint(self) -> None:
        self._check_open()

    def close(self) -> None:
        self._closed = True
        self._datas.clear()
        self._hdrs.clear()

    def delete(self, on_error: Callable[[OSError], None] | None = None) -> None:
        self.close()
