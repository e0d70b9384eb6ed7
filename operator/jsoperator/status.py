"""The status patch of a Stream, Consumer, KeyValue or ObjectStore: conditions, observedGeneration and the observed server state.

Owns how a reconciliation outcome reads in ``status`` (kstatus, Argo CD and Flux all read it):
- ``Ready`` (True/False), ``Reconciling`` (True while work is in progress or will be retried),
  ``Stalled`` (True when only a human can fix it: invalid spec, a change the server refuses, a server
  error that retrying will not cure); plus ``ReconciliationPaused`` and ``Unmanaged`` while those
  annotations are set;
- ``StorageAvailable`` (Streams): False (reason ``OutOfStorage``) from the server's out-of-storage
  advisory on, True again (reason ``MessageStored``) once the stream's lastSeq moves past the one seen then
  (a message was stored: publishing works again); the reconciliations keep it as it is otherwise;
- ``lastTransitionTime`` only moves when a condition's status changes;
- ``observedGeneration`` is the generation the operator acted on (a paused resource keeps the old one:
  its spec was not applied);
- server errors (``code``, ``err_code``, ``description``) -> reason ``JetStreamError`` with the server's
  words and a hint; an unreachable broker -> reason ``BrokerUnavailable``, retried.
Pure: callers pass the time and the server's info dicts; no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from jsoperator.models import Condition, LastReset, LastUnpin, SourceStatus

READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
PAUSED, UNMANAGED = "ReconciliationPaused", "Unmanaged"
# An error no retry can fix (the Stalled ones), whatever spec.terminalPolicy does about it.
TERMINAL = "Terminal"
# What happened to the server object: Synced (does it match the spec now) and Adopted (taken over, or created).
SYNCED_CONDITION, ADOPTED = "Synced", "Adopted"
# Can the stream's server store messages ($JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE says it cannot).
STORAGE = "StorageAvailable"

# Reasons (CamelCase, stable: users and alerts match on them).
SYNCED = "Synced"
PROGRESSING = "Progressing"
JETSTREAM_ERROR = "JetStreamError"
BROKER_UNAVAILABLE = "BrokerUnavailable"
IMMUTABLE_FIELD = "ImmutableFieldChange"
INVALID_SPEC = "InvalidSpec"
INVALID_ANNOTATION = "InvalidAnnotation"
CREDENTIALS_NOT_FOUND = "CredentialsNotFound"
DELETION_BLOCKED = "DeletionBlocked"
WAITING_FOR_STREAM = "WaitingForStream"
CONFLICT = "Conflict"
ADOPTION_REFUSED = "AdoptionRefused"
OWNED_ELSEWHERE = "OwnedElsewhere"
NOT_FOUND_ON_SERVER = "NotFoundOnServer"
CREATED = "Created"
UNSUPPORTED_BY_SERVER = "UnsupportedByServer"
READ_ONLY = "ReadOnly"
OUT_OF_STORAGE = "OutOfStorage"
MESSAGE_STORED = "MessageStored"

# What to do about the server errors users meet most (err_code -> hint).
HINTS = {
    10012: "the server refused the consumer config; fix the spec",
    10013: "the push consumer's deliverSubject still has subscribers; stop them before changing it",
    10014: "the consumer does not exist on the server",
    10023: "the server is out of resources; free some or add capacity",
    10026: "the stream's maxConsumers (or the account limit) is reached",
    10027: "the account's stream limit is reached",
    10028: "the server has no memory left for this stream; lower maxBytes or use file storage",
    10039: "JetStream is not enabled for this account; enable it on the server",
    10047: "the server has no storage left for this stream; lower maxBytes",
    10052: "the server refused the stream config; fix the spec",
    10055: "a mirror's configuration cannot change; delete and recreate the stream",
    10058: "a stream with this name exists with a different configuration",
    10059: "the stream does not exist on the server; create the Stream first",
    10065: "another stream already stores some of these subjects; change spec.subjects",
    10074: "replicas > 1 needs a clustered JetStream; set replicas: 1",
    10084: "on a workqueue stream a pull consumer needs ackPolicy: explicit",
    10098: "on a workqueue stream consumers need ackPolicy: explicit",
    10099: "a workqueue stream allows one unfiltered consumer; set filterSubject on each",
    10100: "on a workqueue stream consumer filters must not overlap",
    10101: "on a workqueue stream consumers need deliverPolicy: all",
    10185: "the server is too old for a feature this spec uses; upgrade it or drop the field",
}
# Errors worth retrying by themselves: the server is busy, or the stream may be created any moment.
_TRANSIENT_ERR_CODES = frozenset({10008, 10023, 10059})


@dataclass(frozen=True)
class Outcome:
    """What one reconciliation found, in condition terms."""

    ready: bool
    reason: str
    message: str
    reconciling: bool = False
    stalled: bool = False
    retried_anyway: bool = False  # terminal, but retried under terminalPolicy: retry

    @property
    def terminal(self) -> bool:
        """No retry is expected to fix it (the Terminal condition), held (Stalled) or retried anyway."""
        return self.stalled or self.retried_anyway

    def with_policy(self, terminal_policy: str | None) -> Outcome:
        """spec.terminalPolicy applied: hold (default) stays Stalled; retry keeps retrying with backoff."""
        if terminal_policy != "retry" or not self.stalled:
            return self
        message = f"{self.message} (terminalPolicy: retry: retried with backoff although no retry is expected to fix it)"
        return Outcome(False, self.reason, message, reconciling=True, retried_anyway=True)


def synced(message: str) -> Outcome:
    return Outcome(True, SYNCED, message)


def progressing(message: str) -> Outcome:
    return Outcome(False, PROGRESSING, message, reconciling=True)


def broker_unavailable(detail: str) -> Outcome:
    message = f"cannot reach JetStream ({detail}); retrying with backoff, nothing was changed or deleted"
    return Outcome(False, BROKER_UNAVAILABLE, message, reconciling=True)


def api_error(code: int, err_code: int, description: str, *, action: str = "") -> Outcome:
    """A JetStream API error answer -> Ready=False JetStreamError; retried only when it may pass by itself."""
    hint = HINTS.get(err_code)
    doing = f"{action}: " if action else ""
    message = f"{doing}JetStream error {err_code} (code {code}): {description}" + (f". {hint}" if hint else "")
    transient = code == 503 or err_code in _TRANSIENT_ERR_CODES
    reason = WAITING_FOR_STREAM if err_code == 10059 else JETSTREAM_ERROR
    return Outcome(False, reason, message, reconciling=transient, stalled=not transient)


def stalled(reason: str, message: str) -> Outcome:
    """Only a person can fix it: not retried until the spec (or the server) changes."""
    return Outcome(False, reason, message, stalled=True)


def retrying(reason: str, message: str) -> Outcome:
    """It may pass by itself: retried with backoff."""
    return Outcome(False, reason, message, reconciling=True)


def immutable_change(message: str) -> Outcome:
    return stalled(IMMUTABLE_FIELD, message)


def unsupported_by_server(message: str) -> Outcome:
    """The spec or an annotation uses what the connected server's release cannot honour (features.py)."""
    return stalled(UNSUPPORTED_BY_SERVER, message)


def invalid_spec(message: str) -> Outcome:
    return stalled(INVALID_SPEC, message)


def invalid_annotation(message: str) -> Outcome:
    return stalled(INVALID_ANNOTATION, message)


def credentials_not_found(message: str) -> Outcome:
    """A Secret named in spec.connection is missing or lacks the key; retried (it may be created later)."""
    return retrying(CREDENTIALS_NOT_FOUND, message)


def deletion_blocked(message: str) -> Outcome:
    """A Stream being deleted waits for its Consumer resources to go first."""
    return retrying(DELETION_BLOCKED, message)


# -- the patch --------------------------------------------------------------------------------------


Mode = Literal["reconciled", "paused", "unmanaged"]


def build(
    previous: Mapping[str, Any] | None,
    *,
    generation: int,
    outcome: Outcome,
    now: datetime,
    observed: Mapping[str, Any] | None = None,
    mode: Mode = "reconciled",
    adopted: bool | None = None,
) -> dict[str, Any]:
    """The status to write (a JSON merge patch for ``status``; ``conditions`` is written whole).

    ``previous`` is the current ``status`` (or None); ``observed`` is ``stream_state(...)`` or
    ``consumer_state(...)`` when the server object was read. ``adopted`` is set when this reconciliation
    first took over (True) or created (False) the server object; otherwise the Adopted condition stays.
    """
    previous = previous or {}
    conditions = _conditions(previous.get("conditions") or [], generation, outcome, now, mode, adopted)
    conditions += storage_conditions(previous, observed, generation, now)
    patch: dict[str, Any] = {"conditions": conditions}
    if mode != "paused":
        patch["observedGeneration"] = generation
    patch.update(observed or {})
    return patch


def _conditions(
    previous: Sequence[Mapping[str, Any]], generation: int, outcome: Outcome, now: datetime, mode: Mode,
    adopted: bool | None,
) -> list[dict[str, Any]]:
    old = {c.get("type"): c for c in previous}
    wanted: list[tuple[str, bool, str, str]] = []
    if mode == "paused":
        # Paused: nothing is applied, so Ready keeps whatever it was; say why nothing moves.
        message = "jsoperator.io/pause-reconciliation is true: the operator changes nothing on the server"
        ready = old.get(READY)
        if ready is not None:
            wanted.append((READY, ready.get("status") == "True", ready.get("reason", ""), ready.get("message", "")))
        wanted += [(RECONCILING, False, PAUSED, message), (STALLED, False, PAUSED, message)]
        wanted.append((PAUSED, True, PAUSED, message))
    elif mode == "unmanaged":
        message = "jsoperator.io/managed is false: the operator never touches the server object"
        wanted += [(READY, True, UNMANAGED, message), (RECONCILING, False, UNMANAGED, message)]
        wanted += [(STALLED, False, UNMANAGED, message), (UNMANAGED, True, UNMANAGED, message)]
    else:
        synced = outcome.ready and outcome.reason == SYNCED
        wanted += [
            (READY, outcome.ready, outcome.reason, outcome.message),
            (RECONCILING, outcome.reconciling, outcome.reason, outcome.message if outcome.reconciling else ""),
            (STALLED, outcome.stalled, outcome.reason, outcome.message if outcome.stalled else ""),
            (SYNCED_CONDITION, synced, outcome.reason, outcome.message),
        ]
        if outcome.terminal or TERMINAL in old:  # written once an error was terminal, then kept current
            wanted.append((TERMINAL, outcome.terminal, outcome.reason, outcome.message if outcome.terminal else ""))
    if adopted is not None:
        how = (ADOPTED, "took over the server object that already existed") if adopted else (
            CREATED, "the operator created the server object")
        wanted.append((ADOPTED, adopted, *how))
    elif (kept := old.get(ADOPTED)) is not None:
        wanted.append((ADOPTED, kept.get("status") == "True", kept.get("reason", ""), kept.get("message", "")))
    return [_condition(old.get(type_), type_, status, reason, message, generation, now)
            for type_, status, reason, message in wanted]


def _condition(
    old: Mapping[str, Any] | None, type_: str, status: bool, reason: str, message: str, generation: int, now: datetime
) -> dict[str, Any]:
    text: Literal["True", "False"] = "True" if status else "False"
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == text else None
    condition = Condition(
        type=type_, status=text, reason=reason, message=message,
        last_transition_time=since or now, observed_generation=generation,
    )
    return condition.model_dump(by_alias=True, mode="json")


def out_of_storage(previous: Mapping[str, Any] | None, server: str, stream: str, generation: int,
                   now: datetime) -> list[dict[str, Any]]:
    """The conditions of a status with StorageAvailable False: the server `server` refused a message of
    `stream` for lack of storage."""
    message = (f"server {server} has no storage left for stream {stream}: publishes are refused (JetStream "
               "error 10023) while reads and acks go on; free space on its volume (purge or delete messages, "
               "lower the streams' limits, or grow the volume); this clears once a message is stored again")
    old = [c for c in (previous or {}).get("conditions") or [] if c.get("type") != STORAGE]
    return [*old, _condition(condition(previous, STORAGE), STORAGE, False, OUT_OF_STORAGE, message, generation, now)]


def stored_again(previous: Mapping[str, Any] | None, observed: Mapping[str, Any] | None) -> bool:
    """StorageAvailable is False and the server's lastSeq has moved past the status's: a message was stored."""
    was = condition(previous, STORAGE)
    if was is None or was.get("status") != "False" or not observed or "lastSeq" not in observed:
        return False
    return int(observed["lastSeq"]) > int((previous or {}).get("lastSeq") or 0)


def storage_back(previous: Mapping[str, Any], observed: Mapping[str, Any], generation: int,
                 now: datetime) -> list[dict[str, Any]] | None:
    """The conditions with StorageAvailable True when `stored_again` (None when not): for the status refresh."""
    if not stored_again(previous, observed):
        return None
    others = [c for c in previous.get("conditions") or [] if c.get("type") != STORAGE]
    return [*others, *storage_conditions(previous, observed, generation, now)]


def storage_conditions(previous: Mapping[str, Any], observed: Mapping[str, Any] | None, generation: int,
                       now: datetime) -> list[dict[str, Any]]:
    """The StorageAvailable condition to keep in a status written whole: as it was, or True once
    `stored_again`."""
    was = condition(previous, STORAGE)
    if was is None:
        return []
    if stored_again(previous, observed):
        message = "a message was stored again after the server ran out of storage: publishing works"
        return [_condition(was, STORAGE, True, MESSAGE_STORED, message, generation, now)]
    return [dict(was)]


def condition(status: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_`` in a status, if any."""
    items: list[Mapping[str, Any]] = (status or {}).get("conditions") or []
    return next((item for item in items if item.get("type") == type_), None)


# -- observed server state --------------------------------------------------------------------------


def stream_state(info: Mapping[str, Any]) -> dict[str, Any]:
    """StreamInfo -> the observed-state part of Stream.status."""
    state = info.get("state") or {}
    return {
        "streamName": (info.get("config") or {}).get("name"),
        "messages": state.get("messages", 0),
        "bytes": state.get("bytes", 0),
        "firstSeq": state.get("first_seq", 0),
        "lastSeq": state.get("last_seq", 0),
        "consumerCount": state.get("consumer_count", 0),
        **_links(info),
    }


def key_value_state(info: Mapping[str, Any]) -> dict[str, Any]:
    """StreamInfo of KV_<bucket> -> the observed-state part of KeyValue.status (as nats.go's KeyValueStatus)."""
    config, state = info.get("config") or {}, info.get("state") or {}
    name = str(config.get("name") or "")
    return {
        "bucket": name.removeprefix("KV_"),
        "streamName": name,
        "values": state.get("messages", 0),
        "bytes": state.get("bytes", 0),
        "history": config.get("max_msgs_per_subject", 0),
    }


def object_store_state(info: Mapping[str, Any]) -> dict[str, Any]:
    """StreamInfo of OBJ_<bucket> -> the observed-state part of ObjectStore.status."""
    config, state = info.get("config") or {}, info.get("state") or {}
    name = str(config.get("name") or "")
    return {"bucket": name.removeprefix("OBJ_"), "streamName": name, "bytes": state.get("bytes", 0),
            "sealed": bool(config.get("sealed"))}


def observed_stream(kind: str, info: Mapping[str, Any]) -> dict[str, Any]:
    """StreamInfo -> the observed-state part of a Stream, KeyValue or ObjectStore status."""
    if kind == "KeyValue":
        return key_value_state(info)
    if kind == "ObjectStore":
        return object_store_state(info)
    return stream_state(info)


_ACTIVE_NS = 10_000_000_000  # nats-server's sourcing health check: a link silent longer is set up again


def _links(info: Mapping[str, Any]) -> dict[str, Any]:
    """The mirror / sources part: each link's lag, whether it is active and its error; None without links
    (a merge patch then removes what a previous spec had). Sources sorted: the server lists them in any order."""
    mirror = _link(info["mirror"]) if info.get("mirror") else None
    sources = sorted((_link(s) for s in info.get("sources") or []), key=lambda s: (s["name"], json.dumps(s)))
    links = [mirror] if mirror else sources
    return {"lag": sum(link["lag"] for link in links) if links else None, "mirror": mirror, "sources": sources or None}


def _link(entry: Mapping[str, Any]) -> dict[str, Any]:
    link = SourceStatus(name=entry.get("name", ""), lag=entry.get("lag", 0),
                        active=0 <= entry.get("active", -1) < _ACTIVE_NS,
                        error=(entry.get("error") or {}).get("description"))
    return link.model_dump(by_alias=True, mode="json", exclude_none=True)


def consumer_state(info: Mapping[str, Any]) -> dict[str, Any]:
    """ConsumerInfo -> the observed-state part of Consumer.status."""
    return {
        "streamName": info.get("stream_name"),
        "consumerName": info.get("name"),
        "delivered": _position(info.get("delivered")),
        "ackFloor": _position(info.get("ack_floor")),
        "numPending": info.get("num_pending", 0),
        "numAckPending": info.get("num_ack_pending", 0),
        "numRedelivered": info.get("num_redelivered", 0),
        "numWaiting": info.get("num_waiting", 0),
    }


def _position(pair: Mapping[str, Any] | None) -> dict[str, int]:
    pair = pair or {}
    return {"consumerSeq": pair.get("consumer_seq", 0), "streamSeq": pair.get("stream_seq", 0)}


def last_reset(
    request: str, *, succeeded: bool, now: datetime, reset_seq: int | None = None, message: str = ""
) -> dict[str, Any]:
    """The ``status.lastReset`` record of an executed reset annotation (see annotations.py)."""
    record = LastReset(
        request=request, reset_seq=reset_seq, time=now, result="Succeeded" if succeeded else "Failed", message=message
    )
    return record.model_dump(by_alias=True, mode="json", exclude_none=True)



def last_unpin(request: str, *, succeeded: bool, now: datetime, message: str) -> dict[str, Any]:
    """The ``status.lastUnpin`` record of an executed unpin annotation (see annotations.py)."""
    record = LastUnpin(request=request, time=now, result="Succeeded" if succeeded else "Failed", message=message)
    return record.model_dump(by_alias=True, mode="json", exclude_none=True)
