"""Durations and sizes as users write them in a CR, and as JetStream wants them.

Owns the two textual unit formats of the CRDs and nothing else (pure, no I/O):

- durations: Go ``time.Duration`` strings (``500ms``, ``30s``, ``1h30m``, ``1.5h``) <-> integer
  nanoseconds, the form the JetStream API uses;
- sizes: an integer number of bytes or a Kubernetes-quantity-style string (``512Mi``, ``1Gi``, ``1G``,
  ``10k``) -> integer bytes.
"""

from __future__ import annotations

import re
from decimal import Decimal

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$|^0$"
SIZE_PATTERN = r"^[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei|k|K|M|G|T|P|E)?$"

_NS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)")
_DURATION_RE = re.compile(DURATION_PATTERN)

_BYTES_PER_SUFFIX = {
    "": 1,
    "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_SIZE_RE = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|K|M|G|T|P|E)?$")


def parse_duration(text: str) -> int:
    """``"1h30m"`` -> nanoseconds. Raises ValueError with the accepted format on bad input."""
    if not isinstance(text, str) or not _DURATION_RE.match(text):
        raise ValueError(
            f"invalid duration {text!r}: use a Go-style duration such as 500ms, 30s, 5m, 1h30m "
            "(units ns, us, ms, s, m, h, without sign or spaces)"
        )
    total = Decimal(0)
    for number, unit in _DURATION_PART.findall(text):
        total += Decimal(number) * _NS_PER_UNIT[unit]
    return int(total)


def format_duration(ns: int) -> str:
    """Nanoseconds -> the shortest readable Go-style string (``5400000000000`` -> ``1h30m``)."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    hours, rest = divmod(ns, _NS_PER_UNIT["h"])
    minutes, rest = divmod(rest, _NS_PER_UNIT["m"])
    seconds, rest = divmod(rest, _NS_PER_UNIT["s"])
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    if rest == 0:
        parts.append(f"{seconds}s" if seconds else "")
    elif seconds or hours or minutes:
        parts.append(f"{Decimal(seconds) + Decimal(rest) / 10**9:f}s")  # :f, never 1E-9
    elif rest % 1_000_000 == 0:
        parts.append(f"{rest // 1_000_000}ms")
    elif rest % 1_000 == 0:
        parts.append(f"{rest // 1_000}us")
    else:
        parts.append(f"{rest}ns")
    return sign + "".join(parts)


def parse_size(value: int | str) -> int:
    """``"1Gi"`` -> 1073741824; integers pass through (``-1`` means unlimited for stream limits)."""
    if isinstance(value, bool):
        raise ValueError(f"invalid size {value!r}: use an integer number of bytes or a string like 512Mi")
    if isinstance(value, int):
        return value
    match = _SIZE_RE.match(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(
            f"invalid size {value!r}: use an integer number of bytes or a quantity such as "
            "512Mi, 1Gi (powers of 1024) or 500M, 1G (powers of 1000)"
        )
    return int(match.group(1)) * _BYTES_PER_SUFFIX[match.group(2) or ""]
