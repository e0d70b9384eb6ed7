"""Push delivery (pure): flow control and pacing (replay original, rate limit) of a push consumer, as
nats-server 2.15.1's `consumer.go` decides them. `consumer.py` asks and does the I/O (the flow control
request, the hold timer); the push subject's interest and the idle heartbeat are timers it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

from .rate import Limiter

PREFIX = "$JS.FC."  # flow control requests' reply subjects: $JS.FC.<stream>.<consumer>.<id>
WINDOW_START = 2 * 1024 * 1024  # flow control starts with this window...
WINDOW_LIMIT = 32 * 1024 * 1024  # ...and doubles on each response up to this
REQUEST = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
REPLAY_MIN_GAP = 1_000_000  # replay original: a gap this short or shorter (ns) is not waited for


@dataclass(slots=True)
class FlowControl:
    """Bytes delivered against a window that grows with each flow control response."""

    window: int = WINDOW_START  # maxpb
    pending_bytes: int = 0  # pbytes: delivered since the responses so far
    reply: str = ""  # fcid: the reply subject of the request awaiting its response ("": none)
    size: int = 0  # fcsz: the pending bytes that request covers

    @property
    def blocked(self) -> bool:
        """The window is full: delivery waits for a response."""
        return self.pending_bytes > self.window

    def delivered(self, size: int, ack_pending_full: bool) -> bool:
        """Count a delivery of `size` bytes; whether a flow control request is due now (half the window
        used, or, with `ack_pending_full`, the acks a flow_control ack policy waits for)."""
        self.pending_bytes += size
        return not self.reply and (self.pending_bytes > self.window // 2 or ack_pending_full)

    def requested(self, reply: str) -> None:
        self.reply, self.size = reply, self.pending_bytes

    def answered(self, subject: str) -> bool:
        """A response on `subject`: the window doubles and what the request covered is freed. False when it
        answers no request awaiting one."""
        if subject != self.reply:
            return False
        self.window = min(self.window * 2, WINDOW_LIMIT)
        self.pending_bytes = max(self.pending_bytes - self.size, 0)
        self.reply, self.size = "", 0
        return True


@dataclass(slots=True)
class Pacing:
    """replay_policy original (the stored gaps between messages) and rate_limit_bps: how long the next
    message waits. State carries over config updates (`limiter` is replaced by one)."""

    replay_original: bool
    limiter: Limiter | None
    hold_until: int = 0  # mono ns until which delivery holds (0: none)
    replay_ts: int = 0  # stored ts of the last replayed message
    rate_held: bool = False  # the held message has its rate reservation already

    def delay(self, ts: int, size: int, now: int) -> int:
        """The ns to hold a message stored at `ts` of `size` bytes (as nats-server counts them) before it
        goes, 0: now. A held message is asked again when its time comes."""
        delay = 0
        if self.replay_original and self.replay_ts:
            delay = ts - self.replay_ts
            if delay <= REPLAY_MIN_GAP or self.hold_until:
                delay = 0
        if self.limiter is not None and not delay:
            if self.rate_held:  # reserved when it was held: it goes now
                self.rate_held = False
            else:
                delay = self.limiter.reserve(size, now)
                self.rate_held = delay > 0
        self.hold_until = 0
        if delay > 0:
            self.hold_until = now + delay
            if self.replay_original:
                self.replay_ts = ts
            return delay
        self.replay_ts = ts
        return 0
