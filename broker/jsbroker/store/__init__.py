"""Message storage for streams: one interface (base.py), a memory store and a crash-safe file store.

This module is the only place that picks an implementation (`open_stream_store`, `open_consumer_store`)
and owns the on-disk directory layout (README.md next to it documents it):

    <store_dir>/jetstream/<account>/                              one account's JetStream (`account_dir`), as nats-server's
    <account>/streams/<stream>/meta.json                          stream config (the stream layer's bytes)
    <account>/streams/<stream>/msgs/NNNNNNNN.blk                  message blocks (file.py)
    <account>/streams/<stream>/msgs/index.snap                    index snapshot: last checkpoint or clean close (index_snapshot.py)
    <account>/streams/<stream>/consumers/<name>/                  meta.json + state.snap + state.log.<gen>
    <account>/restores/                                           archives being received and streams being
                                                                  restored (jetstream/service.py); emptied at start

The functions below take an account's directory. jsbroker before per-account JetStream kept its one account's
streams in `<store_dir>/jetstream/streams/`; `adopt_one_account_layout` moves them under their account.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Hashable, Literal

from .base import ConsumerStore, ErrorCallback, StoreError, StoreLimits, StreamStore
from .durable import fsync_dir, replace_file
from .syncer import DELETED_MARK, Syncer, SyncPolicy

__all__ = [
    "lanes",
    "SyncPolicy",
    "Syncer",
    "open_stream_store",
    "open_consumer_store",
    "save_meta",
    "load_meta",
    "streams_root",
    "restores_root",
    "clear_restores",
    "commit_restore",
    "stream_dir",
    "consumer_dir",
    "list_stream_dirs",
    "list_consumer_dirs",
]

META = "meta.json"
DEDUPE = "dedupe.json"  # a clean stop's msg-id window (jetstream/stream.py)
SOURCES = "sources.json"  # where each source of the stream stopped (jetstream/sourcing.py)


def open_stream_store(
    storage: Literal["file", "memory"], directory: Path | None, limits: StoreLimits, sync: SyncPolicy
) -> StreamStore:
    """A store for one stream; `directory` is the stream directory (see `stream_dir`), unused for memory."""
    # the implementations are imported with the first store opened: an empty start needs none of them
    if storage == "memory":
        from .memory import MemoryStore

        return MemoryStore(limits)
    if directory is None:
        raise StoreError("a file store needs a directory: pass stream_dir(store_dir, name)")
    from .file import FileStore

    return FileStore(directory, limits, sync)


def open_consumer_store(
    storage: Literal["file", "memory"], directory: Path | None, sync: SyncPolicy
) -> ConsumerStore:
    """The state store of one durable consumer; `directory` is its consumer directory (`consumer_dir`)."""
    if storage == "memory":
        from .consumer_store import MemoryConsumerStore

        return MemoryConsumerStore()
    if directory is None:
        raise StoreError("a file consumer store needs a directory: pass consumer_dir(stream_dir, name)")
    from .consumer_store import FileConsumerStore

    return FileConsumerStore(directory, sync)


def _safe_name(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise StoreError(f"{name!r} cannot be used as a directory name")
    return name


def account_dir(store_dir: Path, account: str) -> Path:
    """Where one account's JetStream lives under the server's store directory (nats-server's layout)."""
    return Path(store_dir) / "jetstream" / _safe_name(account)


def streams_root(account_directory: Path) -> Path:
    return Path(account_directory) / "streams"


def restores_root(account_directory: Path) -> Path:
    return Path(account_directory) / "restores"


def clear_restores(account_directory: Path) -> None:
    """Remove what restores interrupted by a stop or crash left (never part of a stream)."""
    shutil.rmtree(restores_root(account_directory), ignore_errors=True)


def one_account_layout(store_dir: Path) -> Path | None:
    """The streams directory jsbroker wrote before per-account JetStream (`<store_dir>/jetstream/streams/`,
    one account's streams), if `store_dir` has one. An account named `streams` has a `streams/` of its own in
    there (no config in it); a stream named `streams` has one."""
    legacy = Path(store_dir) / "jetstream" / "streams"
    if not legacy.is_dir():
        return None
    inner = legacy / "streams"
    return None if inner.is_dir() and not (inner / META).is_file() else legacy


def adopt_one_account_layout(store_dir: Path, account: str) -> None:
    """Move the streams of `one_account_layout` under `account` (the one it served), with one rename, and drop
    the restores that layout left; the account's own directory must not hold streams yet."""
    legacy = one_account_layout(store_dir)
    if legacy is None:
        return
    target = streams_root(account_dir(store_dir, account))
    if target.exists() and any(target.iterdir()):
        raise StoreError(f"{legacy} (streams written before per-account JetStream) and {target} both hold "
                         f"streams: move the old ones into the account they belong to, {target.parent.parent}/<account>/streams")
    if target.exists():
        target.rmdir()
    target.parent.mkdir(parents=True, exist_ok=True)
    os.rename(legacy, target)
    shutil.rmtree(Path(store_dir) / "jetstream" / "restores", ignore_errors=True)
    fsync_dir(target.parent)
    fsync_dir(target.parent.parent)


def commit_restore(staging: Path, final: Path, sync: SyncPolicy) -> None:
    """Move a fully written (and fsynced) stream directory into place: one rename, then the parent's fsync
    (in `sync`'s syncer thread when it has one: wait with `when_durable`), so after a crash the stream is
    there whole or not at all. Whatever lies at `final` belongs to no stream (the caller checked the name is
    free: a directory without a config left by an interrupted delete)."""
    if final.exists():
        shutil.rmtree(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.rename(staging, final)
    sync.fsync_dir(final.parent)


def lanes(account_directory: Path) -> Callable[[Path], Hashable]:
    """For the Syncer: the paths under one stream's directory share a lane (its name); the rest one more."""
    root = streams_root(account_directory)

    def lane_of(path: Path) -> Hashable:
        try:
            parts = Path(path).relative_to(root).parts
        except ValueError:
            return None
        return parts[0] if parts else None

    return lane_of


def stream_dir(account_directory: Path, name: str) -> Path:
    return streams_root(account_directory) / _safe_name(name)


def consumer_dir(stream_directory: Path, name: str) -> Path:
    return Path(stream_directory) / "consumers" / _safe_name(name)


def _dirs_with_meta(parent: Path) -> list[Path]:
    """The directories in `parent` holding a config; one left half removed by a delete (SyncPolicy.remove_dir)
    is removed now."""
    if not parent.is_dir():
        return []
    found = []
    for p in parent.iterdir():
        if p.name.startswith(".") and DELETED_MARK in p.name:
            shutil.rmtree(p, ignore_errors=True)
        elif (p / META).is_file():
            found.append(p)
    return sorted(found)


def list_stream_dirs(account_directory: Path) -> list[Path]:
    """Stream directories of an account that hold a saved config, sorted by name."""
    return _dirs_with_meta(streams_root(account_directory))


def list_consumer_dirs(stream_directory: Path) -> list[Path]:
    return _dirs_with_meta(Path(stream_directory) / "consumers")


def save_meta(directory: Path, data: bytes, sync: SyncPolicy | None = None,
              on_error: ErrorCallback | None = None) -> None:
    """Write `directory/meta.json` atomically: temp file, fsync, rename, fsync of the directory (and of its
    parent when the directory is new). With `sync`'s syncer that follows in its thread, failures to `on_error`."""
    directory = Path(directory)
    new = not directory.is_dir()
    directory.mkdir(parents=True, exist_ok=True)
    if sync is None or sync.syncer is None:
        replace_file(directory / META, data)
        if new:
            fsync_dir(directory.parent)
        return
    sync.replace(directory / META, data, on_error or _log_error)
    if new:
        sync.fsync_dir(directory.parent, on_error or _log_error)


def _log_error(error: OSError) -> None:
    """The syncer's thread logged it already; nobody else waits for the write."""


def save_dedupe(directory: Path, data: bytes) -> None:
    """The stream's Nats-Msg-Id window at a clean stop, so a restart need not re-read the messages."""
    replace_file(Path(directory) / DEDUPE, data)


def take_dedupe(directory: Path) -> bytes | None:
    """What `save_dedupe` wrote, removed as it is read: it describes the store only until the next write."""
    path = Path(directory) / DEDUPE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    path.unlink()
    return data


def save_sources(directory: Path, data: bytes, sync: SyncPolicy | None = None) -> None:
    """The sources' positions (atomically), for when none of a source's copies is left in the stream; with
    `sync`'s syncer the fsyncs and the rename follow in its thread (a failure is logged there)."""
    if sync is None or sync.syncer is None:
        replace_file(Path(directory) / SOURCES, data)
    else:
        sync.replace(Path(directory) / SOURCES, data, _log_error)


def load_sources(directory: Path) -> bytes | None:
    try:
        return (Path(directory) / SOURCES).read_bytes()
    except FileNotFoundError:
        return None


def load_meta(directory: Path) -> bytes | None:
    """The bytes last saved by `save_meta`, or None when there are none."""
    try:
        return (Path(directory) / META).read_bytes()
    except FileNotFoundError:
        return None
