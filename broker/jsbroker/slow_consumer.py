"""nats-server 2.15.1's rules for a client that reads slower than it is sent to (server/client.go), sans-IO.

- max_pending: output waiting for the client's socket past `max_pending` makes it a slow consumer
  (queueOutbound): it gets nothing more, and is closed without an -ERR.
- write_deadline: a write the socket cannot take at once starts a batch; everything queued by then must
  reach the socket within `write_deadline` (flushOutbound sets the deadline per batch), else the client is
  a slow consumer and closed. A client already marked slow by max_pending is closed when its blocked batch
  ends; if that is by the deadline, it is counted a second time, as nats-server does.
- stalls: output past 3/4 of max_pending opens the client's stall gate; a publisher that delivers to it
  is held 2 ms per such message, at most 10 ms per read of its input (nats-server reads at most 64 KB at a
  time: jsbroker's larger reads get 10 ms per 64 KB), and goes on when the gate closes (the output drains)
  or the time is up. Publishers are slowed briefly, never held: their PINGs are answered meanwhile.
"""

from __future__ import annotations

STALL_PER_MESSAGE = 0.002  # stallClientMinDuration
STALL_PER_READ = 0.010  # stallTotalAllowed: per readLoop pass over at most READ_CHUNK bytes
READ_CHUNK = 65536  # maxBufSize: nats-server's largest read


def stall_gate(max_pending: int) -> int:
    """Output beyond this many bytes holds the publishers that deliver to it (nats-server: mp/4*3)."""
    return max_pending // 4 * 3


def producer_stall(messages: int, read_bytes: int) -> float:
    """Seconds a publisher is held after a read that delivered `messages` to clients past their gate."""
    chunks = max(1, -(-read_bytes // READ_CHUNK))
    return min(messages * STALL_PER_MESSAGE, chunks * STALL_PER_READ)



def go_seconds(seconds: float) -> str:
    """A deadline as Go's time.Duration prints it in nats-server's slow-consumer line: "10s", "1.5s", "500ms"."""
    return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}ms"
