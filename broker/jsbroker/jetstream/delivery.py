"""A consumer's delivery and ack state (pure, no I/O): where delivery stands, what awaits an ack, what is
due for redelivery and when, and the ack floor, as nats-server 2.15.1's `consumer.go` keeps them.

Inputs in, decisions out: `consumer.py` feeds it deliveries, acks, naks and the clock, and does the
I/O the answers call for (store writes, advisories, timers). Names as a newcomer reads them; the Go
field each one mirrors is in its comment, for reading consumer.go side by side.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

from jsbroker.store.base import ConsumerState, next_pending

ACK_WAIT_SLACK = 1_000_000  # 1 ms, as nats-server's ackWaitDelay


@dataclass(slots=True)
class Dropped:
    """A message that reached max_deliver after `redeliveries`; `entry` its ack-pending entry
    ([consumer seq, delivered ts]) when it still had one (it leaves ack-pending)."""

    seq: int
    redeliveries: int
    entry: list[int] | None


@dataclass(slots=True)
class Expiry:
    """What an ack-wait check found: messages due for redelivery (queued already), those dropped at
    max_deliver, and when the next check is due (ns from now, while anything is pending)."""

    due: list[int]
    dropped: list[Dropped]
    next_in: int


@dataclass(slots=True)
class DeliveryState:
    """Where delivery stands. Both sequences only grow, except a RESET."""

    next_seq: int = 1  # sseq: the next stream sequence to look at
    next_delivery_seq: int = 1  # dseq: the consumer sequence the next delivery gets
    ack_floor_delivery_seq: int = 0  # adflr: the ack floor, as a consumer sequence...
    ack_floor_seq: int = 0  # asflr: ...and as a stream sequence (ack checks and RESET)
    # pending: {stream seq: [consumer seq of its first delivery, delivered ts]} awaiting an ack
    pending: dict[int, list[int]] = field(default_factory=dict)
    redelivered: dict[int, int] = field(default_factory=dict)  # rdc: {stream seq: redeliveries so far}
    redeliver_queue: deque[int] = field(default_factory=deque)  # rdq: stream seqs to redeliver next
    num_pending: int = 0  # npc: new messages for the filters from `next_seq` on, a running count
    num_pending_through: int = 0  # npf: the stream sequence that count is valid through
    last_per_subject: deque[int] | None = None  # lss: last-per-subject seqs still to deliver first...
    last_per_subject_end: int = 0  # ...then delivery resumes after this sequence

    # ---- positions ---------------------------------------------------------------------------------

    def start_at(self, seq: int) -> None:
        """A new consumer (or a RESET) delivers from `seq`: nothing delivered, everything below acked."""
        self.next_seq, self.next_delivery_seq = seq, 1
        self.ack_floor_delivery_seq, self.ack_floor_seq = 0, seq - 1

    def reset_recounts(self, seq: int, ack_all: bool) -> bool:
        """Whether a RESET to `seq` recounts num_pending (nats-server's resetLocalStartingSeq): only when it
        moves the start or drops pending deliveries; back to the ack floor an ack-all consumer adds its
        pending ones to the running count instead. Otherwise the running count stays (after a restart a
        last_per_subject count is one per subject, before it every message published since the creation)."""
        recount = self.next_seq != seq or bool(self.pending)
        if recount and ack_all and seq == self.ack_floor_seq + 1:
            self.num_pending += len(self.pending)
            return False
        return recount

    def reset(self, seq: int) -> None:
        """CONSUMER.RESET to `seq`: every pending and redelivery is forgotten."""
        self.pending.clear()
        self.redelivered.clear()
        self.redeliver_queue.clear()
        self.last_per_subject = None
        self.start_at(seq)

    def restore(self, state: ConsumerState, last_seq: int) -> bool:
        """Resume from the stored state (`last_seq`: the stream's last sequence now). Returns whether the
        start moved back to the stream's end (a start past the end of a stream that has messages, with
        nothing pending, comes back at the end as nats-server's restart does; an empty stream keeps it).
        The start stays as stored even below the stream's first message (as nats-server's applyState):
        delivery skips what is gone."""
        self.next_delivery_seq = state.delivered_consumer_seq + 1
        self.next_seq = state.delivered_stream_seq + 1
        self.ack_floor_delivery_seq, self.ack_floor_seq = state.ack_floor_consumer_seq, state.ack_floor_stream_seq
        moved = bool(last_seq) and self.next_seq > last_seq + 1 and not state.pending
        if moved:
            self.next_seq, self.ack_floor_seq = last_seq + 1, min(self.ack_floor_seq, last_seq)
        self.pending = {s: [d, ts] for s, (d, ts) in state.pending.items() if s > self.ack_floor_seq}
        # the store counts deliveries, this counts redeliveries
        self.redelivered = {s: max(n - 1, 0) for s, n in state.redelivered.items() if n > 1}
        return moved

    def stored(self) -> ConsumerState:
        """The whole state as the consumer store keeps it."""
        return ConsumerState(
            self.next_delivery_seq - 1, self.next_seq - 1, self.ack_floor_delivery_seq, self.ack_floor_seq,
            {s: (d, ts) for s, (d, ts) in self.pending.items()}, {s: n + 1 for s, n in self.redelivered.items()},
        )

    def purge(self, start: int, gone: Callable[[int], bool] | None) -> list[tuple[int, int]]:
        """nats-server's `consumer.purge`: delivery moves on to `start` at least; pending messages below it,
        and those `gone` says left the stream (a purge narrower than this consumer), count as acked.
        Returns those as (consumer seq, stream seq), in stream order."""
        if self.next_seq < start:  # a last_per_subject skip list stays (the consumer's `_next_msg`)
            self.next_seq = start
        acked: list[tuple[int, int]] = []
        if self.ack_floor_seq < start:
            self.ack_floor_seq = start - 1
            for seq, p in sorted(self.pending.items()):
                if seq <= self.ack_floor_seq or (gone is not None and gone(seq)):
                    del self.pending[seq]
                    self.redelivered.pop(seq, None)
                    acked.append((p[0], seq))
                    if p[0] > self.ack_floor_delivery_seq:
                        self.ack_floor_delivery_seq = p[0]
                        self.next_delivery_seq = max(self.next_delivery_seq, p[0])
        if not self.pending:
            self.redelivered.clear()
            self.caught_up()
        self.redeliver_queue = deque(s for s in self.redeliver_queue if s >= self.next_seq)
        return acked

    def caught_up(self) -> None:
        """Nothing pending: the ack floor is everything delivered."""
        self.ack_floor_delivery_seq, self.ack_floor_seq = self.next_delivery_seq - 1, self.next_seq - 1

    def needs(self, seq: int, every_delivery: bool) -> bool:
        """Whether `seq` still waits for this consumer (interest retention; nats-server's needAck): above the
        floor and not acknowledged (`every_delivery`: ack none or all, where anything above the floor
        counts), or with a redelivery count (one that reached max_deliver stays, even below the floor)."""
        if seq > self.ack_floor_seq and (every_delivery or seq >= self.next_seq or seq in self.pending):
            return True
        return seq in self.redelivered

    # ---- deliveries and acks -----------------------------------------------------------------------

    def delivered(self, seq: int, ts: int) -> int:
        """A delivery of `seq` that awaits an ack (a redelivery keeps its first consumer seq); returns the
        consumer seq this delivery carries."""
        delivery_seq = self.next_delivery_seq
        self.next_delivery_seq = delivery_seq + 1
        p = self.pending.get(seq)
        if p is None:
            self.pending[seq] = [delivery_seq, ts]
        else:
            p[1] = ts
        return delivery_seq

    def delivered_unacked(self, seq: int) -> int:
        """A delivery that needs no ack (ack none): the floor moves with it. Returns its consumer seq."""
        delivery_seq = self.next_delivery_seq
        self.next_delivery_seq = delivery_seq + 1
        self.ack_floor_delivery_seq, self.ack_floor_seq = delivery_seq, seq
        return delivery_seq

    def move_ack_floor(self, delivery_seq: int, seq: int) -> None:
        """`seq` (delivered as `delivery_seq`) left ack-pending: the floor moves when it was the oldest."""
        if not self.pending:
            self.caught_up()
        elif delivery_seq == self.ack_floor_delivery_seq + 1:
            self.ack_floor_delivery_seq, self.ack_floor_seq = delivery_seq, seq
            nxt = next_pending(self.pending, seq, self.next_seq)
            if nxt:
                self.ack_floor_delivery_seq, self.ack_floor_seq = self.pending[nxt][0] - 1, nxt - 1

    def release(self, seq: int) -> list[int] | None:
        """`seq` leaves ack-pending (acked, gone, or dropped): its entry when it was pending."""
        p = self.pending.pop(seq, None)
        if p is not None:
            self.move_ack_floor(p[0], seq)
        return p

    def ack(self, seq: int) -> int | None:
        """An ack of one message: returns the consumer seq of its first delivery when it was pending."""
        p = self.release(seq)
        if self.redelivered:
            self.redelivered.pop(seq, None)
        if self.redeliver_queue and seq in self.redeliver_queue:
            self.redeliver_queue.remove(seq)
        return None if p is None else p[0]

    def ack_up_to(self, seq: int, delivery_seq: int) -> list[int]:
        """AckAll: everything up to `seq` is acknowledged. Returns the pending seqs it acked."""
        self.ack_floor_delivery_seq, self.ack_floor_seq = delivery_seq, seq
        acked = [s for s in self.pending if s <= seq]
        for s in acked:
            del self.pending[s]
        for s in [s for s in self.redelivered if s <= seq]:
            del self.redelivered[s]
        if acked:
            self.redeliver_queue = deque(s for s in self.redeliver_queue if s > seq)
        return acked

    def drop(self, seq: int) -> Dropped:
        """A message reached max_deliver: it leaves ack-pending without moving the reported floor."""
        p = self.release(seq)
        return Dropped(seq, self.redelivered.get(seq, 0), p)

    def take_redelivery(self, max_deliver: int) -> tuple[int, int] | Dropped:
        """The next queued redelivery (the queue must not be empty): (seq, its delivery count), or what
        was dropped because it would pass `max_deliver` (0: no limit)."""
        seq = self.redeliver_queue.popleft()
        n = self.redelivered.get(seq, 0) + 1
        self.redelivered[seq] = n
        if max_deliver and n + 1 > max_deliver:
            return self.drop(seq)
        return seq, n + 1

    def untake_redelivery(self, seq: int, requeue: bool) -> None:
        """A redelivery taken that did not go: its count goes back, and with `requeue` it is first in the
        queue again (False: the message is gone)."""
        self.redelivered[seq] -= 1
        if requeue:
            self.redeliver_queue.appendleft(seq)

    def position(self) -> tuple[int, int, int | None]:
        """Where new deliveries stand, for `put_back`."""
        return self.next_seq, self.num_pending, self.last_per_subject[0] if self.last_per_subject else None

    def put_back(self, seq: int, delivery_count: int, saved: tuple[int, int, int | None]) -> None:
        """A message taken (delivery count `delivery_count`) that could not be delivered now: a new one puts the
        position back as `position` saved it, a redelivery goes back to the head of its queue."""
        if delivery_count > 1:
            self.untake_redelivery(seq, requeue=True)
            return
        self.next_seq, self.num_pending, lss_head = saved
        lss = self.last_per_subject
        if lss_head is not None and (not lss or lss[0] != lss_head):
            if lss is None:
                self.last_per_subject = lss = deque()
            lss.appendleft(lss_head)

    def nak(self, seq: int, delivery_seq: int, backdated: int | None) -> list[int] | None:
        """A NAK of `seq` delivered as `delivery_seq`: queued for redelivery now, or with `backdated` (a delayed
        NAK) its delivery counts as made at that time instead. Returns its pending entry, None when the
        NAK does not count."""
        if delivery_seq <= self.ack_floor_delivery_seq or delivery_seq > self.next_delivery_seq:
            return None
        p = self.pending.get(seq)
        if p is None:
            return None
        queued = seq in self.redeliver_queue
        if backdated is not None:
            if queued:
                self.redeliver_queue.remove(seq)
            p[1] = backdated
        elif not queued:
            self.redeliver_queue.append(seq)
        return p

    # ---- redelivery --------------------------------------------------------------------------------

    def ack_wait_for(self, seq: int, ack_wait: int, backoff: Sequence[int]) -> int:
        """How long a delivery of `seq` waits for its ack before it is due again."""
        if backoff:
            return backoff[min(self.redelivered.get(seq, 0), len(backoff) - 1)] + ACK_WAIT_SLACK
        return ack_wait + ACK_WAIT_SLACK

    def expire(self, now: int, first_seq: int, ack_wait: int, backoff: Sequence[int], max_deliver: int) -> Expiry:
        """The ack-wait check: pending messages gone from the stream (below `first_seq`) or under the floor
        are forgotten; those whose wait passed join the redelivery queue in sequence order, or are dropped
        when they reached `max_deliver` (0: no limit). A redelivery's wait counts from the oldest due one."""
        nxt = backoff[-1] if backoff else ack_wait + ACK_WAIT_SLACK
        due: list[int] = []
        dropped: list[Dropped] = []
        for seq, (_, ts) in list(self.pending.items()):
            if seq < first_seq or seq <= self.ack_floor_seq:
                del self.pending[seq]
                self.redelivered.pop(seq, None)
                continue
            deadline = ack_wait
            if backoff:
                i = self.redelivered.get(seq, 0)
                deadline = backoff[min(i, len(backoff) - 1)]
                nxt = min(nxt, backoff[min(i + 1, len(backoff) - 1)])
            elapsed = now - ts
            if elapsed < deadline:
                nxt = min(nxt, deadline - elapsed)
            elif seq not in self.redeliver_queue and not self._at_max_deliver(seq, max_deliver, dropped):
                due.append(seq)
        if due:
            due.sort()
            self.redeliver_queue.extend(due)
            off = now - self.pending[due[0]][1]
            for seq in due:
                self.pending[seq][1] += off
        if not self.pending:
            self.redeliver_queue.clear()
            self.caught_up()
        return Expiry(due, dropped, nxt)

    def _at_max_deliver(self, seq: int, max_deliver: int, dropped: list[Dropped]) -> bool:
        if not max_deliver:
            return False
        # nats-server's deliveryCount: the redelivery count, at least 1
        delivery_count = self.redelivered.get(seq, 0) or 1
        if delivery_count < max_deliver:
            return False
        self.redelivered[seq] = delivery_count
        dropped.append(self.drop(seq))
        return True
