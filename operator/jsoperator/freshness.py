"""Fresh status counters without a request per resource.

Publishes and acks send no advisory, so every `--status-interval` (default 2 s) the operator lists what
each server it talks to holds: one `STREAM.LIST` per connection, plus one `CONSUMER.LIST` per stream that
has Consumer resources. A resource whose counters changed gets one status patch (so a burst of publishes
is one patch per interval, and nothing is written while nothing changes); a resource whose server object
is missing from the listing, or whose listed config differs from the spec, is signalled to the scheduler,
which reconciles (recreates, puts back) it at once.
Configuration changes and deletions made by hand arrive sooner, as advisories (scheduler.py).

Only resources that are Ready (Synced) and managed are refreshed: a Stalled or paused resource keeps the
numbers its last reconciliation saw. A Stream whose StorageAvailable is False gets it True in the patch
whose lastSeq has moved (status.py): publishing works again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from datetime import datetime, timezone
from collections.abc import Mapping
from typing import Any

from . import annotations as annotation
from . import buckets, jsclient, kubeapi, mapping, models, plan, scheduler, status

log = logging.getLogger("jsoperator")


async def serve(sched: scheduler.Scheduler, pool: jsclient.Pool, interval: float) -> None:
    """Refresh forever (cancel to stop)."""
    while True:
        try:
            await refresh(sched, pool)
        except Exception:  # a failed round must not end the refreshes
            log.exception("status refresh failed")
        await asyncio.sleep(interval)


def _refreshable(entry: scheduler.Entry) -> bool:
    body = entry.body
    ready = status.condition(body.get("status"), status.READY) or {}
    if body["metadata"].get("deletionTimestamp") or ready.get("reason") != status.SYNCED or entry.reached is None:
        return False
    try:
        annotations = body["metadata"].get("annotations") or {}
        return annotation.is_managed(annotations) and not annotation.is_paused(annotations)
    except annotation.AnnotationError:
        return False


async def refresh(sched: scheduler.Scheduler, pool: jsclient.Pool) -> int:
    """One round; returns the number of status patches written."""
    by_connection: dict[jsclient.ConnectionSettings, list[scheduler.Entry]] = defaultdict(list)
    for entry in list(sched.entries.values()):
        if _refreshable(entry):
            assert entry.reached is not None
            by_connection[entry.reached].append(entry)
    patched = 0
    for settings, entries in by_connection.items():
        try:
            listed = await _listing(await pool.client(settings), entries)
        except (jsclient.BrokerUnavailable, jsclient.ApiError):
            continue  # the connection's own signals and the drift check report this
        drifted = []
        for entry in entries:
            info = listed.get(entry.server_names)
            if info is None or _drifted(entry, info):
                drifted.append(entry)
            elif await _patch_if_changed(entry, info):
                patched += 1
        sched.signal(drifted)
    return patched


async def _listing(
    client: jsclient.JetStreamClient, entries: list[scheduler.Entry]
) -> dict[tuple[str, str | None], dict[str, Any]]:
    """StreamInfo / ConsumerInfo by (stream, consumer) for what these entries name."""
    found: dict[tuple[str, str | None], dict[str, Any]] = {}
    if any(buckets.is_stream_kind(e.kind) for e in entries):
        found.update({(name, None): info for name, info in (await client.stream_list()).items()})
    for stream in sorted({e.server_names[0] for e in entries if e.kind == "Consumer"}):
        found.update({(stream, name): info for name, info in (await client.consumer_list(stream)).items()})
    return found


def _drifted(entry: scheduler.Entry, info: Mapping[str, Any]) -> bool:
    """Does the listed server config differ from the spec? (A server without advisories, such as jsbroker,
    tells of a change made by hand only this way.)"""
    spec, name = entry.body.get("spec") or {}, entry.body["metadata"]["name"]
    try:
        if buckets.is_stream_kind(entry.kind):
            _, desired = buckets.desired(entry.kind, spec, name)
            return plan.plan_stream(desired, info.get("config") or {}).action != "none"
        consumer = mapping.consumer_config(models.parse_spec(models.ConsumerSpec, spec), name)
        return plan.plan_consumer(consumer, info.get("config") or {}).action != "none"
    except models.SpecError:
        return False  # the reconciliation reports it


async def _patch_if_changed(entry: scheduler.Entry, info: Mapping[str, Any]) -> bool:
    observed = status.observed_stream(entry.kind, info) if buckets.is_stream_kind(entry.kind) else (
        status.consumer_state(info))
    current = entry.body.get("status") or {}
    if all(current.get(key) == value for key, value in observed.items()) or entry.lock.locked():
        return False  # unchanged, or a reconciliation is writing fresher numbers right now
    meta = entry.body["metadata"]
    back = status.storage_back(current, observed, int(meta.get("generation") or 0), datetime.now(timezone.utc))
    if back is not None:  # a message stored after the server ran out of storage
        observed = {**observed, "conditions": back}
    await kubeapi.patch_status(entry.kind, meta["namespace"], meta["name"], observed)
    return True
