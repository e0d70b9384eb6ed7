"""The account's streams and consumers: their registries, their persistence and the fsync timer.

Owns: the stream registry (create / update / delete / lookup with nats-server's cross-stream rules, and
restoring a stream from a snapshot archive: `restore_stream`), the consumer registry beside it
(`ConsumerRegistry`: create, restore, delete and expire consumers), the on-disk layout
`<store_dir>/jetstream/<account>/streams/<name>/` (config metadata + the stream's store + `consumers/<name>/`
for durable consumers, the store package's layout helpers), the account's limits and its share of the
server's (`ServerStorage`: every account's reservations and usage against `max_memory` / `max_storage`), restoring every stream on start, the periodic fsync of
the default sync policy, the store's `Syncer` (every fsync runs in its threads; an API answer waits for
the fsyncs its handler asked for: `answer_when_durable`), and the numbers `$JS.API.INFO`, /jsz and /varz
report. The API router (api.py) answers requests with it; service.py puts the two together as the
service the core starts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

from jsbroker import store as storage
from jsbroker import subjects
from jsbroker.config import JetStreamSettings
from jsbroker.internal import InternalBus
from jsbroker.jetstream import errors, times
from jsbroker.jetstream.requests import API_LEVEL
from jsbroker.jetstream.responses import ApiCounts
from jsbroker.store.base import ConsumerState, FsyncStats, StreamStore

# The stream, consumer, sourcing and snapshot modules are imported by the methods that open, create or
# restore a stream or consumer (an empty start needs none of them: bench/README.md, "Where an empty
# start's time goes"); once a stream exists they are loaded and those imports cost a dict lookup.
if TYPE_CHECKING:
    from jsbroker.jetstream import atomic_batch, fast_batch, snapshot
    from jsbroker.jetstream.consumer import Consumer
    from jsbroker.jetstream.consumer_config import ConsumerConfig
    from jsbroker.jetstream.sourcing import Sourcing
    from jsbroker.jetstream.stream import Stream
    from jsbroker.jetstream.stream_config import StreamConfig

log = logging.getLogger(__name__)

_META_VERSION = 1


class _LayoutWrite:
    """The layout writes (config, directories) of one API request, made durable by the syncer: the first
    failure is answered with `kind`, after `undo` (a create taken back)."""

    __slots__ = ("kind", "undo", "error")

    def __init__(self, kind: errors.ErrorKind, undo: Callable[[], None] | None) -> None:
        self.kind, self.undo = kind, undo
        self.error: OSError | None = None

    def failed(self, error: OSError) -> None:
        if self.error is None:
            self.error = error


class ConsumerRegistry:
    """The consumers' lifecycle: open one (its state store in `<stream>/consumers/<name>/`, the store's
    layout, or in memory), create, restore (after a start, or from a snapshot), and delete (by request or
    when inactive). The API handlers (`consumer_api`) check the requests; this does what follows."""

    def __init__(self, sync: storage.SyncPolicy, layout: Callable[..., storage.ErrorCallback]) -> None:
        self._sync = sync
        self._layout = layout  # StreamRegistry._layout: an on_error that turns a failed write into the API error

    @staticmethod
    def _directory(stream: Stream, name: str) -> Path | None:
        """Where a consumer of `stream` keeps its files; None for a memory stream (nothing on disk)."""
        if stream.directory is None or stream.config.storage == "memory":
            return None
        return storage.consumer_dir(stream.directory, name)

    def _open(self, stream: Stream, name: str, cfg: ConsumerConfig, created_ns: int) -> Consumer:
        from jsbroker.jetstream.consumer import Consumer

        directory = self._directory(stream, name)
        memory = directory is None or cfg.mem_storage
        store = storage.open_consumer_store("memory" if memory else "file", None if memory else directory,
                                            self._sync)
        consumer = Consumer(stream, name, cfg, store, directory, created_ns,
                            on_inactive=lambda: self.delete(stream, consumer), sync=self._sync)
        return consumer

    def create(self, stream: Stream, name: str, cfg: ConsumerConfig, created_ns: int) -> Consumer:
        """A new consumer (its config checked by the caller): started, saved, attached, announced."""
        consumer = self._open(stream, name, cfg, created_ns)
        consumer.start()
        consumer.save_meta(self._layout(errors.CONSUMER_CREATE, lambda: self._undo_create(stream, consumer)))
        stream.add_consumer(consumer)
        from jsbroker.jetstream import advisories

        advisories.action(stream.bus, stream.name, name, created=True)
        return consumer

    def restore(self, stream: Stream, name: str, created_ns: int, raw_cfg: dict[str, Any],
                state: ConsumerState | None) -> None:
        """Bring back one consumer with its saved config and state (None: the state its store holds)."""
        from jsbroker.jetstream.consumer_config import ConsumerConfig

        consumer = self._open(stream, name, ConsumerConfig.from_json(raw_cfg), created_ns)
        if state is not None:
            consumer.store.reset(state)
        consumer.start(consumer.store.load())
        stream.add_consumer(consumer)

    def restore_saved(self, stream: Stream) -> None:
        """Bring back the consumers saved under a stream just opened from disk (after `stream.start()`);
        a damaged one is logged and skipped."""
        if stream.directory is None or stream.config.storage == "memory":
            return
        from jsbroker.jetstream.consumer_meta import load_meta

        for directory in storage.list_consumer_dirs(stream.directory):
            try:
                meta = load_meta(directory)
                if meta is None or meta[0] in stream.consumers:
                    continue
                name, created, raw_cfg = meta
                self.restore(stream, name, created, raw_cfg, None)
            except Exception:
                log.exception("could not restore consumer", extra={"stream": stream.name, "directory": str(directory)})

    def _undo_create(self, stream: Stream, consumer: Consumer) -> None:
        """Its config could not be made durable: the consumer goes again (unless deleted meanwhile)."""
        if stream.consumers.get(consumer.name) is consumer:
            self.delete(stream, consumer)

    def delete(self, stream: Stream, consumer: Consumer) -> None:
        """Detach, stop and remove a consumer with its files (CONSUMER.DELETE, or inactive_threshold passed)."""
        stream.remove_consumer(consumer)
        consumer.delete(self._layout(errors.STREAM_GENERAL_ERROR))
        from jsbroker.jetstream import advisories

        advisories.action(stream.bus, stream.name, consumer.name, created=False)


class ServerStorage:
    """The server's `max_memory` / `max_storage`, which every account's streams share (nats-server's
    reservations: a stream's max_bytes is reserved against the server's limit, over all accounts)."""

    def __init__(self, max_memory: int, max_storage: int) -> None:
        self.max_memory, self.max_storage = max_memory, max_storage
        self.accounts: list[StreamRegistry] = []

    def limit(self, storage: str) -> int:
        return self.max_memory if storage == "memory" else self.max_storage

    def reserved(self, storage: str, own: Stream | None = None) -> int:
        return sum(r.reserved(storage, own) for r in self.accounts)

    def used(self, storage: str) -> int:
        return sum(r.used(storage) for r in self.accounts)


class StreamRegistry:
    """The streams (and beside them the consumers) of one account; the API's handlers call it."""

    def __init__(self, bus: InternalBus, settings: JetStreamSettings, directory: Path | None,
                 server: ServerStorage) -> None:
        """`directory`: the account's (`storage.account_dir`), None when the server has no store; `server`:
        the limits shared with the other accounts."""
        self.bus = bus
        self.server = server
        server.accounts.append(self)
        # open fast batches across streams (nats-server's 50,000), and the open atomic batches of all streams
        # (a server-wide limit): made with the first stream (`_open`)
        self._fast_inflight: fast_batch.Inflight | None = None
        self._batches: atomic_batch.Inflight | None = None
        self.settings = settings
        self.domain = settings.domain or None
        self.streams: dict[str, Stream] = {}
        self._sourcing: dict[str, Sourcing] = {}  # the streams with a mirror or sources: their copying
        self._store_dir = directory
        stats = FsyncStats()
        # Every fsync of the running broker happens in the syncer's thread (store/syncer.py), never on the loop.
        self._syncer = storage.Syncer(bus.loop, storage.SyncPolicy(stats=stats).fsync_now,
                                      storage.lanes(self._store_dir)) if self._store_dir is not None else None
        self._sync = storage.SyncPolicy(always=settings.sync_always, interval=settings.sync_interval, stats=stats,
                                        syncer=self._syncer)
        self._layout_writes: list[_LayoutWrite] | None = None  # those of the API request being handled, if one is
        self.consumers = ConsumerRegistry(self._sync, self._layout)
        self.api_counts = ApiCounts()  # the API router's answers, for $JS.API.INFO and /jsz
        self._sync_handle: Any = None
        self.recovery_seconds = 0.0  # the last start's store recovery

    # -- lifecycle --------------------------------------------------------------------------------------

    async def start(self) -> None:
        started = time.perf_counter()
        if self._store_dir is not None:
            storage.streams_root(self._store_dir).mkdir(parents=True, exist_ok=True)  # at start, as nats-server's jetstream/
            storage.clear_restores(self._store_dir)
            for directory in storage.list_stream_dirs(self._store_dir):
                await self._restore(directory)
        self.recovery_seconds = time.perf_counter() - started
        self._origins_changed()  # a source restored before its origin finds it now
        self._sync_handle = self.bus.loop.call_later(self._tick_interval(), self._sync_tick)

    def release_waiting_pulls(self, tell: bool) -> None:
        """The server is stopping: every waiting pull request is dropped, and told `409 Server Shutdown`
        (`tell`) while its client is still connected."""
        for stream in self.streams.values():
            for consumer in stream.consumers.values():
                consumer.release_waiting_pulls(tell)

    async def stop(self) -> None:
        if self._sync_handle is not None:
            self._sync_handle.cancel()
            self._sync_handle = None
        for name in list(self._sourcing):
            self._stop_sourcing(name)
        for stream in self.streams.values():
            stream.stop()
            if stream.directory is not None and stream.config.storage == "file":
                try:
                    storage.save_dedupe(stream.directory, stream.dedupe_snapshot())
                except OSError:
                    log.exception("could not save the msg-id window; the next start re-reads it",
                                  extra={"stream": stream.name})
            stream.store.sync()
            stream.store.close()
        self.streams.clear()
        if self._syncer is not None:  # everything asked for is made durable before the process goes
            await self.bus.loop.run_in_executor(None, self._syncer.close)
            self._syncer = None

    async def _restore(self, directory: Path) -> None:
        """Bring back one stream from disk; a damaged one is logged and skipped, never fatal. The store is
        read in a worker thread, so the event loop keeps answering health probes (503 until done)."""
        from jsbroker.jetstream import stream_config

        try:
            meta = json.loads(storage.load_meta(directory) or b"null")
            cfg = stream_config.from_stored(meta["config"])
            created = int(meta.get("created", 0)) or times.now_ns()
            stream = await self.bus.loop.run_in_executor(None, self._open, cfg, directory, created)
        except Exception:
            log.exception("could not restore stream; leaving its directory untouched",
                          extra={"directory": str(directory)})
            return
        self.streams[cfg.name] = stream
        stream.start()
        self._start_sourcing(stream)
        self.consumers.restore_saved(stream)
        stream.consumers_restored()

    def _open(self, cfg: StreamConfig, directory: Path | None, created_ns: int, store: StreamStore | None = None) -> Stream:
        from jsbroker.jetstream import atomic_batch, fast_batch
        from jsbroker.jetstream.stream import Stream

        if self._batches is None or self._fast_inflight is None:
            self._fast_inflight, self._batches = fast_batch.Inflight(), atomic_batch.Inflight()
        if store is None:
            store = storage.open_stream_store(cfg.storage, directory, cfg.store_limits(), self._sync_policy(cfg))  # type: ignore[arg-type]
        s = self.settings
        limited = max(s.max_memory, s.max_storage, s.account.max_mem, s.account.max_file) > 0
        dedupe = storage.take_dedupe(directory) if cfg.storage == "file" and directory is not None else None
        return Stream(self.bus, cfg, store, directory, created_ns, self.domain,
                      self._exhausted if limited else None, dedupe, self._batches, self._fast_inflight)

    def _sync_policy(self, cfg: StreamConfig) -> storage.SyncPolicy:
        """`persist_mode: async` opts a stream out of `sync: always`, as nats-server's (its stats stay shared)."""
        return dataclasses.replace(self._sync, always=False) if cfg.persist_mode == "async" else self._sync

    def _tick_interval(self) -> float:
        """The interval sync policy's period; with `sync_always` the tick only checkpoints, as often."""
        interval = self.settings.sync_interval
        return interval if interval > 0 else storage.SyncPolicy().interval

    def _sync_tick(self) -> None:
        """fsync (interval policy) and checkpoint every stream: after a crash, a start reads at most one
        interval's writes again."""
        for stream in list(self.streams.values()):
            if not self.settings.sync_always or stream.config.persist_mode == "async":
                stream.sync()
            stream.checkpoint()
        self._sync_handle = self.bus.loop.call_later(self._tick_interval(), self._sync_tick)

    # -- registry (called by the API handlers) ---------------------------------------------------------

    def lookup(self, name: str) -> Stream:
        stream = self.streams.get(name)
        if stream is None:
            raise errors.STREAM_NOT_FOUND()
        return stream

    def create_stream(self, cfg: StreamConfig) -> Stream:
        from jsbroker.jetstream import sourcing

        cfg = sourcing.check_origins(cfg, self._origin_config)
        self._check_max_bytes(cfg)
        if cfg.num_replicas > 1:
            raise errors.STREAM_REPLICAS_NOT_SUPPORTED()
        existing = self.streams.get(cfg.name)
        if existing is not None:
            if existing.config.same_as_request(cfg):
                return existing
            raise errors.STREAM_NAME_EXIST()
        self._check_new(cfg)
        directory = self._directory(cfg.name)
        created = times.now_ns()
        self._save(cfg, directory, created, self._layout(errors.STREAM_CREATE, lambda: self._undo_create(cfg.name, created)))
        stream = self._open(cfg, directory, created)
        if cfg.first_seq:  # as nats-server: a purge (first_seq 1 too: reported at once), last_ts stays zero
            stream.store.purge(up_to_seq=cfg.first_seq if cfg.first_seq > 1 else 0)
            stream.last_seq = cfg.first_seq - 1
        self.streams[cfg.name] = stream
        stream.start()
        self._start_sourcing(stream)
        self._origins_changed()
        return stream

    def _undo_create(self, name: str, created_ns: int) -> None:
        """Its config could not be made durable: the stream goes again (unless deleted meanwhile)."""
        stream = self.streams.get(name)
        if stream is not None and stream.created_ns == created_ns:
            self.delete_stream(name)

    def _check_new(self, cfg: StreamConfig) -> None:
        """What a stream that does not exist yet must pass besides its own config (create and restore)."""
        if 0 < self.settings.account.max_streams <= len(self.streams):
            raise errors.MAXIMUM_STREAMS_LIMIT()
        self._check_reservation(cfg, None)
        self._check_overlap(cfg, None)

    def check_restore(self, cfg: StreamConfig, finishing: bool = False) -> StreamConfig:
        """A RESTORE's checks (nats-server's order): the request's before any chunk is taken, and when
        `finishing` everything a new stream must pass (the subjects overlap check comes only then)."""
        from jsbroker.jetstream import sourcing

        cfg = sourcing.check_origins(cfg, self._origin_config)
        self._check_max_bytes(cfg)
        if cfg.num_replicas > 1:
            raise errors.STREAM_REPLICAS_NOT_SUPPORTED()
        if 0 < self.settings.account.max_streams <= len(self.streams):
            raise errors.MAXIMUM_STREAMS_LIMIT()
        self._check_reservation(cfg, None)
        if cfg.name in self.streams:
            raise errors.STREAM_NAME_EXIST_RESTORE_FAILED()
        if finishing:
            self._check_overlap(cfg, None)
        return cfg

    def staging_file(self) -> IO[bytes]:
        """A new file for an archive being received (removed when closed): beside the streams, so a
        restore's rename stays on one file system."""
        where = None if self._store_dir is None else storage.restores_root(self._store_dir)
        if where is not None:
            where.mkdir(parents=True, exist_ok=True)
        return tempfile.TemporaryFile(dir=where)

    async def restore_stream(self, cfg: StreamConfig, archive: IO[bytes]) -> Stream:
        """Create stream `cfg` from a snapshot archive (`snapshot.py`; errors raise `ArchiveError` or an
        ApiError). A file stream is built in a staging directory in a worker thread, with its consumers,
        and renamed into place at once, so a crash leaves either nothing or the whole stream; it is then
        opened as a start opens it. A memory stream is built in memory the same way (and removed again
        when one of its consumers cannot be set up)."""
        from jsbroker.jetstream import snapshot

        cfg = self.check_restore(cfg, finishing=True)  # the registry may have changed while the chunks came in
        loop = self.bus.loop
        size = int((await loop.run_in_executor(None, snapshot.read_state, archive)).get("bytes") or 0)
        self._check_restore_size(cfg, size)
        created = times.now_ns()
        if cfg.storage == "memory":
            store = storage.open_stream_store("memory", None, cfg.store_limits(), self._sync)
            reader = await loop.run_in_executor(None, _fill, store, archive, cfg)
            self.check_restore(cfg, finishing=True)
            stream = self._open(cfg, None, created, store)
            self.streams[cfg.name] = stream
            stream.start()
            self._start_sourcing(stream)
            try:
                for c in reader.header.consumers:
                    self.consumers.restore(stream, c.name, created, c.config, c.state)
            except Exception:
                self.delete_stream(cfg.name)
                raise
            stream.consumers_restored()
        else:
            final = self._directory(cfg.name)
            staging = await loop.run_in_executor(None, self._stage, cfg, archive, created)
            self.check_restore(cfg, finishing=True)
            try:
                storage.commit_restore(staging, final, self._sync)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            await self._durable()
            await self._restore(final)
            if cfg.name not in self.streams:
                raise snapshot.ArchiveError("the restored stream could not be opened (see the broker's log)")
        self._origins_changed()
        return self.streams[cfg.name]

    def _check_restore_size(self, cfg: StreamConfig, size: int) -> None:
        """The archive's bytes against the limits before anything is stored, as nats-server reserves them:
        as a `max_bytes` (10028 / 10047 when the reservations would pass the limit) and as usage."""
        self._check_reservation(dataclasses.replace(cfg, max_bytes=max(cfg.max_bytes, size)), None)
        account, server = self._account_limit(cfg.storage), self.server.limit(cfg.storage)
        if 0 < account < self.used(cfg.storage) + size or 0 < server < self.server.used(cfg.storage) + size:
            raise errors.MEMORY_RESOURCES_EXCEEDED() if cfg.storage == "memory" else errors.STORAGE_RESOURCES_EXCEEDED()

    async def _durable(self) -> None:
        """Wait until everything asked of the syncer so far is done."""
        done: asyncio.Future[None] = self.bus.loop.create_future()
        self._sync.when_durable(self._store_dir or Path(), lambda: None if done.done() else done.set_result(None))
        await done

    def _stage(self, cfg: StreamConfig, archive: IO[bytes], created: int) -> Path:
        """The whole stream directory (messages, consumers, config) under the restores root (a thread: its
        fsyncs are made there, not by the syncer, so all of it is durable before the rename)."""
        assert self._store_dir is not None  # a file stream has a directory (`_directory` checked)
        from jsbroker.jetstream.consumer_meta import consumer_meta

        staging = Path(tempfile.mkdtemp(prefix=f"{cfg.name}.", dir=storage.restores_root(self._store_dir)))
        inline = dataclasses.replace(self._sync_policy(cfg), syncer=None)
        try:
            store = storage.open_stream_store("file", staging, cfg.store_limits(), inline)
            try:
                reader = _fill(store, archive, cfg)
            finally:
                store.close()
            for c in reader.header.consumers:
                directory = storage.consumer_dir(staging, c.name)
                consumer_store = storage.open_consumer_store("file", directory, inline)
                consumer_store.reset(c.state)
                consumer_store.close()
                storage.save_meta(directory, consumer_meta(c.name, created, c.config))
            self._save(cfg, staging, created, sync=inline)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return staging

    def update_stream(self, cfg: StreamConfig) -> Stream:
        from jsbroker.jetstream import sourcing

        cfg = sourcing.check_origins(cfg, self._origin_config)  # nats-server checks these before the name
        stream = self.lookup(cfg.name)
        self._check_max_bytes(cfg)
        from jsbroker.jetstream import stream_config

        cfg = stream_config.check_update(stream.config, cfg)
        self._check_reservation(cfg, stream)
        self._check_overlap(cfg, stream)
        self._save(cfg, self._directory(cfg.name), stream.created_ns, self._layout(errors.STREAM_UPDATE))
        relinked = (stream.config.mirror, stream.config.sources) != (cfg.mirror, cfg.sources)
        if relinked:  # as nats-server: the links start again, positioned from the stored messages
            self._stop_sourcing(cfg.name)
        stream.update(cfg)
        if relinked:
            self._start_sourcing(stream)
        return stream

    def delete_stream(self, name: str) -> None:
        stream = self.lookup(name)
        self._stop_sourcing(name)
        stream.stop()
        del self.streams[name]
        stream.store.delete(self._layout(errors.STREAM_DELETE))
        self._origins_changed()

    # -- sourcing: one Sourcing per stream with a mirror or sources, started and stopped only here ----

    def _start_sourcing(self, stream: Stream) -> None:
        if stream.config.mirror is not None or stream.config.sources:
            from jsbroker.jetstream.sourcing import Sourcing

            self._sourcing[stream.name] = runner = Sourcing(stream, self.streams.get, self.bus, self._sync)
            runner.start()

    def _stop_sourcing(self, name: str) -> None:
        runner = self._sourcing.pop(name, None)
        if runner is not None:
            runner.stop()

    def _origins_changed(self) -> None:
        """Streams came or went: every link looks its origin up (a missing one is reported by its tick)."""
        for runner in self._sourcing.values():
            runner.relink(report_missing=False)

    def _origin_config(self, name: str) -> StreamConfig | None:
        stream = self.streams.get(name)
        return stream.config if stream is not None else None

    def streams_matching(self, subject_filter: str) -> list[Stream]:
        """Streams whose subjects could collide with the filter (all when it is empty)."""
        if not subject_filter:
            return list(self.streams.values())
        return [s for s in self.streams.values()
                if any(subjects.subjects_overlap(subject_filter, subj) for subj in s.config.subjects)]

    def _check_overlap(self, cfg: StreamConfig, own: Stream | None) -> None:
        for other in self.streams.values():
            if other is own:
                continue
            if any(subjects.subjects_overlap(a, b) for a in cfg.subjects for b in other.config.subjects):
                raise errors.STREAM_SUBJECT_OVERLAP()

    def _account_limit(self, storage: str) -> int:
        account = self.settings.account
        return account.max_mem if storage == "memory" else account.max_file

    def _check_max_bytes(self, cfg: StreamConfig) -> None:
        """The account's max_bytes_required and memory / store max stream bytes (nats-server's checkStreamCfg)."""
        account = self.settings.account
        limit = account.memory_max_stream_bytes if cfg.storage == "memory" else account.store_max_stream_bytes
        if account.max_bytes_required and cfg.max_bytes <= 0:
            raise errors.STREAM_MAX_BYTES_REQUIRED()
        if limit > 0 and cfg.max_bytes > limit:
            raise errors.STREAM_MAX_STREAM_BYTES_EXCEEDED()

    def _check_reservation(self, cfg: StreamConfig, own: Stream | None) -> None:
        """A stream's max_bytes is reserved against the account's memory / storage limit (its own streams'
        reservations) and the server's (every account's), as nats-server's checkAllLimits: a stream without
        max_bytes counts as one byte, so an account limit of 0 allows no stream of that storage type."""
        add = cfg.max_bytes if cfg.max_bytes > 0 else 1
        account, server = self._account_limit(cfg.storage), self.server.limit(cfg.storage)
        if (0 <= account < self.reserved(cfg.storage, own) + add
                or 0 < server < self.server.reserved(cfg.storage, own) + add):
            raise errors.MEMORY_RESOURCES_EXCEEDED() if cfg.storage == "memory" else errors.STORAGE_RESOURCES_EXCEEDED()

    def reserved(self, storage: str, own: Stream | None = None) -> int:
        """The max_bytes this account's streams of a storage type reserve (`own`, being updated, left out)."""
        return sum(s.config.max_bytes for s in self.streams.values()
                   if s is not own and s.config.storage == storage and s.config.max_bytes > 0)

    def used(self, storage: str) -> int:
        return sum(s.store.state().bytes for s in self.streams.values() if s.config.storage == storage)

    def _exhausted(self, storage: str) -> errors.ErrorKind | None:
        """The error for a publish when this storage type is used up: the account's limit first (10002),
        then the server's, by every account (10023); None while there is room."""
        if 0 < self._account_limit(storage) <= self.used(storage):
            return errors.ACCOUNT_RESOURCES_EXCEEDED
        if 0 < self.server.limit(storage) <= self.server.used(storage):
            return errors.INSUFFICIENT_RESOURCES
        return None

    @property
    def max_consumers(self) -> int:
        """Consumers each stream may have under the account's limit (0 or -1: unlimited)."""
        return self.settings.account.max_consumers

    @property
    def max_ack_pending(self) -> int:
        """The account's limit of a consumer's max_ack_pending (0 or -1: unlimited)."""
        return self.settings.account.max_ack_pending

    def _directory(self, name: str) -> Path:
        if self._store_dir is None:
            raise errors.STREAM_CREATE(err="jetstream has no store directory")
        return storage.stream_dir(self._store_dir, name)

    def _save(self, cfg: StreamConfig, directory: Path, created_ns: int,
              on_error: storage.ErrorCallback | None = None, sync: storage.SyncPolicy | None = None) -> None:
        """Persist a file stream's config (durable in the syncer's thread, unless `sync` has none); memory
        streams vanish on restart, as in nats-server."""
        if cfg.storage == "memory":
            return
        meta = {"version": _META_VERSION, "created": created_ns, "config": cfg.to_json(dynamic_metadata=False)}
        storage.save_meta(directory, json.dumps(meta).encode(), sync or self._sync, on_error)

    # -- durability of the API's answers ------------------------------------------------------------------

    def _layout(self, kind: errors.ErrorKind, undo: Callable[[], None] | None = None) -> storage.ErrorCallback:
        """An on_error for a layout write of the API request being handled (see `answer_when_durable`); outside
        one (a consumer removed by its inactive threshold) the syncer's log line is all."""
        if self._layout_writes is None:
            return _logged
        write = _LayoutWrite(kind, undo)
        self._layout_writes.append(write)
        return write.failed

    def before_request(self) -> None:
        """Before an API handler: forget which streams' durability work was asked for until now."""
        self._layout_writes = []
        if self._syncer is not None:
            self._syncer.take_touched()

    def answer_when_durable(self, answer: Callable[[errors.ApiError | None], None]) -> None:
        """After an API handler: `answer(None)` at once when it asked the syncer for nothing (since
        `before_request`); otherwise once what it asked for is durable, or `answer(error)` with the
        request's error kind (after taking a create back) when a layout write failed. Other clients are
        served meanwhile: a create, update or delete is answered only after its layout is durable."""
        writes, self._layout_writes = self._layout_writes or [], None
        lanes = self._syncer.take_touched() if self._syncer is not None else []
        if self._syncer is None or not lanes:
            answer(None)
            return

        def durable() -> None:
            for write in writes:
                if write.error is not None:
                    if write.undo is not None:
                        write.undo()
                    answer(write.kind(err=str(write.error)))
                    return
            answer(None)

        self._syncer.when_lanes_durable(lanes, durable)

    # -- reports ----------------------------------------------------------------------------------------

    def cluster_info(self) -> dict[str, Any]:
        return {"leader": self.bus.server_name}

    def usage(self) -> tuple[int, int, int, int, int]:
        """memory and file bytes, streams, consumers, messages."""
        memory = file = consumers = msgs = 0
        for stream in self.streams.values():
            state = stream.store.state()
            msgs += state.msgs
            if stream.config.storage == "memory":
                memory += state.bytes
            else:
                file += state.bytes
            consumers += len(stream.consumers) + len(stream.watchers)  # nats-server's sourcing consumers count
        return memory, file, len(self.streams), consumers, msgs

    def account_info(self) -> dict[str, Any]:
        """$JS.API.INFO's answer: with tiered limits (an account JWT's), the usage and limits are the tier's
        and the account-wide limits are all zero, as nats-server reports them."""
        memory, file, streams, consumers, _ = self.usage()
        account = self.settings.account
        usage: dict[str, Any] = {
            "memory": memory, "storage": file,
            "reserved_memory": self.reserved("memory"), "reserved_storage": self.reserved("file"),
            "streams": streams, "consumers": consumers,
        }
        # the account's limits (the server-wide max_memory / max_storage are not account limits)
        limits = {"max_memory": account.max_mem, "max_storage": account.max_file,
                  "max_streams": account.max_streams, "max_consumers": account.max_consumers,
                  "max_ack_pending": account.max_ack_pending,
                  "memory_max_stream_bytes": account.memory_max_stream_bytes,
                  "storage_max_stream_bytes": account.store_max_stream_bytes,
                  "max_bytes_required": account.max_bytes_required}
        if account.tier:
            body = {**usage, "limits": {**{k: 0 for k in limits}, "max_bytes_required": False},
                    "tiers": {account.tier: {**usage, "limits": limits}}}
        else:
            body = {**usage, "limits": limits}
        if self.domain:
            body["domain"] = self.domain
        body["api"] = {"level": API_LEVEL, "total": self.api_counts.total, "errors": self.api_counts.errors}
        return body

    def store_stats(self) -> dict[str, float]:
        """For /metrics: the stores' fsyncs and how long the last start took to recover them."""
        fsyncs = self._sync.stats
        return {"fsyncs": fsyncs.count, "fsync_seconds": fsyncs.seconds, "fsync_max_seconds": fsyncs.max_seconds,
                "recovery_seconds": self.recovery_seconds}

    def stream_details(self) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
        """Each stream's name, state and its consumers' ConsumerInfo, by name (for /metrics)."""
        return [(name, stream.info_state(), self.consumer_infos(name)) for name, stream in sorted(self.streams.items())]

    def consumer_infos(self, stream: str) -> list[dict[str, Any]]:
        """The ConsumerInfo of `stream`'s consumers, by name (for /metrics and JSZ's consumer_detail)."""
        from jsbroker.jetstream.consumer import Consumer

        consumers = sorted(self.streams[stream].consumers.items())
        return [c.info(dynamic_metadata=False) for _, c in consumers if isinstance(c, Consumer)]

    # -- for the router ---------------------------------------------------------------------------------

    def wants_no_responders(self, tokens: list[str]) -> bool:
        """Whether nats-server would have answered this unhandled API subject with 503 no-responders:
        DIRECT.GET of a stream without allow_direct, MSG.NEXT of a consumer that does not exist."""
        if len(tokens) >= 5 and tokens[2] == "DIRECT" and tokens[3] == "GET":
            stream = self.streams.get(tokens[4])
            return stream is None or not stream.config.allow_direct
        if len(tokens) == 7 and tokens[2] == "CONSUMER" and tokens[3] == "MSG" and tokens[4] == "NEXT":
            stream = self.streams.get(tokens[5])
            return stream is None or tokens[6] not in stream.consumers
        return False


def _logged(error: OSError) -> None:
    """A failed layout write nobody waits for: the syncer logged it."""


def _fill(store: StreamStore, archive: IO[bytes], cfg: StreamConfig) -> snapshot.Reader:
    """Store an archive's messages under their own sequences and times, as nats-server's restore does:
    its first sequence and the gaps (removed messages) as in the snapshot, its last sequence even when
    the newest were removed; a message whose Nats-TTL has run out is a gap too."""
    from jsbroker.jetstream import consumer_config, snapshot
    from jsbroker.jetstream.consumer_config import ConsumerConfig
    from jsbroker.jetstream.stream import stored_ttl_ns

    archive.seek(0)
    reader = snapshot.Reader(archive)
    for c in reader.header.consumers:  # refused before anything is stored, never dropped on the way
        try:
            consumer_config.refuse_unsupported(ConsumerConfig.from_json(c.config))
        except errors.ApiError as err:
            raise snapshot.ArchiveError(f"consumer {c.name!r} cannot be restored ({err.description}): back the "
                                        "stream up without its consumers, or remove that consumer first") from None
    state = reader.header.state
    first = int(state.get("first_seq") or 0)
    if first > 1:
        store.purge(up_to_seq=first)  # as a stream created with first_seq
    elif not state.get("last_seq"):
        store.purge()  # a never-used stream comes back purged, first_seq 1 (as nats-server's restore)
    last, now, unflushed = max(first - 1, 0), times.now_ns(), 0
    for batch in reader.batches():
        for m in batch:
            if m.seq <= last:
                raise snapshot.ArchiveError(f"the archive is corrupt (sequence {m.seq} out of order): {snapshot.RETAKE}")
            ttl = stored_ttl_ns(m.hdr) if m.hdr and cfg.allow_msg_ttl else 0
            if ttl > 0 and m.ts + ttl < now:
                continue
            if m.seq > last + 1:
                store.skip_msgs(m.seq, stamp=False)
            last, _ = store.store_deferred(m.subject, m.hdr, m.data, ttl, ts_ns=m.ts)
        unflushed += len(batch)
        if unflushed >= 4096:
            store.flush()
            unflushed = 0
    store.flush()
    end = int(state.get("last_seq") or 0)
    if end > store.state().last_seq:
        store.skip_msgs(end + 1, stamp=False)
    return reader
