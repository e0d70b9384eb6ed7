"""CONSUMER.RESET of a consumer (`ConsumerReset`): delivery moved to a sequence its deliver policy allows,
the state stored again, and on an interest stream the messages below the new floor offered for removal."""

from __future__ import annotations

from . import errors
from .consumer_base import ConsumerBase


class ConsumerReset(ConsumerBase):
    """Moves a consumer's delivery (CONSUMER.RESET)."""

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
