"""Configured passwords and tokens, compared as nats-server compares them: a bcrypt hash (`$2a$11$...`,
as `nats server passwd` makes) is checked with bcrypt, anything else in constant time. Pure."""

from __future__ import annotations

import hmac
import re

_BCRYPT = re.compile(r"\$2[abxy]\$\d{2}\$.*")  # nats-server's test for a hashed secret


def is_bcrypt(secret: str) -> bool:
    return _BCRYPT.fullmatch(secret) is not None


def matches(given: str, configured: str) -> bool:
    """Whether a client's secret is the configured one (a client that sends the hash itself is refused)."""
    if is_bcrypt(configured):
        import bcrypt  # only where a hash is configured: an unhashed config never pays for the import

        try:
            return bcrypt.checkpw(given.encode(), configured.encode())
        except ValueError:  # a malformed hash, or a secret bcrypt cannot take (over 72 bytes)
            return False
    return hmac.compare_digest(given.encode(), configured.encode())


def plaintext(passwords: list[str | None]) -> bool:
    """Whether nats-server would warn "Plaintext passwords detected" (a set password that is not a hash)."""
    return any(p is not None and not is_bcrypt(p) for p in passwords)
