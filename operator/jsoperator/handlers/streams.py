"""kopf handlers for Stream resources: reconcilers (common) plus delete, which waits for the stream's
Consumer resources (the `consumers_by_stream` index kept by handlers.consumers) to be gone."""

from __future__ import annotations

from typing import Any

import kopf

from ..settings import Settings
from . import common


def register(registry: kopf.OperatorRegistry, settings: Settings) -> None:
    common.register_reconcilers(registry, settings, "Stream", "streams")

    async def on_delete(**kwargs: Any) -> None:
        body: kopf.Body = kwargs["body"]
        index: kopf.Index[tuple[str, str], str] = kwargs["consumers_by_stream"]
        meta = body["metadata"]
        name = (body.get("spec") or {}).get("name") or meta["name"]
        left = list(index.get((meta["namespace"], name), []))
        await common.delete_handler("Stream", body, kwargs["patch"], kwargs["memo"], kwargs["retry"], left,
                                    kwargs[common.claims_index("Stream")])

    common.register_delete(registry, settings, "streams", on_delete)
