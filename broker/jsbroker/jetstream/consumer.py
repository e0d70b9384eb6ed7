"""A JetStream consumer: delivery state, pull and push delivery, acks, redelivery and CONSUMER.RESET,
as nats-server 2.15.1's `consumer.go` behaves (single server, R1).

State lives in pure modules and this class does the I/O around it (store writes, advisories, timers,
the bus): `delivery` (`delivery.py`) where delivery stands, what awaits an ack and what is due for
redelivery; `waiting` (`pull.py`) the pull requests; `priority` (`priority.py`) the priority groups;
`flow` and `pacing` (`push.py`) a push consumer's flow control and replay / rate limit. The I/O of pull
requests (taking them in, their timer, sweeping, choosing the request a delivery goes to) is `pulls`
(`pull_requests.py`), that of the pin of priority groups (its TTL timer, the advisories) `pins` (`pins.py`).
- INFO reports the delivered/ack-floor pair the ConsumerStore keeps (`store.floors()`), whose rules
  differ: delivered = last delivered, ack floor moved by acks only; the delivered pair is the live one
  (`next_seq` - 1) while the store has none (`has_state`), as nats-server's.

Delivery runs in one pass per loop turn (`_kick` -> `_run`): a MSG.NEXT, a stored message, an ack that
frees max_ack_pending, or a timer schedules it; it then sends every message it can. Timers are one
handle per concern (ack wait, pull requests, heartbeat, inactivity, pause, replay/rate), never one
per message. Handlers run inside the core's routing and never block.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from jsbroker import store as storage
from jsbroker import subjects
from jsbroker.config import VERSION
from jsbroker.store.base import ConsumerState, ConsumerStore, StoredMsg, StoreError, StreamStore

from . import ack, advisories, errors, headers, priority, pull, push, rate
from .pins import Pins
from .pull_requests import PullRequests
from .timer import Timer
from .requests import API_LEVEL
from .consumer_config import ConsumerConfig, set_static_metadata
from .delivery import ACK_WAIT_SLACK, DeliveryState, Dropped
from .stream_config import StreamConfig
from .times import now_ns, rfc3339

if TYPE_CHECKING:
    from pathlib import Path

    from jsbroker.internal import Delivery, InterestWatch, InternalBus, InternalMsg, InternalSubscription, Origin

log = logging.getLogger(__name__)

MSG_NEXT_PREFIX = "$JS.API.CONSUMER.MSG.NEXT."
TERM_REMOVED = "Unacknowledged message was deleted"  # the terminated advisory's reason (nats-server's)
# rate_limit_bps: the burst without a stream max_msg_size is the max payload (the default one: the server's
# max_payload setting is not known here), and the ack reply's tokens after its prefix are about this long.
DEFAULT_MAX_PAYLOAD = 1024 * 1024
ACK_REPLY_TAIL = 30
RUN_BUDGET = 4096  # messages per delivery pass before yielding the loop
READ_AHEAD_FIRST, READ_AHEAD_MAX = 8, 256  # new messages read per store call in a pass: doubling up to max
READ_AHEAD_BYTES = 1 << 20  # and at most this many bytes of them (one message at least): large messages
# Deliveries handed to the core at once: 8, then doubling up to 128 within a pass. The core writes each
# batch at once, so the client starts on the first messages while the pass goes on.
OUT_FIRST, OUT_MAX = 8, 128
OUT_BYTES = 256 * 1024  # a batch to the core is sent at this size too, so large messages see backpressure soon

mono = time.monotonic_ns


class ConsumedStream(Protocol):
    """What a consumer needs from its stream (implemented by jetstream/stream.py's `Stream`)."""

    name: str
    bus: InternalBus
    store: StreamStore
    config: StreamConfig  # read live: a stream update may change retention and limits

    @property
    def domain(self) -> str | None: ...  # advisories name it

    def acked(self, seq: int) -> None: ...  # with interest / workqueue retention the stream may drop it


@dataclass(slots=True)
class _Subs:
    items: list[InternalSubscription] = field(default_factory=list)
    watch: InterestWatch | None = None


class Consumer:
    """One consumer of one stream. Created, restored and deleted by the consumer registry (`service.py`),
    which attaches it with `stream.add_consumer`; `directory` holds its files (None: nothing on disk)."""

    def __init__(
        self,
        stream: ConsumedStream,
        name: str,
        cfg: ConsumerConfig,
        store: ConsumerStore,
        directory: Path | None,
        created_ns: int = 0,
        on_inactive: Callable[[Consumer], None] | None = None,
        sync: storage.SyncPolicy | None = None,
    ) -> None:
        self._sync = sync  # how `save_meta` makes the config durable (None: at once)
        self.stream = stream
        self.name = name
        self.cfg = cfg
        self.store = store
        self.directory = directory
        self._replies: list[str] = []  # ack_sync replies held until the acks they confirm are written
        # plain acks applied after the next delivery pass (`_on_acks`), with `next_seq` as it was then
        self._later_acks: list[tuple[list[str], int]] = []
        self._persist_armed = False
        store.set_flush_hook(self._arm_persist)
        self.created_ns = created_ns or now_ns()
        self.bus: InternalBus = stream.bus
        self.loop = self.bus.loop
        self._send = self.bus.deliver  # routes to the target; each MSG line shows the stored subject
        self.closed = False
        self._on_inactive = on_inactive
        self._ack_prefix = ack.reply_prefix(stream.name, name)
        self.pacing = push.Pacing(False, None)  # replay original / rate limit (push)
        self._configure()
        # delivery state
        self.delivery = DeliveryState()
        self.last_delivered_ns = 0
        self.last_acked_ns = 0
        # pull / push
        self.waiting = pull.WaitQueue(cfg.max_waiting, cfg.priority_policy == "prioritized") if not cfg.is_push else None
        self.priority = priority.Priority(cfg.priority_policy, cfg.priority_groups, cfg.priority_timeout)
        self.active = False
        self.flow = push.FlowControl() if cfg.flow_control else None
        self._last_out = 0  # mono ns of the last delivery (push idle heartbeat)
        self._kicked = False
        self._stall = ""  # why the last pass stopped: "eof", "maxp" or "gone" (a skip list's message)
        self._ahead: deque[StoredMsg] = deque()  # new messages read ahead in this delivery pass
        self._ahead_n = READ_AHEAD_FIRST  # how many the next read-ahead asks for
        self._out: list[Delivery] = []  # deliveries of this pass to `_out_target`, sent as one batch
        self._out_target = ""
        self._out_bytes = 0
        self._congested = False  # the receiver is backed up: this pass stops, its drain kicks the next
        self._pass_ns = self._pass_mono = 0  # the clock of the current delivery pass
        self._pass_sent = 0  # deliveries in this pass
        self._out_n = OUT_FIRST  # the size of the pass's next batch to the core
        self._pass_wait = 0  # shortest ack wait of this pass's deliveries (ns)
        self._pass_served: pull.Waiting | None = None  # a request already checked for expiry and interest
        self._pass_retained = False  # the stream hears about acks (interest/workqueue), read per pass
        self._subs = _Subs()
        self._t_ack = Timer(self.loop, self._check_pending)
        self._t_hb = Timer(self.loop, self._on_heartbeat_timer)
        self._t_inactive = Timer(self.loop, self._on_inactive_timer)
        self._t_pause = Timer(self.loop, self._kick)
        self._t_hold = Timer(self.loop, self._kick)
        self.pins = Pins(self, self._kick)
        self.pulls = PullRequests(self, self._publish, self._kick, lambda: self._stall == "maxp")

    def _configure(self) -> None:
        cfg = self.cfg
        self.filters = cfg.filters
        self._filter_set = frozenset(f for f in self.filters if subjects.is_literal(f))
        self._wild_filters = [f for f in self.filters if not subjects.is_literal(f)]
        self.max_deliver = max(cfg.max_deliver, 0)  # maxdc: 0 is no limit
        self.max_ack_pending = cfg.max_ack_pending  # maxp
        self._ack_none = cfg.ack_policy == "none"
        self._ack_all = cfg.ack_policy in ("all", "flow_control")
        self._fc_acks = cfg.ack_policy == "flow_control"  # acked by flow control responses only
        self._holds = cfg.is_push and (cfg.replay_policy == "original" or bool(cfg.rate_limit_bps))
        self.pacing.replay_original = cfg.replay_policy == "original"
        self.pacing.limiter = rate.limiter(cfg.rate_limit_bps, self.stream.config.max_msg_size, DEFAULT_MAX_PAYLOAD)
        self._headers_only = cfg.headers_only
        # sample_freq ("50%" or "50"): the share of explicit acks reported as ack metrics
        self._sample = int(cfg.sample_freq.removesuffix("%") or 0) if cfg.ack_policy == "explicit" else 0

    @property
    def ack_floor_seq(self) -> int:
        return self.delivery.ack_floor_seq

    @property
    def _interest_retention(self) -> bool:
        """Interest or workqueue retention: the stream must hear about acks (read live: a stream
        update may switch retention)."""
        return self.stream.config.retention != "limits"

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
                nseq = min([st.last_seq, *(s for s in firsts if s >= seq)])
                if seq < nseq < st.last_seq:
                    seq = nseq
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

    def _recount_pending(self) -> None:
        """nats-server's streamNumPending: count from the store, valid through the stream's last sequence
        (`npf`); from then on the count runs (`on_stored`, deliveries, `on_removed`) until the next recount
        (start, a filter update, a purge, a reset), and INFO only clamps it (`_checked_pending`)."""
        store = self.stream.store
        lps = self.cfg.deliver_policy == "last_per_subject"
        self.delivery.num_pending = store.num_pending(self.delivery.next_seq, self.filters or None, lps)
        self.delivery.num_pending_through = store.state().last_seq

    def _checked_pending(self) -> int:
        """nats-server's checkNumPending: never more than the messages there are from `next_seq` on."""
        st, d = self.stream.store.state(), self.delivery
        if d.next_seq > st.last_seq:
            d.num_pending = 0
        elif d.num_pending > 0:
            d.num_pending = min(d.num_pending, st.msgs, st.last_seq - d.next_seq + 1)
        return max(d.num_pending, 0)

    # ---- stream hooks ----------------------------------------------------------------------------

    def wants(self, subject: str) -> bool:
        if not self.filters or subject in self._filter_set:
            return True
        return any(subjects.subject_matches(f, subject) for f in self._wild_filters)

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
            dc = self.delivery.redelivered.get(seq, 0) + 1
            self._ack(seq, p[0])
            advisories.terminated(self.bus, self.stream.name, self.name, seq, p[0], dc, TERM_REMOVED)

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
        asflr, last = self.store.floors()[3], store.state().last_seq
        if asflr > last:
            return 0
        nxt = store.load_next_msgs(asflr + 1, self.filters or None, 1)
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
        for dseq, seq in acked:
            self.store.update_acks(dseq, seq, ack_all=self._ack_all)
        delivered_dseq, _, _, floor_sseq = self.store.floors()
        if state.delivered_consumer_seq >= delivered_dseq and state.ack_floor_stream_seq >= floor_sseq:
            self.store.reset(state)

    # ---- delivery ----------------------------------------------------------------------------------

    def _kick(self) -> None:
        if not self._kicked and not self.closed:
            self._kicked = True
            self.loop.call_soon(self._run)

    def _paused(self) -> bool:
        until = self.cfg.pause_until_ns if self.cfg.pause_until else 0
        return until > now_ns()

    def _run(self) -> None:
        self._kicked = False
        if self.closed:
            return
        try:
            self._pass()
        finally:
            self._settle_acks()  # acks that waited for this pass (see `_on_acks`)

    def _pass(self) -> None:
        self._stall = ""
        self._congested = False
        self._ahead.clear()  # a new pass reads afresh: the stream or the filters may have changed
        # pull requests say how many they want: read that many at once (push starts small and doubles); not
        # when a priority policy may pass over every request (standby clients of a pin): each stored message
        # would read ahead for nobody
        owed = self.waiting.owed() if self.waiting is not None and not self.priority.chooses else 0
        self._ahead_n = min(max(owed, READ_AHEAD_FIRST), READ_AHEAD_MAX)
        if not self._paused():  # checked once: the pause timer kicks again when it ends
            self._pass_ns, self._pass_mono = now_ns(), mono()  # one clock read per pass
            self._pass_served, self._pass_retained = None, self._interest_retention
            try:
                finished = self._deliver_all()
            finally:
                self._end_pass()
            if not finished:
                self._kick()  # budget used up: continue on the next loop turn
                return
        if not self.cfg.is_push:
            self.pulls.sweep(end_of_stream=self._stall != "maxp" and not self._congested)

    def _deliver_all(self) -> bool:
        """Deliver every message this pass can; False when the budget ran out first."""
        is_push = self.cfg.is_push
        alive: set[str] = set()
        # whether this pass may deliver runs (`_deliver_run`): not with headers only, nor to a push
        # subject under flow control, replay or a rate limit
        flow = self.flow
        runs = not self._headers_only and not (is_push and (flow is not None or self._holds))
        budget = RUN_BUDGET
        while budget > 0:
            budget -= 1
            if is_push:
                if not self.active or self._congested or (flow is not None and flow.blocked):
                    return True
            elif not self.waiting or self._congested:
                return True
            if runs and (sent := self._deliver_run(budget)):
                budget -= sent
                continue
            if self.pacing.hold_until and (left := self.pacing.hold_until - mono()) > 0:
                # loop timers may fire a little early (uvloop counts in whole milliseconds): wait out the rest
                self._t_hold.arm(left, earliest=False)
                return True
            saved = self.delivery.position()
            got = self._next_msg()
            if got is None:
                return True
            msg, dc = got
            if dc == 1:
                self.delivery.num_pending -= 1
            if self._holds and self._must_hold(msg):
                self.delivery.put_back(msg.seq, dc, saved)
                return True
            d = self.delivery
            reply = ack.reply_subject(self._ack_prefix, dc, msg.seq, d.next_delivery_seq, msg.ts, max(d.num_pending, 0))
            hdr, data = msg.hdr, msg.data
            if self._headers_only:
                hdr, data = headers.append(hdr, [(headers.MSG_SIZE, str(len(data)))]), b""
            size = 0  # what a byte limit (push flow control, a pull's max_bytes) counts
            if is_push:
                target, left_n, left_b = self.cfg.deliver_subject, 1, 0
                if flow is not None:
                    size = len(msg.subject) + len(reply) + len(hdr) + len(data)
            else:
                w = self.pulls.next(msg.subject, reply, hdr, data, alive, self._pass_served, self._pass_mono, self._pass_ns)
                if w is None:
                    self.delivery.put_back(msg.seq, dc, saved)
                    return True
                self._pass_served = w
                target, left_n, left_b = w.reply, w.n, w.b
                if w.heartbeat and w.n > 0:
                    w.next_heartbeat = self._pass_mono + w.heartbeat
                if (pin := self.priority.header()) is not None:
                    hdr = headers.append(hdr, [(priority.PIN_ID, pin)])
            self._deliver(target, reply, msg.seq, msg.subject, hdr, data, dc, size)
            if left_n <= 0 and left_b > 0:
                self._publish(target, None, pull.batch_completed(left_n, left_b), b"")
        return False

    def _deliver_run(self, budget: int) -> int:
        """New messages from the read-ahead in a row, to the push subject or to the only waiting pull
        request once checked in this pass (a fetch): the per-message choice of message and destination
        is skipped. `_deliver_all` calls it only in passes that allow runs. Returns how many were
        delivered (0 leaves the work to the general path)."""
        if not self._ahead or self.delivery.redeliver_queue or self.delivery.last_per_subject is not None:
            return 0
        q = self.waiting
        if q is None:
            w, target, n = None, self.cfg.deliver_subject, budget + 1
        else:
            w = q.peek()
            if w is None or w is not self._pass_served or w.b or len(q) != 1 or not priority.Priority.runs(w.ask):
                return 0
            target, n = w.reply, min(w.n, budget + 1)
        pin = self.priority.header()
        if self.max_ack_pending > 0:
            n = min(n, self.max_ack_pending - len(self.delivery.pending))
        ahead = self._ahead
        msgs: list[StoredMsg] = []
        while ahead and len(msgs) < n:
            msg = ahead.popleft()
            if msg.seq >= self.delivery.next_seq:
                msgs.append(msg)
        deliver, reply_subject, prefix, d = self._deliver, ack.reply_subject, self._ack_prefix, self.delivery
        for i, msg in enumerate(msgs):
            seq = msg.seq
            d.next_seq = seq + 1
            d.num_pending -= 1
            hdr = msg.hdr if pin is None else headers.append(msg.hdr, [(priority.PIN_ID, pin)])
            deliver(target, reply_subject(prefix, 1, seq, d.next_delivery_seq, msg.ts, max(d.num_pending, 0)), seq,
                    msg.subject, hdr, msg.data, 1, 0)
            if self._congested:  # the subscriber is backed up: the rest waits in the read-ahead
                ahead.extendleft(reversed(msgs[i + 1:]))
                del msgs[i + 1:]
                break
        if w is not None and q is not None:
            q.take_many(w, len(msgs))
            if msgs and w.heartbeat and w.n > 0:
                w.next_heartbeat = self._pass_mono + w.heartbeat
        return len(msgs)

    def _next_msg(self) -> tuple[StoredMsg, int] | None:
        store, d = self.stream.store, self.delivery
        while d.redeliver_queue:
            taken = d.take_redelivery(self.max_deliver)
            if isinstance(taken, Dropped):
                self._dropped(taken)
                continue
            seq, dc = taken
            msg = store.load_msg(seq)
            if msg is None:  # gone from the stream: acknowledged internally
                d.untake_redelivery(seq, requeue=False)
                if (p := d.release(seq)) is not None:
                    self.store.update_acks(p[0], seq)
                continue
            return msg, dc
        if self.max_ack_pending > 0 and len(self.delivery.pending) >= self.max_ack_pending:
            self._stall = "maxp"
            return None
        if self.delivery.last_per_subject:
            seq = self.delivery.last_per_subject.popleft()
            if not self.delivery.last_per_subject:
                self.delivery.last_per_subject = None
                self.delivery.next_seq = self.delivery.last_per_subject_end + 1
            else:
                self.delivery.next_seq = seq + 1
            msg = store.load_msg(seq)
            if msg is None:  # gone (a purge, a delete): nats-server's getNextMsg fails and the pass waits
                self._stall = "gone"
                return None
            return msg, 1
        msg = self._next_new()
        if msg is None:
            self._stall = "eof"
            self._at_end(store)
            return None
        self.delivery.next_seq = msg.seq + 1
        return msg, 1

    def _at_end(self, store: StreamStore) -> None:
        """Nothing new to deliver: nats-server's stores answer the search with their last sequence and its
        getNextMsg moves the start past it, over other subjects' messages. The stored position (what INFO
        shows, see `info`) stays until something writes the whole state (a purge), and a restart forgets
        the move. Then checkNumPendingOnEOF: the count restarts at the stream's end."""
        last = store.state().last_seq
        if self.delivery.next_seq <= last:
            self.delivery.next_seq = last + 1
        if self.delivery.num_pending:
            self.delivery.num_pending, self.delivery.num_pending_through = 0, last

    def _next_new(self) -> StoredMsg | None:
        """The first new message from `next_seq`, from a read-ahead that grows while the pass keeps taking
        them (one store call and, for files, one read per batch). The read-ahead lives for one
        synchronous pass: limits, purges and deletes run between passes, so its messages are still
        there (only an internal subscriber reached by this pass's own output could change the stream
        meanwhile; such a message is delivered as it was read)."""
        store = self.stream.store
        ahead = self._ahead
        while ahead:
            msg = ahead.popleft()
            if msg.seq >= self.delivery.next_seq:
                return msg
        n = self._ahead_n
        if self.max_ack_pending > 0:
            n = min(n, max(self.max_ack_pending - len(self.delivery.pending), 1))
        self._ahead_n = min(self._ahead_n * 2, READ_AHEAD_MAX)
        got = store.load_next_msgs(self.delivery.next_seq, self.filters or None, n, READ_AHEAD_BYTES)
        if not got:
            return None
        ahead.extend(got)
        return ahead.popleft()

    def _must_hold(self, msg: StoredMsg) -> bool:
        """Replay original spacing and rate limits: hold delivery until the timer says go."""
        # the size nats-server counts: subject, ack reply (about), headers, payload
        size = len(msg.subject) + len(self._ack_prefix) + ACK_REPLY_TAIL + len(msg.hdr) + len(msg.data)
        delay = self.pacing.delay(msg.ts, size, mono())
        if delay:
            self._t_hold.arm(delay, earliest=False)
        return delay > 0

    def _deliver(self, target: str, reply: str, seq: int, subject: str, hdr: bytes, data: bytes, dc: int,
                 size: int) -> None:
        """Account one delivery and queue it; `_end_pass` sends the queue and settles the per-pass state."""
        self._pass_sent += 1
        if self._ack_none:
            self.delivery.delivered_unacked(seq)
        else:
            ts = self._pass_ns
            self.store.update_delivered(self.delivery.delivered(seq, ts), seq, dc, ts)
            if dc > 1 or not self._pass_wait:  # new deliveries in a pass share the first one's wait
                wait = self._ack_wait_for(seq)
                if not self._pass_wait or wait < self._pass_wait:
                    self._pass_wait = wait
        if target != self._out_target:
            self._flush_out()
            self._out_target = target
        self._out.append((subject, reply, hdr, data))
        self._out_bytes += len(data)
        if len(self._out) >= self._out_n or self._out_bytes >= OUT_BYTES:
            self._out_n = min(self._out_n * 2, OUT_MAX)
            self._flush_out()
        if self.flow is not None:
            ack_pending_full = self._fc_acks and 0 < self.max_ack_pending <= len(self.delivery.pending)
            if self.flow.delivered(size, ack_pending_full):
                self._send_flow_control(self.flow)
        if self._ack_none and self._pass_retained:
            self.stream.acked(seq)  # interest/workqueue streams drop it once nobody needs it

    def _flush_out(self) -> None:
        """Send the queued deliveries (before anything else this consumer publishes, to keep order). When
        their receiver is backed up (a push subscriber, or the client of a pull request), the pass stops
        until it drains, as nats-server stalls its producers."""
        if self._out:
            out, self._out = self._out, []
            self._out_bytes = 0
            self._send(self._out_target, out)
            if not self._congested and self.bus.wait_for_drain(self._out_target, self._kick):
                self._congested = True

    def _publish(self, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> None:
        self._flush_out()
        self.bus.publish(subject, reply, hdr, payload)

    def _end_pass(self) -> None:
        """Send what the pass queued and record it once: delivered/ack-floor bookkeeping, activity
        times and the ack-wait timer (the pass's clock stands for every delivery in it)."""
        self._flush_out()
        self._out_n = OUT_FIRST
        sent, self._pass_sent = self._pass_sent, 0
        if not sent:
            return
        if self._ack_none:
            self.store.update_floor(self.delivery.ack_floor_delivery_seq, self.delivery.ack_floor_seq, self._pass_ns)
        self.last_delivered_ns = self._pass_ns
        self._last_out = self._pass_mono
        if self.waiting is not None:
            self.waiting.last_activity = self._pass_mono
        if self._pass_wait:
            self._t_ack.arm(self._pass_wait)
            self._pass_wait = 0

    # ---- pull requests ---------------------------------------------------------------------------

    def _on_next(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
        if reply:
            self.pulls.request(reply, hdr, payload)

    # ---- acks --------------------------------------------------------------------------------------

    def _on_acks(self, msgs: list[InternalMsg]) -> None:
        """The acks of one read, in order (`subscribe_batched`). Runs of plain acks (no body, no reply:
        nobody waits for an answer) are applied together; anything else takes `_on_ack`.

        A run of plain acks that cannot change what the next pass delivers (explicit acks, limits
        retention, nothing queued for redelivery) waits for that pass: a client sends a fetch's acks
        and its next request in one write, and the pass then goes out while the acks are applied, as
        nats-server applies acks on the consumer's own goroutine. Anything that reads or changes the
        ack state applies them first (`_settle_acks`), so requests still see every ack sent before."""
        if self.closed:
            return
        plain: list[str] = []
        for subject, reply, hdr, payload, origin in msgs:
            if payload or reply:
                self._settle_acks()
                if plain:
                    self._ack_plain(plain, self.delivery.next_seq)
                    plain = []
                self._on_ack(subject, reply, hdr, payload, origin)
            else:
                plain.append(subject)
        if not plain:
            return
        if self._ack_none or self._ack_all or self.delivery.redeliver_queue or self._interest_retention:
            self._settle_acks()
            self._ack_plain(plain, self.delivery.next_seq)
        else:
            self._later_acks.append((plain, self.delivery.next_seq))
            self._kick()

    def _settle_acks(self) -> None:
        """Apply the plain acks waiting for a delivery pass."""
        if self._later_acks:
            runs, self._later_acks = self._later_acks, []
            for subjects, below in runs:
                self._ack_plain(subjects, below)

    def _ack_plain(self, subjects: list[str], below: int) -> None:
        """Plain acks in order, of messages delivered when they arrived (stream seq < `below`). The
        common case, an explicit-ack consumer acking pending messages with no redeliveries about, takes
        one loop, one store call and one clock read; the rest `_ack`."""
        parse = ack.parse_subject
        d = self.delivery
        if self._ack_none or self._ack_all or d.redelivered or d.redeliver_queue or self._sample:
            for subject in subjects:
                if (target := parse(subject)) is not None and target[1] < below:
                    self._ack(target[1], target[2], target[0])
            return
        pending, release, next_sseq = self.delivery.pending, self.delivery.release, below
        freed = self.max_ack_pending > 0 and len(pending) >= self.max_ack_pending
        acked: list[tuple[int, int]] = []
        offered: list[int] = []  # every valid ack, pending or not, for the stream (`_ack_single`)
        for subject in subjects:
            target = parse(subject)
            if target is None or not 0 < target[1] < next_sseq:
                continue
            sseq = target[1]
            offered.append(sseq)
            p = release(sseq)
            if p is not None:
                acked.append((p[0], sseq))
        if not offered:
            return
        self.last_acked_ns = now_ns()
        if acked:
            self.store.update_acks_many(acked)
        if self._interest_retention:
            for sseq in offered:
                self.stream.acked(sseq)
        if freed:
            self._kick()

    def _on_ack(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
        if self.closed:
            return
        dc, sseq, dseq = ack.parse_subject(subject) or (0, 0, 0)
        body = ack.parse_body(payload)
        answer = sseq != 0
        kind = body.kind
        if kind is ack.AckKind.ACK:
            answer = self._ack(sseq, dseq, dc) and answer
        elif kind is ack.AckKind.NEXT:
            self._ack(sseq, dseq, dc)
            if reply:
                self.pulls.request(reply, b"", body.next_request)
            answer = False
        elif kind is ack.AckKind.NAK:
            self._nak(sseq, dseq, dc, body.delay_ns)
        elif kind is ack.AckKind.PROGRESS:
            p = self.delivery.pending.get(sseq)
            if p is not None:
                p[1] = self.last_delivered_ns = now_ns()  # nats-server counts progress as delivery activity
                self.store.update_delivered(p[0], sseq, 1, p[1])
        elif kind is ack.AckKind.TERM:
            answer = self._ack(sseq, dseq) and answer
            advisories.terminated(self.bus, self.stream.name, self.name, sseq, dseq, dc, body.reason)
        if reply and answer:
            self._replies.append(reply)
            self._arm_persist()

    def _arm_persist(self) -> None:
        if not self._persist_armed:
            self._persist_armed = True
            self.bus.before_output(self._persist)

    def _persist(self) -> None:
        """Write the store's buffered updates (one write, before the broker's next output), then answer
        the acks they confirm once durable (`when_durable`); a failed write or fsync answers none of them
        (the ack_sync caller times out)."""
        self._persist_armed = False
        replies, self._replies = self._replies, []
        if self._written() and replies:
            self.store.when_durable(lambda: self._confirm(replies))

    def _written(self) -> bool:
        try:
            self.store.flush()
        except (StoreError, OSError) as exc:
            log.error("consumer store failed", extra={"stream": self.stream.name, "consumer": self.name,
                                                      "error": str(exc)})
            return False
        return True

    def _confirm(self, replies: list[str]) -> None:
        """The acks are durable (sync: always: fsynced in the syncer's thread), unless the fsync failed (the
        store's flush then raises and no reply goes)."""
        if self._written():
            for reply in replies:
                self.bus.publish(reply, None, b"", b"")

    def _ack(self, sseq: int, dseq: int, dc: int = 0) -> bool:
        """Process an ack; returns whether nats-server would answer an ack_sync reply. `dc`: the delivery
        count of the ack subject, given for the acks nats-server samples (`sample_freq`)."""
        if sseq == 0 or sseq >= self.delivery.next_seq:
            return False
        if self._ack_none:
            return self._interest_retention
        freed = self.max_ack_pending > 0 and len(self.delivery.pending) >= self.max_ack_pending
        if self._ack_all:
            if dseq <= self.delivery.ack_floor_delivery_seq or sseq <= self.delivery.ack_floor_seq:
                return True
            self._ack_up_to(sseq, dseq)
        else:
            if dc and self._sample and sseq in self.delivery.pending and self._sampled():
                advisories.ack_metric(self.bus, self.stream.name, self.name, sseq, dseq, dc,
                                      now_ns() - self.delivery.pending[sseq][1])
            self._ack_single(sseq, dseq)
        self.last_acked_ns = now_ns()
        if freed:
            self._kick()
        return True

    def _sampled(self) -> bool:
        """nats-server's draw: every ack at 100% or more, else when a number below 100 is <= the percentage."""
        return self._sample >= 100 or random.randrange(100) <= self._sample

    def _ack_single(self, sseq: int, dseq: int) -> None:
        d = self.delivery
        redelivered = sseq in d.redelivered
        first = d.ack(sseq)
        if first is not None:
            self.store.update_acks(first, sseq)
        elif redelivered:
            self.store.update_acks(dseq, sseq)  # clears the stored redelivery count
        # a no-op unless interest/workqueue retention; nats-server offers the acked message to the stream even
        # when it was not pending (a delivery from before a RESET: it goes if nobody needs it)
        self.stream.acked(sseq)

    def _ack_up_to(self, sseq: int, dseq: int) -> None:
        """AckAll: everything up to `sseq` is acknowledged."""
        was_pending = sseq in self.delivery.pending
        acked = self.delivery.ack_up_to(sseq, dseq)
        if was_pending:  # the store moves its floor only for a pending seq
            self.store.update_acks(dseq, sseq, ack_all=True)
        for seq in acked if was_pending else [sseq, *acked]:  # the acked seq is offered even when not pending
            self.stream.acked(seq)  # a no-op unless interest/workqueue retention

    def _nak(self, sseq: int, dseq: int, dc: int, delay_ns: int | None) -> None:
        # a delayed NAK counts the delivery as made so that its ack wait runs out after the delay
        backdated = None if delay_ns is None else now_ns() - self.cfg.ack_wait + delay_ns
        p = self.delivery.nak(sseq, dseq, backdated)
        if p is None:
            return
        advisories.nak(self.bus, self.stream.name, self.name, sseq, dseq, dc)
        if backdated is not None:
            self.store.update_delivered(p[0], sseq, dc, p[1])
            self._t_ack.arm(10_000_000)
        else:
            self._kick()

    def _dropped(self, dropped: Dropped) -> None:
        """A message reached max_deliver: the advisory (once, at the limit) and the store's count."""
        seq, n, entry = dropped.seq, dropped.redeliveries, dropped.entry
        if n == self.max_deliver:
            advisories.max_deliveries(self.bus, self.stream.name, self.name, seq, n)
        if entry is not None:
            self.store.update_dropped(entry[0], seq, n + 2, entry[1])
            if self.max_ack_pending > 0:
                self._kick()

    # ---- redelivery timer (ack wait / backoff) ---------------------------------------------------

    def _ack_wait_for(self, seq: int) -> int:
        return self.delivery.ack_wait_for(seq, self.cfg.ack_wait, self.cfg.backoff)

    def _check_pending(self) -> None:
        self._settle_acks()  # an ack waiting for a pass is no reason to redeliver
        d = self.delivery
        if self.closed or not d.pending or self.cfg.ack_wait <= 0:
            return
        first = self.stream.store.state().first_seq
        expiry = d.expire(now_ns(), first, self.cfg.ack_wait, self.cfg.backoff, self.max_deliver)
        for dropped in expiry.dropped:
            self._dropped(dropped)
        if expiry.due:
            self._kick()
        if d.pending:
            self._t_ack.arm(expiry.next_in, earliest=False)

    # ---- push: interest, heartbeats, flow control --------------------------------------------------

    def _watch_interest(self) -> None:
        """A push consumer is active while its deliver subject has interest: with a deliver group, a
        subscriber in that queue group (a plain subscriber alone does not count, as in nats-server)."""
        subject, group = self.cfg.deliver_subject, self.cfg.deliver_group or None
        self.active = self.bus.has_interest(subject, group)
        self._subs.watch = self.bus.watch_interest(subject, self._on_interest, group)

    def _on_interest(self, has_interest: bool) -> None:
        if self.closed:
            return
        self.active = has_interest
        if has_interest:
            self._t_inactive.cancel()
            self._kick()
        else:
            self._arm_inactive()

    def _on_heartbeat_timer(self) -> None:
        if self.closed:
            return
        hb = self.cfg.idle_heartbeat
        idle = mono() - self._last_out
        if idle >= hb - ACK_WAIT_SLACK:
            if self.active:
                d = self.delivery
                flow = self.flow
                hdr = pull.idle_heartbeat(d.next_delivery_seq - 1, d.next_seq - 1, stalled=flow.reply if flow else "")
                self.bus.publish(self.cfg.deliver_subject, None, hdr, b"")
                if self._fc_acks and d.pending and flow is not None and not flow.reply:
                    self._send_flow_control(flow)  # acks wait for a flow control response
            self._last_out = mono()
            idle = 0
        self._t_hb.arm(hb - idle, earliest=False)

    def _send_flow_control(self, flow: push.FlowControl) -> None:
        flow.requested(f"{push.PREFIX}{self.stream.name}.{self.name}.{os.urandom(3).hex()[:4]}")
        self._publish(self.cfg.deliver_subject, flow.reply, push.REQUEST, b"")

    def _on_flow_control(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
        if self.closed or self.flow is None or not self.flow.answered(subject):
            return
        if self._fc_acks:  # ack_policy flow_control: the response names what its receiver stored
            sseq = _header_int(hdr, headers.LAST_STREAM)
            if sseq > 0:
                self._ack(sseq, max(_header_int(hdr, headers.LAST_CONSUMER), 0))
        self._kick()

    # ---- inactivity and pause ----------------------------------------------------------------------

    def _arm_inactive(self) -> None:
        if self.cfg.inactive_threshold > 0 and self._on_inactive is not None:
            self._t_inactive.arm(self.cfg.inactive_threshold, earliest=False)

    def _on_inactive_timer(self) -> None:
        if self.closed:
            return
        self._settle_acks()
        threshold = self.cfg.inactive_threshold
        if self.cfg.is_push:
            if self.active:
                return
        else:
            q = self.waiting
            assert q is not None
            idle = mono() - q.last_activity
            if q or idle < threshold:
                self._t_inactive.arm(threshold if q else threshold - idle, earliest=False)
                return
        if self._on_inactive is not None:
            self._on_inactive(self)

    def _arm_pause(self) -> None:
        until = self.cfg.pause_until_ns if self.cfg.pause_until else 0
        now = now_ns()
        if until > now:
            self._t_pause.arm(until - now + ACK_WAIT_SLACK, earliest=False)
        else:
            self._t_pause.cancel()

    def pause(self, until: str | None) -> None:
        """Pause until the given RFC 3339 time (kept as given, a past one too, as nats-server does)."""
        self.cfg.pause_until = until or None
        set_static_metadata(self.cfg)  # a pause time needs API level 1: nats-server's stored config says so
        self.save_meta()
        self._arm_pause()  # no pass now: nats-server signals the consumer only when a pause runs out

    # ---- reset -------------------------------------------------------------------------------------

    def reset(self, seq: int) -> int:
        """CONSUMER.RESET: move delivery to `seq` (0 = ack floor + 1). Returns the target seq."""
        self._settle_acks()
        cfg = self.cfg
        if seq == 0:
            seq = self.delivery.ack_floor_seq + 1
        elif cfg.deliver_policy == "all":
            pass
        elif cfg.deliver_policy == "by_start_sequence":
            if seq < cfg.opt_start_seq:
                raise errors.CONSUMER_INVALID_RESET(err="below start seq")
        elif cfg.deliver_policy == "by_start_time":
            if seq < self.stream.store.first_seq_at_or_after_time(cfg.opt_start_time_ns):
                raise errors.CONSUMER_INVALID_RESET(err="below start time")
        else:
            raise errors.CONSUMER_INVALID_RESET(err="not allowed")
        seq = max(seq, 1)
        recount = self.delivery.reset_recounts(seq, self._ack_all)
        self.delivery.reset(seq)
        self.last_delivered_ns = self.last_acked_ns = 0
        self.store.reset(self.delivery.stored())
        self._t_ack.cancel()
        # not a work queue: nats-server keeps its messages; nor past the stream's end (its interest check
        # refuses an ack floor above the last sequence)
        if self.stream.config.retention == "interest" and seq - 1 <= self.stream.store.state().last_seq:
            self._release_below(seq)
        if recount:
            self._recount_pending()
        self._kick()
        return seq

    def _release_below(self, seq: int) -> None:
        """Interest streams: offer the messages below the new floor that this consumer takes for removal
        (nats-server's checkStateForInterestStream walks its own filters only)."""
        store = self.stream.store
        for s, subject in list(store.seqs()):
            if s >= seq:
                break
            if self.wants(subject):
                self.stream.acked(s)

    # ---- info --------------------------------------------------------------------------------------

    def info(self, dynamic_metadata: bool = True) -> dict[str, Any]:
        """ConsumerInfo as nats-server reports it (without "type"); LIST leaves out the server's
        dynamic metadata (`_nats.level`, `_nats.ver`) as nats-server does."""
        self._settle_acks()
        num_pending = self._checked_pending()
        if self.waiting is not None:
            self.pulls.sweep(end_of_stream=False)
        delivered_dseq, delivered_sseq, floor_dseq, floor_sseq = self.store.floors()
        stored = self.store.has_state()  # else the live position, moved by passes that found nothing (`_at_end`)
        delivered: dict[str, Any] = {
            "consumer_seq": delivered_dseq if stored else self.delivery.next_delivery_seq - 1,
            "stream_seq": delivered_sseq if stored else self.delivery.next_seq - 1,
        }
        if self.last_delivered_ns:
            delivered["last_active"] = rfc3339(self.last_delivered_ns)
        ack_floor: dict[str, Any] = {"consumer_seq": floor_dseq, "stream_seq": floor_sseq}
        if self.last_acked_ns:
            ack_floor["last_active"] = rfc3339(self.last_acked_ns)
        out: dict[str, Any] = {
            "stream_name": self.stream.name,
            "name": self.name,
            "created": rfc3339(self.created_ns),
            "config": self.cfg.to_json(self.dynamic_metadata() if dynamic_metadata else None),
            "delivered": delivered,
            "ack_floor": ack_floor,
            "num_ack_pending": len(self.delivery.pending),
            "num_redelivered": 0 if self.cfg.max_deliver == 1 else len(self.delivery.redelivered),
            "num_waiting": len(self.waiting) if self.waiting is not None else 0,
            "num_pending": num_pending,
        }
        if self.cfg.is_push and self.active:
            out["push_bound"] = True
        until = self.cfg.pause_until_ns if self.cfg.pause_until else 0
        if until > now_ns():
            out["paused"] = True
            out["pause_remaining"] = min(until - now_ns(), 2**63 - 1)
        out["ts"] = rfc3339(now_ns())
        if groups := self.priority.state():
            out["priority_groups"] = groups
        return out

    @staticmethod
    def dynamic_metadata() -> dict[str, str]:
        return {"_nats.level": str(API_LEVEL), "_nats.ver": VERSION}


def consumer_meta(name: str, created_ns: int, config: dict[str, Any]) -> bytes:
    """What `save_meta` writes (a restore writes the same for the consumers of a snapshot)."""
    return json.dumps({"name": name, "created": created_ns, "config": config}).encode()


def _header_int(hdr: bytes, key: str) -> int:
    text = headers.get(hdr, key)
    try:
        return int(text) if text else 0
    except ValueError:
        return 0


def load_meta(directory: Path) -> tuple[str, int, dict[str, Any]] | None:
    """(name, created ns, config JSON) saved by `Consumer.save_meta`, or None when there is none."""
    raw = storage.load_meta(directory)
    if raw is None:
        return None
    data = json.loads(raw)
    return data["name"], int(data["created"]), data["config"]
