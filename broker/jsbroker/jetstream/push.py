"""Delivering a stored message to a consumer's delivery subject (a push deliver subject or a pull
request's inbox) while the MSG line shows the message's *original* subject, as nats-server does
(`MSG <original subject> <sid> <ack reply> <n>`); nats-py's KV watch and ordered consumers read it.

`InternalBus.publish` routes by the subject it shows, so it cannot do this. `sender(bus)` uses the
bus's own `deliver(target, subject, reply, hdr, payload)` when the core provides one; until then it
falls back to the core router's subject index (a bridge kept in this one function, to be dropped when
the InternalBus contract gains `deliver`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from jsbroker.internal import InternalBus

# send(target, subject, reply, hdr, payload) -> delivered to anyone
Sender = Callable[[str, str, "str | None", bytes, bytes], bool]


def sender(bus: InternalBus) -> Sender:
    native = getattr(bus, "deliver", None)
    if native is not None:
        return native  # type: ignore[no-any-return]
    router = getattr(bus, "router", None)
    if router is None or not all(hasattr(router, a) for a in _ROUTER_PARTS):
        return lambda target, subject, reply, hdr, payload: bus.publish(target, reply, hdr, payload)
    return _router_sender(router)


# what the bridge uses of the core router (checked, so a core refactor degrades instead of crashing)
_ROUTER_PARTS = ("sublist", "pending", "reading", "_flush_scheduled", "flush", "broker", "_pick", "_expire",
                 "out_msgs")


def _router_sender(router: Any) -> Sender:
    match = router.sublist.match

    def send(target: str, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> bool:
        plain, groups = match(target)
        if not plain and not groups:
            return False
        subj = subject.encode()
        rb = b" " + reply.encode() + b" " if reply else b" "
        if hdr:
            size = len(hdr) + len(payload)
            data = hdr + payload + b"\r\n"
            verb, tail = b"HMSG ", b"%s%d %d\r\n" % (rb, len(hdr), size)
            plain_tail, plain_data = b"%s%d\r\n" % (rb, len(payload)), payload + b"\r\n"
        else:
            data = payload + b"\r\n"
            verb, tail = b"MSG ", b"%s%d\r\n" % (rb, len(payload))
            plain_tail = plain_data = b""
        delivered = 0
        pending = router.pending
        targets = list(plain) + [s for g in groups if (s := router._pick(g, None)) is not None]
        for sub in targets:
            c = sub.client
            if c is None:
                if not sub.closed:
                    sub.handler(subject, reply, hdr, payload, None)
                    delivered += 1
                    sub.delivered += 1
                continue
            if hdr and not c.headers:
                c.out += (b"MSG ", subj, sub.head, plain_tail, plain_data)
            else:
                c.out += (verb, subj, sub.head, tail, data)
            if not c.dirty:
                c.dirty = True
                pending.append(c)
            delivered += 1
            c.out_msgs += 1
            sub.delivered += 1
            if sub.max_msgs and sub.delivered >= sub.max_msgs:
                router._expire(sub)
        router.out_msgs += delivered
        if pending and router.reading is None and not router._flush_scheduled:
            router._flush_scheduled = True
            router.broker.loop.call_soon(router.flush)
        return delivered > 0

    return send
