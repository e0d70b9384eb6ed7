"""Write the same settings as a nats-server config file or a jsbroker TOML file, for `server_factory`."""

from __future__ import annotations

import json
import tempfile
from typing import Any

from tests.servers import NATS_SERVER


def _toml_value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)


def config_file(kind: str, top: dict[str, Any], authorization: dict[str, Any] | None = None) -> str:
    """Path of a fresh config file for `kind`; durations as strings ("500ms"), sizes as byte counts."""
    if kind == NATS_SERVER:
        lines = [f"{k}: {json.dumps(v)}" for k, v in top.items()]
        if authorization:
            lines.append("authorization {")
            lines += [f"  {k}: {json.dumps(v)}" for k, v in authorization.items()]
            lines.append("}")
        suffix = ".conf"
    else:
        lines = [f"{k} = {_toml_value(v)}" for k, v in top.items()]
        if authorization:
            lines.append("[authorization]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in authorization.items()]
        suffix = ".toml"
    with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False) as f:
        f.write("\n".join(lines) + "\n")
        return f.name
