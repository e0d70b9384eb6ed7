"""kopf handlers for Stream resources, and for KeyValue and ObjectStore buckets (each a stream with a fixed
mapping): reconcilers (common) plus delete, which waits for the Consumer resources of the stream (the
`consumers_by_stream` index kept by handlers.consumers) to be gone."""

from __future__ import annotations

from typing import Any

import kopf

from .. import buckets, kubeapi, reconcile
from ..settings import Settings
from . import common


def register(registry: kopf.OperatorRegistry, settings: Settings) -> None:
    for kind in buckets.STREAM_KINDS:
        plural = kubeapi.PLURALS[kind]
        common.register_reconcilers(registry, settings, kind, plural)
        common.register_delete(registry, settings, plural, _deleter(kind))


def _deleter(kind: reconcile.Kind) -> Any:
    async def on_delete(**kwargs: Any) -> None:
        body: kopf.Body = kwargs["body"]
        index: kopf.Index[tuple[str, str], str] = kwargs["consumers_by_stream"]
        meta = body["metadata"]
        stream = buckets.stream_of(kind, body.get("spec") or {}, meta["name"])
        left = list(index.get((meta["namespace"], stream), []))
        await common.delete_handler(kind, body, kwargs["patch"], kwargs["memo"], kwargs["retry"], left,
                                    kwargs)

    return on_delete
