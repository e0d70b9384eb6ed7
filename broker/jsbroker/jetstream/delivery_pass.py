"""A consumer's delivery pass (`DeliveryPass`): one pass per loop turn (`_kick` -> `_run`), scheduled by a
MSG.NEXT, a stored message, an ack that frees max_ack_pending or a timer; it then sends every message it
can: redeliveries first, then new messages from a read-ahead, to the push subject or to the pull request
each one goes to, in batches to the core that stop when the receiver is backed up."""

from __future__ import annotations

from time import monotonic_ns as mono
from typing import TYPE_CHECKING

from jsbroker.store.base import StoredMsg, StreamStore

from . import ack, headers, priority, pull
from .consumer_base import (ACK_REPLY_TAIL, OUT_BYTES, OUT_FIRST, OUT_MAX, READ_AHEAD_BYTES, READ_AHEAD_FIRST,
                            READ_AHEAD_MAX, RUN_BUDGET, ConsumerBase)
from .delivery import Dropped
from .times import now_ns

if TYPE_CHECKING:
    from jsbroker.internal import Origin


class DeliveryPass(ConsumerBase):
    """Finds and sends the next messages of a consumer."""

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
            self.pulls.sweep(end_of_stream=self._stall != "max_ack_pending" and not self._congested)

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
            msg, delivery_count = got
            if delivery_count == 1:
                self.delivery.num_pending -= 1
            if self._holds and self._must_hold(msg):
                self.delivery.put_back(msg.seq, delivery_count, saved)
                return True
            d = self.delivery
            reply = ack.reply_subject(self._ack_prefix, delivery_count, msg.seq, d.next_delivery_seq, msg.ts,
                                      max(d.num_pending, 0))
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
                    self.delivery.put_back(msg.seq, delivery_count, saved)
                    return True
                self._pass_served = w
                target, left_n, left_b = w.reply, w.n, w.b
                if w.heartbeat and w.n > 0:
                    w.next_heartbeat = self._pass_mono + w.heartbeat
                if (pin := self.priority.header()) is not None:
                    hdr = headers.append(hdr, [(priority.PIN_ID, pin)])
            self._deliver(target, reply, msg.seq, msg.subject, hdr, data, delivery_count, size)
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
            seq, delivery_count = taken
            msg = store.load_msg(seq)
            if msg is None:  # gone from the stream: acknowledged internally
                d.untake_redelivery(seq, requeue=False)
                if (p := d.release(seq)) is not None:
                    self.store.update_acks(p[0], seq)
                continue
            return msg, delivery_count
        if self.max_ack_pending > 0 and len(self.delivery.pending) >= self.max_ack_pending:
            self._stall = "max_ack_pending"
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

    def _deliver(self, target: str, reply: str, seq: int, subject: str, hdr: bytes, data: bytes, delivery_count: int,
                 size: int) -> None:
        """Account one delivery and queue it; `_end_pass` sends the queue and settles the per-pass state."""
        self._pass_sent += 1
        if self._ack_none:
            self.delivery.delivered_unacked(seq)
        else:
            ts = self._pass_ns
            self.store.update_delivered(self.delivery.delivered(seq, ts), seq, delivery_count, ts)
            if delivery_count > 1 or not self._pass_wait:  # new deliveries in a pass share the first one's wait
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
