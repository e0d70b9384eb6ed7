"""Executing one consumer reset annotation: resolve the target sequence, call CONSUMER.RESET, record it.

`annotation.pending_reset` decides *whether* a reset runs (each distinct value once); this module
runs it. Refusals by the server (policy error 10204, no RESET API) become a Failed `status.lastReset`
and a Warning Event, never a retry; an unreachable broker propagates (BrokerUnavailable) so nothing
is recorded and the reset runs once the broker is back.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from . import annotations as annotation
from . import jsclient, events, metrics, status


@dataclasses.dataclass(frozen=True)
class Executed:
    """A reset that ran (or was refused): what to write in status.lastReset and which Event to post."""

    last_reset: dict[str, Any]
    event: events.Event
    info: dict[str, Any] | None  # ConsumerInfo after a successful reset


async def target_sequence(broker: jsclient.JetStreamClient, stream: str, request: annotation.ResetRequest) -> int:
    """The stream sequence to reset to; 0 means the consumer's ack floor (the server resolves it)."""
    if request.kind == "sequence":
        assert request.sequence is not None
        return request.sequence
    assert request.time is not None
    seq = await broker.first_seq_at(stream, request.time)
    if seq is not None:
        return seq
    # Nothing stored at or after that time: start after the last message (only new ones are delivered).
    info = await broker.stream_info(stream)
    last_seq: int = ((info or {}).get("state") or {}).get("last_seq", 0)
    return last_seq + 1


async def execute(
    broker: jsclient.JetStreamClient, stream: str, consumer: str, request: annotation.ResetRequest, now: datetime
) -> Executed:
    try:
        seq = await target_sequence(broker, stream, request)
        reply = await broker.reset_consumer(stream, consumer, seq)
    except (jsclient.ApiError, jsclient.ResetUnsupported) as exc:
        message = f"{request.request} failed: {exc}"
        if isinstance(exc, jsclient.InvalidReset):
            message += " (the consumer's deliverPolicy does not allow this target; see operator/README.md)"
        metrics.RESETS.labels("Failed").inc()
        return Executed(
            status.last_reset(request.request, succeeded=False, now=now, message=message),
            events.Event("Warning", events.RESET_FAILED, message),
            None,
        )
    reset_seq = int(reply["reset_seq"])
    message = f"{request.request}: the next delivery is stream sequence >= {reset_seq}, consumer sequence 1"
    metrics.RESETS.labels("Succeeded").inc()
    return Executed(
        status.last_reset(request.request, succeeded=True, now=now, reset_seq=reset_seq, message=message),
        events.Event("Normal", events.RESET_SUCCEEDED, message),
        reply,
    )
