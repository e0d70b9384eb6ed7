"""One re-armable loop timer: a consumer keeps one per concern (ack wait, pull requests, heartbeats, the pin,
...), a stream one for expiry, one for schedules and one for atomic batches; never one per message."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable


@dataclass(slots=True)
class Timer:
    """One loop timer handle that can be re-armed; keeps the earliest deadline requested."""

    loop: asyncio.AbstractEventLoop
    fire: Callable[[], None]
    handle: asyncio.TimerHandle | None = None
    at: float = 0.0

    @property
    def armed(self) -> bool:
        return self.handle is not None

    def arm(self, delay_ns: int, earliest: bool = True) -> None:
        when = self.loop.time() + max(delay_ns, 0) / 1e9
        if self.handle is not None:
            if earliest and self.at <= when:
                return
            self.handle.cancel()
        self.at = when
        self.handle = self.loop.call_at(when, self._fired)

    def _fired(self) -> None:
        self.handle = None
        self.fire()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
