"""`.creds` files and decorated JWT files, as `nsc` writes them: armoured blocks between dashed lines.

    -----BEGIN NATS USER JWT-----
    eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ...
    ------END NATS USER JWT------
    ...
    -----BEGIN USER NKEY SEED-----
    SUA...
    ------END USER NKEY SEED------

nats-io/jwt reads the first block as the JWT and the second as the seed; a file holding a bare JWT is
that JWT (nats-server's `operator: file.jwt` takes both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# a line of three or more dashes around a title, the content, and the closing dashed line
_BLOCK = re.compile(r"\s*(?:(?:-{3,}[^\n]*-{3,}\r?\n)(.+?)(?:\r?\n\s*-{3,}[^\n]*-{3,}\r?\n?))", re.DOTALL)


class CredsError(ValueError):
    """A creds or JWT file without what it should hold; the message says what is missing."""


@dataclass(frozen=True)
class Creds:
    jwt: str
    seed: str

    def __repr__(self) -> str:  # never the seed
        return f"Creds(jwt={self.jwt[:16]}...)"


def _blocks(text: str) -> list[str]:
    return [m.group(1).strip() for m in _BLOCK.finditer(text)]


def decorated_jwt(text: str) -> str:
    """The JWT in a decorated file (its first armoured block), or the text itself when it is a bare JWT."""
    blocks = _blocks(text)
    token = blocks[0] if blocks else text.strip()
    if not token.startswith("eyJ") or token.count(".") != 2:
        raise CredsError("no JWT found: expected a JWT (eyJ...) or a -----BEGIN ... JWT----- block")
    return token


def parse_creds(text: str) -> Creds:
    """A user's JWT and nkey seed from a `.creds` file."""
    blocks = _blocks(text)
    if len(blocks) < 2:
        raise CredsError("a creds file holds two blocks, the user JWT and the user's nkey seed; "
                         f"found {len(blocks)}")
    token = decorated_jwt(text)
    seed = blocks[1]
    if not seed.startswith("SU"):
        raise CredsError("the second block of a creds file must be a user nkey seed (SU...)")
    return Creds(token, seed)
