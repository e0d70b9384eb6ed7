"""kopf handlers for Consumer resources: reconcilers (common; they also run reset annotations), delete,
and the `consumers_by_stream` index that Stream deletion waits on."""

from __future__ import annotations

from typing import Any

import kopf

from ..settings import Settings
from . import common


def register(registry: kopf.OperatorRegistry, settings: Settings) -> None:
    common.register_reconcilers(registry, settings, "Consumer", "consumers")

    @kopf.index(common.GROUP, common.VERSION, "consumers", id="consumers_by_stream", registry=registry)
    def consumers_by_stream(namespace: str, name: str, spec: kopf.Spec, **_: Any) -> dict[tuple[str, str], str]:
        return {(namespace, str(spec.get("streamName") or "")): name}

    @kopf.on.delete(common.GROUP, common.VERSION, "consumers", id="delete", registry=registry)
    async def on_delete(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **_: Any) -> None:
        await common.delete_handler("Consumer", body, patch, memo, retry, [])
