"""A push consumer's `rate_limit_bps`: a token bucket as nats-server's (Go's `rate.Limiter`).

nats-server turns the bits per second into bytes per second, lets a burst of one maximum message (the
stream's `max_msg_size`, else the server's max payload) through at once, starts with the bucket full,
and reserves each delivery's size: a reservation past the tokens left makes that delivery wait until
they have refilled. Pure: the caller passes the monotonic time and arms its own timer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Limiter:
    bytes_per_second: float
    burst: int
    tokens: float = -1.0  # -1: full (not used yet)
    at: int = 0  # mono ns of the last reservation

    def reserve(self, size: int, now: int) -> int:
        """Take `size` bytes' tokens; the ns to wait before sending them (0: now)."""
        if self.tokens < 0 and self.at == 0:
            self.tokens = float(self.burst)
        else:
            self.tokens = min(self.burst, self.tokens + (now - self.at) / 1e9 * self.bytes_per_second)
        self.at = now
        self.tokens -= size
        return 0 if self.tokens >= 0 else int(-self.tokens / self.bytes_per_second * 1e9)


def limiter(bps: int, max_msg_size: int, max_payload: int) -> Limiter | None:
    """The limiter for a consumer config (None without a rate limit)."""
    if bps <= 0:
        return None
    return Limiter(bps / 8, max_msg_size if max_msg_size > 0 else max_payload)
