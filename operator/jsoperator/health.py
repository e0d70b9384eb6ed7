"""Liveness: kopf serves `/healthz` on the health port and runs these probes; a failing probe fails the check.

The operator is alive when kopf's loop runs (implicit) and no pooled broker connection is stuck
closed; an unreachable broker is not a liveness failure (restarting the pod would not help).
"""

from __future__ import annotations

from typing import Any

import kopf

from . import connection


def register(registry: kopf.OperatorRegistry, pool: connection.Pool) -> None:
    @kopf.on.probe(id="brokers", registry=registry)
    def brokers(**_: Any) -> str:
        return "connected" if pool.connected() else "reconnecting"


def endpoint(port: int | None) -> str | None:
    return f"http://0.0.0.0:{port}/healthz" if port else None
