"""Who owns a server stream or consumer: the marks the operator records in its `metadata`, and what a resource
may do with an object that carries another owner's marks.

Every stream (a KeyValue's and ObjectStore's too) and consumer the operator creates or takes over carries
`jsoperator.io/cluster`, `/kind`, `/namespace`, `/name` and `/uid`: the Kubernetes cluster (``--cluster-name``,
default the uid of its kube-system namespace) and the resource. Another cluster's operator, or a resource of
another name, then sees the object is taken and follows its adoptionPolicy instead of fighting over it.

The `jsoperator.io/` prefix is ours (refused in `spec.metadata`), `_nats.` is the server's: neither is the
user's metadata, so neither counts as drift of `spec.metadata`. Metadata needs nats-server 2.10 (features.py);
an older server gets no marks.
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

PREFIX = "jsoperator.io/"
SERVER_PREFIX = "_nats."
CLUSTER, KIND, NAMESPACE, NAME, UID = (PREFIX + key for key in ("cluster", "kind", "namespace", "name", "uid"))

Standing = Literal["unmarked", "ours", "stale", "foreign"]


@dataclasses.dataclass(frozen=True)
class Owner:
    """One resource of one cluster, as its marks name it."""

    cluster: str
    kind: str
    namespace: str
    name: str
    uid: str

    def marks(self) -> dict[str, str]:
        return {CLUSTER: self.cluster, KIND: self.kind, NAMESPACE: self.namespace, NAME: self.name, UID: self.uid}

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} (uid {self.uid}) of cluster {self.cluster or '(unnamed)'}"


def reserved(key: str) -> bool:
    """A metadata key that is not the user's: the server's `_nats.*` or the operator's `jsoperator.io/*`."""
    return key.startswith((SERVER_PREFIX, PREFIX))


def user_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's keys of a server object's metadata."""
    return {key: value for key, value in (metadata or {}).items() if not reserved(key)}


def read(config: Mapping[str, Any] | None) -> Owner | None:
    """The owner the marks in a StreamConfig / ConsumerConfig name; None when it carries no uid mark."""
    metadata = (config or {}).get("metadata") or {}
    if not metadata.get(UID):
        return None
    return Owner(*(str(metadata.get(key) or "") for key in (CLUSTER, KIND, NAMESPACE, NAME, UID)))


def marked(config: Mapping[str, Any], owner: Owner) -> dict[str, Any]:
    """``config`` carrying ``owner``'s marks in its metadata (the user's keys kept)."""
    return {**config, "metadata": {**(config.get("metadata") or {}), **owner.marks()}}


def unmarked(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without any operator marks (the user's and the server's keys kept)."""
    metadata = {key: value for key, value in (config.get("metadata") or {}).items() if not key.startswith(PREFIX)}
    return {**config, "metadata": metadata}


def carries(config: Mapping[str, Any], owner: Owner) -> bool:
    """Does the server object carry exactly ``owner``'s marks?"""
    metadata = config.get("metadata") or {}
    return all(metadata.get(key) == value for key, value in owner.marks().items())


def standing(mark: Owner | None, me: Owner, alive: bool) -> Standing:
    """How ``me`` stands towards a server object marked ``mark``: `alive` says whether the marking resource still
    exists (only asked, and only answerable, when it is of this cluster)."""
    if mark is None:
        return "unmarked"
    if mark.uid == me.uid:
        return "ours"
    return "foreign" if alive else "stale"


def same_cluster(mark: Owner, me: Owner) -> bool:
    """Can this cluster tell whether the marking resource still exists? Only for its own marks (named alike)."""
    return bool(mark.cluster) and mark.cluster == me.cluster
