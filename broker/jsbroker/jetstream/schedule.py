"""Message schedules (ADR-51, pure): the `Nats-Schedule` patterns, the publish checks of a schedule, the
message a schedule produces, and the table of schedules a stream waits on.

A stream with `allow_msg_schedules` keeps a publish carrying `Nats-Schedule` as the schedule of its subject
(a new one on the subject replaces it: nats-server adds `Nats-Rollup: sub`). When it is due, the stream
publishes a copy on `Nats-Schedule-Target` (the body and headers of the last message on
`Nats-Schedule-Source` instead, when given) through its own publish path, without the schedule's
`Nats-Schedule*`, `Nats-Expected-*`, `Nats-Msg-Id`, `Nats-TTL` and `Nats-Rollup` headers and with
`Nats-Scheduler: <schedule subject>`, `Nats-Schedule-Next: purge` (a one-shot schedule: storing it purges
the schedule's subject) or the next fire time (a repeating one), and `Nats-TTL` / `Nats-Rollup` from
`Nats-Schedule-TTL` / `Nats-Schedule-Rollup`. The stored messages are the whole state: a restarted stream
reads its schedules back from them (`Table`), so a schedule due while it was down fires once it is up.

Patterns: `@at <RFC 3339 time>` (once; a past time fires at once), `@every <Go duration >= 1s>`
(repeating from the schedule's store time, whole seconds) and 6-field cron expressions or `@yearly`..`@hourly`
(jetstream/cron.py), in UTC or in the zone named by `Nats-Schedule-Time-Zone` (cron only; jetstream/zones.py
finds it as nats-server does), whose offset then also shows in the product's `Nats-Schedule-Next`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Callable

from jsbroker import subjects
from jsbroker.jetstream import cron, errors, headers, times, zones

_NS = 1_000_000_000
MIN_DELAY_NS = 250_000_000  # nats-server's scheduler timer never fires sooner than this
PURGE = "purge"


def next_fire(hdr: bytes, ts_ns: int, now_ns: int) -> tuple[int, bool] | None:
    """(when the schedule in `hdr` fires next after `ts_ns`, whether it repeats); None: no schedule (no or
    an empty Nats-Schedule). Raises 10223 for a bad time zone, 10189 for a bad pattern (and for a time zone
    beside `@at` / `@every`)."""
    zone = _zone(hdr)
    pattern = headers.get(hdr, headers.SCHEDULE)
    if not pattern:
        return None
    if pattern.startswith("@at ") or pattern.startswith("@every "):
        if zone is not None:  # a time zone only goes with cron forms
            raise errors.MESSAGE_SCHEDULES_PATTERN_INVALID()
        return _at(pattern[4:]) if pattern.startswith("@at ") else _every(pattern[7:], ts_ns, now_ns)
    expression = cron.parse(pattern)
    in_zone = zone or timezone.utc
    due = expression.next_after(ts_ns, in_zone) if expression is not None else None
    if expression is not None and due is not None and due < now_ns:
        due = expression.next_after(_round_second(now_ns), in_zone)
    if due is None:
        raise errors.MESSAGE_SCHEDULES_PATTERN_INVALID()
    return due, True


def _zone(hdr: bytes) -> tzinfo | None:
    """The schedule's Nats-Schedule-Time-Zone; None: no such header. Raises 10223 (also for an empty one)."""
    name = headers.get(hdr, headers.SCHEDULE_TIME_ZONE)
    if name is None:
        return None
    zone = zones.load(name)
    if zone is None:
        raise errors.MESSAGE_SCHEDULES_TIME_ZONE_INVALID()
    return zone


def _at(text: str) -> tuple[int, bool]:
    try:
        return times.parse_rfc3339(text), False
    except ValueError:
        raise errors.MESSAGE_SCHEDULES_PATTERN_INVALID() from None


def _every(text: str, ts_ns: int, now_ns: int) -> tuple[int, bool]:
    try:
        interval = times.parse_duration(text)
    except ValueError:
        raise errors.MESSAGE_SCHEDULES_PATTERN_INVALID() from None
    if interval < _NS:
        raise errors.MESSAGE_SCHEDULES_PATTERN_INVALID()
    due = _round_second(ts_ns) + interval
    return (due if due >= now_ns else _round_second(now_ns) + interval), True


def _round_second(ns: int) -> int:
    """Go's Time.Round(time.Second): halves round up."""
    return (ns + _NS // 2) // _NS * _NS


def check_publish(subject: str, hdr: bytes, stream_subjects: tuple[str, ...], enabled: bool, ttl_allowed: bool,
                  ttl_valid: Callable[[str], bool], last_on: Callable[[str], bytes | None], now_ns: int) -> bytes:
    """The schedule checks of a publish in nats-server's order (after the expected-sequence checks); returns
    `hdr`, with `Nats-Rollup: sub` added to a schedule. `last_on(subject)`: the headers of the subject's last
    stored message (b"" for none without headers, None: no message)."""
    try:
        fire = next_fire(hdr, now_ns, now_ns)
    except errors.ApiError:
        if not enabled:
            raise errors.MESSAGE_SCHEDULES_DISABLED() from None
        raise
    if fire is not None:
        hdr = _check_schedule(subject, hdr, stream_subjects, enabled, ttl_allowed, ttl_valid)
    scheduler = headers.get(hdr, headers.SCHEDULER)
    next_text = headers.get(hdr, headers.SCHEDULE_NEXT)
    if next_text:  # only a purge may be published; it purges a schedule
        if next_text != PURGE or not scheduler or scheduler == subject \
                or not subjects.is_valid_publish_subject(scheduler):
            raise errors.MESSAGE_SCHEDULES_SCHEDULER_INVALID()
        if not enabled:
            raise errors.MESSAGE_SCHEDULES_DISABLED()
        last = last_on(scheduler)
        if last is not None and not headers.get(last, headers.SCHEDULE):
            raise errors.MESSAGE_SCHEDULES_SCHEDULER_INVALID()
    elif scheduler:
        raise errors.MESSAGE_SCHEDULES_SCHEDULER_INVALID()
    return hdr


def _check_schedule(subject: str, hdr: bytes, stream_subjects: tuple[str, ...], enabled: bool, ttl_allowed: bool,
                    ttl_valid: Callable[[str], bool]) -> bytes:
    if not enabled:
        raise errors.MESSAGE_SCHEDULES_DISABLED()
    ttl = headers.get(hdr, headers.SCHEDULE_TTL)
    if ttl and not ttl_valid(ttl):
        raise errors.MESSAGE_SCHEDULES_TTL_INVALID()
    if headers.get(hdr, headers.SCHEDULE_ROLLUP) not in (None, "", "sub"):
        raise errors.MESSAGE_SCHEDULES_ROLLUP_INVALID()
    if ttl and not ttl_allowed:
        raise errors.MESSAGE_TTL_DISABLED()
    target = headers.get(hdr, headers.SCHEDULE_TARGET) or ""
    if not target or not subjects.is_valid_publish_subject(target) or target == subject:
        raise errors.MESSAGE_SCHEDULES_TARGET_INVALID()
    source = headers.get(hdr, headers.SCHEDULE_SOURCE) or ""
    if source and (source in (target, subject) or not subjects.is_valid_publish_subject(source)):
        raise errors.MESSAGE_SCHEDULES_SOURCE_INVALID()
    if not any(subjects.subjects_overlap(s, target) for s in stream_subjects):
        raise errors.MESSAGE_SCHEDULES_TARGET_INVALID()
    if source and not any(subjects.subjects_overlap(s, source) for s in stream_subjects):
        raise errors.MESSAGE_SCHEDULES_SOURCE_INVALID()
    rollup = headers.rollup(hdr)
    if not rollup:
        return headers.append(hdr, ((headers.ROLLUP, "sub"),))
    if rollup != "sub":
        raise errors.MESSAGE_SCHEDULES_ROLLUP_INVALID()
    return hdr


def produce(schedule_subject: str, hdr: bytes, payload: bytes, source: tuple[bytes, bytes] | None,
            next_ns: int | None) -> tuple[str, bytes, bytes]:
    """(target subject, headers, body) of the message a due schedule publishes; `source`: the last message
    on its Nats-Schedule-Source ((headers, body), None: none or no source); `next_ns`: when a repeating
    schedule fires next (None: once)."""
    target = headers.get(hdr, headers.SCHEDULE_TARGET) or ""
    ttl = headers.get(hdr, headers.SCHEDULE_TTL)
    rollup = headers.get(hdr, headers.SCHEDULE_ROLLUP)
    out_hdr, body = source if source is not None else (hdr, payload)
    keys = (headers.MSG_ID, headers.TTL, headers.ROLLUP)
    out_hdr = headers.without(out_hdr, *keys, prefixes=(headers.SCHEDULE, "Nats-Expected-"))
    pairs = [(headers.SCHEDULER, schedule_subject),
             (headers.SCHEDULE_NEXT, PURGE if next_ns is None else _next_text(hdr, next_ns))]
    if ttl:
        pairs.append((headers.TTL, ttl))
    if rollup:
        pairs.append((headers.ROLLUP, rollup))
    return target, headers.append(out_hdr, pairs), body


def _next_text(hdr: bytes, next_ns: int) -> str:
    """A repeating schedule's next fire time as nats-server writes it: in the schedule's zone (UTC: `Z`)."""
    zone = _zone(hdr) or timezone.utc
    offset = datetime.fromtimestamp(next_ns // _NS, zone).utcoffset()
    return times.rfc3339(next_ns, int(offset.total_seconds()) if offset is not None else 0)


@dataclass
class Table:
    """The schedules of a stream: subject -> (seq of the schedule message, when it is due), as nats-server's
    MsgScheduling. `track` is called for every stored message (in order, also when a stream reads its
    messages back at start); `due` gives what to fire."""

    entries: dict[str, tuple[int, int]] = field(default_factory=dict)

    def track(self, seq: int, subject: str, hdr: bytes, ts_ns: int, now_ns: int) -> None:
        fire = None
        if hdr and headers.SCHEDULE_NEEDLE in hdr:
            try:
                fire = next_fire(hdr, ts_ns, now_ns)
            except errors.ApiError:
                fire = None
        scheduler = headers.get(hdr, headers.SCHEDULER) if hdr else None
        if fire is not None:
            self.entries[subject] = (seq, fire[0])
        elif not scheduler:
            self.entries.pop(subject, None)
        next_text = headers.get(hdr, headers.SCHEDULE_NEXT) if scheduler else None
        if scheduler and next_text and next_text != PURGE and scheduler in self.entries:
            try:
                self.entries[scheduler] = (self.entries[scheduler][0], times.parse_rfc3339(next_text))
            except ValueError:
                pass

    def remove(self, subject: str) -> None:
        self.entries.pop(subject, None)

    def next_due(self) -> int | None:
        return min((due for _, due in self.entries.values()), default=None)

    def due(self, now_ns: int) -> list[tuple[int, str, int]]:
        """(seq, subject, due time) of the schedules due at `now_ns`, in sequence order."""
        return sorted((seq, subject, at) for subject, (seq, at) in self.entries.items() if at <= now_ns)
