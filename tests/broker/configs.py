"""Write the same settings as one nats-server config file, which both servers read (`-c`), for `server_factory`."""

from __future__ import annotations

import json
import tempfile
from typing import Any


def config_file(top: dict[str, Any], authorization: dict[str, Any] | None = None) -> str:
    """Path of a fresh config file; durations as strings ("500ms"), sizes as byte counts."""
    lines = [f"{k}: {json.dumps(v)}" for k, v in top.items()]
    if authorization:
        lines.append("authorization {")
        lines += [f"  {k}: {json.dumps(v)}" for k, v in authorization.items()]
        lines.append("}")
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        return f.name
