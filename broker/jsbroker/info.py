"""nats-server's INFO line: the fields it sends, in its order (the Go `Info` struct's), for the first INFO,
the one after the first PONG (`connect_info`) and lame duck mode's (`ldm`).

Two fields are jsbroker's own, honestly: `go` names the Python runtime that runs the server
("cpython3.11.9", the shape of Go's "go1.27.2": clients keep it as a string, none parses it; nats-core
requires the key), and `git_commit` is left out (nats-server omits it when built without one too).
`xkey` is an x25519 public key in NATS' encoding, fresh per start: the key auth callout answers may be sealed
to. With a callout configured it is the server's real key (auth_callout.ServerKeys); without one no private
half is kept (generating a real pair costs an import of PyNaCl at every start) and nothing is sealed to it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .nkeys import curve_public_key

PROTO = 1
API_LEVEL = 5  # JetStream API level (nats-server 2.15's), sent with and without JetStream as nats-server does
RUNTIME = f"{sys.implementation.name}{sys.version.split()[0]}"  # as platform's two calls (its import: ~3 ms a start)


def server_fields(*, server_id: str, server_name: str, version: str, host: str, port: int, auth_required: bool,
                  tls: dict[str, bool], max_payload: int, jetstream: bool) -> dict[str, Any]:
    """The fields before the client's own (client_id...), in nats-server's order."""
    info: dict[str, Any] = {"server_id": server_id, "server_name": server_name, "version": version, "proto": PROTO,
                            "go": RUNTIME, "host": host, "port": port, "headers": True}
    if auth_required:
        info["auth_required"] = True
    info.update(tls)
    info["max_payload"] = max_payload
    if jetstream:
        info["jetstream"] = True
    return info


def new_xkey() -> str:
    return curve_public_key(os.urandom(32))


def info_line(head: dict[str, Any], *, client_id: int, client_ip: str, nonce: str, domain: str | None, xkey: str,
              ldm: bool = False, connect_info: bool = False, account: str = "", system: bool = False) -> bytes:
    """`INFO {...} \\r\\n` for one client: `head` (server_fields), then the client's and the later fields."""
    info = dict(head, client_id=client_id, client_ip=client_ip)
    if nonce and not (ldm or connect_info):  # the first INFO only: that is the one the client signs
        info["nonce"] = nonce
    if domain:
        info["domain"] = domain
    if ldm:
        info["ldm"] = True
    if connect_info:  # the INFO after the first PONG: which account the client is bound to
        info["connect_info"] = True
        info["remote_account"] = account
        if system:  # the client is bound to the system account
            info["acc_is_sys"] = True
    info["api_lvl"] = API_LEVEL
    info["xkey"] = xkey
    return b"INFO " + json.dumps(info, separators=(",", ":")).encode() + b" \r\n"
