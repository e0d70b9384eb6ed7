"""The kopf layer: handlers for Stream and Consumer resources (thin glue from kopf's kwargs to `reconcile`
and back) and kopf's own settings. Only this package (and the command that starts kopf) imports kopf.

`register(registry, settings)` puts every handler on one registry, so no module-level state or
decorator side effects exist at import time.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from .. import state_storage
from . import common
from ..settings import Settings


def register(registry: kopf.OperatorRegistry, settings: Settings) -> None:
    from . import connections, consumers, streams

    # A plain registry has no fallback login: use the kubernetes client's (kubeconfig or in-cluster).
    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    streams.register(registry, settings)
    consumers.register(registry, settings)
    connections.register(registry, settings)

    # kopf waits up to 5 s at exit for every task started after it (the NATS clients' readers among
    # them): stop the operator's loops and close the connections as kopf stops, so it exits at once
    # (a standby takes the Lease only after that).
    @kopf.on.cleanup(registry=registry)
    async def shutdown(memo: kopf.Memo, **_: Any) -> None:
        await memo["shutdown"]()


scheduled = common.scheduled


def kopf_settings(settings: Settings) -> kopf.OperatorSettings:
    """kopf's own settings: state under `state.jsoperator.io` annotations (so changes of the users'
    `jsoperator.io/` annotations are changes to kopf), Events only when we post them."""
    ks = kopf.OperatorSettings()
    ks.persistence.finalizer = settings.finalizer
    ks.persistence.progress_storage = state_storage.progress_storage()
    ks.persistence.diffbase_storage = state_storage.DiffBaseStorage()
    ks.posting.loggers = False
    ks.posting.level = logging.INFO
    ks.watching.server_timeout = 300
    ks.networking.request_timeout = 30
    return ks
