"""Executing one consumer unpin annotation: check the spec pins clients in that group, call CONSUMER.UNPIN,
record it.

`annotation.pending_unpin` decides *whether* an unpin runs (each distinct value once); this module runs
it. A consumer without `priorityPolicy: pinnedClient`, or a group not in its `priorityGroups`, is refused
before anything is sent: nats-server answers an unpin of an `overflow` consumer with success and changes
nothing, which would report an unpin that never happened. Refusals (ours or the server's) become a Failed
`status.lastUnpin` and a Warning Event, never a retry; an unreachable broker propagates (BrokerUnavailable)
so nothing is recorded and the unpin runs once the broker is back.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from . import annotations as annotation
from . import events, jsclient, metrics, models, status


@dataclasses.dataclass(frozen=True)
class Executed:
    """An unpin that ran (or was refused): what to write in status.lastUnpin and which Event to post."""

    last_unpin: dict[str, Any]
    event: events.Event


def refusal(spec: models.ConsumerSpec, request: annotation.UnpinRequest) -> str | None:
    """Why the spec cannot have a client pinned in the requested group (None: it can)."""
    if spec.priority_policy != "pinnedClient":
        return (f"{request.request} refused: the consumer's priorityPolicy is {spec.priority_policy or 'none'}, and "
                f"only a pinnedClient consumer pins a client; set spec.priorityPolicy: pinnedClient (with "
                f"spec.priorityGroups) or remove the {annotation.UNPIN} annotation")
    groups = spec.priority_groups or []
    if request.group not in groups:
        return (f"{request.request} refused: {request.group!r} is not one of the consumer's priority groups "
                f"({', '.join(groups) or 'none'}); name one of spec.priorityGroups in {annotation.UNPIN}")
    return None


async def execute(
    broker: jsclient.JetStreamClient, stream: str, consumer: str, spec: models.ConsumerSpec,
    request: annotation.UnpinRequest, now: datetime,
) -> Executed:
    problem = refusal(spec, request)
    if problem is None:
        try:
            await broker.unpin_consumer(stream, consumer, request.group)
        except jsclient.ApiError as exc:
            problem = f"{request.request} failed: {exc}"
    if problem is not None:
        metrics.UNPINS.labels("Failed").inc()
        return Executed(status.last_unpin(request.request, succeeded=False, now=now, message=problem),
                        events.Event("Warning", events.UNPIN_FAILED, problem))
    message = (f"{request.request}: no client is pinned in group {request.group} now; the next pull request in "
               f"that group gets pinned")
    metrics.UNPINS.labels("Succeeded").inc()
    return Executed(status.last_unpin(request.request, succeeded=True, now=now, message=message),
                    events.Event("Normal", events.UNPIN_SUCCEEDED, message))
