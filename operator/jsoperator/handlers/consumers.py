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
    def consumers_by_stream(**kwargs: Any) -> dict[tuple[str, str], str]:
        stream = str(kwargs["spec"].get("streamName") or "")
        return {(kwargs["namespace"], stream): kwargs["name"]}

    async def on_delete(**kwargs: Any) -> None:
        await common.delete_handler("Consumer", kwargs["body"], kwargs["patch"], kwargs["memo"], kwargs["retry"], [],
                                    kwargs)

    common.register_delete(registry, settings, "consumers", on_delete)
