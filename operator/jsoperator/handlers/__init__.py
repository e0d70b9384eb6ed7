"""kopf handlers for Stream and Consumer resources: thin glue from kopf's kwargs to `reconcile` and back.

`register(registry, settings)` puts every handler on one registry, so no module-level state or
decorator side effects exist at import time.
"""

from __future__ import annotations

from typing import Any

import kopf

from ..settings import Settings


def register(registry: kopf.OperatorRegistry, settings: Settings) -> None:
    from . import consumers, streams

    # A plain registry has no fallback login: use the kubernetes client's (kubeconfig or in-cluster).
    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    streams.register(registry, settings)
    consumers.register(registry, settings)
