"""One JetStream stream: the publish path into its store, limits, retention, dedupe, expiry and reads.

Owns: the internal subscriptions on the stream's subjects (a stream is just a subscriber, so a subject no
stream covers falls through to the core's 503), the publish checks in nats-server's order (publish_checks.py),
the duplicate window, discard-new decisions, rollups, per-message TTL, interest/workqueue retention, the
max_age/TTL expiry timer, pub acks (byte templates, no JSON encoder on the hot path) and the DIRECT.GET
subscriptions (direct_get.py answers them).
It talks to storage only through `jsbroker.store.base.StreamStore`.

Batch publishes come first, as nats-server dispatches them before any other check: a reply subject ending in
`.$FI` (a fast batch) or a `Nats-Batch-Id` header (an atomic batch) gets sealed (10109) -> memory/storage used
up (10002, 10023) -> max_msg_size (10054) -> without `allow_batched` 10205 "batch publish is disabled" /
without `allow_atomic` 10174. Then a fast batch message goes to jetstream/fast_batch.py (10206, 10207, 10208,
10211, 10185, gaps, flow acks) and, when it lets it through, through the publish checks below into the store,
the outcome going back to it for the flow acks, "err" answers and the closing pub ack; an atomic batch to
atomic_batch.py, which stages it and checks its commit (the commit stores the batch with one write).

Publish checks (publish_checks.py's and the counters'), in the order nats-server applies them
(`processJetStreamMsgWithBatch`), after the stream's `subject_transform` mapped the subject: sealed (10109) ->
Nats-Incr (10171, 10168, 10170) -> Nats-Expected-Stream (10060) -> Nats-TTL without allow_msg_ttl (10166) ->
Nats-Expected-Last-Subject-Sequence[-Subject] (10071, 10193) -> Nats-Expected-Last-Sequence (10071) ->
message schedule headers (schedule.check_publish: 10188-10192, 10203, 10212, 10223) ->
Nats-Msg-Id duplicate (ack with "duplicate") -> Nats-Expected-Last-Msg-Id (10070) -> Nats-Rollup (10111)
-> counter streams: increment missing (10169), the new total (10172, 10054) -> max_msg_size (10054) ->
header size (10097) -> account or server memory/storage used up (10002, 10023) ->
interest retention without interest (not stored, the
sequence still moves) -> Nats-TTL value (10165) -> raised to the delete marker TTL -> discard new limits
(10077) -> store -> rollup purge -> republish -> a schedule purge (`Nats-Schedule-Next: purge`) and the
schedule timer -> pub ack.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from jsbroker import subjects
from jsbroker.jetstream import (advisories, atomic_batch, counters, direct_get, errors, fast_batch, headers,
                                publish_checks, requests, responses, schedule, times)
from jsbroker.jetstream.dedupe import MsgIdWindow
from jsbroker.jetstream.stream_config import StreamConfig, input_transform, republish_transform, short_hash
from jsbroker.jetstream.stream_schedules import StreamSchedules
from jsbroker.jetstream.timer import Timer
from jsbroker.store.base import ConsumerStore, StoreClosed, StoredMsg, StoreError, StoreFull, StreamStore

if TYPE_CHECKING:
    from jsbroker.internal import InternalBus, InternalSubscription, Origin

log = logging.getLogger(__name__)

_MAX_REPUBLISH_DEPTH = 16
DIRECT_GET_GROUP = "_sys_"  # the queue group of DIRECT.GET subscriptions (a stream and its mirrors)
_NS = 1_000_000_000
# The refusals nats-server makes while storing a fast batch message, after the batch took it: the pub ack
# error goes out as for a plain publish and the batch does not count the message as handled.
# (A store that fails is one too.)
_LATE_BATCH_ERRORS = (errors.STREAM_WRONG_LAST_MSG_ID, errors.INSUFFICIENT_RESOURCES, errors.ACCOUNT_RESOURCES_EXCEEDED)
_INTEREST_SCAN_LIMIT = 100_000  # nats-server's cleanupNoInterestMessages checks up to this many one by one


class ConsumerHook(Protocol):
    """What a stream needs from a consumer (implemented by jetstream/consumer.py)."""

    name: str
    store: ConsumerStore  # its delivery state; fsynced with the stream's store (`Stream.sync`)

    @property
    def ack_floor_seq(self) -> int: ...  # every stream sequence up to it is acknowledged

    def on_stored(self, seq: int, subject: str) -> None: ...

    def wants(self, subject: str) -> bool: ...

    def needs(self, seq: int) -> bool: ...

    def on_removed(self, seq: int, subject: str, terminate: bool = True) -> None: ...

    def terminate_removed(self, seq: int) -> None: ...

    def recount_pending(self, first_seq: int) -> None: ...

    def check_floor(self) -> int: ...

    def on_stream_purged(self, start: int, last_seq: int, wider: bool) -> None: ...

    def purges_with(self, subject: str) -> tuple[bool, bool]: ...

    def release_waiting_pulls(self, tell: bool) -> None: ...

    def stop(self) -> None: ...


class SourceWatch(Protocol):
    """A mirror or source reading this stream (jetstream/sourcing.py): told about new messages, and an
    interest like a consumer's (nats-server sources through an ack-none consumer)."""

    def kick(self) -> None: ...

    def wants(self, subject: str) -> bool: ...


class Stream:
    """A stream and its store.

    A republish is published at once, so it reaches subscribers before the pub ack as on nats-server;
    a chain of streams republishing into one another (bounded only by the growing headers, 10097, as
    on nats-server) continues on later loop turns past `_MAX_REPUBLISH_DEPTH` instead of recursing.

    Consumer hook points (stable; jetstream/consumer.py codes against them):
    - `add_consumer(c)` / `remove_consumer(c)`: register a consumer object. It provides `c.name`,
      `c.on_stored(seq, subject)` (called after every stored message), `c.wants(subject)` (its filter
      matches; for interest retention), `c.needs(seq)` (not yet acked by it; for interest/workqueue
      retention), `c.on_removed()` / `c.terminate_removed()`, `c.recount_pending()`, `c.on_stream_purged()`,
      `c.purges_with()`, `c.check_floor()` (interest retention) and `c.stop()`.
    - `acked(seq)`: a consumer calls it after an ack; with interest or workqueue retention the stream
      removes the message once no consumer still needs it.
    - `store`, `config`, `name`, `consumers` (name -> consumer), `directory` (None for memory streams;
      the consumer registry in registry.py keeps the consumers' directories under it), `bus` (the
      InternalBus), `created_ns`.
    """

    _republish_depth = 0  # republishes in progress on the stack, across streams

    def __init__(self, bus: InternalBus, config: StreamConfig, store: StreamStore, directory: Path | None,
                 created_ns: int, domain: str | None = None,
                 resources_exhausted: Callable[[str], errors.ErrorKind | None] | None = None,
                 dedupe: bytes | None = None, batches: atomic_batch.Inflight | None = None,
                 fast_inflight: fast_batch.Inflight | None = None) -> None:
        self.bus = bus
        self._fast_inflight = fast_inflight  # the server's count of open fast batches (None: this stream's own)
        self._fast: fast_batch.Batches | None = None  # allow_batched: the open fast batches
        # The account's and the server's memory / storage check (None when no limit is set): the error it names.
        self._exhausted = resources_exhausted
        self.config = config
        self.name = config.name
        self.store = store
        self.directory = directory
        self.created_ns = created_ns
        self.consumers: dict[str, ConsumerHook] = {}
        self.watchers: list[SourceWatch] = []  # mirrors and sources reading this stream
        # The `mirror` / `sources` part of a StreamInfo, set by the stream's sourcing while it runs.
        self.source_info: Callable[[], dict[str, Any]] | None = None
        self._domain = domain
        self._subs: list[InternalSubscription] = []
        self._direct_subs: list[InternalSubscription] = []
        self._direct_names: list[str] = []  # the stream names whose DIRECT.GET this stream answers
        self._expiry_timer = Timer(bus.loop, self._expire)
        self._expiry_at = 0  # the wall-clock deadline the expiry timer is armed for
        self._schedules: StreamSchedules | None = None  # allow_msg_schedules: the schedules and their timer
        self._batches = atomic_batch.Batches(batches or atomic_batch.Inflight())  # open atomic batches
        self._batch_timer = Timer(bus.loop, self._expire_batches)  # drops the batches whose time is up
        self._closed = False
        self.counter_val = ""  # counter streams: the total the last stored message holds (its pub ack's "val")
        # File streams write the plain publishes of one read with one write(): their pub acks wait here
        # until `_release` (run by the core before any output) has written them (None: memory streams).
        self._held: list[tuple[str, bytes]] | None = [] if config.storage == "file" else None
        self._release_armed = False
        store.set_on_remove(self._on_removed)  # limits and expiry remove messages inside the store
        self._apply_config()
        if config.allow_atomic:
            self._drop_partial_batch()
        state = store.state()
        self.last_seq = state.last_seq
        self.last_msg_id = ""
        self._dedupe = MsgIdWindow(config.duplicate_window)
        if not self._restore_dedupe(dedupe):
            self._rebuild_dedupe()

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        for subject in self.config.subjects:
            self._subs.append(self.bus.subscribe_internal(subject, self._on_publish))
        self._sync_direct_get()
        self._arm_expiry(self.store.next_expiry())
        self._load_schedules()

    def sync(self) -> None:
        """fsync what the stream's store and its consumers' stores wrote since the last sync (the
        interval sync policy); one failing store does not keep the others from syncing."""
        stores: list[StreamStore | ConsumerStore] = [self.store, *(c.store for c in self.consumers.values())]
        for store in stores:
            try:
                store.sync()
            except Exception:
                log.exception("fsync failed", extra={"stream": self.name})

    def checkpoint(self) -> None:
        """Let the store save its index (file streams: the next start after a crash reads only what came
        after); a failure costs only that speed-up."""
        try:
            self.store.checkpoint()
        except Exception:
            log.exception("index checkpoint failed", extra={"stream": self.name})

    def stop(self) -> None:
        """Unsubscribe and stop timers; the store stays open (the service closes or deletes it)."""
        self._closed = True
        for sub in self._subs + self._direct_subs:
            self.bus.unsubscribe_internal(sub)
        self._subs.clear()
        self._direct_subs.clear()
        self._direct_names = []
        for timer in (self._expiry_timer, self._batch_timer):
            timer.cancel()
        if self._schedules is not None:
            self._schedules.stop()
        self._batches.clear()
        self._close_fast_batches()
        for consumer in list(self.consumers.values()):
            consumer.stop()

    def _close_fast_batches(self) -> None:
        if self._fast is not None:
            self._fast.close()
            self._fast = None

    def update(self, config: StreamConfig) -> None:
        """Apply an already validated new config (subjects, limits, flags)."""
        old_subjects, was_retained = self.config.subjects, self._retained
        self.config = config
        self._apply_config()
        self._dedupe.window_ns = config.duplicate_window
        if not config.allow_atomic:
            self._batches.clear()
        if config.subjects != old_subjects:
            for sub in self._subs:
                self.bus.unsubscribe_internal(sub)
            self._subs = [self.bus.subscribe_internal(s, self._on_publish) for s in config.subjects]
        self._sync_direct_get()
        self.store.update_limits(config.store_limits())
        if self._retained and not was_retained and self.consumers:
            self._drop_unneeded()  # what every consumer already acked goes, as nats-server's checkInterestState
        self._arm_expiry(self.store.next_expiry())
        self._load_schedules()
        if not config.allow_batched:  # nats-server drops the open batches when the setting goes
            self._close_fast_batches()

    def _apply_config(self) -> None:
        cfg = self.config
        self._interest = cfg.retention == "interest"
        self._retained = cfg.retention != "limits"
        self._discard_new = cfg.discard == "new"
        self._counter = cfg.allow_msg_counter
        self._acks = not cfg.no_ack
        self._max_age = cfg.max_age
        self._marker_ttl = cfg.subject_delete_marker_ttl // _NS  # whole seconds, as nats-server counts them
        self._transform = input_transform(cfg)
        self._republish = republish_transform(cfg)
        # A message without headers can only be refused by these; without them it takes the fast path.
        self._plain_ok = not (cfg.sealed or self._interest or self._discard_new or cfg.max_msg_size >= 0
                              or self._exhausted is not None or self._counter or cfg.allow_msg_schedules)
        prefix = '{"stream":' + _json_str(cfg.name) + (',"domain":' + _json_str(self._domain) if self._domain else "")
        self._ack_prefix = (prefix + ',"seq":').encode()
        self._err_suffix = (',"stream":' + _json_str(cfg.name) + ',"seq":0}').encode()

    def _sync_direct_get(self) -> None:
        """DIRECT.GET for this stream (allow_direct) and, for a mirror with mirror_direct, for its origin
        too: one queue group per stream name, so the origin or one of its mirrors answers, as nats-server."""
        cfg = self.config
        names = [self.name] if cfg.allow_direct else []
        if cfg.mirror is not None and cfg.mirror_direct and cfg.mirror.external is None:  # an external one
            names.append(cfg.mirror.name)  # never catches up, so nats-server's never answers for its origin
        want = [] if self._closed else names
        if want == self._direct_names:
            return
        for sub in self._direct_subs:
            self.bus.unsubscribe_internal(sub)
        self._direct_subs = []
        self._direct_names = want
        prefixes = ["$JS.API"] + ([f"$JS.{self._domain}.API"] if self._domain else [])
        for name in want:
            for prefix in prefixes:
                base = f"{prefix}.DIRECT.GET.{name}"
                self._direct_subs += [self.bus.subscribe_internal(base, self._on_direct_get, DIRECT_GET_GROUP),
                                      self.bus.subscribe_internal(base + ".>", self._on_direct_get_last,
                                                                  DIRECT_GET_GROUP)]

    def dedupe_snapshot(self) -> bytes:
        """The msg-id window as of now, for `_restore_dedupe` at the next start (a clean stop writes it)."""
        self._dedupe.prune(times.now_ns())
        return json.dumps({"last_seq": self.last_seq, "last_msg_id": self.last_msg_id,
                           "ids": [list(entry) for entry in self._dedupe.entries()]}).encode()

    def _restore_dedupe(self, snapshot: bytes | None) -> bool:
        """Take the window a clean stop saved, if it describes this store (same last sequence)."""
        if not snapshot:
            return False
        try:
            data = json.loads(snapshot)
            if data["last_seq"] != self.last_seq:
                return False
            present = self.store.subject_of  # deleted messages' ids are gone, as a rebuild from the store has them
            for msg_id, seq, ts in data["ids"]:
                if present(int(seq)) is not None:
                    self._dedupe.add(str(msg_id), int(seq), int(ts))
            self.last_msg_id = str(data["last_msg_id"]) if present(self.last_seq) is not None else ""
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable msg-id window; re-reading the messages", extra={"stream": self.name})
            self._dedupe.clear()
            return False
        self._dedupe.prune(times.now_ns())
        return True

    def _rebuild_dedupe(self) -> None:
        """Msg ids published inside the window survive a restart (nats-server rebuilds them the same way)."""
        now = times.now_ns()
        start = self.store.first_seq_at_or_after_time(now - self.config.duplicate_window)
        for seq in self.store.header_seqs(start):  # a message without headers has no id: not even read
            msg = self.store.load_msg(seq)
            msg_id = headers.get(msg.hdr, headers.MSG_ID) if msg is not None and msg.hdr else None
            if msg_id:
                self._dedupe.add(msg_id, seq, msg.ts)  # type: ignore[union-attr]
            if seq == self.last_seq:  # Nats-Expected-Last-Msg-Id compares with the newest message's id
                self.last_msg_id = msg_id or ""

    # -- consumers --------------------------------------------------------------------------------------

    def add_consumer(self, consumer: ConsumerHook) -> None:
        self.consumers[consumer.name] = consumer

    def remove_consumer(self, consumer: ConsumerHook) -> None:
        if self.consumers.get(consumer.name) is consumer:
            del self.consumers[consumer.name]
        if self.config.retention == "interest":
            self._drop_uninterested(consumer.ack_floor_seq)

    def _drop_uninterested(self, start: int) -> None:
        """After a consumer of an interest stream was deleted (nats-server's cleanupNoInterestMessages): from
        its ack floor on, what no remaining consumer needs goes; with no consumer left, everything goes. A
        work queue keeps its messages for the next consumer. When that floor is past the stream's last
        message (nats-server's unsigned stop - start wraps around) or the range is too long to check,
        nats-server runs its interest check instead: the stream is compacted to the lowest check floor of
        the remaining consumers."""
        if not self.consumers:
            self.store.purge(None)
            return
        st = self.store.state()
        start = max(start, st.first_seq)
        if start > st.last_seq or st.last_seq - start > _INTEREST_SCAN_LIMIT:
            self._compact(min(c.check_floor() for c in self.consumers.values()))
        else:
            self._drop_unneeded(start)

    def _compact(self, floor: int) -> None:
        """nats-server's store Compact(floor): everything below `floor` goes; 0 or past the end is a purge
        (which sets the first seq of a stream that never stored anything). The consumers count again."""
        last = self.store.state().last_seq
        if floor == 0 or floor > last:
            purged = self.store.purge(None)
        else:
            purged = self.store.purge(up_to_seq=floor) if floor > 1 else 0
        if purged:
            first = self.store.state().first_seq
            for consumer in self.consumers.values():
                consumer.recount_pending(first)

    def identity(self) -> str:
        """nats-server's stream identity: 8 base-62 characters of the SHA-256 of the creation time
        (RFC 3339, ns), so a recreated stream of the same name has another one."""
        return short_hash(times.rfc3339(self.created_ns))

    @property
    def domain(self) -> str | None:
        """The JetStream domain (consumer advisories name it)."""
        return self._domain

    def acked(self, seq: int) -> None:
        if not self._retained:
            return
        subject = self.store.subject_of(seq)
        if subject is not None and not self._needed(seq, subject, list(self.consumers.values())):
            self._remove(seq, subject)

    def _remove(self, seq: int, subject: str, erase: bool = False) -> bool:
        """Remove one message and tell the consumers (the store reports its own removals, limits and
        expiry, through `_on_removed`)."""
        if not self.store.remove_msg(seq, erase=erase):
            return False
        self._on_removed(seq, subject)
        return True

    def _on_removed(self, seq: int, subject: str) -> None:
        for consumer in self.consumers.values():
            consumer.on_removed(seq, subject)

    @staticmethod
    def _needed(seq: int, subject: str, consumers: list[ConsumerHook]) -> bool:
        """Whether a consumer still needs the message: one whose filters take its subject (as nats-server,
        a consumer filtered elsewhere never holds a message back)."""
        return any(c.wants(subject) and c.needs(seq) for c in consumers)

    def _drop_unneeded(self, start: int = 0) -> None:
        """Remove what no consumer needs any more (from `start` on)."""
        consumers = list(self.consumers.values())
        self._remove_all([(seq, subject) for seq, subject in self.store.seqs(start)
                          if not self._needed(seq, subject, consumers)])

    def consumers_restored(self) -> None:
        """nats-server checks an interest stream's messages when it starts again (checkForOrphanMsgs; a
        work queue is not checked): a message at or below the ack floor of a consumer that wants it goes
        when no other consumer needs it (a message stored for a consumer that starts after it, say).
        Messages no consumer wants stay."""
        if not (self.config.retention == "interest" and self.consumers):
            return
        consumers = list(self.consumers.values())
        last = self.store.state().last_seq
        # nats-server skips a consumer whose ack floor (as the restart brought it back to the end) is past it
        ackers = [c for c in consumers if c.ack_floor_seq <= last]
        if not ackers:
            return
        below = max(c.ack_floor_seq for c in ackers) + 1
        doomed = []
        for seq, subject in self.store.seqs():
            if seq >= below:
                break
            wanted = [c for c in consumers if c.wants(subject)]
            if (any(seq <= c.ack_floor_seq for c in wanted if c in ackers)
                    and not self._needed(seq, subject, wanted)):
                doomed.append((seq, subject))
        self._remove_all(doomed)

    def _remove_all(self, doomed: list[tuple[int, str]]) -> None:
        for seq, subject in doomed:
            self._remove(seq, subject)

    # -- publish ----------------------------------------------------------------------------------------

    def _on_publish(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
        if self._transform is not None:  # a subject the transform's source does not match is kept as is
            subject = self._transform.apply(subject) or subject
        try:
            if reply is not None and fast_batch.is_fast_batch(reply):  # whatever its headers, as nats-server
                self._fast_batch(subject, reply, hdr, payload)
                return
            if not hdr and self._plain_ok:  # the common case: no headers, no check that could refuse it
                seq = self._store_plain(subject, payload)
                ack = b"%s%d}" % (self._ack_prefix, seq)
            elif headers.BATCH_ID_NEEDLE in hdr and (batch_id := headers.get(hdr, headers.BATCH_ID)):
                ack = self._atomic_batch(batch_id, subject, hdr, payload)
            else:
                seq, duplicate = self.process(subject, hdr, payload)
                if duplicate:
                    ack = b'%s%d,"duplicate": true}' % (self._ack_prefix, seq)
                elif self._counter:
                    ack = b'%s%d,"val":"%s"}' % (self._ack_prefix, seq, self.counter_val.encode())
                else:
                    ack = b"%s%d}" % (self._ack_prefix, seq)
        except errors.ApiError as err:
            ack = b'{"error":' + _error_json(err) + self._err_suffix
        except (StoreError, OSError) as exc:  # disk full, I/O error: the publisher hears of it, no timeout
            ack = b'{"error":' + _error_json(self._store_failure(exc)) + self._err_suffix
        if reply and self._acks:  # an atomic batch's staged message gets an empty reply
            if self._held is None:
                self.bus.publish(reply, None, b"", ack)
            else:  # in order behind the held ones
                self._held.append((reply, ack))
                if not self._release_armed:
                    self._release_armed = True
                    self.bus.before_output(self._release)

    def _store_failure(self, exc: StoreError | OSError) -> errors.ApiError:
        """The publish error for a store that refused or failed (a full volume is nats-server's 10023, was
        logged by the store and, at its first refusal, is announced by the out-of-storage advisory)."""
        if isinstance(exc, StoreFull):
            if exc.first:
                advisories.out_of_storage(self.bus, self.name, self._domain)
            return errors.INSUFFICIENT_RESOURCES()
        log.error("stream store failed", extra={"stream": self.name, "error": str(exc)})
        return errors.STREAM_STORE_FAILED(err=str(exc))

    def _store_plain(self, subject: str, payload: bytes) -> int:
        """Store a message no check can refuse (`_plain_ok`, no headers); file streams write it, with the
        rest of this read, before any output (`_release`)."""
        republish = self._republish_target(subject) if self._republish is not None else None
        if self._held is None:
            seq, ts = self.store.store_msg(subject, b"", payload, 0)
        else:
            seq, ts = self.store.store_deferred(subject, b"", payload, 0)
            if not self._release_armed:
                self._release_armed = True
                self.bus.before_output(self._release)
        self.last_seq = seq
        self.last_msg_id = ""
        if republish is not None:
            self._republish_msg(republish[0], StoredMsg(seq, subject, b"", payload, ts), republish[1])
        if self._max_age:
            self._arm_expiry(ts + self._max_age)
        if self.consumers:
            for consumer in self.consumers.values():
                consumer.on_stored(seq, subject)
        for watcher in self.watchers:
            watcher.kick()
        return seq

    def _atomic_batch(self, batch_id: str, subject: str, hdr: bytes, payload: bytes) -> bytes:
        """One message of an atomic batch (atomic_batch.py): b"" (an empty reply) while the batch is open,
        the pub ack of its commit, which stores the whole batch with one write."""
        publish_checks.check_batch(hdr, payload, self.config, self._exhausted)
        if not self.config.allow_atomic:
            raise errors.ATOMIC_PUBLISH_DISABLED()
        now = times.now_ns()
        try:
            msgs = self._batches.stage(batch_id, atomic_batch.Msg(subject, hdr, payload), now)
        except atomic_batch.Refused as refused:
            if refused.abandoned:
                advisories.batch_abandoned(self.bus, self.name, self._domain, batch_id, refused.abandoned)
            raise refused.error from None
        if msgs is None:
            self._arm_batches()
            return b""
        committed = atomic_batch.check_commit(msgs, _BatchView(self), now)
        self.store.check_room(sum(self.store.accounted_size(m.subject, m.hdr, m.payload) for m in committed))
        for msg in committed:
            self.process(msg.subject, msg.hdr, msg.payload, checked=True)
        self.store.flush()
        return b'%s%d,"batch":%s,"count":%d}' % (self._ack_prefix, self.last_seq, _json_str(batch_id).encode(),
                                                 len(msgs))

    def _arm_batches(self) -> None:
        if self._closed or self._batch_timer.armed:
            return
        due = self._batches.next_deadline()
        if due is None:
            return
        self._batch_timer.arm(due - times.now_ns(), earliest=False)

    def _expire_batches(self) -> None:
        """An open batch without a message for atomic_batch.TIMEOUT_NS goes (no commit can follow)."""
        for batch_id in self._batches.expire(times.now_ns()):
            advisories.batch_abandoned(self.bus, self.name, self._domain, batch_id, atomic_batch.TIMEOUT)
        self._arm_batches()

    def _drop_partial_batch(self) -> None:
        """After a crash inside a commit's write (a torn tail, a write per store block), the store may end
        with the first messages of a batch whose last one (carrying Nats-Batch-Commit) is missing: they go,
        so a batch is stored whole or not at all."""
        last_seq = self.store.state().last_seq
        msg = self.store.load_msg(last_seq) if last_seq else None
        batch_id = headers.get(msg.hdr, headers.BATCH_ID) if msg is not None and msg.hdr else None
        if msg is None or not batch_id or headers.get(msg.hdr, headers.BATCH_COMMIT) is not None:
            return
        dropped = 0
        while msg is not None and headers.get(msg.hdr, headers.BATCH_ID) == batch_id:
            self.store.remove_msg(msg.seq)
            dropped += 1
            position = headers.get(msg.hdr, headers.BATCH_SEQUENCE)
            msg = self.store.load_msg(msg.seq - 1) if position != "1" and msg.seq > 1 else None
        log.warning("dropped the messages of an atomic batch whose commit was not written",
                    extra={"stream": self.name, "batch": batch_id, "messages": dropped})

    def _fast_batch(self, subject: str, reply: str, hdr: bytes, payload: bytes) -> None:
        """A publish whose reply subject names a fast batch."""
        ref = None
        try:
            publish_checks.check_batch(hdr, payload, self.config, self._exhausted)
            if not self.config.allow_batched:
                raise errors.BATCH_PUBLISH_DISABLED()
            ref = fast_batch.parse(reply)
            if self._fast is None:
                self._fast = fast_batch.Batches(self._fast_inflight)
            answers, store = self._fast.receive(ref, times.now_ns(), requests.api_level_supported(hdr))
        except errors.ApiError as err:
            answers, store = [fast_batch.Answer("error", error=err, needs_acks=True)], False
        self._answer_batch(reply, ref, answers)
        if not store or ref is None or self._fast is None:
            return
        if hdr and headers.REQUIRED_API_LEVEL.encode() in hdr:  # checked by the batch, not stored
            hdr = headers.without(hdr, headers.REQUIRED_API_LEVEL)
            if len(hdr) <= len(b"NATS/1.0\r\n\r\n"):  # nothing left: stored without headers, as nats-server
                hdr = b""
        try:
            seq, duplicate = (self._store_plain(subject, payload), False) if not hdr and self._plain_ok \
                else self.process(subject, hdr, payload)
        except errors.ApiError as err:
            answers = self._fast.refused(ref, err, err.kind in _LATE_BATCH_ERRORS)
        except (StoreError, OSError) as exc:
            answers = self._fast.refused(ref, self._store_failure(exc), True)
        else:
            answers = self._fast.duplicate(ref, seq) if duplicate else self._fast.stored(ref, seq)
        self._answer_batch(reply, ref, answers)

    def _answer_batch(self, reply: str, ref: fast_batch.Ref | None, answers: list[fast_batch.Answer]) -> None:
        """Send the answers, in order behind what this read still holds back (a flow ack says the messages
        before it were written)."""
        for answer in answers:
            if self._acks or not answer.needs_acks:
                data = fast_batch.render(answer, ref.id if ref else "", self._ack_prefix, self._err_suffix, _error_json)
                if self._held is not None and self._release_armed:
                    self._held.append((reply, data))
                else:
                    self.bus.publish(reply, None, b"", data)

    def _release(self) -> None:
        """Write the deferred records, then send the held acks once they are durable (with sync: always,
        after their fsync in the syncer's thread: the loop serves others meanwhile); when the write or the
        fsync fails, every held publish hears of it instead."""
        self._release_armed = False
        held, self._held = self._held or [], []
        if self._written(held):
            self.store.when_durable(lambda: self._confirm(held))

    def _written(self, held: list[tuple[str, bytes]]) -> bool:
        """Flush the store; False when that failed (the held publishes were answered with the error)."""
        try:
            self.store.flush()
        except StoreClosed:
            pass  # closed (writing what was pending) or deleted after these publishes: they were stored
        except (StoreError, OSError) as exc:
            log.error("stream store failed", extra={"stream": self.name, "error": str(exc)})
            failed = b'{"error":' + _error_json(errors.STREAM_STORE_FAILED(err=str(exc))) + self._err_suffix
            for reply, _ in held:
                self.bus.publish(reply, None, b"", failed)
            return False
        return True

    def _confirm(self, held: list[tuple[str, bytes]]) -> None:
        """The held writes are durable, unless their fsync failed (then the store's flush raises)."""
        if self._written(held):
            for reply, ack in held:
                self.bus.publish(reply, None, b"", ack)

    def process(self, subject: str, hdr: bytes, payload: bytes, sourced: bool = False,
                scheduled: bool = False, checked: bool = False) -> tuple[int, bool]:
        """Check and store one message; returns (seq, duplicate). Raises ApiError with the pub-ack error.
        `sourced`: copied from a source by jetstream/sourcing.py (its Nats-Stream-Source header allowed,
        the checks its origin already made not repeated, as nats-server), and written by the sourcing's
        `store.flush()` after its batch. `scheduled`: produced by a schedule (its Nats-Scheduler and
        Nats-Schedule-Next are the server's, not checked as a client's). `checked`: a message of an atomic
        batch whose checks `atomic_batch.check_commit` made (stored deferred, the batch's flush writes it)."""
        cfg = self.config
        if cfg.sealed and not checked:
            raise errors.STREAM_SEALED()
        msg_id = ""
        rollup = ""
        ttl = 0
        incr = None
        if checked:
            if not atomic_batch.only_batch_headers(hdr):
                msg_id, rollup, ttl = headers.get(hdr, headers.MSG_ID) or "", headers.rollup(hdr), \
                    publish_checks.header_ttl(hdr)
        elif hdr:
            if self._counter or headers.INCR_NEEDLE in hdr:
                incr = counters.increment(hdr, payload, self._counter, sourced)
            msg_id, rollup, ttl, duplicate_of, hdr = publish_checks.check_headers(
                subject, hdr, cfg, self.store, self._dedupe, self.last_seq, self.last_msg_id, times.now_ns(), sourced,
                scheduled)
            if duplicate_of:
                return duplicate_of, True
        if self._counter and not checked:
            if incr is None:
                raise errors.MESSAGE_INCR_MISSING()
            last = self.store.load_last_msg(subject)
            hdr, payload, self.counter_val = counters.apply(
                incr, (last.hdr, last.data) if last is not None else None, hdr, payload, self.bus.max_payload)
        if not checked:
            publish_checks.check_size(hdr, payload, cfg.max_msg_size)
            publish_checks.check_resources(cfg.storage, self._exhausted)
        if self._interest and not any(c.wants(subject) for c in self.consumers.values()) \
                and not any(w.wants(subject) for w in self.watchers):
            return self._skip(msg_id, subject, rollup), False
        ttl, hdr = publish_checks.check_ttl(ttl, hdr, self._marker_ttl, cfg.max_msgs_per_subject)
        if self._discard_new and not checked:
            publish_checks.check_discard_new(subject, hdr, payload, rollup, cfg, self.store)
        republish = self._republish_target(subject) if self._republish is not None else None
        store = self.store.store_deferred if sourced or checked else self.store.store_msg
        seq, ts = store(subject, hdr, payload, ttl * _NS if ttl > 0 else ttl)
        self.last_seq = seq
        self.last_msg_id = msg_id
        if msg_id and cfg.duplicate_window > 0:
            self._dedupe.add(msg_id, seq, ts)
        if rollup:
            self._rollup(subject, rollup, seq)
        if republish is not None:
            self._republish_msg(republish[0], StoredMsg(seq, subject, hdr, payload, ts), republish[1])
        if ttl > 0:
            self._arm_expiry(ts + min(ttl * _NS, cfg.max_age or ttl * _NS))
        elif cfg.max_age and ttl == 0:
            self._arm_expiry(ts + cfg.max_age)
        self._stored(seq, subject)
        if self._schedules is not None:
            if hdr and headers.SCHEDULE_NEEDLE in hdr:
                self._purge_schedule(hdr)
            self._schedules.stored(seq, subject, hdr, ts)
        return seq, False

    def _republish_target(self, subject: str) -> tuple[str, int] | None:
        """Before a message on `subject` is stored: its republish subject and the subject's previous seq
        (None: `src` does not match, or the mapped subject is no valid publish subject, which nats-server
        drops)."""
        to = self._republish.apply(subject) if self._republish is not None else None
        if to is None or not subjects.is_valid_publish_subject(to):
            return None
        return to, self.store.last_seq(subject)

    def _republish_msg(self, to: str, msg: StoredMsg, last_seq: int) -> None:
        """Send a stored message on to its republish subject with nats-server's headers (Nats-Last-Sequence:
        the subject's previous message, for gap detection; headers_only: the size instead of the body)."""
        pairs = [(headers.STREAM, self.name), (headers.SUBJECT, msg.subject), (headers.SEQUENCE, str(msg.seq)),
                 (headers.TIME_STAMP, times.rfc3339(msg.ts)), (headers.LAST_SEQUENCE, str(last_seq))]
        payload = msg.data
        if self.config.republish and self.config.republish.get("headers_only"):
            pairs.append((headers.MSG_SIZE, str(len(payload))))
            payload = b""
        hdr = headers.append(msg.hdr, pairs)
        if Stream._republish_depth >= _MAX_REPUBLISH_DEPTH:  # streams republishing into each other
            self.bus.loop.call_soon(self.bus.publish, to, None, hdr, payload)
            return
        Stream._republish_depth += 1
        try:
            self.bus.publish(to, None, hdr, payload)  # before the pub ack, as nats-server queues them
        finally:
            Stream._republish_depth -= 1

    def store_mirrored(self, seq: int, ts: int, subject: str, hdr: bytes, payload: bytes) -> None:
        """Store a mirrored message under its origin sequence and time (no publish checks: a mirror keeps
        what its origin accepted); what the origin no longer has below `seq` becomes a gap here too. An
        empty mirror starts at `seq` (a purge, as nats-server compacts it). Written by the sourcing's
        `store.flush()` after its batch."""
        state = self.store.state()
        if state.last_seq == 0 and seq > 1:
            self.store.purge(up_to_seq=seq)
        elif seq > self.last_seq + 1:
            self.store.skip_msgs(seq)
        ttl = publish_checks.header_ttl(hdr) if hdr and self.config.allow_msg_ttl else 0
        stored, ts = self.store.store_deferred(subject, hdr, payload, ttl * _NS if ttl > 0 else ttl, ts_ns=ts)
        self.last_seq = stored
        self.last_msg_id = headers.get(hdr, headers.MSG_ID) or "" if hdr else ""
        if ttl > 0 or self._max_age:
            self._arm_expiry(ts + min(x for x in (ttl * _NS if ttl > 0 else 0, self._max_age) if x > 0))
        self._stored(stored, subject)

    def _stored(self, seq: int, subject: str) -> None:
        for consumer in self.consumers.values():
            consumer.on_stored(seq, subject)
        for watcher in self.watchers:
            watcher.kick()

    def _skip(self, msg_id: str, subject: str, rollup: str) -> int:
        """Interest retention with no interest: the message takes a sequence but is not stored."""
        self.last_seq += 1
        self.store.skip_msgs(self.last_seq + 1)
        self.last_msg_id = msg_id
        if msg_id:
            self._dedupe.add(msg_id, self.last_seq, times.now_ns())
        if rollup:
            self._rollup(subject, rollup, 0)
        return self.last_seq

    def _rollup(self, subject: str, kind: str, new_seq: int) -> None:
        """A rollup is a purge (nats-server's purgeLocked): the consumers move past what it removed."""
        subject_filter = subject if kind == "sub" else ""
        self._purge(subject_filter, 0, 1 if new_seq else 0)

    # -- expiry -----------------------------------------------------------------------------------------

    def _arm_expiry(self, at_ns: int | None) -> None:
        if at_ns is None or self._closed or (self._expiry_timer.armed and self._expiry_at <= at_ns):
            return  # the publish path's common case: armed already for an earlier deadline
        self._expiry_at = at_ns
        self._expiry_timer.arm(at_ns - times.now_ns(), earliest=False)

    def _expire(self) -> None:
        if self._closed:
            return
        try:
            if self._marker_ttl:
                self._expire_with_markers(times.now_ns())
            else:
                self.store.expire(times.now_ns())
        except Exception:
            log.exception("stream expiry failed", extra={"stream": self.name})
        self._arm_expiry(self.store.next_expiry())

    def _expire_with_markers(self, now_ns: int) -> None:
        """Subject delete markers (ADR-43): an expiring message that is the last of its subject (and no
        marker itself) is replaced by a marker, a message nats-server writes with a roll-up of the
        subject; the others are removed."""
        for seq in self.store.take_expired(now_ns):
            subject = self.store.subject_of(seq)
            if subject is None:
                continue
            last = self.store.subjects_state(subject).get(subject) == 1
            msg = self.store.load_msg(seq) if last else None  # only a subject's last one is read
            if msg is not None and not _is_marker(msg.hdr):
                self._write_marker(msg)
            else:
                self._remove(seq, subject)

    def _write_marker(self, expired: StoredMsg) -> None:
        hdr = headers.build(((headers.MARKER_REASON, "MaxAge"),
                             (headers.TTL, times.format_duration(self._marker_ttl * _NS)), (headers.ROLLUP, "sub")))
        subject = self._transform.apply(expired.subject) or expired.subject if self._transform else expired.subject
        try:
            self.process(subject, hdr, b"")  # the stream's own publish path, as nats-server's
        except (errors.ApiError, StoreError, OSError) as exc:  # the message must still go
            log.warning("subject delete marker not written", extra={"stream": self.name, "error": str(exc)})
        if self.store.subject_of(expired.seq) is not None:
            self._remove(expired.seq, expired.subject)

    # -- message schedules (jetstream/schedule.py) -----------------------------------------------------

    def _purge_schedule(self, hdr: bytes) -> None:
        """A stored `Nats-Schedule-Next: purge` (a one-shot schedule's product, or a client's) purges the
        schedule's subject (a stream sourcing the product keeps its copy of the schedule, as nats-server)."""
        scheduler = headers.get(hdr, headers.SCHEDULER)
        if scheduler and headers.get(hdr, headers.SCHEDULE_NEXT) == schedule.PURGE:
            self._purge(scheduler, 0, 0)
            if self._schedules is not None:  # always set here; for the type checker
                self._schedules.remove(scheduler)

    def _load_schedules(self) -> None:
        """A stream allowing schedules reads them back from its messages (so they survive any restart)."""
        if not self.config.allow_msg_schedules or self._schedules is not None:
            return
        self._schedules = StreamSchedules(self, self.bus.loop)
        self._schedules.load()

    # -- admin operations (called by stream_api) -------------------------------------------------------

    def purge(self, subject_filter: str, seq: int, keep: int) -> int:
        if self.config.sealed:
            raise errors.STREAM_SEALED()
        if self.config.deny_purge:
            raise errors.STREAM_PURGE_FAILED(err="stream purge not permitted")
        purged = self._purge(subject_filter, seq, keep)
        self.last_seq = max(self.last_seq, self.store.state().last_seq)
        return purged

    def _purge(self, subject_filter: str, seq: int, keep: int) -> int:
        """nats-server's purgeLocked (the PURGE request and rollups): the store's purge, then the consumers."""
        # its PurgeEx removes one by one with a filter, or to keep some without a sequence; the first to go
        # is then the oldest matching message
        one_by_one = subject_filter not in ("", ">") or (keep > 0 and not seq)
        oldest = self.store.load_next_msg(0, subject_filter or None) if one_by_one else None
        purged = self.store.purge(subject_filter or None, up_to_seq=seq, keep=keep)
        self._purged(subject_filter, purged, oldest if purged == 1 else None)
        return purged

    def _purged(self, subject_filter: str, purged: int, alone: StoredMsg | None) -> None:
        """The consumers after a purge, as nats-server's purgeLocked: every consumer counts its pending
        messages again when something went, except after a one-by-one purge that took a single message
        (`alone`): nats-server's stores report that one as a single removal, the memory store under its
        subject, the file store under the purge's filter (">" without one), which reaches only the
        consumers whose filters take that as a subject (the others keep their count). Then those the purge
        covers (no filter, or a consumer filter inside the purged subject) move to the purged subject's
        first message left (past the end when none is), and those whose filter is wider than the purged
        subject move to the stream's first message, dropping pending messages that are gone."""
        state = self.store.state()
        told: list[ConsumerHook] = []
        if alone is not None:
            subject = alone.subject if self.config.storage == "memory" else subject_filter or ">"
            told = [c for c in self.consumers.values() if c.wants(subject)]
            for consumer in told:
                consumer.on_removed(alone.seq, subject, terminate=False)
        elif purged:
            for consumer in self.consumers.values():
                consumer.recount_pending(state.first_seq)
        start = state.first_seq
        if subject_filter:
            first = self.store.load_next_msg(state.first_seq, subject_filter)
            start = first.seq if first is not None else 0
        for consumer in list(self.consumers.values()):
            covered, wider = consumer.purges_with(subject_filter) if subject_filter else (True, False)
            if covered or wider:
                consumer.on_stream_purged(state.first_seq if wider else start, state.last_seq, wider)
        if alone is not None:  # nats-server terminates a pending one in a goroutine, after the moves above
            for consumer in told:
                consumer.terminate_removed(alone.seq)

    def delete_msg(self, seq: int, erase: bool) -> None:
        if self.config.sealed:
            raise errors.STREAM_SEALED()
        if self.config.deny_delete:
            raise errors.STREAM_MSG_DELETE_FAILED(err="message delete not permitted")
        if self.config.storage == "file":  # nats-server's filestore tells apart above the last and below the first
            state = self.store.state()
            if seq > state.last_seq:
                raise errors.STREAM_MSG_DELETE_FAILED(err="stream store EOF")
            if seq < state.first_seq:
                raise errors.STREAM_MSG_DELETE_FAILED(err="no message found")
        subject = self.store.subject_of(seq)
        if subject is None or not self._remove(seq, subject, erase=erase):
            raise errors.SEQUENCE_NOT_FOUND(seq=seq)

    def info_state(self, deleted_details: bool = False) -> dict[str, Any]:
        """The `state` object of a StreamInfo."""
        st = self.store.state(deleted_details)
        out: dict[str, Any] = {"messages": st.msgs, "bytes": st.bytes, "first_seq": st.first_seq,
                               "first_ts": times.rfc3339(st.first_ts), "last_seq": st.last_seq,
                               "last_ts": times.rfc3339(st.last_ts)}
        if st.num_subjects:
            out["num_subjects"] = st.num_subjects
        if st.num_deleted:
            out["num_deleted"] = st.num_deleted
            if deleted_details and st.deleted:
                out["deleted"] = st.deleted
        if st.lost:
            out["lost"] = {"msgs": st.lost, "bytes": 0}
        # nats-server counts its sourcing consumers on an interest / workqueue origin (not on a limits one)
        out["consumer_count"] = len(self.consumers) + (len(self.watchers) if self._retained else 0)
        return out

    # -- reads ------------------------------------------------------------------------------------------

    def get_msg(self, seq: int, last_by_subj: str, next_by_subj: str, start_time: int | None) -> StoredMsg | None:
        """STREAM.MSG.GET / DIRECT.GET single lookups, as nats-server resolves them."""
        if start_time is not None:
            seq = self.store.first_seq_at_or_after_time(start_time)
        if next_by_subj:
            return self.store.load_next_msg(seq, next_by_subj)
        if seq > 0:
            return self.store.load_msg(seq)
        return self.store.load_last_msg(last_by_subj)

    def _on_direct_get(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
        if reply:
            for out_hdr, data in direct_get.answer(self.name, self.store, hdr, payload, None):
                self.bus.publish(reply, None, out_hdr, data)

    def _on_direct_get_last(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
        if reply:
            key = subject.split(".", 5)[5] if subject.count(".") >= 5 else ""
            for out_hdr, data in direct_get.answer(self.name, self.store, hdr, payload, key):
                self.bus.publish(reply, None, out_hdr, data)


class _BatchView:
    """The stream as atomic_batch.check_commit reads it (its StreamView)."""

    def __init__(self, stream: Stream) -> None:
        self.config = stream.config
        self.last_seq = stream.last_seq
        self.max_payload = stream.bus.max_payload
        self._store = stream.store
        self._dedupe = stream._dedupe

    def last_msg(self, subject: str) -> tuple[bytes, bytes] | None:
        msg = self._store.load_last_msg(subject)
        return None if msg is None else (msg.hdr, msg.data)

    def last_seq_of(self, subject: str) -> int:
        return self._store.last_seq(subject)

    def is_duplicate(self, msg_id: str) -> bool:
        return bool(self._dedupe.find(msg_id, times.now_ns()))

    def totals(self) -> tuple[int, int]:
        state = self._store.state()
        return state.msgs, state.bytes

    def subject_count(self, subject: str) -> int:
        return self._store.subjects_state(subject).get(subject, 0)

    def accounted_size(self, subject: str, hdr: bytes, payload: bytes) -> int:
        return self._store.accounted_size(subject, hdr, payload)


def _is_marker(hdr: bytes) -> bool:
    """A subject delete marker, or a KV purge (which stands for one): replaced by nothing when it expires."""
    return bool(hdr) and (bool(headers.get(hdr, headers.MARKER_REASON))
                          or headers.get(hdr, headers.KV_OPERATION) == "PURGE")


def _json_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _error_json(err: errors.ApiError) -> bytes:
    return responses.dumps(err.to_dict())


def stored_ttl_ns(hdr: bytes) -> int:
    """The TTL a stored message's Nats-TTL header gives it, as the store takes it (ns; -1 never; 0 none):
    for messages stored again with their headers (a restore)."""
    ttl = publish_checks.header_ttl(hdr)
    return ttl * _NS if ttl > 0 else ttl
