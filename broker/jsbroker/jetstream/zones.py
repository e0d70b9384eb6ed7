"""Time zones by name, found as nats-server's Go `time.LoadLocation` finds them (for `Nats-Schedule-Time-Zone`).

`UTC` is UTC; `Local` is the process's zone (`$TZ`: unset reads /etc/localtime, empty or `UTC` is UTC, a
name or `:name` or an absolute path is read like any zone, UTC when unreadable); any other name is a TZif
file under `$ZONEINFO` (a directory; Go also takes a zip there, jsbroker does not) or else the system's
zone directories (`zoneinfo.TZPATH`, /usr/share/zoneinfo first), taken as the file
system resolves it (so `Europe//Berlin` works, as in Go) but never with `..` or a leading slash. Only when
no directory has it does the PyPI `tzdata` package answer (nats-server, built without Go's embedded
database, would refuse the zone on a host without one; jsbroker then knows more zones, never other times).
Names are case-sensitive, as the files are. Loaded zones are kept for the process's life.
"""

from __future__ import annotations

import functools
import os
import zoneinfo
from datetime import timezone, tzinfo


@functools.lru_cache(maxsize=256)
def load(name: str) -> tzinfo | None:
    """The zone named `name`; None when nats-server would refuse it."""
    if name == "UTC":
        return timezone.utc
    if name == "Local":
        return _local()
    if not name or ".." in name or name[0] in "/\\":
        return None
    first = os.environ.get("ZONEINFO")
    return _from_directories(name, (first,) if first else ())


def _from_directories(name: str, first: tuple[str, ...] = ()) -> tzinfo | None:
    for directory in (*first, *zoneinfo.TZPATH):
        try:
            return _from_file(os.path.join(directory, name), name)
        except OSError:  # none there (or a directory): the next one
            continue
    try:
        return zoneinfo.ZoneInfo(name)
    except (ValueError, OSError, zoneinfo.ZoneInfoNotFoundError):
        return None


def _from_file(path: str, key: str) -> tzinfo | None:
    """The zone in a TZif file; None: the file is malformed. OSError: no such file."""
    with open(path, "rb") as file:
        try:
            return zoneinfo.ZoneInfo.from_file(file, key=key)
        except ValueError:
            return None


def _local() -> tzinfo:
    tz = os.environ.get("TZ")
    name = "/etc/localtime" if tz is None else tz[1:] if tz.startswith(":") else tz
    found = None
    if name.startswith("/"):
        try:
            found = _from_file(name, "Local")
        except OSError:
            pass
    elif name and name != "UTC":
        found = _from_directories(name)
    return found or timezone.utc
