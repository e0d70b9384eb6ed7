"""A consumer's timers beside delivery (`ConsumerTimers`): a push consumer's interest in its deliver subject,
idle heartbeats and flow control requests and responses; the inactive threshold (push and pull) and the
end of a pause."""

from __future__ import annotations

import os
from time import monotonic_ns as mono
from typing import TYPE_CHECKING

from . import headers, pull, push
from .consumer_base import ConsumerBase
from .delivery import ACK_WAIT_SLACK
from .times import now_ns

if TYPE_CHECKING:
    from jsbroker.internal import Origin


class ConsumerTimers(ConsumerBase):
    """Interest, heartbeats, flow control, inactivity and pause of a consumer."""

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
            stream_seq = _header_int(hdr, headers.LAST_STREAM)
            if stream_seq > 0:
                self._ack(stream_seq, max(_header_int(hdr, headers.LAST_CONSUMER), 0))
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
            self._on_inactive()

    def _arm_pause(self) -> None:
        until = self.cfg.pause_until_ns if self.cfg.pause_until else 0
        now = now_ns()
        if until > now:
            self._t_pause.arm(until - now + ACK_WAIT_SLACK, earliest=False)
        else:
            self._t_pause.cancel()


def _header_int(hdr: bytes, key: str) -> int:
    text = headers.get(hdr, key)
    try:
        return int(text) if text else 0
    except ValueError:
        return 0
