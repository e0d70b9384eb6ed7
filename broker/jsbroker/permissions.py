"""Per-user publish and subscribe permissions, applied the way nats-server applies them.

- Publish: the subject must match an `allow` pattern (when an allow list is given) and no `deny` pattern;
  otherwise the message is dropped and the client gets `-ERR 'Permissions Violation for Publish to
  "<subject>"'`, staying connected. Verdicts are cached per subject.
- Subscribe: the subscription's subject (wildcards compared token by token, as nats-server's sublist
  does) must match an allow pattern and no deny pattern, or the SUB is refused with `-ERR 'Permissions
  Violation for Subscription to "<subject>"'`. A wildcard subscription that a deny pattern overlaps is
  accepted, and the messages the deny pattern matches are not delivered to it.
- allow_responses: a user may publish to the reply subject of a request it received, `response_max`
  times within `response_expires` seconds, even where its publish permissions say no.

JetStream's API is subjects like any other ($JS.API.>, $JS.ACK.>), so the same rules govern it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .config import Permissions, SubjectRules
from .subjects import is_literal, subject_matches, subjects_overlap

_CACHE_LIMIT = 4096  # publish verdicts and answerable requests remembered per connection


def _allowed(rules: SubjectRules, subject: str) -> bool:
    if rules.allow is not None and not any(subject_matches(p, subject) for p in rules.allow):
        return False
    return not any(subject_matches(p, subject) for p in rules.deny)


class PermissionChecker:
    """One connection's permissions; created at CONNECT for a user that has them."""

    def __init__(self, permissions: Permissions) -> None:
        self.permissions = permissions
        self._publish_cache: dict[bytes, bool] = {}
        self._replies: dict[bytes, list[float]] = {}  # reply subject -> [uses left, deadline]
        self.tracks_replies = permissions.response_max > 0

    def can_publish(self, subject: bytes) -> bool:
        rules = self.permissions.publish
        if rules is None:
            return True
        verdict = self._publish_cache.get(subject)
        if verdict is None:
            verdict = _allowed(rules, subject.decode("utf-8", "replace"))
            if len(self._publish_cache) >= _CACHE_LIMIT:
                self._publish_cache.clear()
            self._publish_cache[subject] = verdict
        return verdict or self._use_reply(subject)

    def can_subscribe(self, subject: str) -> bool:
        rules = self.permissions.subscribe
        return rules is None or _allowed(rules, subject)

    def delivery_filter(self, subject: str) -> Callable[[bytes], bool] | None:
        """For a wildcard subscription that a deny pattern overlaps: a test of message subjects to hold back."""
        rules = self.permissions.subscribe
        if rules is None or is_literal(subject):
            return None
        overlapping = tuple(p for p in rules.deny if subjects_overlap(p, subject))
        if not overlapping:
            return None
        return lambda msg_subject: any(subject_matches(p, msg_subject.decode("utf-8", "replace")) for p in overlapping)

    # -- allow_responses ---------------------------------------------------------------------------------

    def note_request(self, reply: bytes) -> None:
        """A message with this reply subject was delivered to the user: it may answer it."""
        expires, now = self.permissions.response_expires, time.monotonic()
        if len(self._replies) >= _CACHE_LIMIT:  # requests never answered: forget expired, then the oldest
            self._replies = {k: v for k, v in self._replies.items() if not v[1] or v[1] > now}
            while len(self._replies) >= _CACHE_LIMIT:
                del self._replies[next(iter(self._replies))]
        self._replies[reply] = [self.permissions.response_max, now + expires if expires else 0.0]

    def _use_reply(self, subject: bytes) -> bool:
        entry = self._replies.get(subject)
        if entry is None:
            return False
        left, deadline = entry
        if deadline and time.monotonic() > deadline:
            del self._replies[subject]
            return False
        if left <= 1:
            del self._replies[subject]
        else:
            entry[0] = left - 1
        return True
