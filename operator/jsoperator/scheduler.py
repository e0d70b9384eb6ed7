"""When each resource is reconciled apart from kopf's change handlers (create, update, resume): the drift
check every `--drift-interval`, retries with backoff, and at once when something signals a change on the
server (a JetStream advisory, a reconnect). Also holds the per-resource runtime state the handlers share:
one lock (reconciliations of one resource never overlap), the reset requests executed, the connection the
last reconciliation reached.

Not kopf timers: kopf puts a finalizer on every object a timer serves, and the operator must be able to
run without finalizers (`--no-finalizers`). kopf's watch feeds `seen`/`gone`; `serve` runs due entries
through the `run` callback the kopf layer supplies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal

from . import buckets, connections, jsclient

log = logging.getLogger("jsoperator")

Kind = Literal["Stream", "Consumer", "KeyValue", "ObjectStore"]
Key = tuple[str, str, str]  # kind, namespace, name
Why = Literal["timer", "signal"]

MAX_BACKOFF = 30.0
CONCURRENCY = 8  # reconciliations the scheduler runs at once (each holds one broker request at a time)


def backoff(retry: int) -> float:
    """Seconds before retry number `retry` (0-based): 0.5, 1, 2, 4, ... capped at MAX_BACKOFF."""
    return min(0.5 * 2.0**retry, MAX_BACKOFF)


def key_of(kind: str, body: Mapping[str, Any]) -> Key:
    meta = body["metadata"]
    return kind, meta["namespace"], meta["name"]


@dataclasses.dataclass
class Entry:
    """One resource (Stream, Consumer, KeyValue, ObjectStore) as the scheduler knows it."""

    kind: Kind
    body: Mapping[str, Any]  # the latest seen by kopf's watch
    due: float
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    executed: set[str] = dataclasses.field(default_factory=set)  # reset requests run by this process
    reached: jsclient.ConnectionSettings | None = None  # the connection of the last reconciliation
    retries: int = 0
    signalled: bool = False
    out_of_storage: str | None = None  # the server whose out-of-storage advisory the next run reports

    @property
    def server_names(self) -> tuple[str, str | None]:
        """(stream, consumer) on the server; consumer None for a Stream or a bucket."""
        spec = self.body.get("spec") or {}
        name = self.body["metadata"]["name"]
        if buckets.is_stream_kind(self.kind):
            return buckets.stream_of(self.kind, spec, name), None
        return str(spec.get("streamName") or ""), str(spec.get("durableName") or name)


def _ready_reason(body: Mapping[str, Any]) -> str | None:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c.get("reason") for c in conditions if c.get("type") == "Ready"), None)


Run = Callable[[Entry, Why], Awaitable[tuple[bool, jsclient.ConnectionSettings | None]]]  # -> (retry, reached)


class Scheduler(jsclient.Listener):
    """The entries, their due times, and the signals from the pool's connections (it is their Listener)."""

    def __init__(self, drift_interval: float) -> None:
        self.drift_interval = drift_interval
        self.entries: dict[Key, Entry] = {}
        self.indexes: dict[str, Any] = {}  # kopf indexes (live views) by id, for the runs outside kopf's handlers
        self._wake = asyncio.Event()

    # -- fed by kopf's watch and handlers ----------------------------------------------------------

    def seen(self, kind: Kind, body: Mapping[str, Any]) -> Entry:
        """The latest version of a resource (a new one is first reconciled by kopf's handlers)."""
        key = key_of(kind, body)
        entry = self.entries.get(key)
        if entry is None or entry.body["metadata"].get("uid") != body["metadata"].get("uid"):
            entry = self.entries[key] = Entry(kind, body, time.monotonic() + self.drift_interval)
        entry.body = body
        return entry

    def gone(self, kind: Kind, body: Mapping[str, Any]) -> None:
        """A resource is deleted: those held back by a Conflict (with it, maybe) look again."""
        self.entries.pop(key_of(kind, body), None)
        self.signal(e for e in self.entries.values() if _ready_reason(e.body) == "Conflict")

    def wrote(self, entry: Entry, status: Mapping[str, Any]) -> None:
        """Our own status patch, seen before the watch brings it back (a signal may come first)."""
        if status:
            entry.body = {**entry.body, "status": {**(entry.body.get("status") or {}), **status}}

    def entry(self, kind: Kind, body: Mapping[str, Any]) -> Entry:
        return self.entries.get(key_of(kind, body)) or self.seen(kind, body)

    def done(self, entry: Entry, retry: bool, reached: jsclient.ConnectionSettings | None) -> None:
        """A reconciliation ended: next drift check, or a retry with backoff."""
        if reached is not None:
            entry.reached = reached
        entry.retries = entry.retries + 1 if retry else 0
        delay = backoff(entry.retries - 1) if retry else self.drift_interval
        # A signal that came while it ran is not lost: it runs again at once.
        entry.due = time.monotonic() + (0.0 if entry.signalled else delay)
        self._wake.set()

    # -- signals ----------------------------------------------------------------------------------

    def signal(self, entries: Iterable[Entry]) -> int:
        """Reconcile these at once; returns how many."""
        count = 0
        for entry in entries:
            entry.due, entry.signalled = time.monotonic(), True
            count += 1
        if count:
            self._wake.set()
        return count

    def advisory(self, settings: jsclient.ConnectionSettings, advisory: jsclient.Advisory) -> None:
        if advisory.event == "OUT_OF_STORAGE":
            self.signal(self.out_of_storage(settings, advisory))
            return
        self.signal(self.naming(settings, advisory.stream, advisory.consumer))

    def out_of_storage(self, settings: jsclient.ConnectionSettings, advisory: jsclient.Advisory) -> list[Entry]:
        """The Streams (all of the connection's when the advisory names none) whose next run reports it. Not
        the buckets: their status has no lastSeq to tell when storing works again."""
        found = [e for e in self.entries.values() if e.reached == settings and e.kind == "Stream"
                 and advisory.stream in ("", e.server_names[0])]
        for entry in found:
            entry.out_of_storage = advisory.server or settings.describe()
        return found

    def connection(self, settings: jsclient.ConnectionSettings, connected: bool) -> None:
        self.signal(self.on_connection(settings))

    def on_connection(self, settings: jsclient.ConnectionSettings) -> list[Entry]:
        return [e for e in self.entries.values() if e.reached == settings]

    def referencing(self, ref: connections.Ref) -> list[Entry]:
        """Resources naming that connection object in spec.connectionRef."""
        return [e for e in self.entries.values()
                if connections.ref_of(e.body["metadata"]["namespace"], e.body.get("spec") or {}) == ref]

    def naming(self, settings: jsclient.ConnectionSettings, stream: str, consumer: str | None = None) -> list[Entry]:
        """Resources for that stream (and consumer; a Stream matches any consumer of it) on that connection,
        or not connected yet (e.g. Stalled by a Conflict, waiting for the server object to be free)."""
        return [
            e for e in self.entries.values()
            if e.reached in (settings, None)
            and e.server_names[0] == stream and (consumer is None or e.server_names[1] in (None, consumer))
        ]

    # -- the loop ---------------------------------------------------------------------------------

    async def serve(self, run: Run) -> None:
        """Run due entries through `run` forever (cancel to stop)."""
        slots = asyncio.Semaphore(CONCURRENCY)
        running: set[Key] = set()
        tasks: set[asyncio.Task[None]] = set()

        async def one(key: Key, entry: Entry) -> None:
            async with slots:
                why: Why = "signal" if entry.signalled else "timer"
                entry.signalled = False
                reached = None
                try:
                    retry, reached = await run(entry, why)
                except Exception:  # one resource's failure must not stop the others
                    log.exception("scheduled reconciliation failed", extra={"object": "/".join(key[1:])})
                    retry = True
                finally:
                    running.discard(key)
                self.done(entry, retry, reached)

        while True:
            now = time.monotonic()
            for key, entry in list(self.entries.items()):
                if entry.due <= now and key not in running and not entry.body["metadata"].get("deletionTimestamp"):
                    running.add(key)
                    entry.due = float("inf")  # until done() sets the next time
                    task = asyncio.create_task(one(key, entry))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            upcoming = [e.due for e in self.entries.values() if e.due != float("inf")]
            timeout = max(0.0, min(upcoming) - time.monotonic()) if upcoming else None
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            except asyncio.TimeoutError:
                pass
