"""The ``jsoperator.io/`` annotations users put on a Stream or Consumer, and what they ask for.

Owns the annotation names, the parsing of their values (with errors that say what to write instead),
and the "each distinct reset value is executed exactly once" decision:

- ``jsoperator.io/pause-reconciliation: "true"``: change nothing on the server (condition ReconciliationPaused);
- ``jsoperator.io/managed: "false"``: never touch the server object, not even on delete (condition Unmanaged);
- ``jsoperator.io/reset-to-sequence``: ``"<N>"`` resets the consumer to stream sequence N, ``"0"`` to its
  ack floor; ``jsoperator.io/reset-to-time``: ``"<RFC 3339 time>"`` resets to the first message at or
  after that time. Either value may end in ``@<token>`` so the same target can be requested again.
- ``jsoperator.io/unpin``: ``"<group>"`` unpins the client pinned in that priority group of a
  ``pinnedClient`` consumer (the next pull request in the group gets pinned); ``@<token>`` as above.

A reset is executed when its request string (``reset-to-sequence=42@b``) differs from
``status.lastReset.request`` (an unpin: ``unpin=jobs@b`` and ``status.lastUnpin.request``); the
annotation stays in place (GitOps would re-add it), so re-applying the same value is a no-op. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

PREFIX = "jsoperator.io/"
PAUSE = PREFIX + "pause-reconciliation"
MANAGED = PREFIX + "managed"
RESET_TO_SEQUENCE = PREFIX + "reset-to-sequence"
RESET_TO_TIME = PREFIX + "reset-to-time"
UNPIN = PREFIX + "unpin"

_TOKEN = re.compile(r"^[A-Za-z0-9._-]{1,63}$")
_SEQUENCE = re.compile(r"^[0-9]{1,20}$")
_MAX_SEQUENCE = 2**64 - 1
# RFC 3339: date, 'T', time, optional fraction, and a zone (Z or +hh:mm) - no zone-less local times.
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


class AnnotationError(ValueError):
    """An annotation value the operator cannot act on; the message says what to write instead."""


@dataclass(frozen=True)
class ResetRequest:
    """One reset annotation, parsed."""

    kind: Literal["sequence", "time"]
    request: str  # the identity recorded in status.lastReset.request, e.g. "reset-to-sequence=42@b"
    sequence: int | None = None  # for kind "sequence"; 0 means the ack floor
    time: datetime | None = None  # for kind "time"
    token: str | None = None

    @property
    def annotation(self) -> str:
        return _annotation_of(self.request)


@dataclass(frozen=True)
class UnpinRequest:
    """One unpin annotation, parsed."""

    request: str  # the identity recorded in status.lastUnpin.request, e.g. "unpin=jobs@b"
    group: str
    token: str | None = None

    @property
    def annotation(self) -> str:
        return _annotation_of(self.request)


def _annotation_of(request: str) -> str:
    """The annotation a recorded request (``reset-to-sequence=42@b``) came from."""
    return PREFIX + request.partition("=")[0]


def is_paused(annotations: Mapping[str, str] | None) -> bool:
    return _flag(annotations, PAUSE, default=False)


def is_managed(annotations: Mapping[str, str] | None) -> bool:
    return _flag(annotations, MANAGED, default=True)


def _flag(annotations: Mapping[str, str] | None, name: str, *, default: bool) -> bool:
    raw = (annotations or {}).get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise AnnotationError(f'{name} must be "true" or "false", not {raw!r}')
    return value == "true"


def reset_request(annotations: Mapping[str, str] | None) -> ResetRequest | None:
    """The reset the annotations ask for (None when there is none); AnnotationError when malformed."""
    annotations = annotations or {}
    present = [name for name in (RESET_TO_SEQUENCE, RESET_TO_TIME) if name in annotations]
    if len(present) > 1:
        raise AnnotationError(
            f"set only one of {RESET_TO_SEQUENCE} and {RESET_TO_TIME}: remove one of them"
        )
    if not present:
        return None
    name = present[0]
    raw = annotations[name].strip()
    target, token = _split_token(name, raw)
    request = f"{name.removeprefix(PREFIX)}={raw}"
    if name == RESET_TO_SEQUENCE:
        return ResetRequest("sequence", request, sequence=_parse_sequence(raw, target), token=token)
    return ResetRequest("time", request, time=_parse_time(raw, target), token=token)


def pending_reset(annotations: Mapping[str, str] | None, last: Mapping[str, Any] | None) -> ResetRequest | None:
    """The reset still to execute: the annotation's request unless ``status.lastReset`` already holds it.

    A Failed record counts as executed too (no retry loop); a broker that could not be reached must not
    be recorded, so the reset runs once it is back.
    """
    wanted = reset_request(annotations)
    return None if wanted is None or _executed(wanted.request, last) else wanted


def unpin_request(annotations: Mapping[str, str] | None) -> UnpinRequest | None:
    """The unpin the annotations ask for (None when there is none); AnnotationError when malformed.

    Whether the group is one of the consumer's is checked against its spec when the unpin runs (unpin.py)."""
    raw = (annotations or {}).get(UNPIN)
    if raw is None:
        return None
    raw = raw.strip()
    group, token = _split_token(UNPIN, raw)
    if not group:
        raise AnnotationError(
            f'{UNPIN} must name one of the consumer\'s priority groups (spec.priorityGroups), optionally with '
            f'"@token" ("jobs@again"), not {raw!r}'
        )
    return UnpinRequest(f"{UNPIN.removeprefix(PREFIX)}={raw}", group, token)


def pending_unpin(annotations: Mapping[str, str] | None, last: Mapping[str, Any] | None) -> UnpinRequest | None:
    """The unpin still to execute: the annotation's request unless ``status.lastUnpin`` already holds it
    (a Failed record counts as executed too, as for resets)."""
    wanted = unpin_request(annotations)
    return None if wanted is None or _executed(wanted.request, last) else wanted


def _executed(request: str, last: Mapping[str, Any] | None) -> bool:
    return (last or {}).get("request") == request


def _split_token(name: str, raw: str) -> tuple[str, str | None]:
    target, sep, token = raw.rpartition("@")
    if not sep:
        return raw, None
    if not _TOKEN.match(token):
        raise AnnotationError(
            f"{name}: the part after @ in {raw!r} must be 1-63 letters, digits, '.', '_' or '-' "
            "(it only makes the value distinct, e.g. 42@retry2)"
        )
    return target, token


def _parse_sequence(raw: str, target: str) -> int:
    if not _SEQUENCE.match(target) or int(target) > _MAX_SEQUENCE:
        raise AnnotationError(
            f'{RESET_TO_SEQUENCE} must be a stream sequence number such as "42" ("0" = the ack floor), '
            f'optionally with "@token" ("42@again"), not {raw!r}'
        )
    return int(target)


def _parse_time(raw: str, target: str) -> datetime:
    problem = f"{RESET_TO_TIME} must be an RFC 3339 time with a zone such as \"2026-01-02T15:04:05Z\", optionally " \
        f"with \"@token\", not {raw!r}"
    if not _RFC3339.match(target):
        raise AnnotationError(problem)
    try:
        return datetime.fromisoformat(target.upper().replace("Z", "+00:00"))
    except ValueError:
        raise AnnotationError(problem) from None
