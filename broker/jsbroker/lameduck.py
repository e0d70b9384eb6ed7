"""Lame duck mode (SIGUSR2, `jsbroker --signal ldm=<pid>`), as nats-server's `lameDuckMode`.

The server stops accepting clients and stops JetStream, tells every client with an async INFO carrying
`"ldm": true`, waits the grace period, then closes its clients one by one spread over the rest of the
lame duck duration (at most a second apart), and shuts down. This module holds the schedule (pure);
the broker does the I/O.
"""

from __future__ import annotations

import random

MAX_PAUSE = 1.0


def pauses(clients: int, duration: float, grace: float, rand: random.Random | None = None) -> list[float]:
    """Seconds to wait after each close but the last: a random share of (duration - grace) / clients, at
    least half of it and never more than a second (nats-server's spacing)."""
    if clients <= 1:
        return []
    spread = duration - grace if duration > grace else 1.0
    step = min(spread / clients, MAX_PAUSE)
    draw = (rand or random).uniform
    return [max(draw(0, step), step / 2) for _ in range(clients - 1)]
