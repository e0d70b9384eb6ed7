"""Where kopf keeps its own state on our objects: annotations under `state.jsoperator.io/`, apart from
the user-facing `jsoperator.io/` annotations.

kopf leaves every annotation under its storage prefix out of an object's essence, so while its state
lived under `jsoperator.io/` a `kubectl annotate ... jsoperator.io/reset-to-sequence=3` was no change to
kopf and waited for the drift timer. Objects written by that version still carry the old state
annotations: their diff-base is read as a fallback (so nothing is created again), the essence is built
as if they were gone (so the user's annotations count at once), and they are removed with the next patch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf

PREFIX = "state.jsoperator.io"  # not "kopf.…": kopf marks (and so ignores) only prefixes without it
DIFFBASE_KEY = "last-handled-configuration"

_LEGACY_PREFIX = "jsoperator.io"
_LEGACY_DIFFBASE = f"{_LEGACY_PREFIX}/{DIFFBASE_KEY}"
# kopf's marker, its diff-base, and the progress records of our handler ids under the old prefix.
LEGACY_KEYS = frozenset(
    f"{_LEGACY_PREFIX}/{name}"
    for name in ("kopf-managed", DIFFBASE_KEY, "create", "update", "resume", "delete", "drift")
)


def _annotations(body: Mapping[str, Any]) -> Mapping[str, str]:
    return cast(Mapping[str, str], body.get("metadata", {}).get("annotations") or {})


def legacy_keys(body: Mapping[str, Any]) -> list[str]:
    """The old state annotations this object still carries."""
    return sorted(LEGACY_KEYS.intersection(_annotations(body)))


def drop_legacy(body: Mapping[str, Any], patch: kopf.Patch) -> None:
    """Remove the old state annotations with this patch."""
    for key in legacy_keys(body):
        patch.metadata.annotations[key] = None


def _without_legacy(body: kopf.Body) -> kopf.Body:
    if not legacy_keys(body):
        return body
    raw = dict(body)
    metadata = dict(raw["metadata"])
    metadata["annotations"] = {k: v for k, v in _annotations(body).items() if k not in LEGACY_KEYS}
    raw["metadata"] = metadata
    return kopf.Body(cast(kopf.RawBody, raw))


class DiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff-base under `state.jsoperator.io/`, reading and then removing the old one."""

    def __init__(self) -> None:
        super().__init__(prefix=PREFIX, key=DIFFBASE_KEY)

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return super().build(body=_without_legacy(body), extra_fields=extra_fields)

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        current = super().fetch(body=body)
        if current is not None:
            return current
        legacy = _annotations(body).get(_LEGACY_DIFFBASE)
        return cast(kopf.BodyEssence, json.loads(legacy)) if legacy else None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        super().store(body=body, patch=patch, essence=essence)
        drop_legacy(body, patch)


def progress_storage() -> kopf.ProgressStorage:
    return kopf.AnnotationsProgressStorage(prefix=PREFIX)
