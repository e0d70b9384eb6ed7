"""When to try a failed JetStream request again: a pure schedule (the caller passes the time).

Pauses start short and double up to `LONGEST`, each scattered by +-20 % so the tasks of one job that
lost the same server do not come back to it in step. Retrying ends `budget` seconds (the `retryTimeout`
option) after the first attempt began: a broker restart or failover takes seconds to a minute or two,
and a server that stays away longer is an outage to report, not to wait out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

FIRST = 0.2  # seconds: the first pause (a broker restarting on the same node is back within seconds)
LONGEST = 5.0  # seconds: the longest pause, so a server that is back is found within this


@dataclass
class Backoff:
    budget: float  # seconds from the first attempt's start: retryTimeout
    started: float  # monotonic time the first attempt began
    failures: int = 0
    jitter: random.Random = field(default_factory=random.Random)

    def failed(self, now: float) -> float | None:
        """The pause before the next attempt after a failure at `now`; None when the budget is spent."""
        self.failures += 1
        left = self.started + self.budget - now
        if left <= 0:
            return None
        pause = min(FIRST * 2 ** (self.failures - 1), LONGEST) * self.jitter.uniform(0.8, 1.2)
        return min(pause, left)

    def elapsed(self, now: float) -> float:
        return now - self.started
