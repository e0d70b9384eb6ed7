"""The connection resources (JetStreamConnection, ClusterJetStreamConnection) as the resources that name them
in `spec.connectionRef` (Stream, Consumer, KeyValue, ObjectStore) see them: which object a reference means, whether a cluster
connection grants the resource's namespace, and what a reference that cannot be used says.

A namespaced connection serves the resources of its own namespace and reads its Secrets there; a cluster
connection serves the namespaces its `allowedNamespaces` lists (names or globs) and reads its Secrets from
its `secretNamespace`. Pure: the connection object is read by credentials.py, the callers act on the result.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

from . import models

NAMESPACED, CLUSTER = "JetStreamConnection", "ClusterJetStreamConnection"
KINDS = (NAMESPACED, CLUSTER)
# On a ClusterJetStreamConnection: the --instance of the operator that serves it (several may run in a cluster).
INSTANCE_LABEL = "jsoperator.io/instance"
NOT_FOUND = "ConnectionNotFound"
NOT_GRANTED = "ConnectionNotGranted"
INVALID = "ConnectionInvalid"

Ref = tuple[str, str, str]
"""(kind, namespace, name) of a connection object; namespace "" for a cluster connection."""


class Unusable(Exception):
    """A connectionRef that cannot be used; `reason` is the Ready reason, the message says what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def ref_of(namespace: str, spec: Mapping[str, Any]) -> Ref | None:
    """The connection a resource's raw spec names in connectionRef (None: inline or the operator's own)."""
    ref = spec.get("connectionRef")
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    kind = str(ref.get("kind") or NAMESPACED)
    return kind, (namespace if kind == NAMESPACED else ""), str(ref["name"])


def ref_of_body(kind: str, body: Mapping[str, Any]) -> Ref:
    """The Ref of a connection object itself."""
    meta = body["metadata"]
    return kind, (str(meta.get("namespace") or "") if kind == NAMESPACED else ""), str(meta["name"])


def describe(ref: Ref) -> str:
    kind, namespace, name = ref
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def granted(patterns: Iterable[str], namespace: str) -> bool:
    return any(fnmatch.fnmatchcase(namespace, pattern) for pattern in patterns)


def may_serve(patterns: Iterable[str], watched: Iterable[str]) -> bool:
    """Does an operator watching `watched` (namespace globs; empty: all) serve a cluster connection granting
    `patterns`? Only if a granted namespace can be one it watches: two operators with their own namespaces
    never both hold one cluster connection's finalizer."""
    watched = tuple(watched)
    if not watched:
        return True
    return any(fnmatch.fnmatchcase(p, w) or fnmatch.fnmatchcase(w, p) for p in patterns for w in watched)


def serves(instance: str, watched: Iterable[str], body: Mapping[str, Any]) -> bool:
    """Does the operator `instance` (--instance; "" the default one) watching `watched` serve this cluster
    connection (its status, finalizer and counts)? The one its label INSTANCE_LABEL names (none: the default
    instance), if it may serve it at all: every other operator leaves it alone, so exactly one holds it."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    granted = (body.get("spec") or {}).get("allowedNamespaces") or []
    return labels.get(INSTANCE_LABEL, "") == instance and may_serve(granted, watched)


def usable(ref: Ref, body: Mapping[str, Any] | None, namespace: str | None) -> tuple[models.ConnectionSpec, str]:
    """The connection spec and the namespace of its Secrets, for a resource in `namespace` (None: the
    connection's own check, no grant needed); Unusable says why not."""
    kind, own_namespace, name = ref
    where = describe(ref)
    if body is None:
        return _missing(where, kind, name)
    raw = dict(body.get("spec") or {})
    try:
        if kind == NAMESPACED:
            return models.parse_spec(models.ConnectionSpec, raw), own_namespace
        spec = models.parse_spec(models.ClusterConnectionSpec, raw)
    except models.SpecError as exc:
        raise Unusable(INVALID, f"{where} is invalid ({exc}): fix it; nothing was changed on the server") from None
    if namespace is not None and not granted(spec.allowed_namespaces, namespace):
        raise Unusable(NOT_GRANTED, (
            f"{where} does not grant namespace {namespace} (allowedNamespaces: {spec.allowed_namespaces}); nothing "
            f"was changed on the server. Add {namespace} to its spec.allowedNamespaces, or use another connection"))
    own = spec.model_dump(exclude={"secret_namespace", "allowed_namespaces"})
    return models.ConnectionSpec.model_validate(own), spec.secret_namespace or ""


def _missing(where: str, kind: str, name: str) -> tuple[models.ConnectionSpec, str]:
    raise Unusable(NOT_FOUND, (
        f"{where} not found; nothing was changed on the server. Create the {kind} {name}, or fix "
        "spec.connectionRef (the resource continues by itself once it exists)"))
