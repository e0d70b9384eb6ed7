"""A consumer's acks (`AckProcessing`): acks, naks, progress and terms as they arrive, runs of plain acks
applied together (or after the next delivery pass), their writes to the consumer store and the ack_sync
answers once those are durable, max_deliver, and the ack-wait timer that makes messages due again."""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

from jsbroker.store.base import StoreError

from . import ack, advisories
from .consumer_base import ConsumerBase
from .delivery import Dropped
from .times import now_ns

if TYPE_CHECKING:
    from jsbroker.internal import InternalMsg, Origin

log = logging.getLogger(__name__)


class AckProcessing(ConsumerBase):
    """Applies a consumer's acks and persists them."""

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
        pending, release, next_stream_seq = self.delivery.pending, self.delivery.release, below
        freed = self.max_ack_pending > 0 and len(pending) >= self.max_ack_pending
        acked: list[tuple[int, int]] = []
        offered: list[int] = []  # every valid ack, pending or not, for the stream (`_ack_single`)
        for subject in subjects:
            target = parse(subject)
            if target is None or not 0 < target[1] < next_stream_seq:
                continue
            stream_seq = target[1]
            offered.append(stream_seq)
            p = release(stream_seq)
            if p is not None:
                acked.append((p[0], stream_seq))
        if not offered:
            return
        self.last_acked_ns = now_ns()
        if acked:
            self.store.update_acks_many(acked)
        if self._interest_retention:
            for stream_seq in offered:
                self.stream.acked(stream_seq)
        if freed:
            self._kick()

    def _on_ack(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
        if self.closed:
            return
        delivery_count, stream_seq, delivery_seq = ack.parse_subject(subject) or (0, 0, 0)
        body = ack.parse_body(payload)
        answer = stream_seq != 0
        kind = body.kind
        if kind is ack.AckKind.ACK:
            answer = self._ack(stream_seq, delivery_seq, delivery_count) and answer
        elif kind is ack.AckKind.NEXT:
            self._ack(stream_seq, delivery_seq, delivery_count)
            if reply:
                self.pulls.request(reply, b"", body.next_request)
            answer = False
        elif kind is ack.AckKind.NAK:
            self._nak(stream_seq, delivery_seq, delivery_count, body.delay_ns)
        elif kind is ack.AckKind.PROGRESS:
            p = self.delivery.pending.get(stream_seq)
            if p is not None:
                p[1] = self.last_delivered_ns = now_ns()  # nats-server counts progress as delivery activity
                self.store.update_delivered(p[0], stream_seq, 1, p[1])
        elif kind is ack.AckKind.TERM:
            answer = self._ack(stream_seq, delivery_seq) and answer
            advisories.terminated(self.bus, self.stream.name, self.name, stream_seq, delivery_seq, delivery_count,
                                  body.reason)
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

    def _ack(self, stream_seq: int, delivery_seq: int, delivery_count: int = 0) -> bool:
        """Process an ack; returns whether nats-server would answer an ack_sync reply. `delivery_count`: the delivery
        count of the ack subject, given for the acks nats-server samples (`sample_freq`)."""
        if stream_seq == 0 or stream_seq >= self.delivery.next_seq:
            return False
        if self._ack_none:
            return self._interest_retention
        freed = self.max_ack_pending > 0 and len(self.delivery.pending) >= self.max_ack_pending
        if self._ack_all:
            if delivery_seq <= self.delivery.ack_floor_delivery_seq or stream_seq <= self.delivery.ack_floor_seq:
                return True
            self._ack_up_to(stream_seq, delivery_seq)
        else:
            if delivery_count and self._sample and stream_seq in self.delivery.pending and self._sampled():
                advisories.ack_metric(self.bus, self.stream.name, self.name, stream_seq, delivery_seq, delivery_count,
                                      now_ns() - self.delivery.pending[stream_seq][1])
            self._ack_single(stream_seq, delivery_seq)
        self.last_acked_ns = now_ns()
        if freed:
            self._kick()
        return True

    def _sampled(self) -> bool:
        """nats-server's draw: every ack at 100% or more, else when a number below 100 is <= the percentage."""
        return self._sample >= 100 or random.randrange(100) <= self._sample

    def _ack_single(self, stream_seq: int, delivery_seq: int) -> None:
        d = self.delivery
        redelivered = stream_seq in d.redelivered
        first = d.ack(stream_seq)
        if first is not None:
            self.store.update_acks(first, stream_seq)
        elif redelivered:
            self.store.update_acks(delivery_seq, stream_seq)  # clears the stored redelivery count
        # a no-op unless interest/workqueue retention; nats-server offers the acked message to the stream even
        # when it was not pending (a delivery from before a RESET: it goes if nobody needs it)
        self.stream.acked(stream_seq)

    def _ack_up_to(self, stream_seq: int, delivery_seq: int) -> None:
        """AckAll: everything up to `stream_seq` is acknowledged."""
        was_pending = stream_seq in self.delivery.pending
        acked = self.delivery.ack_up_to(stream_seq, delivery_seq)
        if was_pending:  # the store moves its floor only for a pending seq
            self.store.update_acks(delivery_seq, stream_seq, ack_all=True)
        for seq in acked if was_pending else [stream_seq, *acked]:  # the acked seq is offered even when not pending
            self.stream.acked(seq)  # a no-op unless interest/workqueue retention

    def _nak(self, stream_seq: int, delivery_seq: int, delivery_count: int, delay_ns: int | None) -> None:
        # a delayed NAK counts the delivery as made so that its ack wait runs out after the delay
        backdated = None if delay_ns is None else now_ns() - self.cfg.ack_wait + delay_ns
        p = self.delivery.nak(stream_seq, delivery_seq, backdated)
        if p is None:
            return
        advisories.nak(self.bus, self.stream.name, self.name, stream_seq, delivery_seq, delivery_count)
        if backdated is not None:
            self.store.update_delivered(p[0], stream_seq, delivery_count, p[1])
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
