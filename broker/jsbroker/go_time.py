"""Go's time values as nats-server writes them in its JSON (monitoring, system account events)."""

from __future__ import annotations

from datetime import datetime, timezone


def rfc3339(epoch: float) -> str:
    """A time.Time: UTC with nanoseconds (microseconds here)."""
    dt = datetime.fromtimestamp(epoch, timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}000Z"


def go_duration(seconds: float) -> str:
    """An uptime as nats-server prints it: "1d2h3m4s", "5m0s", "0s"."""
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    out = f"{days}d" if days else ""
    if days or hours:
        out += f"{hours}h"
    if days or hours or minutes:
        out += f"{minutes}m"
    return out + f"{s}s"


def duration_string(ns: int) -> str:
    """Go's time.Duration.String(): "0s", "850ns", "1.5µs", "12.345ms", "1m2.5s", "1h0m0s"."""
    if ns == 0:
        return "0s"
    sign, u = ("-" if ns < 0 else ""), abs(ns)
    if u < 1_000_000_000:  # below a second: the largest unit that keeps an integer part
        for scale, unit in ((1_000_000, "ms"), (1_000, "µs"), (1, "ns")):
            if u >= scale:
                return sign + _fraction(u, scale) + unit
    seconds, rest = divmod(u, 1_000_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    out = _fraction(seconds * 1_000_000_000 + rest, 1_000_000_000) + "s"
    if hours or minutes:
        out = f"{minutes}m" + out
    if hours:
        out = f"{hours}h" + out
    return sign + out


def _fraction(value: int, scale: int) -> str:
    whole, part = divmod(value, scale)
    digits = f"{part:0{len(str(scale)) - 1}d}".rstrip("0") if scale > 1 else ""
    return f"{whole}.{digits}" if digits else str(whole)
