"""The cron expressions of message schedules (pure), with nats-server 2.15.1's syntax and search, in UTC.

Six fields `second minute hour day-of-month month day-of-week`, each a comma-separated list of `*` or `?`
(every value), `N`, `N-M`, with an optional `/step` (`N/step` runs to the field's maximum); months and
weekdays also by their three-letter English names (any case), Sunday 0. Day of month and day of week
combine with OR, unless one of them is a plain `*`/`?` (then AND, so `*` does not widen the other).
`next_after` is the first whole second after a time that matches; a pattern that matches nothing within
five years (Feb 30) is invalid, as nats-server's search gives up there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

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

    def next_after(self, ts_ns: int) -> int | None:
        """ns of the first matching second after `ts_ns` (None: none within the search range)."""
        t = datetime.fromtimestamp(ts_ns // _NS, timezone.utc) + timedelta(seconds=1)
        limit = t.year + _SEARCH_YEARS
        while t.year <= limit:
            if t.month not in self.months:
                t = datetime(t.year + t.month // 12, t.month % 12 + 1, 1, tzinfo=timezone.utc)
            elif not self.day_matches(t):
                t = datetime(t.year, t.month, t.day, tzinfo=timezone.utc) + timedelta(days=1)
            elif t.hour not in self.hours:
                t = t.replace(minute=0, second=0) + timedelta(hours=1)
            elif t.minute not in self.minutes:
                t = t.replace(second=0) + timedelta(minutes=1)
            elif t.second not in self.seconds:
                t += timedelta(seconds=1)
            else:
                return int(t.timestamp()) * _NS
        return None


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
