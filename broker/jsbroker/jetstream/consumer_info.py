"""CONSUMER.INFO of a consumer (`ConsumerInfo`): the info nats-server reports, from the stored floors (see
consumer.py) and the live delivery state."""

from __future__ import annotations

from typing import Any

from jsbroker.config import VERSION

from .consumer_base import ConsumerBase
from .requests import API_LEVEL
from .times import now_ns, rfc3339


class ConsumerInfo(ConsumerBase):
    """Reports a consumer (CONSUMER.INFO, LIST)."""

    def info(self, dynamic_metadata: bool = True) -> dict[str, Any]:
        """ConsumerInfo as nats-server reports it (without "type"); LIST leaves out the server's
        dynamic metadata (`_nats.level`, `_nats.ver`) as nats-server does."""
        self._settle_acks()
        num_pending = self._checked_pending()
        if self.waiting is not None:
            self.pulls.sweep(end_of_stream=False)
        delivered_consumer_seq, delivered_stream_seq, floor_consumer_seq, floor_stream_seq = self.store.floors()
        stored = self.store.has_state()  # else the live position, moved by passes that found nothing (`_at_end`)
        delivered: dict[str, Any] = {
            "consumer_seq": delivered_consumer_seq if stored else self.delivery.next_delivery_seq - 1,
            "stream_seq": delivered_stream_seq if stored else self.delivery.next_seq - 1,
        }
        if self.last_delivered_ns:
            delivered["last_active"] = rfc3339(self.last_delivered_ns)
        ack_floor: dict[str, Any] = {"consumer_seq": floor_consumer_seq, "stream_seq": floor_stream_seq}
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
