"""Writing `$JS.API` answers: the compact JSON every answer and error body is, the prefix of its `type`, and
the counts of answers and errors that `$JS.API.INFO` and /jsz report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

TYPE_PREFIX = "io.nats.jetstream.api.v1."


def dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(slots=True)
class ApiCounts:
    """Requests answered, and how many of them with an error."""

    total: int = 0
    errors: int = 0
