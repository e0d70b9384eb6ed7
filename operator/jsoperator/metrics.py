"""Prometheus metrics of the operator: reconciliations (total, failed, duration), managed resources, resets, unpins.

Every series is labelled by `kind` (Stream or Consumer); the HTTP endpoint is started by `serve()`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import prometheus_client as prom

REGISTRY = prom.CollectorRegistry(auto_describe=True)

RECONCILIATIONS = prom.Counter(
    "jsoperator_reconciliations", "Reconciliations run, by kind and trigger.", ["kind", "trigger"], registry=REGISTRY
)
RECONCILIATIONS_FAILED = prom.Counter(
    "jsoperator_reconciliations_failed", "Reconciliations that ended in an error, by kind and reason.",
    ["kind", "reason"], registry=REGISTRY,
)
RECONCILE_SECONDS = prom.Histogram(
    "jsoperator_reconcile_duration_seconds", "Time spent in one reconciliation.", ["kind"], registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
MANAGED = prom.Gauge(
    "jsoperator_resources_managed", "Custom resources currently known to the operator.", ["kind"], registry=REGISTRY
)
RESETS = prom.Counter(
    "jsoperator_consumer_resets", "Consumer reset annotations executed, by result.", ["result"], registry=REGISTRY
)
UNPINS = prom.Counter(
    "jsoperator_consumer_unpins", "Consumer unpin annotations executed, by result.", ["result"], registry=REGISTRY
)
DRIFT_REPAIRS = prom.Counter(
    "jsoperator_drift_repairs", "Server objects put back to the spec after a change behind our back.", ["kind"],
    registry=REGISTRY,
)


@contextlib.contextmanager
def timed(kind: str, trigger: str) -> Iterator[None]:
    """Count and time one reconciliation; failures are counted by the caller (it knows the reason)."""
    RECONCILIATIONS.labels(kind, trigger).inc()
    start = time.perf_counter()
    try:
        yield
    finally:
        RECONCILE_SECONDS.labels(kind).observe(time.perf_counter() - start)


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Start the /metrics HTTP endpoint in a background thread."""
    prom.start_http_server(port, addr=addr, registry=REGISTRY)
