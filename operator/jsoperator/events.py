"""Kubernetes Events posted on our resources: their reasons and shape (handlers/ posts them through kopf).

Reasons are CamelCase constants so `kubectl get events --field-selector reason=...` works.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

CREATED, UPDATED, ADOPTED, DRIFT_REPAIRED = "Created", "Updated", "Adopted", "DriftRepaired"
DELETED, LEFT_ON_SERVER, DELETE_BLOCKED = "Deleted", "LeftOnServer", "DeleteBlocked"
RESET_SUCCEEDED, RESET_FAILED = "ResetSucceeded", "ResetFailed"
UNPIN_SUCCEEDED, UNPIN_FAILED = "UnpinSucceeded", "UnpinFailed"
FAILED = "ReconcileFailed"
DEPRECATED = "Deprecated"
RECREATED = "Recreated"
OUT_OF_STORAGE = "OutOfStorage"


@dataclasses.dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str

