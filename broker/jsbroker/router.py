"""Message delivery: the subject index, MSG/HMSG framing, per-read flushing and backpressure.

`Router` matches a published subject in the `Sublist`, appends MSG/HMSG frames to the subscribers'
output lists (one member per queue group), calls internal handlers synchronously, answers
no-responders with a 503 to the publisher's own reply subscription, and writes every touched connection
once per read (or on the next loop turn for timer-driven publishes), after running the services'
`before_output` callbacks. A subscriber that reads slower than it is sent to meets nats-server's
rules (slow_consumer.py): past its stall gate the publisher being read is held a few milliseconds,
past `max_pending` it is a slow consumer. It also tracks interest watches for `InternalBus.watch_interest`.

The router is the core's bus, below what uses it: it knows a client only as a `RoutedConnection` (the
compiled base class of connection.py's `Connection`: the members it reads and writes) and the server only
as a `RouterHost` (server.py provides it).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Callable, Final, Protocol, Sequence

from mypy_extensions import mypyc_attr

from .internal import Delivery, InterestListener
from .slow_consumer import go_seconds, producer_stall, stall_gate
from .subjects import subject_matches
from .sublist import EMPTY, Sublist, Subscription

# Module constants are Final: compiled, a plain module global is a dict lookup at every use.
# " <size>\r\n" ends of MSG lines without a reply subject, prebuilt for common payload sizes.
_TAIL_CACHE: Final = 4096
_TAILS: Final = [b" %d\r\n" % size for size in range(_TAIL_CACHE)]
# Outside a read, a delivery batch that leaves this many output parts queued on a connection (about 8
# messages) is written at once, so the client parses the start of a pass while the rest is built.
_EAGER_PARTS: Final = 24
# A connection's queued output is joined and written in pieces of about this size: under the mmap threshold
# that cli.fix_mmap_threshold keeps at 128 KiB, so each piece comes from the heap and reuses the memory the
# previous one freed; one join of a whole read's output (often more) was mapped and page-faulted afresh for
# every write, ~20% of a fan-out's CPU.
_WRITE_CHUNK: Final = 64 * 1024

if TYPE_CHECKING:
    import asyncio

    from .config import BrokerConfig
    from .internal import Origin
    from .logs import Logger
    from .permissions import PermissionChecker


class RouterHost(Protocol):
    """What the router reads of the server that wires it: its loop (set at start), log and settings."""

    loop: asyncio.AbstractEventLoop
    log: Logger
    config: BrokerConfig


@mypyc_attr(allow_interpreted_subclasses=True)
class RoutedConnection:
    """What the router reads and writes of a client connection (connection.py's `Connection` extends it): its
    subject space and CONNECT options, its queued output and counters, and the backpressure state between it
    and the others. A compiled class with an interpreted subclass: these members are struct fields the router
    reads and writes for every message, not instance-dict entries (a quarter of a fan-out's CPU was their
    dict lookups); the methods are the connection's."""

    def __init__(self, cid: int, sublist: Sublist, origin: Origin) -> None:
        self.cid = cid
        self.sublist = sublist
        self.origin = origin
        # CONNECT options (nats-server's defaults before CONNECT), and the user's permissions (none: None)
        self.echo = True
        self.headers = False
        self.no_responders = False
        self.perms: PermissionChecker | None = None
        self.connected = False
        self.closed = False
        self.congested = False  # past the transport's high-water mark
        self.transport: asyncio.Transport | None = None
        self.out: list[bytes] = []  # output parts queued for the next write
        self.dirty = False  # on the router's pending list
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0  # messages, their header + payload bytes
        self.queued = 0  # bytes handed to the transport so far
        self.written_msgs = 0  # out_msgs at the last write: what a read delivered since then
        self.blocked_publishers: set[RoutedConnection] = set()  # publishers held because this one is backed up
        self.blockers: set[RoutedConnection] = set()  # the backed-up connections holding this publisher
        self.stall_timer: asyncio.TimerHandle | None = None  # this publisher held (slow_consumer.producer_stall)
        self.drain_callbacks: list[Callable[[], None]] = []  # internal producers waiting for this output to drain

    @property
    def who(self) -> str:  # the prefix of its log lines
        raise NotImplementedError

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def remove_sub(self, sub: Subscription) -> None:
        raise NotImplementedError

    def blocked_write(self) -> None:  # its socket did not take a write at once: time it
        raise NotImplementedError

    def gate(self, limit: int) -> None:  # past the stall gate
        raise NotImplementedError

    def mark_slow(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError


class Router:
    def __init__(self, broker: RouterHost) -> None:
        self.broker = broker
        self.sublist = Sublist()  # the global account's ($G): internal subscriptions' default
        self.pending: list[RoutedConnection] = []  # connections with output to flush
        self.reading: RoutedConnection | None = None  # the connection whose read is being parsed
        self._flush_scheduled = False
        self._flushing = False  # running the before-output callbacks
        self._held: list[Subscription] = []  # batched internal subscriptions holding messages
        self._before_output: list[Callable[[], None]] = []  # one-shot callbacks of the next flush
        self._watches: dict[str, list[Watch]] = {}
        self.slow_consumers = 0
        self._stall_msgs = 0  # messages of the current flush that went to clients past their stall gate

    # -- subscriptions ------------------------------------------------------------------------------

    def insert(self, sub: Subscription, sublist: Sublist | None = None) -> None:
        """Into `sublist`, else its client's account's (internal subscriptions: the global account's)."""
        if sublist is None:
            sublist = self.sublist if sub.client is None else sub.client.sublist
        sub.sublist = sublist
        sublist.insert(sub)
        if self._watches:
            self._check_watches(sub.subject, sublist)

    def remove(self, sub: Subscription) -> None:
        if sub.closed:
            return
        sub.closed = True
        sublist = sub.sublist or self.sublist
        sublist.remove(sub)
        if sub.shadows is not None:
            for shadow in sub.shadows:
                self.remove(shadow)
        if self._watches:
            self._check_watches(sub.subject, sublist)

    def watch(self, subject: str, listener: InterestListener, queue: str | None = None,
              sublist: Sublist | None = None) -> "Watch":
        """Interest in `subject` within one account's sublist (default: the global account's)."""
        sublist = sublist or self.sublist
        w = Watch(self, subject, listener, self.has_interest(subject, queue, sublist), queue, sublist)
        self._watches.setdefault(subject, []).append(w)
        return w

    def _check_watches(self, changed: str, sublist: Sublist) -> None:
        for subject, watches in list(self._watches.items()):
            if not subject_matches(changed, subject):
                continue
            for w in list(watches):
                if w.sublist is not sublist:
                    continue
                now = self.has_interest(subject, w.queue, sublist)
                if w.state != now:
                    w.state = now
                    w.listener(now)

    def has_interest(self, subject: str, queue: str | None = None, sublist: Sublist | None = None) -> bool:
        plain, groups = (sublist or self.sublist).match(subject)
        if queue is None:
            return bool(plain or groups)
        return any(g[0].queue == queue for g in groups)

    # -- delivery -----------------------------------------------------------------------------------

    def touch(self, conn: RoutedConnection) -> None:
        conn.dirty = True
        self.pending.append(conn)
        if self.reading is None and not self._flush_scheduled:
            self._flush_scheduled = True
            self.broker.loop.call_soon(self.flush)

    def before_output(self, callback: Callable[[], None]) -> None:
        self._before_output.append(callback)
        if self.reading is None and not self._flush_scheduled:
            self._flush_scheduled = True
            self.broker.loop.call_soon(self.flush)

    def _run_before_output(self) -> None:
        callbacks, self._before_output = self._before_output, []
        self._flush_scheduled = True  # what they publish goes out with this flush
        for callback in callbacks:
            try:
                callback()
            except Exception:
                self.broker.log.exception("before-output callback failed")
        self._flush_scheduled = False

    def route_into(self, sublist: Sublist, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> bool:
        """An internal publish into an account's subject space (imports crossing accounts)."""
        return self.route(None, subject, reply, hdr_len, data, None, sublist)

    def route(
        self, pub: RoutedConnection | None, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes,
        target: bytes | None = None, into: Sublist | None = None,
    ) -> bool:
        """Deliver one message; `data` is header block + payload + CRLF. True if anyone received it.
        `target`, when given, is matched instead of `subject`, which the MSG line still shows
        (JetStream deliveries carry the message's original subject). A client's message is matched in its
        account's sublist, an internal one in `into` (default: the global account's)."""
        key = target or subject
        sublist = pub.sublist if pub is not None else into if into is not None else self.sublist
        result = sublist.cache.get(key) or sublist.match(key)
        if pub is not None:  # a client's message: counted as nats-server does, header and payload bytes
            pub.in_msgs += 1
            pub.in_bytes += len(data) - 2
        if result is EMPTY:
            if reply and pub is not None and pub.no_responders:
                self._no_responders(pub, subject, reply)
            return False
        plain, groups = result
        if self._held and (groups or len(plain) != 1 or plain[0].batch is None):
            self._release_held()  # anything else routed sees what the held messages changed
        if groups:  # one member per queue group, chosen at random, plus every plain subscriber
            plain = plain + tuple(sub for sub in (self._pick(g, pub) for g in groups) if sub is not None)
        tail = b""  # the MSG/HMSG line ends, built for the first client (internal handlers need none)
        delivered = 0
        pending = self.pending
        for sub in plain:
            c: RoutedConnection | None = sub.client
            if c is None:  # an internal one; a stream import's shadow of it sees the local subject
                shown = subject if sub.rename is None else sub.rename(subject)
                delivered += self._internal(sub, pub, shown, reply, hdr_len, data)
                continue
            if not c.echo and c is pub:
                continue
            if sub.rename is not None:  # a stream import's shadow: its own MSG line, under the local subject
                self._deliver_renamed(sub, sub.rename(subject), pub, reply, hdr_len, data)
                delivered += 1
                continue
            if c.perms is not None and not self._permitted(c, sub, subject, reply):
                continue
            if not tail:
                size = len(data) - 2
                if hdr_len < 0:
                    verb = b"MSG "
                    tail = (b" %s %d\r\n" % (reply, size) if reply else
                            _TAILS[size] if size < _TAIL_CACHE else b" %d\r\n" % size)
                else:
                    verb = b"HMSG "
                    tail = b" %s %d %d\r\n" % (reply, hdr_len, size) if reply else b" %d %d\r\n" % (hdr_len, size)
                    # clients that did not negotiate headers get a plain MSG without the header block
                    plain_data = data[hdr_len:]
                    plain_tail = b" %s %d\r\n" % (reply, size - hdr_len) if reply else b" %d\r\n" % (size - hdr_len)
            if hdr_len >= 0 and not c.headers:
                c.out.extend((b"MSG ", subject, sub.head, plain_tail, plain_data))
                c.out_bytes += size - hdr_len
            else:
                if sub.line_subject is not subject or sub.line_tail is not tail:  # not the previous message's line
                    sub.line = b"".join((verb, subject, sub.head, tail))
                    sub.line_subject, sub.line_tail = subject, tail
                out = c.out
                out.append(sub.line)
                out.append(data)
                c.out_bytes += size
            if not c.dirty:
                c.dirty = True
                pending.append(c)
            delivered += 1
            c.out_msgs += 1
            sub.delivered += 1
            if sub.max_msgs and sub.delivered >= sub.max_msgs:
                self._expire(sub)
        if pending and self.reading is None and not self._flush_scheduled:
            self._flush_scheduled = True
            self.broker.loop.call_soon(self.flush)
        if not delivered and reply and pub is not None and pub.no_responders:
            self._no_responders(pub, subject, reply)
        return delivered > 0

    def _deliver_renamed(self, sub: Subscription, subject: bytes, pub: RoutedConnection | None, reply: bytes | None,
                         hdr_len: int, data: bytes) -> None:
        c: RoutedConnection = sub.client
        if (not c.echo and c is pub) or (c.perms is not None and not self._permitted(c, sub, subject, reply)):
            return
        size = len(data) - 2
        r = b" " + reply if reply else b""
        if hdr_len >= 0 and c.headers:
            c.out.extend((b"HMSG ", subject, sub.head, b"%s %d %d\r\n" % (r, hdr_len, size), data))
            c.out_bytes += size
        else:
            body = data[hdr_len:] if hdr_len >= 0 else data
            c.out.extend((b"MSG ", subject, sub.head, b"%s %d\r\n" % (r, len(body) - 2), body))
            c.out_bytes += len(body) - 2
        if not c.dirty:
            c.dirty = True
            self.pending.append(c)
        c.out_msgs += 1
        sub.delivered += 1

    def route_empty(self, pub: RoutedConnection, subjects: list[bytes]) -> None:
        """PUBs without reply or payload, in order (the parser's runs; a consumer's acks, mostly). One
        that goes to a single batched internal subscription (a consumer's ack subscription) is queued
        for it right here; anything else takes `route`."""
        cache_get, match = pub.sublist.cache.get, pub.sublist.match
        origin = pub.origin
        queued = 0
        for subject in subjects:
            result = cache_get(subject) or match(subject)
            if result is not EMPTY and not result[1] and len(result[0]) == 1:
                sub = result[0][0]
                batch = sub.batch
                if batch is not None and not sub.closed:
                    if not batch:
                        self._held.append(sub)
                    batch.append((subject.decode(), None, b"", b"", origin))
                    sub.delivered += 1
                    queued += 1
                    continue
            self.route(pub, subject, None, -1, b"\r\n")
        pub.in_msgs += queued

    def deliver(self, target: bytes, msgs: Sequence[Delivery], sublist: Sublist | None = None) -> bool:
        """JetStream deliveries to `target` in an account's sublist (default: the global account's): one match
        for the batch, each MSG/HMSG line built once per subscriber. Queue groups, internal subscribers,
        auto-unsubscribe limits and clients without headers take `route`, one message at a time, for their
        exact rules."""
        if sublist is None:
            sublist = self.sublist
        result = sublist.cache.get(target) or sublist.match(target)
        plain, groups = result
        if groups or any(s.client is None or s.max_msgs or not s.client.headers or s.client.perms or s.rename
                         for s in plain):
            delivered = False
            for subject, reply, hdr, data in msgs:
                hl = len(hdr) if hdr else -1
                delivered |= self.route(None, subject.encode(), reply.encode(), hl, hdr + data + b"\r\n", target,
                                        sublist)
            return delivered
        n = len(msgs)
        size = sum(len(hdr) + len(data) for _, _, hdr, data in msgs)
        for sub in plain:
            c: RoutedConnection = sub.client
            sid = sub.sid.decode()
            add = c.out.append
            for subject, reply, hdr, data in msgs:
                if hdr:
                    add(f"HMSG {subject} {sid} {reply} {len(hdr)} {len(hdr) + len(data)}\r\n".encode())
                    add(hdr)
                else:
                    add(f"MSG {subject} {sid} {reply} {len(data)}\r\n".encode())
                add(data)
                add(b"\r\n")
            c.out_msgs += n
            c.out_bytes += size
            sub.delivered += n
            if not c.dirty:
                c.dirty = True
                self.pending.append(c)
        if plain and self.reading is None:
            for s in plain:
                if len(s.client.out) >= _EAGER_PARTS:
                    self._write(s.client)  # a long delivery pass: let the client start on what is ready
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self.broker.loop.call_soon(self.flush)
        return bool(plain)

    @staticmethod
    def _permitted(c: RoutedConnection, sub: Subscription, subject: bytes, reply: bytes | None) -> bool:
        """A permissioned user's delivery: held back when its deny list covers the subject; a reply
        subject it may then answer (allow_responses) is noted."""
        if sub.deny is not None and sub.deny(subject):
            return False
        if reply and c.perms.tracks_replies:  # type: ignore[union-attr]
            c.perms.note_request(reply)  # type: ignore[union-attr]
        return True

    @staticmethod
    def _pick(group: tuple[Subscription, ...], pub: RoutedConnection | None) -> Subscription | None:
        n = len(group)
        start = 0 if n == 1 else int(random.random() * n)
        for i in range(n):
            sub = group[(start + i) % n]
            c: RoutedConnection | None = sub.client
            if c is not None and (c.closed or (not c.echo and c is pub)):
                continue
            return sub
        return None

    def _internal(
        self, sub: Subscription, pub: RoutedConnection | None, subject: bytes, reply: bytes | None, hdr_len: int,
        data: bytes,
    ) -> int:
        if sub.closed:
            return 0
        if hdr_len > 0:
            hdr, payload = data[:hdr_len], data[hdr_len:-2]
        else:
            hdr, payload = b"", data[:-2]
        msg = (
            subject.decode() if subject.__class__ is bytes else subject,
            reply.decode() if reply.__class__ is bytes else reply,  # type: ignore[union-attr]
            hdr,
            payload,
            pub.origin if pub is not None else None,
        )
        if sub.batch is not None:
            if not sub.batch:
                self._held.append(sub)
                if self.reading is None and not self._flush_scheduled:  # held by a publish from a timer
                    self._flush_scheduled = True
                    self.broker.loop.call_soon(self.flush)
            sub.batch.append(msg)
            sub.delivered += 1
            return 1
        try:
            sub.handler(*msg)  # type: ignore[misc]
        except Exception:
            self.broker.log.exception("internal handler failed", subject=sub.subject)
        sub.delivered += 1
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self._expire(sub)
        return 1

    def _release_held(self) -> None:
        """Hand the messages held for batched internal handlers over, in order."""
        while self._held:
            held, self._held = self._held, []
            for sub in held:
                msgs, sub.batch = sub.batch, []
                if sub.closed:
                    continue
                try:
                    sub.handler(msgs)  # type: ignore[misc]
                except Exception:
                    self.broker.log.exception("internal handler failed", subject=sub.subject)

    def _expire(self, sub: Subscription) -> None:
        """The subscription reached its UNSUB max."""
        if sub.client is not None:
            sub.client.remove_sub(sub)
        else:
            self.remove(sub)

    def _no_responders(self, pub: RoutedConnection, subject: bytes, reply: bytes) -> None:
        plain, groups = pub.sublist.match(reply)
        for sub in (*plain, *(s for g in groups for s in g)):
            if sub.client is pub:
                hdr = b"NATS/1.0 503\r\nNats-Subject: " + subject + b"\r\n\r\n"
                pub.send(b"HMSG %s%s %d %d\r\n%s\r\n" % (reply, sub.head, len(hdr), len(hdr), hdr))
                return

    def flush(self, publisher: RoutedConnection | None = None, read_bytes: int = 0) -> None:
        """Write each touched connection's output once; apply the slow-consumer rules.

        `publisher` is the connection whose read (of `read_bytes`) produced this output (the flush at the
        end of a read): messages it sent to clients past their stall gate hold it briefly."""
        self._flush_scheduled = False
        self._release_held()
        self._flushing = True
        try:
            while self._before_output:
                self._run_before_output()
        finally:
            self._flushing = False
        pending = self.pending
        if not pending:
            return
        self.pending = []
        for c in pending:
            c.dirty = False
            self._write(c, publisher)
        if self._stall_msgs:
            messages, self._stall_msgs = self._stall_msgs, 0
            if publisher is not None:
                self._hold(publisher, producer_stall(messages, read_bytes))

    def _write(self, c: RoutedConnection, publisher: RoutedConnection | None = None) -> None:
        """Write a connection's queued output; time a write the socket does not take at once, and
        apply max_pending and the stall gate to what waits."""
        if c.closed:
            c.out.clear()
            return
        out = c.out
        if not out:
            return
        transport = c.transport
        start = end = size = 0
        for part in out:  # joined in pieces of about _WRITE_CHUNK bytes
            size += len(part)
            end += 1
            if size >= _WRITE_CHUNK:
                transport.write(b"".join(out[start:end]))  # type: ignore[union-attr]
                c.queued += size
                start, size = end, 0
        if size:
            transport.write(b"".join(out[start:] if start else out))  # type: ignore[union-attr]
            c.queued += size
        out.clear()
        backlog = transport.get_write_buffer_size()  # type: ignore[union-attr]
        if backlog:
            c.blocked_write()
            gate = stall_gate(self.broker.config.max_pending)
            if backlog > gate:
                if backlog > self.broker.config.max_pending:
                    self.max_pending_exceeded(c)
                    return
                delivered = c.out_msgs - c.written_msgs
                if delivered and publisher is not None and publisher is not c:
                    self._stall_msgs += delivered
                    self._block(publisher, c)
                    c.gate(gate)
        c.written_msgs = c.out_msgs

    def wait_for_drain(self, subject: bytes, callback: Callable[[], None], sublist: Sublist | None = None) -> bool:
        """Internal producers' backpressure: `callback` runs when the backed-up subscriber drains."""
        plain, groups = (sublist or self.sublist).match(subject)
        for sub in (*plain, *(s for g in groups for s in g)):
            c: RoutedConnection | None = sub.client
            if c is not None and c.out and not c.congested and not c.closed:
                self._write(c)  # what the producer queued so far: the transport's backlog tells (not only at the read's end)
            if c is not None and c.congested and not c.closed:
                c.drain_callbacks.append(callback)
                return True
        return False

    def max_pending_exceeded(self, c: RoutedConnection) -> None:
        self.slow_consumers += 1
        max_pending = self.broker.config.max_pending
        self.broker.log.info(f"{c.who} - Slow Consumer Detected: MaxPending of {max_pending} Exceeded", cid=c.cid,
                             max_pending=max_pending)
        c.mark_slow()

    def write_deadline_exceeded(self, c: RoutedConnection, backlog: int) -> None:
        if c.connected:  # nats-server does not count a client that never sent CONNECT
            self.slow_consumers += 1
        deadline = self.broker.config.write_deadline
        self.broker.log.info(f"{c.who} - Slow Consumer Detected: WriteDeadline of {go_seconds(deadline)} exceeded "
                             f"with {backlog} total bytes.", cid=c.cid, write_deadline=deadline, pending=backlog)
        c.abort()

    def _block(self, publisher: RoutedConnection, subscriber: RoutedConnection) -> None:
        if publisher in subscriber.blocked_publishers or publisher.closed:
            return
        subscriber.blocked_publishers.add(publisher)
        if not publisher.blockers:
            publisher.transport.pause_reading()  # type: ignore[union-attr]
        publisher.blockers.add(subscriber)

    def _hold(self, publisher: RoutedConnection, seconds: float) -> None:
        """Keep the publisher paused (by `_block`) until its subscribers drain or `seconds` pass."""
        if publisher.blockers and publisher.stall_timer is None:
            publisher.stall_timer = self.broker.loop.call_later(seconds, self._unhold, publisher)

    def _unhold(self, publisher: RoutedConnection) -> None:
        publisher.stall_timer = None
        for subscriber in publisher.blockers:
            subscriber.blocked_publishers.discard(publisher)
        publisher.blockers.clear()
        if not publisher.closed:
            publisher.transport.resume_reading()  # type: ignore[union-attr]

    def resume_publishers(self, subscriber: RoutedConnection) -> None:
        """The subscriber drained or is gone: internal producers and the publishers it held go on."""
        if subscriber.drain_callbacks:
            callbacks, subscriber.drain_callbacks = subscriber.drain_callbacks, []
            for callback in callbacks:
                self.broker.loop.call_soon(callback)
        self.release_publishers(subscriber)

    def release_publishers(self, subscriber: RoutedConnection) -> None:
        blocked = subscriber.blocked_publishers
        if not blocked:
            return
        subscriber.blocked_publishers = set()
        for p in blocked:
            p.blockers.discard(subscriber)
            if not p.blockers:
                if p.stall_timer is not None:
                    p.stall_timer.cancel()
                self._unhold(p)


class Watch:
    def __init__(self, router: Router, subject: str, listener: InterestListener, state: bool,
                 queue: str | None, sublist: Sublist) -> None:
        self.router, self.subject, self.listener, self.state, self.queue = router, subject, listener, state, queue
        self.sublist = sublist

    def cancel(self) -> None:
        watches = self.router._watches.get(self.subject)
        if watches and self in watches:
            watches.remove(self)
            if not watches:
                del self.router._watches[self.subject]
