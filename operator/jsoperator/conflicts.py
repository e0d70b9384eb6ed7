"""Which resources would drive the same server object: two Streams naming one stream, two Consumers one
durable, or two Streams with overlapping subjects, on the same server connection (in any namespaces).
A KeyValue or ObjectStore counts as a Stream of its bucket's stream and subjects (buckets.py).
The resource already driving the object (its status names it) keeps it, else the earlier one (by
creationTimestamp, which has one-second steps, then namespace/name); the other is Stalled with reason
Conflict and changes nothing on the server. Pure: claims are built from resource bodies and kept
in kopf indexes by the handlers.

"The same connection" is read from the spec, before any Secret is resolved: the servers (unset: the
operator's), the JetStream domain, and the credentials Secrets named (a Secret is per namespace, so two
namespaces with their own Secrets count as different connections even when the Secrets hold the same
credentials: those pairs are not detected here, and the server itself still refuses overlapping subjects).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jsoperator import buckets, connections

_AUTH_REFS = ("credentialsSecretRef", "tokenSecretRef", "userSecretRef", "tlsSecretRef")


@dataclass(frozen=True, order=True)
class Claim:
    """What one resource drives on the server. Ordered by precedence: the smallest claim wins."""

    newcomer: bool  # False once the resource has driven its server object (status names it)
    created: str  # metadata.creationTimestamp (RFC 3339 UTC: sorts as text)
    namespace: str
    name: str
    kind: str
    stream: str
    consumer: str | None  # durable name; None for a Stream or a bucket
    subjects: tuple[str, ...]  # a stream's subjects (a Stream's name when unset, none for a mirror)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def connection_key(namespace: str, spec: Mapping[str, Any]) -> str:
    """Resources with equal keys reach the same server object namespace (servers, domain, credentials; or
    the same connection object)."""
    ref = connections.ref_of(namespace, spec)
    if ref is not None:
        return json.dumps({"connectionRef": list(ref)})
    conn = dict(spec.get("connection") or {})
    auth = {ref: conn[ref] for ref in _AUTH_REFS if conn.get(ref)}
    key = {"servers": sorted(conn.get("servers") or []), "domain": conn.get("jsDomain") or "",
           "auth": [namespace, auth] if auth else None}
    return json.dumps(key, sort_keys=True)


def claim(kind: str, body: Mapping[str, Any]) -> Claim:
    meta, spec, status = body["metadata"], dict(body.get("spec") or {}), dict(body.get("status") or {})
    name = str(meta["name"])
    newcomer = not status.get("streamName" if buckets.is_stream_kind(kind) else "consumerName")
    if buckets.is_stream_kind(kind):
        stream, subjects = buckets.stream_of(kind, spec, name), buckets.subjects_of(kind, spec, name)
        consumer = None
    else:
        stream, consumer, subjects = str(spec.get("streamName") or ""), str(spec.get("durableName") or name), ()
    return Claim(newcomer, str(meta.get("creationTimestamp") or ""), str(meta["namespace"]), name, kind, stream,
                 consumer, subjects)


def conflict(mine: Claim, others: Iterable[Claim], *, subjects: bool = True) -> str:
    """Why `mine` must not touch the server (an earlier claim on the same object or, with `subjects`, on
    overlapping subjects), or ""."""
    for other in sorted(others):
        if other >= mine or (other.namespace, other.name) == (mine.namespace, mine.name):
            continue
        if other.stream == mine.stream and other.consumer == mine.consumer:
            what = f"consumer {mine.consumer} of stream {mine.stream}" if mine.consumer else f"stream {mine.stream}"
            return f"{other.describe()} (first) already manages {what} on the same server"
        overlap = [(a, b) for a in mine.subjects for b in other.subjects if subjects and subjects_overlap(a, b)]
        if overlap and other.stream != mine.stream:
            a, b = overlap[0]
            return (f"subject {a} overlaps {b} of stream {other.stream}, managed by {other.describe()} (first), "
                    "on the same server")
    return ""


def subjects_overlap(a: str, b: str) -> bool:
    """Can one subject match both filters? (`*` matches one token, `>` one or more at the end.) The server's
    rule, also in jsbroker.subjects: the parts share no code (tests/test_layers.py), so each has its own."""
    ta, tb = a.split("."), b.split(".")
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == ">" or y == ">":
            return x is not None and y is not None  # `>` needs at least one token on the other side
        if x is None or y is None:
            return False
        if x != y and "*" not in (x, y):
            return False
    return True
