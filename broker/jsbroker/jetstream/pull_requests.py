"""A pull consumer's waiting MSG.NEXT requests, the I/O around `pull.py`'s decisions: taking a request in or
answering it at once (400, 408, 409, 404, 100 heartbeats...), the timer of their expiries and heartbeats,
sweeping expired or abandoned ones, and choosing the request each delivery goes to (with `priority.py`)."""

from __future__ import annotations

from time import monotonic_ns as mono
from typing import TYPE_CHECKING, Callable, Protocol

from . import headers, priority, pull
from .consumer_config import ConsumerConfig
from .delivery import DeliveryState
from .pins import Pins
from .requests import api_level_supported
from .timer import Timer

if TYPE_CHECKING:
    from jsbroker.internal import InternalBus

Publish = Callable[[str, "str | None", bytes, bytes], None]


class RequestedConsumer(Protocol):
    """What the pull requests use of their consumer (consumer.py's `Consumer`): its state, read live."""

    closed: bool
    bus: InternalBus
    cfg: ConsumerConfig
    delivery: DeliveryState
    waiting: pull.WaitQueue | None
    priority: priority.Priority
    pins: Pins


class PullRequests:
    """One consumer's pull requests (`consumer.waiting` holds the queue: None for a push consumer).
    `publish` sends in order with the consumer's queued deliveries, `kick` starts a delivery pass."""

    def __init__(self, consumer: RequestedConsumer, publish: Publish, kick: Callable[[], None]) -> None:
        self.consumer = consumer
        self._publish = publish
        self._kick = kick
        self._timer = Timer(consumer.bus.loop, self._on_timer)

    def request(self, reply: str, hdr: bytes, payload: bytes) -> None:
        """Handle one MSG.NEXT (or the request part of `+NXT`)."""
        c = self.consumer
        if c.closed:
            return
        send = self._send_status
        q = c.waiting
        if q is None:
            return send(reply, pull.PUSH_BASED)
        if not api_level_supported(hdr):
            return send(reply, headers.API_LEVEL_TOO_HIGH)
        try:
            req = pull.parse_request(payload)
        except pull.BadRequest as e:
            return send(reply, pull.status(400, f"Bad Request - {e}"))
        cfg = c.cfg
        if (refused := pull.limit_refusal(req, cfg.max_batch, cfg.max_expires, cfg.max_bytes)) is not None:
            return send(reply, refused)
        now = mono()
        if (refused := c.priority.refusal(req.ask, now)) is not None:
            return send(reply, refused)
        if q.full:
            self.sweep(end_of_stream=False)
        if req.no_wait:
            available = max(c.delivery.num_pending, 0) + len(c.delivery.redeliver_queue)
            if available == 0 and not req.expires:
                q.last_activity = now
                return send(reply, pull.NO_MESSAGES)
            if available:
                self.sweep(end_of_stream=False)
                if available < q.owed():
                    q.last_activity = now
                    return send(reply, pull.REQUESTS_PENDING)
        if q.full:
            if not req.heartbeat:
                send(reply, pull.MAX_WAITING)
            return None
        expires_at = now + req.expires if req.expires > 0 else 0
        q.add(pull.Waiting(reply, req.batch, req.max_bytes, expires_at, req.no_wait, req.heartbeat,
                           now + req.heartbeat if req.heartbeat else 0, ask=req.ask))
        q.last_activity = now
        for t in (expires_at, now + req.heartbeat if req.heartbeat else 0):
            if t:
                self._timer.arm(t - now)
        self._kick()
        return None

    def _send_status(self, reply: str, hdr: bytes) -> None:
        self.consumer.bus.publish(reply, None, hdr, b"")

    def sweep(self, end_of_stream: bool) -> None:
        """Answer the requests that are done (expired, abandoned, or no_wait at the stream's end) and send
        the heartbeats that are due."""
        c = self.consumer
        q = c.waiting
        if q is None or not q:
            return
        now = mono()
        bus = c.bus
        out, due, deadline = q.sweep(now, end_of_stream, bus.has_interest)
        for reply, hdr in out:
            bus.publish(reply, None, hdr, b"")
        if due:
            d = c.delivery
            beat = pull.idle_heartbeat(d.next_delivery_seq - 1, d.next_seq - 1)
            for w in due:
                bus.publish(w.reply, None, beat, b"")
        if deadline:
            self._timer.arm(deadline - now)

    def _on_timer(self) -> None:
        """The earliest expiry or heartbeat is due. nats-server's wake-up sweeps as at the stream's end
        (processWaiting(true)) even when its last pass stopped at max_ack_pending: a no_wait request that
        got part of its batch ends here with 404, rather than waiting for acks to free more messages (a
        client that fetched sends its next request to the same inbox, where they would land)."""
        c = self.consumer
        if not c.closed and c.waiting is not None:
            self.sweep(end_of_stream=True)

    def stop(self) -> None:
        """The consumer stops: waiting requests get `409 Consumer Deleted`."""
        self._timer.cancel()
        c = self.consumer
        for w in c.waiting.clear() if c.waiting is not None else []:
            c.bus.publish(w.reply, None, pull.CONSUMER_DELETED, b"")

    def release_for_shutdown(self, tell: bool) -> None:
        """The server stops: waiting requests are dropped, and told (`tell`) `409 Server Shutdown` with what
        they were still owed, as nats-server tells them before it closes its clients on SIGTERM (in lame
        duck mode it tells them nothing)."""
        c = self.consumer
        for w in c.waiting.clear() if c.waiting is not None else []:
            if tell:
                c.bus.publish(w.reply, None, pull.server_shutdown(w.n, w.b), b"")

    def next(self, subject: str, reply: str, hdr: bytes, data: bytes, alive: set[str], served: pull.Waiting | None,
             now: int, now_ns: int) -> pull.Waiting | None:
        """The request the next delivery goes to (round-robin), dropping expired or abandoned ones; a
        request served just before in this pass (`served`) needs no expiry or interest check again; `now`,
        `now_ns` are the pass's clocks. `alive` holds the replies found listening in this pass."""
        c = self.consumer
        q = c.waiting
        assert q is not None
        w = q.peek()
        if w is not None and w is served and not w.b and priority.Priority.runs(w.ask):
            q.take(w)
            return w
        prio = c.priority
        choose = prio.chooses
        cycled = 0
        while (w := q.peek()) is not None:
            if w.expires_at and now >= w.expires_at:
                self._publish(w.reply, None, pull.request_timeout(w.n, w.b), b"")
                q.drop_head()
                continue
            pinned_now = False
            if choose:
                # num_pending + 1: this message was taken off the count
                choice = prio.choose(w.ask, c.delivery.num_pending + 1, len(c.delivery.pending))
                if choice is priority.Choice.SKIP:
                    q.cycle()
                    cycled += 1
                    if cycled >= len(q):
                        return None
                    continue
                if choice is priority.Choice.WRONG_PIN:
                    self._publish(w.reply, None, priority.wrong_pin(w.n, w.b), b"")
                    q.drop_head()
                    continue
                if choice is priority.Choice.PIN and w.ask is not None:
                    c.pins.pin(w.ask, now, now_ns)
                    pinned_now = True
            if w.b > 0:
                size = len(subject) + len(reply) + len(hdr) + len(data)
                if size <= w.b:
                    w.b -= size
                    if w.b == 0:
                        w.n = 1
                else:
                    self._publish(w.reply, None, pull.size_exceeds(w.n, w.b), b"")
                    if pinned_now:  # the pin just given goes again, without an advisory (as nats-server)
                        prio.unassign()
                    q.drop_head()
                    continue
            if w.reply in alive or c.bus.has_interest(w.reply):
                alive.add(w.reply)
                q.take(w)
                return w
            q.drop_head()
        return None
