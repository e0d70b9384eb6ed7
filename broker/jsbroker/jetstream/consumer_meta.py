"""A consumer's metadata file: its name, creation time and config, written beside its state so it comes back
after a restart (`Consumer.save_meta`; a restore writes the same for the consumers of a snapshot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsbroker import store as storage


def consumer_meta(name: str, created_ns: int, config: dict[str, Any]) -> bytes:
    """What `save_meta` writes (a restore writes the same for the consumers of a snapshot)."""
    return json.dumps({"name": name, "created": created_ns, "config": config}).encode()


def load_meta(directory: Path) -> tuple[str, int, dict[str, Any]] | None:
    """(name, created ns, config JSON) saved by `Consumer.save_meta`, or None when there is none."""
    raw = storage.load_meta(directory)
    if raw is None:
        return None
    data = json.loads(raw)
    return data["name"], int(data["created"]), data["config"]
