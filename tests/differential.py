"""Helpers to compare jsbroker's answers with nats-server's: `normalise` volatile values away.

`normalise(obj)` returns a copy of a JSON-like value in which values that legitimately differ between
two servers or two runs (timestamps, server ids/names, nuid-like ids, versions, ports, client ids,
resource counters) are replaced by placeholders such as "<time>", so `normalise(a) == normalise(b)`
compares only what must match. Extra keys to blank can be passed in `volatile`.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

# Keys whose values are run- or server-specific; the placeholder keeps the key and its presence.
VOLATILE_KEYS = {
    "server_id": "<server_id>", "server_name": "<server_name>", "id": "<id>", "name_server": "<server_name>",
    "version": "<version>", "go": "<go>", "git_commit": "<git_commit>", "xkey": "<xkey>", "nonce": "<nonce>",
    "host": "<host>", "port": "<port>", "http_port": "<port>", "client_id": "<client_id>", "cid": "<client_id>",
    "client_ip": "<ip>", "ip": "<ip>", "now": "<time>", "start": "<time>", "created": "<time>", "ts": "<time>",
    "time": "<time>", "first_ts": "<time>", "last_ts": "<time>", "last_active": "<time>", "uptime": "<uptime>",
    "mem": "<n>", "cpu": "<n>", "rtt": "<rtt>", "idle": "<idle>", "connect_urls": "<urls>",
    "config_load_time": "<time>", "_nats.ver": "<version>",
}
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
_SERVER_ID = re.compile(r"^N[A-Z2-7]{55}$")
_NUID = re.compile(r"^[A-Za-z0-9]{22}$")
ZERO_TIME = "0001-01-01T00:00:00Z"


def normalise(obj: Any, volatile: Iterable[str] = ()) -> Any:
    keys = dict(VOLATILE_KEYS)
    keys.update({k: f"<{k}>" for k in volatile})
    return _walk(obj, keys)


def _walk(obj: Any, keys: dict[str, str]) -> Any:
    if isinstance(obj, dict):
        return {k: (keys[k] if k in keys and obj[k] not in (None, ZERO_TIME) else _walk(v, keys)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_walk(v, keys) for v in obj]
    if isinstance(obj, str):
        if obj != ZERO_TIME and _TIME.match(obj):
            return "<time>"
        if _SERVER_ID.match(obj):
            return "<server_id>"
        if _NUID.match(obj) and any(c.isdigit() for c in obj) and any(c.isalpha() for c in obj):
            return "<nuid>"
    return obj
