"""Consumer advisories published on `$JS.EVENT.ADVISORY.CONSUMER.*`, a stream's abandoned atomic batches, the
server's out-of-storage advisory, and the sampled ack metrics on `$JS.EVENT.METRIC.CONSUMER.ACK.*`
(`jetstream_events.go` shapes).

Advisories are optional for clients, so one is built only when somebody listens on its subject: the
JSON costs nothing on the hot path of a consumer nobody monitors.
"""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Any

from .times import now_ns, rfc3339

if TYPE_CHECKING:
    from jsbroker.internal import InternalBus

PREFIX = "$JS.EVENT.ADVISORY.CONSUMER."
_TYPE = "io.nats.jetstream.advisory.v1."
METRIC_ACK_PREFIX = "$JS.EVENT.METRIC.CONSUMER.ACK."
_METRIC_TYPE = "io.nats.jetstream.metric.v1."
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def new_id() -> str:
    """A 22-character id like nats-server's nuids (advisory ids, pin ids)."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(22))


def _send(bus: InternalBus, subject: str, kind: str, fields: dict[str, Any], schema: str = _TYPE) -> None:
    if not bus.has_interest(subject):
        return
    body = {"type": schema + kind, "id": new_id(), "timestamp": rfc3339(now_ns()), **fields}
    bus.publish(subject, None, b"", json.dumps(body, separators=(",", ":")).encode())


def max_deliveries(bus: InternalBus, stream: str, consumer: str, stream_seq: int, deliveries: int) -> None:
    _send(bus, f"{PREFIX}MAX_DELIVERIES.{stream}.{consumer}", "max_deliver",
          {"stream": stream, "consumer": consumer, "stream_seq": stream_seq, "deliveries": deliveries})


def nak(bus: InternalBus, stream: str, consumer: str, stream_seq: int, consumer_seq: int, deliveries: int) -> None:
    _send(bus, f"{PREFIX}MSG_NAKED.{stream}.{consumer}", "nak",
          {"stream": stream, "consumer": consumer, "consumer_seq": consumer_seq, "stream_seq": stream_seq,
           "deliveries": deliveries})


def terminated(bus: InternalBus, stream: str, consumer: str, stream_seq: int, consumer_seq: int,
               deliveries: int, reason: str) -> None:
    _send(bus, f"{PREFIX}MSG_TERMINATED.{stream}.{consumer}", "terminated",
          {"stream": stream, "consumer": consumer, "consumer_seq": consumer_seq, "stream_seq": stream_seq,
           "deliveries": deliveries, "reason": reason})


def ack_metric(bus: InternalBus, stream: str, consumer: str, stream_seq: int, consumer_seq: int,
               deliveries: int, ack_time_ns: int) -> None:
    """A sampled ack (`sample_freq`): how long after its delivery a message was acknowledged."""
    _send(bus, f"{METRIC_ACK_PREFIX}{stream}.{consumer}", "consumer_ack",
          {"stream": stream, "consumer": consumer, "consumer_seq": consumer_seq, "stream_seq": stream_seq,
           "ack_time": ack_time_ns, "deliveries": deliveries}, _METRIC_TYPE)


def action(bus: InternalBus, stream: str, consumer: str, created: bool) -> None:
    verb = "CREATED" if created else "DELETED"
    _send(bus, f"{PREFIX}{verb}.{stream}.{consumer}", "consumer_action",
          {"stream": stream, "consumer": consumer, "action": "create" if created else "delete"})


def pinned(bus: InternalBus, stream: str, consumer: str, domain: str | None, group: str, pin_id: str) -> None:
    """A priority group pinned a client (`pinned_client`)."""
    _send(bus, f"{PREFIX}PINNED.{stream}.{consumer}", "consumer_group_pinned",
          {"account": bus.account_name, "stream": stream, "consumer": consumer, **({"domain": domain} if domain else {}),
           "group": group, "pinned_id": pin_id})


def unpinned(bus: InternalBus, stream: str, consumer: str, domain: str | None, group: str, reason: str) -> None:
    """A pin ended: `reason` "timeout" (priority_timeout passed) or "admin" (CONSUMER.UNPIN)."""
    _send(bus, f"{PREFIX}UNPINNED.{stream}.{consumer}", "consumer_group_unpinned",
          {"account": bus.account_name, "stream": stream, "consumer": consumer, **({"domain": domain} if domain else {}),
           "group": group, "reason": reason})


def batch_abandoned(bus: InternalBus, stream: str, domain: str | None, batch_id: str, reason: str) -> None:
    """An open atomic batch went without being stored (`reason`: atomic_batch.TIMEOUT, LARGE, ...)."""
    _send(bus, f"$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.{stream}", "stream_batch_abandoned",
          {"stream": stream, **({"domain": domain} if domain else {}), "batch": batch_id, "reason": reason})


OUT_OF_STORAGE = "$JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE"


def out_of_storage(bus: InternalBus, stream: str, domain: str | None) -> None:
    """A stream's store refused a message for lack of room on its volume (`server_out_of_space`).

    nats-server sends it once when a write meets a full disk, and then turns JetStream off until a restart;
    jsbroker refuses publishes before the disk is full and stores again as soon as space is back
    (store/disk_room.py), so it sends it once per stream each time its volume turns full. Sent in the
    served account (jsbroker has no system account, where nats-server sends it)."""
    _send(bus, OUT_OF_STORAGE, "server_out_of_space",
          {"server": bus.server_name, "server_id": bus.server_id, "stream": stream, "cluster": "",
           **({"domain": domain} if domain else {})})
