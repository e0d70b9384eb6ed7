"""A JetStream consumer (`Consumer`): delivery state, pull and push delivery, acks, redelivery and
CONSUMER.RESET, as nats-server 2.15.1's `consumer.go` behaves (single server, R1). Its parts are one class
per concept (consumer_base.py lists them); this one puts them together with the lifecycle (start, stop,
delete, update, pause), the starting position and the hooks the stream calls (stored, removed, purged).
- INFO reports the delivered/ack-floor pair the ConsumerStore keeps (`store.floors()`), whose rules
  differ: delivered = last delivered, ack floor moved by acks only; the delivered pair is the live one
  (`next_seq` - 1) while the store has none (`has_state`), as nats-server's.
"""

from __future__ import annotations

from collections import deque
from time import monotonic_ns as mono
from typing import Callable

from jsbroker import store as storage
from jsbroker import subjects
from jsbroker.store.base import ConsumerState

from . import ack, advisories, push
from .consumer_acks import AckProcessing
from .consumer_base import ConsumedStream
from .consumer_config import ConsumerConfig, set_static_metadata
from .consumer_info import ConsumerInfo
from .consumer_meta import consumer_meta
from .consumer_reset import ConsumerReset
from .consumer_timers import ConsumerTimers
from .delivery_pass import DeliveryPass
from .times import now_ns

__all__ = ["ConsumedStream", "Consumer"]

MSG_NEXT_PREFIX = "$JS.API.CONSUMER.MSG.NEXT."
TERM_REMOVED = "Unacknowledged message was deleted"  # the terminated advisory's reason (nats-server's)


class Consumer(DeliveryPass, AckProcessing, ConsumerTimers, ConsumerInfo, ConsumerReset):
    """One consumer of one stream, as the registry and the stream use it."""

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self, state: ConsumerState | None = None) -> None:
        """Pick the starting sequence, or resume from the stored state of a consumer that existed before a
        restart, and start receiving. The start is resolved once, at creation, and stored at once: a
        consumer created on an empty stream starts at sequence 1 and stays there after a restart (as in
        nats-server), instead of resolving its deliver policy again against the stream as it is then."""
        if state is not None:
            self._apply_state(state)
        else:
            self._select_start()
            self.store.reset(self.delivery.stored())
        self._recount_pending()
        bus, stream = self.bus, self.stream.name
        if self.cfg.ack_policy not in ("none", "flow_control"):  # nats-server listens for no acks then
            self._subs.items.append(bus.subscribe_batched(ack.subscription_subject(stream, self.name), self._on_acks))
        self._subs.items.append(bus.subscribe_internal(f"{MSG_NEXT_PREFIX}{stream}.{self.name}", self._on_next))
        if self.cfg.is_push:
            if self.cfg.flow_control:
                sub = bus.subscribe_internal(f"{push.PREFIX}{stream}.{self.name}.*", self._on_flow_control)
                self._subs.items.append(sub)
            self._watch_interest()
            if self.cfg.idle_heartbeat:
                self._t_hb.arm(self.cfg.idle_heartbeat)
            if not self.active:
                self._arm_inactive()
        else:
            self.waiting.last_activity = mono()  # type: ignore[union-attr]
            self._arm_inactive()
        if self.delivery.pending:
            self._t_ack.arm(self._ack_wait_for(min(self.delivery.pending)))
        self._arm_pause()
        self._kick()

    def stop(self) -> None:
        """Stop delivering and release subscriptions and timers (state stays in the store). Waiting
        pulls get `409 Consumer Deleted`: the stream calls this when it is deleted."""
        if self.closed:
            return
        self._settle_acks()
        self.pulls.stop()
        self.closed = True
        for t in (self._t_ack, self._t_hb, self._t_inactive, self._t_pause, self._t_hold):
            t.cancel()
        self.pins.stop()
        for sub in self._subs.items:
            self.bus.unsubscribe_internal(sub)
        self._subs.items.clear()
        if self._subs.watch is not None:
            self._subs.watch.cancel()
            self._subs.watch = None
        self.store.close()

    def release_waiting_pulls(self, tell: bool) -> None:
        """The server stops: waiting pulls are dropped, told `409 Server Shutdown` if `tell` (not the
        `Consumer Deleted` of `stop`, which clients take as final)."""
        self.pulls.release_for_shutdown(tell)

    def delete(self, on_error: Callable[[OSError], None] | None = None) -> None:
        """Stop for good (waiting pulls get `409 Consumer Deleted`); the stored state goes (`on_error`: its
        removal failed in the syncer's thread)."""
        self.stop()
        self.store.delete(on_error)

    def snapshot_state(self) -> ConsumerState:
        """A copy of the delivery state with every ack received so far applied (a stream snapshot)."""
        self._settle_acks()
        st = self.store.load()
        return ConsumerState(st.delivered_consumer_seq, st.delivered_stream_seq, st.ack_floor_consumer_seq,
                             st.ack_floor_stream_seq, dict(st.pending), dict(st.redelivered))

    def save_meta(self, on_error: Callable[[OSError], None] | None = None) -> None:
        """Persist the config next to the state so the consumer comes back after a restart; a memory
        consumer (`mem_storage`) keeps nothing on disk and is gone after one, as in nats-server. With a
        syncer the fsyncs follow in its thread (`on_error` hears of a failure)."""
        if self.directory is not None and not self.cfg.mem_storage:
            storage.save_meta(self.directory, consumer_meta(self.name, self.created_ns, self.cfg.to_json()),
                              self._sync, on_error)

    def update_config(self, cfg: ConsumerConfig) -> None:
        """Apply an allowed update (checked by the caller with `consumer_config.update_refusal`)."""
        self._settle_acks()
        old = self.cfg
        cfg.pause_until = old.pause_until
        self.cfg = cfg
        self._configure()
        if self.waiting is not None:
            self.waiting.max = cfg.max_waiting
            self.waiting.prioritized = cfg.priority_policy == "prioritized"
        self.priority.configure(cfg.priority_policy, cfg.priority_groups, cfg.priority_timeout)
        if (cfg.deliver_subject, cfg.deliver_group) != (old.deliver_subject, old.deliver_group) and cfg.is_push:
            if self._subs.watch is not None:
                self._subs.watch.cancel()
            self._watch_interest()
        if self.filters != old.filters:
            self._recount_pending()
        self.save_meta()
        self._kick()

    def pause(self, until: str | None) -> None:
        """Pause until the given RFC 3339 time (kept as given, a past one too, as nats-server does)."""
        self.cfg.pause_until = until or None
        set_static_metadata(self.cfg)  # a pause time needs API level 1: nats-server's stored config says so
        self.save_meta()
        self._arm_pause()  # no pass now: nats-server signals the consumer only when a pause runs out

    # ---- starting position -----------------------------------------------------------------------

    def _select_start(self) -> None:
        cfg, st = self.cfg, self.stream.store.state()
        store = self.stream.store
        if cfg.opt_start_seq:
            seq = cfg.opt_start_seq
        elif cfg.deliver_policy == "all":
            seq = st.first_seq
        elif cfg.deliver_policy == "last":
            if not self.filters:
                seq = st.last_seq
            else:
                lasts = [m.seq for f in self.filters if (m := store.load_last_msg(f)) is not None]
                seq = max(lasts, default=0)
        elif cfg.deliver_policy == "last_per_subject":
            seq = self._start_last_per_subject(st.first_seq, st.last_seq)
        elif cfg.deliver_policy == "by_start_time":
            seq = store.first_seq_at_or_after_time(cfg.opt_start_time_ns)
            if self.filters:  # nats-server skips ahead only to a filter's first message in the whole stream
                firsts = [m.seq for f in self.filters if (m := store.load_next_msg(st.first_seq, f)) is not None]
                filter_seq = min([st.last_seq, *(s for s in firsts if s >= seq)])
                if seq < filter_seq < st.last_seq:
                    seq = filter_seq
        else:  # new
            seq = st.last_seq + 1
        if st.first_seq == 0 and not cfg.opt_start_seq:
            seq = 1
        elif seq > st.last_seq and not cfg.opt_start_seq:
            seq = st.last_seq + 1
        elif seq < st.first_seq:
            seq = st.first_seq
        self.delivery.start_at(seq)

    def _start_last_per_subject(self, first_seq: int, last_seq: int) -> int:
        store = self.stream.store
        if self.stream.config.max_msgs_per_subject == 1:
            return first_seq
        seqs: set[int] = set()
        for f in self.filters or [">"]:
            for subject in store.subjects_state(f):
                m = store.load_last_msg(subject)
                if m is not None:
                    seqs.add(m.seq)
        if not seqs:
            return last_seq
        ordered = sorted(seqs)
        if ordered[0] < last_seq:  # a list that starts at its resume point is none (nats-server's setLeader drops it)
            self.delivery.last_per_subject, self.delivery.last_per_subject_end = deque(ordered), last_seq
        return ordered[0]

    def _apply_state(self, state: ConsumerState) -> None:
        """Resume from the stored state: everything unacked is due for redelivery once its ack wait passed."""
        d = self.delivery
        if d.restore(state, self.stream.store.state().last_seq):  # moved back to the stream's end: stored so
            self.store.reset(ConsumerState(d.next_delivery_seq - 1, d.next_seq - 1, d.ack_floor_delivery_seq,
                                           d.ack_floor_seq))

    # ---- stream hooks ----------------------------------------------------------------------------

    def needs(self, seq: int) -> bool:
        """Whether this consumer still needs `seq` (interest retention; nats-server's needAck): above the ack
        floor and not acknowledged, or with a redelivery count (one that reached max_deliver is kept, even
        below the floor)."""
        self._settle_acks()
        return self.delivery.needs(seq, self._ack_none or self._ack_all)

    def on_stored(self, seq: int, subject: str) -> None:
        if self.closed or not self.wants(subject):
            return
        if seq > self.delivery.num_pending_through:  # counted even below `next_seq` (processStreamSignal)
            self.delivery.num_pending += 1
        if seq >= self.delivery.next_seq:
            if (self.active if self.cfg.is_push else len(self.waiting)):  # type: ignore[arg-type]
                self._kick()

    def on_removed(self, seq: int, subject: str, terminate: bool = True) -> None:
        """One message left the stream (deleted, acked away, a limit, expiry): nats-server's
        decStreamPending. It no longer counts as pending delivery; a delivered, unacknowledged one is
        terminated (`terminate_removed`; a purge does that after it moved the consumers, as nats-server's
        goroutine does), and one waiting for redelivery is forgotten."""
        if self.closed:
            return
        if seq >= self.delivery.next_seq and self.wants(subject):
            self.delivery.num_pending -= 1
        self._settle_acks()
        if seq not in self.delivery.pending:
            self.delivery.redelivered.pop(seq, None)
        elif terminate:
            self.terminate_removed(seq)

    def terminate_removed(self, seq: int) -> None:
        """A removed message still pending is terminated (acked, with a terminated advisory) so its ack
        floor moves on."""
        p = self.delivery.pending.get(seq)
        if p is not None and not self.closed:
            delivery_count = self.delivery.redelivered.get(seq, 0) + 1
            self._ack(seq, p[0])
            advisories.terminated(self.bus, self.stream.name, self.name, seq, p[0], delivery_count, TERM_REMOVED)

    def recount_pending(self, first_seq: int) -> None:
        """Messages went in a batch (a purge): count again, forget redeliveries of what is below the stream."""
        self._settle_acks()
        self._recount_pending()
        for seq in [s for s in self.delivery.redelivered if s < first_seq and s not in self.delivery.pending]:
            del self.delivery.redelivered[seq]

    def check_floor(self) -> int:
        """nats-server's check floor of an interest stream's consumer (checkStateForInterestStream, as it
        would compute it now): the first message after the stored ack floor this consumer takes, the stream's
        end when there is none; 0 when the ack floor is past the stream's last message (nats-server then
        leaves it unset). nats-server keeps the highest one it computed; this one is not remembered."""
        self._settle_acks()
        store = self.stream.store
        floor_stream_seq, last = self.store.floors()[3], store.state().last_seq
        if floor_stream_seq > last:
            return 0
        nxt = store.load_next_msgs(floor_stream_seq + 1, self.filters or None, 1)
        return nxt[0].seq if nxt else last + 1

    def purges_with(self, subject: str) -> tuple[bool, bool]:
        """For a purge of `subject`: (covered, wider). Covered: every filter of this consumer is the purged
        subject or inside it (nats-server 2.15.1: a consumer with filters [a, c.x] is not moved by a purge
        of c.x). Wider: otherwise, when one of its filters overlaps the purged subject (nats-server 2.15.1:
        filters [a, c.x] are moved to the stream's first message by a purge of c.*; a consumer without
        filters sees everything)."""
        if self.filters and all(f == subject or subjects.is_subset(f, subject) for f in self.filters):
            return True, False
        wider = not self.filters or any(subjects.subjects_overlap(subject, f) for f in self.filters)
        return False, wider

    def on_stream_purged(self, start: int, last_seq: int, wider: bool) -> None:
        """nats-server's `consumer.purge`: move the start to `start` (0: everything this consumer sees was
        purged, so past `last_seq`), acknowledge the pending messages below it and, for a purge narrower
        than this consumer (`wider`), the pending messages that are gone; persist the whole state."""
        self._settle_acks()
        if start == 0 and not wider:
            start = last_seq + 1
        store = self.stream.store
        acked = self.delivery.purge(start, (lambda seq: store.load_msg(seq) is None) if wider else None)
        if acked:
            self.last_acked_ns = now_ns()  # acknowledged, as nats-server's updateAcks records
        # no delivery pass: nats-server's purge does not signal the consumer (a pass would move `next_seq`)
        self._store_purged(acked, self.delivery.stored())

    def _store_purged(self, acked: list[tuple[int, int]], state: ConsumerState) -> None:
        """What nats-server's purge stores: an ack of each pending message it took (the store's ack rules:
        an ack-all one moves the stored floor up to it), then the whole state, which the store refuses as
        outdated when its delivered consumer seq or ack floor stream seq is below the stored one. INFO shows
        the stored floors, so after such a purge they can differ from the ones the consumer works with."""
        for delivery_seq, seq in acked:
            self.store.update_acks(delivery_seq, seq, ack_all=self._ack_all)
        delivered_consumer_seq, _, _, floor_stream_seq = self.store.floors()
        if state.delivered_consumer_seq >= delivered_consumer_seq and state.ack_floor_stream_seq >= floor_stream_seq:
            self.store.reset(state)
