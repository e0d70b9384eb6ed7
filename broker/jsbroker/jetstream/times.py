"""Time formats of the JetStream API (pure): RFC 3339 with nanoseconds and `Z`, and Go durations.

JSON times are UTC RFC 3339 with up to nine fraction digits, trailing zeros dropped (Go's RFC3339Nano);
the zero time `0001-01-01T00:00:00Z` stands for "unset" and maps to 0 ns here. Durations in JSON are ns
integers; Go duration strings ("1m30s", "250ms") appear in headers (`Nats-TTL`) and some texts.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone

ZERO_TIME = "0001-01-01T00:00:00Z"
_NS_PER_S = 1_000_000_000
_RFC3339 = re.compile(
    r"^(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)$"
)
_DURATION_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": _NS_PER_S,
                   "m": 60 * _NS_PER_S, "h": 3600 * _NS_PER_S}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def now_ns() -> int:
    return time.time_ns()


def rfc3339(ns: int, offset_s: int = 0) -> str:
    """RFC 3339 with nanoseconds, in UTC (`Z`) or at a zone's offset from it (Go's RFC3339Nano, which
    drops an offset's seconds); 0 gives the zero time."""
    if ns <= 0:
        return ZERO_TIME
    seconds, frac = divmod(ns, _NS_PER_S)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds + offset_s))
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    if not offset_s:
        return text + "Z"
    hours, minutes = divmod(abs(offset_s) // 60, 60)
    return f"{text}{'-' if offset_s < 0 else '+'}{hours:02d}:{minutes:02d}"


def parse_rfc3339(text: str) -> int:
    """ns since the epoch; the zero time (and anything before 1970) gives 0. ValueError when malformed."""
    match = _RFC3339.match(text)
    if not match:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second, frac, zone = match.groups()
    tz = timezone.utc
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=tz)
    whole = int(moment.timestamp())
    if whole < 0:
        return 0
    return whole * _NS_PER_S + int((frac or "0").ljust(9, "0"))


def parse_duration(text: str) -> int:
    """A Go duration string ("1h2m3.5s", "-250ms", "0") in ns. ValueError when malformed (as Go's, also
    with blanks around it)."""
    body = text
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-")
    if body == "0":
        return 0
    total, pos = 0, 0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if not match:
            raise ValueError(f"not a duration: {text!r}")
        number, unit = match.groups()
        whole, _, frac = number.partition(".")
        scale = _DURATION_UNITS[unit]
        total += int(whole or "0") * scale + (int(frac) * scale // 10 ** len(frac) if frac else 0)
        pos = match.end()
    if not body:
        raise ValueError(f"not a duration: {text!r}")
    return sign * total


def format_duration(ns: int) -> str:
    """Go's Duration.String(): "1h2m3.5s", "1.5ms", "0s"."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < _NS_PER_S:
        for unit, scale in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= scale:
                return sign + _decimal(ns, scale) + unit
    hours, rest = divmod(ns, 3600 * _NS_PER_S)
    minutes, rest = divmod(rest, 60 * _NS_PER_S)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "")
    return sign + text + _decimal(rest, _NS_PER_S) + "s"


def _decimal(value: int, scale: int) -> str:
    whole, frac = divmod(value, scale)
    if not frac:
        return str(whole)
    digits = len(str(scale)) - 1
    return f"{whole}." + f"{frac:0{digits}d}".rstrip("0")


def parse_ttl(text: str) -> int:
    """Nats-TTL: seconds, a Go duration >= 1s, or "never" (-1); -2 marks an invalid value (10165 later)."""
    if text.lower() == "never":
        return -1
    try:
        ns = parse_duration(text)
        return ns // _NS_PER_S if ns >= _NS_PER_S else -2
    except ValueError:
        pass
    return int(text) if text.isascii() and text.isdigit() else -2  # Go's digits: ASCII only
