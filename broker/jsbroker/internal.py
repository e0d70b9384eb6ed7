"""The contract between the core broker and the services built on it (JetStream).

The core (`server.py`, `connection.py`, `sublist.py`) implements `InternalBus`; `jetstream/` uses only
this Protocol, never the core modules, so data flows one way: connections -> subject index -> services.

Rules of the bus:
- Handlers run synchronously while the core routes a message (inside the publisher's read), so a
  JetStream publish is stored and acked before the next message of that connection is parsed. A handler
  must never block or await; long work is scheduled on the loop.
- `publish` may be called from a handler or from any callback on the loop; the core batches the output
  per connection and flushes it (once per read, or on the next loop turn when called from a timer).
- An internal subscription counts as a responder: a request it receives never gets a 503.
- `before_output(cb)` runs `cb` once, right before the core next writes any output to a connection
  (at the end of the current read, or on the next loop turn): a service writes what it buffered
  during the read (one write() per read) and only then publishes the acks that depend on it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence


@dataclass(frozen=True, slots=True)
class Origin:
    """Who published a message that reached an internal handler (None for internal publishes)."""

    client_id: int
    headers: bool  # the client negotiated headers (HMSG) support
    no_responders: bool = False  # it wants a 503 for a request nobody receives
    rtt_ns: int = 0  # its round-trip time (nanoseconds, as nats-server's headers give it)


# handler(subject, reply, hdr, payload, origin): hdr is the raw header block or b"".
InternalHandler = Callable[[str, "str | None", bytes, bytes, "Origin | None"], None]
# A message held for a batched handler: (subject, reply, hdr, payload, origin), as InternalHandler gets them.
InternalMsg = tuple[str, "str | None", bytes, bytes, "Origin | None"]
BatchHandler = Callable[[list[InternalMsg]], None]
# listener(has_interest): called when a literal subject gains its first or loses its last subscriber.
InterestListener = Callable[[bool], None]
# One JetStream delivery: (subject shown in the MSG line, reply subject, header block or b"", payload).
Delivery = tuple[str, str, bytes, bytes]


class InternalSubscription(Protocol):
    subject: str


class InterestWatch(Protocol):
    def cancel(self) -> None: ...


class InternalBus(Protocol):
    loop: asyncio.AbstractEventLoop
    server_id: str
    server_name: str
    max_payload: int  # the largest message a client may publish (a counter's stored total must fit it)
    account_name: str  # the account whose subject space the bus is (advisories name it)

    def subscribe_internal(
        self, subject: str, handler: InternalHandler, queue: str | None = None
    ) -> InternalSubscription:
        """Subscribe a Python callback to a subject (wildcards allowed)."""

    def subscribe_batched(self, subject: str, handler: BatchHandler) -> InternalSubscription:
        """Like `subscribe_internal`, for high-rate subjects (acks): the core holds the messages routed to
        this subscription and hands them over in order, as one list, before it routes any message to
        anyone else and at the end of the read; state a later message could observe is never stale."""

    def unsubscribe_internal(self, sub: InternalSubscription) -> None: ...

    def publish(self, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> bool:
        """Route a message exactly as a client PUB/HPUB would be routed (queue groups, HMSG vs MSG for
        clients without headers). Returns True when at least one subscriber received it."""

    def deliver(self, target: str, msgs: Sequence[Delivery]) -> bool:
        """Route messages, in order, to the subscribers of `target` while each MSG/HMSG line shows the
        message's own subject and reply (JetStream deliveries to a deliver subject or pull inbox carry
        the stored message's subject and an ack reply). One subject match for the whole batch.
        Returns True when at least one subscriber received them."""

    def before_output(self, callback: Callable[[], None]) -> None:
        """Run `callback` once before the next output reaches any connection (see the module rules)."""

    def wait_for_drain(self, subject: str, callback: Callable[[], None]) -> bool:
        """When a subscriber of this literal subject is backed up (its output above the high-water mark),
        call `callback` once it has drained (or gone) and return True: the internal producer should stop
        sending until then, as a client publisher would be paused. False when nobody is backed up."""

    def has_interest(self, subject: str, queue: str | None = None) -> bool:
        """Whether a publish to this literal subject would reach anyone (in `queue` when given)."""

    def has_literal_interest(self, subject: str) -> bool:
        """Whether a subscription names exactly this literal subject: nats-server's interest notifications
        (a snapshot waits for its receiver's own subscription; the client's wildcard reply subscription
        that also matches the deliver subject does not count)."""

    def watch_interest(self, subject: str, listener: InterestListener, queue: str | None = None) -> InterestWatch:
        """Call `listener` whenever interest in this literal subject (in `queue` when given) appears or
        disappears (push consumers deliver only while their deliver subject, in their deliver group, has
        interest)."""
