"""A stream's message schedules at run time (ADR-51, allow_msg_schedules): the table of schedules
(schedule.py) read back from the stream's messages and kept as messages are stored, the timer that waits
for the next one due, and what a due schedule produces, published through the stream's own publish path."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from jsbroker.jetstream import errors, headers, schedule, times
from jsbroker.jetstream.timer import Timer
from jsbroker.store.base import StoreError, StreamStore

log = logging.getLogger(__name__)


class ScheduledStream(Protocol):
    """What the schedules use of their stream (stream.py's `Stream`)."""

    name: str
    store: StreamStore

    def process(self, subject: str, hdr: bytes, payload: bytes, sourced: bool = False,
                scheduled: bool = False, checked: bool = False) -> tuple[int, bool]: ...


class StreamSchedules:
    """The schedules of one stream, from `load` (its start, or an update allowing them) until `stop`."""

    def __init__(self, stream: ScheduledStream, loop: asyncio.AbstractEventLoop) -> None:
        self._stream = stream
        self.table = schedule.Table()
        self._timer = Timer(loop, self._fire_due)
        self._at = 0  # the wall-clock deadline the timer is armed for
        self._stopped = False

    def load(self) -> None:
        """Read the schedules back from the stream's messages (so they survive any restart)."""
        now = times.now_ns()
        for msg in self._stream.store.messages():
            self.table.track(msg.seq, msg.subject, msg.hdr, msg.ts, now)
        self.arm()

    def stored(self, seq: int, subject: str, hdr: bytes, ts: int) -> None:
        """A message was stored: a schedule (or a schedule's replacement) is kept, its timer armed."""
        self.table.track(seq, subject, hdr, ts, ts)
        self.arm()

    def remove(self, subject: str) -> None:
        self.table.remove(subject)

    def stop(self) -> None:
        self._stopped = True
        self._timer.cancel()

    def arm(self) -> None:
        due = self.table.next_due()
        if due is None or self._stopped or (self._timer.armed and self._at <= due):
            return
        self._at = due
        self._timer.arm(max(due - times.now_ns(), schedule.MIN_DELAY_NS), earliest=False)

    def _fire_due(self) -> None:
        if self._stopped:
            return
        now = times.now_ns()
        for seq, subject, at in self.table.due(now):
            self._fire(seq, subject, at, now)
        self.arm()

    def _fire(self, seq: int, subject: str, at: int, now: int) -> None:
        """Publish what a due schedule produces through the stream's own publish path; storing it moves the
        schedule on (or purges it). When that does not happen (refused, not stored) the schedule stops
        until the next start, as nats-server keeps it in flight."""
        stream = self._stream
        before = self.table.entries.get(subject)
        msg = stream.store.load_msg(seq)
        try:
            fire = schedule.next_fire(msg.hdr, at, now) if msg is not None else None
            if msg is not None and fire is not None:
                source = headers.get(msg.hdr, headers.SCHEDULE_SOURCE)
                last = stream.store.load_last_msg(source) if source else None
                target, hdr, body = schedule.produce(subject, msg.hdr, msg.data,
                                                     None if last is None else (last.hdr, last.data),
                                                     fire[0] if fire[1] else None)
                stream.process(target, hdr, body, scheduled=True)
        except (errors.ApiError, StoreError, OSError) as exc:
            log.warning("scheduled message not stored", extra={"stream": stream.name, "schedule": subject,
                                                               "error": str(exc)})
        if self.table.entries.get(subject) == before:
            self.table.remove(subject)
