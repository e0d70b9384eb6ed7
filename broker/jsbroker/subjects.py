"""NATS subject rules (pure functions): validity, wildcard matching and overlap.

Tokens are separated by "."; no token may be empty or contain whitespace. "*" is a whole token matching
exactly one token; ">" is a whole last token matching one or more tokens ("foo.>" does not match "foo").
Used by the subject index, the stores (subject filters) and JetStream config checks alike.
"""

from __future__ import annotations

import re
from functools import lru_cache

_WHITESPACE_RE = re.compile(r"[ \t\r\n\f\v]")


def tokens(subject: str) -> list[str]:
    return subject.split(".")


def is_valid_subject(subject: str) -> bool:
    """A subject a client may subscribe to (wildcards allowed in their proper places)."""
    if not subject or _WHITESPACE_RE.search(subject):
        return False
    toks = subject.split(".")
    if "" in toks:
        return False
    if ">" in subject:  # only as the whole last token
        return toks[-1] == ">" and subject.count(">") == 1
    return True


def is_literal(subject: str) -> bool:
    """No wildcard tokens (a "*" or ">" inside a longer token is a literal character)."""
    return not any(tok in ("*", ">") for tok in subject.split("."))


def is_valid_publish_subject(subject: str) -> bool:
    return is_valid_subject(subject) and is_literal(subject)


@lru_cache(maxsize=65536)
def _pattern(filter_subject: str) -> tuple[tuple[str, ...], bool]:
    toks = filter_subject.split(".")
    if toks[-1] == ">":
        return tuple(toks[:-1]), True
    return tuple(toks), False


def subject_matches(filter_subject: str, subject: str) -> bool:
    """Whether the literal `subject` matches `filter_subject` (which may hold wildcards)."""
    if filter_subject == subject or filter_subject == ">":
        return True
    pattern, tail = _pattern(filter_subject)
    toks = subject.split(".")
    if tail:
        if len(toks) <= len(pattern):
            return False
    elif len(toks) != len(pattern):
        return False
    for want, got in zip(pattern, toks):
        if want != "*" and want != got:
            return False
    return True


def subjects_overlap(a: str, b: str) -> bool:
    """Whether some literal subject could match both patterns."""
    ta, tb = a.split("."), b.split(".")
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == ">" or y == ">":
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and x != "*" and y != "*":
            return False
    return True


def is_subset(sub: str, sup: str) -> bool:
    """Whether every subject matched by `sub` is also matched by `sup`."""
    ts, tp = sub.split("."), sup.split(".")
    for i, p in enumerate(tp):
        if p == ">":
            return len(ts) > i
        if i >= len(ts):
            return False
        s = ts[i]
        if s == ">":
            return False
        if p != "*" and (s == "*" or s != p):
            return False
    return len(ts) == len(tp)
