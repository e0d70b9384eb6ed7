"""Kubernetes Events posted on our resources: one function per thing worth telling a human.

Reasons are CamelCase constants so `kubectl get events --field-selector reason=...` works.
"""

from __future__ import annotations

from typing import Any

import kopf

CREATED, UPDATED, DELETED, ADOPTED, DRIFT_REPAIRED = "Created", "Updated", "Deleted", "Adopted", "DriftRepaired"
RESET_SUCCEEDED, RESET_FAILED = "ResetSucceeded", "ResetFailed"
BROKER_UNAVAILABLE, SERVER_ERROR, DELETE_BLOCKED = "BrokerUnavailable", "ServerError", "DeleteBlocked"


def normal(body: Any, reason: str, message: str) -> None:
    kopf.event(body, type="Normal", reason=reason, message=message)


def warning(body: Any, reason: str, message: str) -> None:
    kopf.event(body, type="Warning", reason=reason, message=message)
