"""`AccountBus`: the `InternalBus` of one account, so each account's JetStream lives in its own subject space.

nats-server gives every account with JetStream its own API, streams and consumers; here each gets a JetStream
service built on an `AccountBus`, which subscribes, publishes, delivers and watches interest in that account's
sublist only (the router does the work; this only names the sublist). A stream in account A sees A's
publishes, answers A's `$JS.API.>` and delivers to A's subscribers; what another account sees of it goes
through exports and imports (accounts.py), as in nats-server.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Protocol, Sequence

from .internal import BatchHandler, Delivery, InterestListener, InterestWatch, InternalHandler, InternalSubscription
from .sublist import Sublist, Subscription


class ServerIdentity(Protocol):
    """What a service reads of the server it runs in."""

    loop: asyncio.AbstractEventLoop
    server_id: str
    server_name: str
    max_payload: int


class Router(Protocol):
    """What the bus needs of router.py's `Router` (named here, so this module stays out of the core's circle)."""

    def insert(self, sub: Subscription, sublist: Sublist | None = None) -> None: ...

    def remove(self, sub: Subscription) -> None: ...

    def route(self, pub: None, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes,
              target: bytes | None = None, into: Sublist | None = None) -> bool: ...

    def deliver(self, target: bytes, msgs: Sequence[Delivery], sublist: Sublist | None = None) -> bool: ...

    def before_output(self, callback: Callable[[], None]) -> None: ...

    def wait_for_drain(self, subject: bytes, callback: Callable[[], None], sublist: Sublist | None = None) -> bool: ...

    def has_interest(self, subject: str, queue: str | None = None, sublist: Sublist | None = None) -> bool: ...

    def watch(self, subject: str, listener: InterestListener, queue: str | None = None,
              sublist: Sublist | None = None) -> InterestWatch: ...


Replies = Callable[[str, Sequence[Delivery]], "bool | None"]


class AccountBus:
    """`jsbroker.internal.InternalBus` over the router, within one account's sublist."""

    def __init__(self, server: ServerIdentity, router: Router, account_name: str, sublist: Sublist,
                 replies: Replies | None = None, shadows: Callable[[Subscription], None] | None = None) -> None:
        """`replies`: the account's service-import replies (`Account.deliver_reply`), which deliveries to an
        `_R_.` subject reach (a pull request made through an import); `shadows`: the account's stream imports
        (`Account.add_shadows`), so a stream on an imported subject stores what the exporter publishes."""
        self._server, self._router, self.account_name, self.sublist = server, router, account_name, sublist
        self._replies, self._shadows = replies, shadows

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._server.loop

    @property
    def server_id(self) -> str:
        return self._server.server_id

    @property
    def server_name(self) -> str:
        return self._server.server_name

    @property
    def max_payload(self) -> int:
        return self._server.max_payload

    def subscribe_internal(self, subject: str, handler: InternalHandler, queue: str | None = None) -> Subscription:
        sub = Subscription(None, subject, queue, b"0", handler)
        self._router.insert(sub, self.sublist)
        if self._shadows is not None:
            self._shadows(sub)
        return sub

    def subscribe_batched(self, subject: str, handler: BatchHandler) -> Subscription:
        sub = Subscription(None, subject, None, b"0", handler)
        sub.batch = []
        self._router.insert(sub, self.sublist)
        return sub

    def unsubscribe_internal(self, sub: InternalSubscription) -> None:
        assert isinstance(sub, Subscription)
        self._router.remove(sub)

    def publish(self, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> bool:
        return self._router.route(None, subject.encode(), reply.encode() if reply else None,
                                  len(hdr) if hdr else -1, hdr + payload + b"\r\n", None, self.sublist)

    def deliver(self, target: str, msgs: Sequence[Delivery]) -> bool:
        if self._replies is not None and target.startswith("_R_."):
            delivered = self._replies(target, msgs)
            if delivered is not None:
                return delivered
        return self._router.deliver(target.encode(), msgs, self.sublist)

    def before_output(self, callback: Callable[[], None]) -> None:
        self._router.before_output(callback)

    def wait_for_drain(self, subject: str, callback: Callable[[], None]) -> bool:
        return self._router.wait_for_drain(subject.encode(), callback, self.sublist)

    def has_interest(self, subject: str, queue: str | None = None) -> bool:
        return self._router.has_interest(subject, queue, self.sublist)

    def watch_interest(self, subject: str, listener: InterestListener, queue: str | None = None) -> InterestWatch:
        return self._router.watch(subject, listener, queue, self.sublist)

    def has_literal_interest(self, subject: str) -> bool:
        return self.sublist.has_literal(subject)
