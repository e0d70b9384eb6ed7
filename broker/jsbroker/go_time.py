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
