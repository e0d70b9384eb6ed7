"""The pin of a consumer's priority groups (ADR-42), the I/O around `priority.py`'s decisions: the pin's
TTL timer and the pinned / unpinned advisories."""

from __future__ import annotations

from time import monotonic_ns as mono
from typing import TYPE_CHECKING, Callable, Protocol

from . import advisories, priority
from .timer import Timer

if TYPE_CHECKING:
    from jsbroker.internal import InternalBus


class AdvisedStream(Protocol):
    """The stream a pin advisory names."""

    name: str

    @property
    def domain(self) -> str | None: ...


class PinnedConsumer(Protocol):
    """What the pins use of their consumer (consumer.py's `Consumer`)."""

    name: str
    closed: bool
    bus: InternalBus
    priority: priority.Priority

    @property
    def stream(self) -> AdvisedStream: ...


class Pins:
    """Gives and takes back one consumer's pin (`consumer.priority` holds it)."""

    def __init__(self, consumer: PinnedConsumer, kick: Callable[[], None]) -> None:
        self.consumer = consumer
        self._kick = kick  # a delivery pass: the next request of the group may take the pin
        self._timer = Timer(consumer.bus.loop, self._on_timer)

    def _advise_unpinned(self, group: str, reason: str) -> None:
        c = self.consumer
        advisories.unpinned(c.bus, c.stream.name, c.name, c.stream.domain, group, reason)

    def pin(self, ask: priority.Ask, now: int, now_ns: int) -> None:
        """Pin the client of `ask` (a delivery pass's clocks: `now` monotonic, `now_ns` wall)."""
        c = self.consumer
        c.priority.assign(ask, advisories.new_id(), now, now_ns)
        self._timer.arm(c.priority.ttl, earliest=False)
        advisories.pinned(c.bus, c.stream.name, c.name, c.stream.domain, ask.group, c.priority.pin)

    def _on_timer(self) -> None:
        """The pin's TTL: a request with the pin id renews it, so the deadline may have moved on."""
        c = self.consumer
        if c.closed or not c.priority.pin:
            return
        now = mono()
        if (group := c.priority.expired(now)) is not None:
            self._advise_unpinned(group, "timeout")
            self._kick()
        else:
            self._timer.arm(c.priority.deadline - now, earliest=False)

    def unpin(self, group: str) -> None:
        """CONSUMER.UNPIN of a group of this consumer: nobody is pinned (an advisory says so even when nobody
        was, as nats-server's does); the next request of the group gets the pin."""
        self.consumer.priority.unassign()
        self._timer.cancel()
        self._advise_unpinned(group, "admin")
        self._kick()

    def stop(self) -> None:
        self._timer.cancel()
        self.consumer.priority.unassign()  # a stopped consumer pins nobody (nats-server keeps no pin across a restart)
