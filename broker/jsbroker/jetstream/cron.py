"""The cron expressions of message schedules (pure), with nats-server 2.15.1's syntax and search, in UTC or
a time zone.

Six fields `second minute hour day-of-month month day-of-week`, each a comma-separated list of `*` or `?`
(every value), `N`, `N-M`, with an optional `/step` (`N/step` runs to the field's maximum); months and
weekdays also by their three-letter English names (any case), Sunday 0. Day of month and day of week
combine with OR, unless one of them is a plain `*`/`?` (then AND, so `*` does not widen the other).
`next_after` is the first whole second after a time that matches, in a zone's wall-clock time (UTC by
default) as nats-server's search finds it around DST changes (`_Search`); a pattern that matches nothing within
five years (Feb 30) is invalid, as nats-server's search gives up there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo

_NS = 1_000_000_000
_INT = re.compile(r"[+-]?[0-9]+")  # Go's strconv.Atoi
_MONTHS = {name: i for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
_DAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (min, max, names) of the six fields in order
_FIELDS: tuple[tuple[int, int, dict[str, int]], ...] = (
    (0, 59, {}), (0, 59, {}), (0, 23, {}), (1, 31, {}), (1, 12, _MONTHS), (0, 6, _DAYS))
ALIASES = {"@yearly": "0 0 0 1 1 *", "@annually": "0 0 0 1 1 *", "@monthly": "0 0 0 1 * *",
           "@weekly": "0 0 0 * * 0", "@daily": "0 0 0 * * *", "@midnight": "0 0 0 * * *",
           "@hourly": "0 0 * * * *"}
_SEARCH_YEARS = 5
_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class Cron:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # Sunday 0
    any_day: bool  # day of month or day of week was a plain * / ?: both must match

    def day_matches(self, t: datetime) -> bool:
        by_date, by_weekday = t.day in self.days, (t.weekday() + 1) % 7 in self.weekdays
        return (by_date and by_weekday) if self.any_day else (by_date or by_weekday)

    def next_after(self, ts_ns: int, zone: tzinfo = timezone.utc) -> int | None:
        """ns of the first matching second after `ts_ns` in `zone` (None: none within the search range)."""
        search = _Search(self, zone, ts_ns // _NS + 1)
        limit = _wall(search.t, zone).year + _SEARCH_YEARS
        while _wall(search.t, zone).year <= limit:
            if search.one_pass():
                return search.t * _NS
        return None


@dataclass
class _Search:
    """nats-server's search for the next matching second, field by field from the month down; a field
    that wraps around (December to January, the last day to the 1st, 23h to 0h, ...) starts a new pass.
    The first time a field does not match, the time is truncated to it in the zone (the 1st of the
    month, midnight, the hour, ...). Months and days then move by wall-clock date (Go's AddDate and Date:
    a wall time a DST change skips or repeats is resolved as Go resolves it, `_date`), hours and smaller
    by elapsed time (so a DST change skips or repeats those wall times)."""

    cron: Cron
    zone: tzinfo
    t: int  # unix seconds
    truncated: bool = False

    def one_pass(self) -> bool:
        """True: `t` matches; False: a field wrapped around."""
        c, zone = self.cron, self.zone
        w = _wall(self.t, zone)
        while w.month not in c.months:
            self._truncate(_date(zone, w.year, w.month, 1))
            self.t = _add_date(self.t, zone, months=1)
            if (w := _wall(self.t, zone)).month == 1:
                return False
        while not c.day_matches(w):
            self._truncate(_date(zone, w.year, w.month, w.day))
            self.t = _add_date(self.t, zone, days=1)
            if (w := _wall(self.t, zone)).day == 1:
                return False
        while w.hour not in c.hours:
            self._truncate(_date(zone, w.year, w.month, w.day, w.hour))
            self.t += 3600
            if (w := _wall(self.t, zone)).hour == 0:
                return False
        while w.minute not in c.minutes:
            self._truncate(self.t - self.t % 60)
            self.t += 60
            if (w := _wall(self.t, zone)).minute == 0:
                return False
        while w.second not in c.seconds:
            self.truncated = True  # already a whole second
            self.t += 1
            if (w := _wall(self.t, zone)).second == 0:
                return False
        return True

    def _truncate(self, to: int) -> None:
        if not self.truncated:
            self.truncated, self.t = True, to


def _wall(t: int, zone: tzinfo) -> datetime:
    return datetime.fromtimestamp(t, zone)


def _offset(t: int, zone: tzinfo) -> int:
    return int(_wall(t, zone).utcoffset().total_seconds())  # type: ignore[union-attr]


def _date(zone: tzinfo, year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    """Go's time.Date: out-of-range months and days carry over; a wall time that does not exist or exists
    twice takes the offset in force at that wall time read as UTC, unless that instant minus the offset
    falls under another offset, which then applies (so which side of a DST change wins depends on the
    zone's sign: New York's skipped 02:30 is 01:30 EST, Berlin's 03:30 CEST)."""
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    days = (datetime(year, month, 1) - _EPOCH).days + day - 1
    wall = days * 86400 + hour * 3600 + minute * 60 + second
    return wall - _offset(wall - _offset(wall, zone), zone)


def _add_date(t: int, zone: tzinfo, months: int = 0, days: int = 0) -> int:
    w = _wall(t, zone)
    return _date(zone, w.year, w.month + months, w.day + days, w.hour, w.minute, w.second)


def parse(pattern: str) -> Cron | None:
    """The expression (or an @alias), None when nats-server would refuse it."""
    fields = ALIASES.get(pattern, pattern).split()
    if len(fields) != 6:
        return None
    parsed = [_field(text, *spec) for text, spec in zip(fields, _FIELDS)]
    valid = [p for p in parsed if p is not None]
    if len(valid) != 6:
        return None
    (seconds, _), (minutes, _), (hours, _), (days, any_date), (months, _), (weekdays, any_weekday) = valid
    return Cron(seconds, minutes, hours, days, months, weekdays, any_day=any_date or any_weekday)


def _field(text: str, low: int, high: int, names: dict[str, int]) -> tuple[frozenset[int], bool] | None:
    """(the values, whether a part was a plain star) of one field; None: invalid."""
    values: set[int] = set()
    star = False
    for part in (p for p in text.split(",") if p):
        parsed = _part(part, low, high, names)
        if parsed is None:
            return None
        values |= parsed[0]
        star = star or parsed[1]
    return frozenset(values), star


def _part(part: str, low: int, high: int, names: dict[str, int]) -> tuple[set[int], bool] | None:
    range_text, *steps = part.split("/")
    bounds = range_text.split("-")
    star = bounds[0] in ("*", "?")
    if star:
        start, end = low, high
    else:
        if len(bounds) > 2:
            return None
        first = _number(bounds[0], names)
        last = _number(bounds[-1], names)
        if first is None or last is None:
            return None
        start, end = first, last
    step = 1
    if len(steps) > 1:
        return None
    if steps:
        parsed_step = _number(steps[0], {})
        if parsed_step is None:
            return None
        step = parsed_step
        if len(bounds) == 1:
            end = high
        if step > 1:
            star = False
    if start < low or end > high or start > end or step == 0:
        return None
    return set(range(start, end + 1, step)), star


def _number(text: str, names: dict[str, int]) -> int | None:
    if text.lower() in names:
        return names[text.lower()]
    if _INT.fullmatch(text) is None or int(text) < 0:
        return None
    return int(text)
