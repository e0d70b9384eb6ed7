"""Pull requests (pure): parsing `$JS.API.CONSUMER.MSG.NEXT` bodies, the waiting-request queue a pull
consumer serves round-robin (or by priority, `prioritized`), and the status messages that end or interrupt a
request (`consumer.go nextReqFromMsg`, `waitQueue`, `processNextMsgRequest`, `processWaiting`). A request's
priority-group fields are kept as a `priority.Ask`; what they decide is `priority.py`'s.

Times here are `time.monotonic_ns()` values passed in by the caller (no clock reads, no timers): the
consumer owns the single timer that calls `WaitQueue.sweep`.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

from .errors import json_kind
from .priority import Ask, rank
from .times import format_duration

PENDING_MSGS = "Nats-Pending-Messages"
PENDING_BYTES = "Nats-Pending-Bytes"

NO_MESSAGES = b"NATS/1.0 404 No Messages\r\n\r\n"
REQUESTS_PENDING = b"NATS/1.0 408 Requests Pending\r\n\r\n"
PUSH_BASED = b"NATS/1.0 409 Consumer is push based\r\n\r\n"
CONSUMER_DELETED = b"NATS/1.0 409 Consumer Deleted\r\n\r\n"
MAX_WAITING = b"NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n"


def status(code: int, description: str) -> bytes:
    return f"NATS/1.0 {code} {description}\r\n\r\n".encode()


def _with_pending(code: int, description: str, n: int, b: int) -> bytes:
    return f"NATS/1.0 {code} {description}\r\n{PENDING_MSGS}: {n}\r\n{PENDING_BYTES}: {b}\r\n\r\n".encode()


def request_timeout(n: int, b: int) -> bytes:
    return _with_pending(408, "Request Timeout", n, b)


def size_exceeds(n: int, b: int) -> bytes:
    return _with_pending(409, "Message Size Exceeds MaxBytes", n, b)


def batch_completed(n: int, b: int) -> bytes:
    return _with_pending(409, "Batch Completed", n, b)


def server_shutdown(n: int, b: int) -> bytes:
    """What a waiting request hears when the server stops (not terminal: the client re-pulls after it
    reconnects, and finds out then whether its consumer came back)."""
    return _with_pending(409, "Server Shutdown", n, b)


def idle_heartbeat(last_dseq: int, last_sseq: int, stalled: str = "") -> bytes:
    extra = f"Nats-Consumer-Stalled: {stalled}\r\n" if stalled else ""
    return (
        f"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: {last_dseq}\r\n"
        f"Nats-Last-Stream: {last_sseq}\r\n{extra}\r\n"
    ).encode()


class BadRequest(Exception):
    """A pull request nats-server answers with `400 Bad Request - <reason>`."""


@dataclass(slots=True)
class PullRequest:
    """What one MSG.NEXT asked for (durations in ns); `ask` its priority fields (None: not a JSON body)."""

    batch: int = 1
    expires: int = 0
    max_bytes: int = 0
    no_wait: bool = False
    heartbeat: int = 0
    ask: Ask | None = None


def parse_request(body: bytes) -> PullRequest:
    """Empty -> batch 1; a bare integer -> that batch; JSON -> the full request; anything else -> 1."""
    text = body.strip()
    if not text:
        return PullRequest()
    if text[:1] != b"{":
        try:
            return PullRequest(batch=int(text))
        except ValueError:
            return PullRequest()
    try:
        data = json.loads(text)
    except ValueError as e:
        raise BadRequest(f"invalid JSON: {e}") from None
    if not isinstance(data, dict):
        raise BadRequest("json: cannot unmarshal into Go value of type server.JSApiConsumerGetNextRequest")
    req = PullRequest(
        batch=_int(data, "batch"),
        expires=_int(data, "expires"),
        max_bytes=_int(data, "max_bytes"),
        no_wait=bool(data.get("no_wait") or False),
        heartbeat=_int(data, "idle_heartbeat"),
        ask=Ask(
            group=_str(data, "group"),
            min_pending=_int(data, "min_pending", "int64"),
            min_ack_pending=_int(data, "min_ack_pending", "int64"),
            pin_id=_str(data, "id"),
            priority=_int(data, "priority"),
        ),
    )
    if req.heartbeat > 0 and req.heartbeat * 2 > req.expires:
        raise BadRequest("heartbeat value too large")
    return req


def limit_refusal(req: PullRequest, max_batch: int, max_expires: int, max_bytes: int) -> bytes | None:
    """The 409 for a request past the consumer's max_batch, max_expires or max_bytes (0: no limit), in
    nats-server's order; None within them."""
    if max_batch > 0 and req.batch > max_batch:
        return status(409, f"Exceeded MaxRequestBatch of {max_batch}")
    if req.expires > 0 and max_expires > 0 and req.expires > max_expires:
        return status(409, f"Exceeded MaxRequestExpires of {format_duration(max_expires)}")
    if req.max_bytes > 0 and max_bytes > 0 and req.max_bytes > max_bytes:
        return status(409, f"Exceeded MaxRequestMaxBytes of {max_bytes}")
    return None


def _int(data: dict[str, object], key: str, go_type: str = "int") -> int:
    value = data.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        kind = f"number {value}" if isinstance(value, float) else json_kind(value)
        raise BadRequest(f"json: cannot unmarshal {kind} into Go struct field .{key} of type {go_type}")
    return value


def _str(data: dict[str, object], key: str) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"json: cannot unmarshal {json_kind(value)} into Go struct field .{key} of type string")
    return value


@dataclass(slots=True, eq=False)
class Waiting:
    """A queued pull request: `n` messages still owed, `b` bytes left (0 = no byte limit)."""

    reply: str
    n: int
    b: int
    expires_at: int  # monotonic ns, 0 = never
    no_wait: bool
    heartbeat: int  # ns, 0 = none
    next_heartbeat: int  # monotonic ns
    delivered: int = 0
    ask: Ask | None = None  # the priority fields (`priority.py`)


class WaitQueue:
    """Pending pull requests, served round-robin: one message each, then to the back of the queue;
    `prioritized`: in order of `priority.rank`, round-robin within one rank."""

    def __init__(self, max_waiting: int, prioritized: bool = False) -> None:
        self.max = max_waiting
        self.prioritized = prioritized
        self._q: deque[Waiting] = deque()
        self.last_activity = 0  # monotonic ns of the last request or delivery (inactive_threshold)

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[Waiting]:
        return iter(self._q)

    @property
    def full(self) -> bool:
        return len(self._q) >= self.max > 0

    def add(self, w: Waiting) -> None:
        if self.prioritized:
            self._insert(w)
        else:
            self._q.append(w)

    def _insert(self, w: Waiting) -> None:
        """Behind every request ranked the same or better (nats-server's insertAtPosition)."""
        r = rank(w.ask)
        at = next((i for i, other in enumerate(self._q) if rank(other.ask) > r), len(self._q))
        self._q.insert(at, w)

    def cycle(self) -> None:
        """The head is not eligible now: to the back of the queue."""
        self._q.rotate(-1)

    def owed(self) -> int:
        """Messages owed to all queued requests."""
        return sum(w.n for w in self._q)

    def peek(self) -> Waiting | None:
        return self._q[0] if self._q else None

    def take(self, w: Waiting) -> None:
        """Count one delivery to the head request `w`; requeue it at the back if it wants more."""
        self._q.popleft()
        w.n -= 1
        w.delivered += 1
        if w.n > 0:
            self.add(w)

    def take_many(self, w: Waiting, n: int) -> None:
        """Count `n` deliveries to `w`, the only request (as `take` n times: it stays the head)."""
        w.n -= n
        w.delivered += n
        if w.n <= 0:
            self._q.popleft()

    def drop_head(self) -> None:
        self._q.popleft()

    def remove(self, w: Waiting) -> None:
        self._q.remove(w)

    def clear(self) -> list[Waiting]:
        out = list(self._q)
        self._q.clear()
        return out

    def sweep(
        self, now: int, end_of_stream: bool, has_interest: Callable[[str], bool] = lambda _: True
    ) -> tuple[list[tuple[str, bytes]], list[Waiting], int]:
        """Expire requests at `now`; with `end_of_stream`, finish no_wait requests too; silently drop
        requests whose reply subject lost its subscriber; of the others, those whose heartbeat is due get
        their next one set. As nats-server's processWaiting, a request that ends here gets its status and no
        heartbeat. Returns the status messages to send [(reply, hdr)], the requests owed a heartbeat now and
        the next deadline (expiry or heartbeat), 0 if none."""
        out: list[tuple[str, bytes]] = []
        due: list[Waiting] = []
        keep: deque[Waiting] = deque()
        next_deadline = 0
        for w in self._q:
            expired = bool(w.expires_at) and now >= w.expires_at
            if expired:
                out.append((w.reply, request_timeout(w.n, w.b)))
                continue
            if end_of_stream and w.no_wait and (not w.expires_at or w.delivered > 0):
                out.append((w.reply, NO_MESSAGES))
                continue
            if not has_interest(w.reply):
                continue
            keep.append(w)
            if w.heartbeat and now >= w.next_heartbeat:
                due.append(w)
                w.next_heartbeat = now + w.heartbeat
            for t in (w.expires_at, w.next_heartbeat if w.heartbeat else 0):
                if t and (not next_deadline or t < next_deadline):
                    next_deadline = t
        self._q = keep
        return out, due, next_deadline
