"""The acknowledgement protocol (pure): the v1 `$JS.ACK` reply subject each delivery carries, and the
ack bodies clients publish to it (`consumer.go ackReply`, `ackReplyInfo`, `processAck`, `processNak`).

Reply subject (v1, what nats-py reads):
    $JS.ACK.<stream>.<consumer>.<delivery count>.<stream seq>.<consumer seq>.<stored ts ns>.<num pending>
v2 subjects (`$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending>...`)
are parsed too. Bodies: empty / `+ACK` / `+OK` ack; `-NAK` [json `{"delay": ns}` | Go duration];
`+WPI`; `+NXT` [n | json] (ack, then a pull request answered on the ack's reply); `+TERM` [reason].
Anything else is not an ack operation (nats-server still answers an ack_sync reply to it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

from .times import parse_duration

PREFIX = "$JS.ACK."


class AckKind(Enum):
    ACK = "ack"
    NAK = "nak"
    PROGRESS = "progress"
    NEXT = "next"
    TERM = "term"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class AckBody:
    kind: AckKind
    delay_ns: int | None = None  # NAK only: redeliver after this delay (None = now)
    next_request: bytes = b""  # NEXT only: the pull request that follows `+NXT`
    reason: str = ""  # TERM only


PLAIN_ACK = AckBody(AckKind.ACK)


# The delivery an ack subject names: (delivery count, stream seq, consumer seq). A plain tuple: acks are
# the hottest path of a consumer and a NamedTuple costs more to build than the parse itself.
AckTarget = tuple[int, int, int]


def reply_prefix(stream: str, consumer: str) -> str:
    """The constant part of a consumer's ack subjects; `reply_subject` appends the numbers."""
    return f"{PREFIX}{stream}.{consumer}."


def reply_subject(prefix: str, delivery_count: int, stream_seq: int, delivery_seq: int, ts: int, pending: int) -> str:
    return f"{prefix}{delivery_count}.{stream_seq}.{delivery_seq}.{ts}.{pending}"


def subscription_subject(stream: str, consumer: str) -> str:
    """What a consumer subscribes to so it receives the acks for its deliveries (v1 subjects only,
    as nats-server: anything else gets no responders)."""
    return f"{PREFIX}{stream}.{consumer}.*.*.*.*.*"


def parse_subject(subject: str) -> AckTarget | None:
    """The delivery an ack subject refers to, or None when the subject is not a valid ack subject."""
    toks = subject.split(".")
    n = len(toks)
    if n == 9:
        i = 4
    elif n >= 11:
        i = 6
    else:
        return None
    try:
        delivery_count, stream_seq, delivery_seq = int(toks[i]), int(toks[i + 1]), int(toks[i + 2])
    except ValueError:
        return None
    if delivery_count < 0 or stream_seq < 0 or delivery_seq < 0:
        return None
    return delivery_count, stream_seq, delivery_seq


def parse_body(body: bytes) -> AckBody:
    if not body or body == b"+ACK" or body == b"+OK":
        return PLAIN_ACK
    if body.startswith(b"+NXT"):
        return AckBody(AckKind.NEXT, next_request=body[4:])
    if body.startswith(b"-NAK"):
        return AckBody(AckKind.NAK, delay_ns=_nak_delay(body[4:].strip()))
    if body == b"+WPI":
        return AckBody(AckKind.PROGRESS)
    if body.startswith(b"+TERM"):
        return AckBody(AckKind.TERM, reason=body[5:].strip().decode("utf-8", "replace"))
    return AckBody(AckKind.UNKNOWN)


def _nak_delay(arg: bytes) -> int | None:
    """The delay of `-NAK <arg>`; None (plain NAK) when absent or unparsable, as nats-server does."""
    if not arg:
        return None
    try:
        if arg.startswith(b"{"):
            delay = json.loads(arg).get("delay", 0)
            if isinstance(delay, bool) or not isinstance(delay, int):
                return None
            return delay
        return parse_duration(arg.decode())
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
