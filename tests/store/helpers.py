"""Shared helpers for the store tests: open either store kind the same way, reopen file stores."""

from __future__ import annotations

from pathlib import Path

from jsbroker.store import SyncPolicy, record
from jsbroker.store.base import StoreLimits
from jsbroker.store.file import FileStore
from jsbroker.store.memory import MemoryStore

SMALL_BLOCK = 4096  # forces many blocks, rolls and block removals in small tests


class StoreFactory:
    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.directory = directory

    def open(self, limits: StoreLimits = StoreLimits(), block_size: int = SMALL_BLOCK, sync: SyncPolicy = SyncPolicy()):
        if self.kind == "memory":
            return MemoryStore(limits)
        return FileStore(self.directory, limits, sync, block_size=block_size)

    def size(self, subject: str, hdr: bytes, data: bytes) -> int:
        """The bytes a message counts for in this kind of store (nats-server's formulas)."""
        account = record.memory_size if self.kind == "memory" else record.file_size
        return account(len(subject), len(hdr), len(data))

    def reopen(self, store, limits: StoreLimits = StoreLimits(), block_size: int = SMALL_BLOCK):
        """A restart for file stores; memory stores are returned as they are."""
        if self.kind == "memory":
            return store
        store.close()
        return self.open(limits, block_size)


def dump(store) -> tuple:
    """Everything observable about a store's content, for equality checks."""
    st = store.state(deleted_details=True)
    st.lost = None
    msgs = [(m.seq, m.subject, m.hdr, m.data, m.ts) for m in store.messages()]
    return st, msgs, store.subjects_state(">")
