"""Priority groups of a pull consumer (pure, ADR-42): which queued pull request may take the next message
under `priority_policy` `overflow`, `pinned_client` or `prioritized`, the pin and its TTL, and the pull
request checks nats-server 2.15.1 makes (`consumer.go processNextMsgRequest`, `nextWaiting`,
`setPinnedTimer`, `insertAtPosition`).

Inputs in, decisions out: times are `time.monotonic_ns()` / wall-clock ns values passed in, new pin ids
are given by the caller; the consumer owns the TTL timer, the advisories and the status messages.
The pin is one per consumer, not per group (as nats-server's `currentPinId`), and lives in memory only:
after a restart no client is pinned.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Sequence

from .times import ZERO_TIME, rfc3339

PIN_ID = "Nats-Pin-Id"
LOWEST = 2**31 - 1  # the rank of a request without a priority group (a plain-number body)


@dataclass(slots=True)
class Ask:
    """The priority fields of one pull request (nats-server's PriorityGroup; None for a non-JSON body)."""

    group: str = ""
    min_pending: int = 0
    min_ack_pending: int = 0
    pin_id: str = ""  # the request's "id"
    priority: int = 0


class Choice(enum.Enum):
    SERVE = "serve"  # deliver to this request
    PIN = "pin"  # pin this request's client (a new id), then deliver to it
    SKIP = "skip"  # not eligible now: move it to the back of the queue
    WRONG_PIN = "wrong pin"  # a stale pin id: end the request with 423 Nats-Wrong-Pin-Id


def wrong_pin(n: int, b: int) -> bytes:
    return (f"NATS/1.0 423 Nats-Wrong-Pin-Id\r\nNats-Pending-Messages: {n}\r\n"
            f"Nats-Pending-Bytes: {b}\r\n\r\n").encode()


PIN_MISMATCH = b"NATS/1.0 423 Nats-Pin-Id mismatch\r\n\r\n"


def rank(ask: Ask | None) -> int:
    """The request's place under `prioritized`: lower goes first."""
    return LOWEST if ask is None else ask.priority


class Priority:
    """The priority state of one pull consumer: its policy and groups, and the pinned client."""

    def __init__(self, policy: str, groups: Sequence[str], ttl_ns: int) -> None:
        self.policy, self.groups, self.ttl = policy, list(groups), ttl_ns
        self.pin = ""  # the pinned client's id ("" = nobody)
        self.pinned_group = ""  # the group of the request that got the pin (the timeout advisory names it)
        self.pinned_ns = 0  # wall clock of the pin (INFO's pinned_ts)
        self.deadline = 0  # monotonic ns when the pin expires (0 = no pin)

    def configure(self, policy: str, groups: Sequence[str], ttl_ns: int) -> None:
        """A config update: the pin stays (and expires on its running TTL), as in nats-server."""
        self.policy, self.groups, self.ttl = policy, list(groups), ttl_ns

    @property
    def chooses(self) -> bool:
        """Whether a queued request may be passed over or turned away (`choose` has a say)."""
        return self.policy in ("overflow", "pinned_client") or bool(self.pin)

    # ---- a pull request arrives ----------------------------------------------------------------

    def refusal(self, ask: Ask | None, now: int) -> bytes | None:
        """The status that ends a new pull request at once, or None to queue it. A request carrying the
        current pin id renews the pin's TTL."""
        if ask is None:
            return None
        if (ask.min_pending or ask.min_ack_pending) and self.policy != "overflow":
            return _bad("Not a Overflow Priority consumer")
        if ask.pin_id and self.policy != "pinned_client":
            return _bad("Not a Pinned Client Priority consumer")
        if not 0 <= ask.priority <= 9:
            return _bad("Priority must be between 0 and 9")
        if self.policy == "none":
            return None
        if not ask.group:
            return _bad("Priority Group missing")
        if ask.group not in self.groups:
            return _bad("Invalid Priority Group")
        if self.pin:
            if ask.pin_id == self.pin:
                self.deadline = now + self.ttl
            elif ask.pin_id:
                return PIN_MISMATCH
        return None

    # ---- a message is ready: may this request take it? ------------------------------------------

    def choose(self, ask: Ask | None, num_pending: int, ack_pending: int) -> Choice:
        """For the queued request at the head: `num_pending` counts the message at hand, `ack_pending`
        the messages delivered and not acknowledged before it."""
        if self.pin:
            if ask is None or not ask.pin_id:
                return Choice.SKIP
            if ask.pin_id != self.pin:
                return Choice.WRONG_PIN
        elif self.policy == "pinned_client":
            if ask is not None and ask.pin_id:
                return Choice.WRONG_PIN
            return Choice.PIN if ask is not None and ask.group else Choice.SERVE
        if not self._overflow_ok(ask, num_pending, ack_pending):
            return Choice.SKIP
        return Choice.SERVE

    def _overflow_ok(self, ask: Ask | None, num_pending: int, ack_pending: int) -> bool:
        """`overflow`: a request with min_pending / min_ack_pending waits until either is reached."""
        if self.policy != "overflow" or ask is None or (ask.min_pending <= 0 and ask.min_ack_pending <= 0):
            return True
        return (0 < ask.min_pending <= num_pending) or (0 < ask.min_ack_pending <= ack_pending)

    @staticmethod
    def runs(ask: Ask | None) -> bool:
        """Whether a served request may take a run of messages without `choose` for each (no overflow
        threshold that the run could cross)."""
        return ask is None or (ask.min_pending <= 0 and ask.min_ack_pending <= 0)

    def header(self) -> str | None:
        """The Nats-Pin-Id value every delivery carries under `pinned_client` (empty while nobody is)."""
        return self.pin if self.policy == "pinned_client" else None

    # ---- the pin ------------------------------------------------------------------------------

    def assign(self, ask: Ask, pin_id: str, now: int, wall_ns: int) -> None:
        """Pin the client of `ask` (the request carries the id from now on)."""
        self.pin, self.pinned_ns, self.deadline = pin_id, wall_ns, now + self.ttl
        self.pinned_group = ask.group
        ask.pin_id = pin_id

    def unassign(self) -> bool:
        """Nobody is pinned any more; returns whether somebody was."""
        was = bool(self.pin)
        self.pin, self.pinned_ns, self.deadline = "", 0, 0
        return was

    def expired(self, now: int) -> str | None:
        """The TTL timer fired: unpin when the deadline has passed (timers may fire a little early);
        returns the group that lost its pin, else None."""
        if self.pin and now >= self.deadline:
            group = self.pinned_group
            self.unassign()
            return group
        return None

    def state(self) -> list[dict[str, Any]]:
        """INFO's `priority_groups`: the first group with the pin (nats-server reports one)."""
        if not self.groups:
            return []
        out: dict[str, Any] = {"group": self.groups[0]}
        if self.pin:
            out["pinned_client_id"] = self.pin
        out["pinned_ts"] = rfc3339(self.pinned_ns) if self.pinned_ns else ZERO_TIME
        return [out]


def _bad(reason: str) -> bytes:
    return f"NATS/1.0 400 Bad Request - {reason}\r\n\r\n".encode()
