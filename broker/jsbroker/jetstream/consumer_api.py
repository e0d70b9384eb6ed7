"""Handlers of the consumer endpoints of `$JS.API.CONSUMER.*`: `CONSUMER_HANDLERS`. They check requests;
the consumer registry (`service.ConsumerRegistry`, `req.js.consumers`) creates and deletes consumers.

CREATE (three subject forms and the legacy ephemeral one), DURABLE.CREATE, INFO, NAMES, LIST, DELETE,
PAUSE, UNPIN and RESET. MSG.NEXT is not here: each consumer subscribes its own MSG.NEXT subject (the
router answers 503 for consumers that do not exist). Checks run in nats-server's order
(`jsConsumerCreateRequest`, `addConsumerWithAssignmentAndMode`) so a request wrong in several ways gets
the same error from both servers.
"""

from __future__ import annotations

import secrets
import string
from typing import TYPE_CHECKING, Any

from . import consumer_config, errors, headers
from .api import Endpoint, Request
from .requests import api_level_supported, get_int, get_str, get_time
from .consumer import Consumer
from .consumer_config import ConsumerConfig, StreamFacts
from .times import ZERO_TIME, now_ns

if TYPE_CHECKING:
    from .registry import StreamRegistry
    from .stream import Stream

MAX_DURATION = 2**63 - 1  # Go's time.Duration saturates here
NAMES_LIMIT = 1024
LIST_LIMIT = 256
_NAME_ALPHABET = string.ascii_letters + string.digits


def stream_facts(stream: Stream, account_max_ack_pending: int = 0) -> StreamFacts:
    cfg = stream.config
    limits = cfg.consumer_limits or {}
    return StreamFacts(
        name=cfg.name,
        retention=cfg.retention,
        replicas=cfg.num_replicas,
        max_msgs_per_subject=cfg.max_msgs_per_subject,
        limit_max_ack_pending=int(limits.get("max_ack_pending") or 0),
        limit_inactive_threshold=int(limits.get("inactive_threshold") or 0),
        subjects=cfg.subjects,
        account_max_ack_pending=account_max_ack_pending,
    )


# ---- create ----------------------------------------------------------------------------------------


def consumer_create(req: Request) -> dict[str, Any]:
    """`CONSUMER.CREATE.<s>`, `CONSUMER.CREATE.<s>.<name>[.<filter>]`, `CONSUMER.DURABLE.CREATE.<s>.<d>`."""
    raw = req.json()
    tokens = req.tokens
    durable_form = tokens[3] == "DURABLE"
    if durable_form:
        stream_name, name, filtered = tokens[5], tokens[6], ""
    else:
        stream_name = tokens[4]
        name = tokens[5] if len(tokens) > 5 else ""
        filtered = req.tail(6) if len(tokens) > 6 else ""
    raw_cfg = raw.get("config")
    cfg = ConsumerConfig.from_json(raw_cfg if raw_cfg is not None else {})
    action = get_str(raw, "action")
    if action not in ("", "create", "update"):
        raise errors.INVALID_JSON(err=f'unknown consumer action: "{action}"')
    if get_str(raw, "stream_name") != stream_name:
        raise errors.STREAM_MISMATCH()
    if len(tokens) == 5:
        name = cfg.name
    if name and ("\\" in name or "/" in name):
        raise errors.CONSUMER_NAME_CONTAINS_PATH_SEPARATORS()
    if durable_form:
        if not cfg.durable_name:
            raise errors.CONSUMER_DURABLE_NAME_NOT_SET()
        if name != cfg.durable_name:
            raise errors.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT()
        cfg.name = name
    elif len(tokens) > 5:
        if cfg.durable_name and name != cfg.durable_name:
            raise errors.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT()
        cfg.name = name
    elif cfg.durable_name:
        raise errors.CONSUMER_EPHEMERAL_WITH_DURABLE_NAME()
    if filtered and cfg.filter_subjects:
        raise errors.CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED()
    if filtered and cfg.filter_subject != filtered:
        raise errors.CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH()
    if cfg.num_replicas > 1:
        raise errors.STREAM_REPLICAS_NOT_SUPPORTED()
    js: StreamRegistry = req.js
    stream = js.lookup(stream_name)
    existing = stream.consumers.get(cfg.durable_name or cfg.name) if (cfg.durable_name or cfg.name) else None
    if isinstance(existing, Consumer):
        cfg.pause_until = existing.cfg.pause_until
    consumer = add_consumer(js, stream, cfg, action, pedantic=bool(raw.get("pedantic")))
    return consumer.info()


# A stream's consumers when neither it nor the account sets a limit: nats-server 2.15 refuses the 1001st
# (while its STREAM.INFO and $JS.API.INFO still say -1).
DEFAULT_MAX_CONSUMERS = 1000

def add_consumer(js: StreamRegistry, stream: Stream, cfg: ConsumerConfig, action: str = "", pedantic: bool = False) -> Consumer:
    """Create, or update in place, a consumer from a request config (nats-server's rules and order)."""
    facts = stream_facts(stream, js.max_ack_pending)
    consumer_config.set_static_metadata(cfg)
    consumer_config.fill_defaults(cfg, facts, pedantic)
    consumer_config.validate(cfg, facts)
    consumer_config.refuse_unsupported(cfg)
    wanted = cfg.durable_name or cfg.name
    existing = stream.consumers.get(wanted) if wanted else None
    if isinstance(existing, Consumer):
        return _update(stream, existing, cfg, action)
    if action == "update":
        raise errors.CONSUMER_DOES_NOT_EXIST()
    limits = [n for n in (stream.config.max_consumers, js.max_consumers) if n > 0]
    if (min(limits) if limits else DEFAULT_MAX_CONSUMERS) <= len(stream.consumers):
        raise errors.MAXIMUM_CONSUMERS_LIMIT()
    if stream.config.retention == "workqueue":
        consumer_config.check_workqueue(cfg, _other_filters(stream, wanted))
    name = wanted or _new_name(stream)
    if len(name) > consumer_config.MAX_NAME_LEN:
        raise errors.CONSUMER_NAME_TOO_LONG(max=consumer_config.MAX_NAME_LEN)
    if not consumer_config.is_valid_asset_name(name):
        raise errors.CONSUMER_BAD_DURABLE_NAME()
    consumer_config.stamp_ephemeral_threshold(cfg)
    return js.consumers.create(stream, name, cfg, now_ns())


def _update(stream: Stream, existing: Consumer, cfg: ConsumerConfig, action: str) -> Consumer:
    if action == "create":
        same = cfg.comparable()
        consumer_config.stamp_ephemeral_threshold(same)
        if same != existing.cfg.comparable():
            raise errors.CONSUMER_ALREADY_EXISTS()
    if stream.config.retention == "workqueue":
        consumer_config.check_workqueue_partition(cfg, _other_filters(stream, existing.name))
    if not cfg.durable_name:
        consumer_config.stamp_ephemeral_threshold(cfg)
    bound = cfg.deliver_subject != existing.cfg.deliver_subject and existing.cfg.is_push and existing.active
    reason = consumer_config.update_refusal(existing.cfg, cfg, bound)
    if reason == errors.CONSUMER_NAME_EXIST.description:
        raise errors.CONSUMER_NAME_EXIST()
    if reason == errors.CONSUMER_MAX_DELIVER_BACKOFF.description:
        raise errors.CONSUMER_MAX_DELIVER_BACKOFF()
    if reason is not None:
        raise errors.CONSUMER_CREATE(err=reason)
    if cfg.comparable() != existing.cfg.comparable():
        existing.update_config(cfg)
    return existing


def _other_filters(stream: Stream, own: str) -> list[list[str]]:
    return [c.cfg.filters for c in stream.consumers.values() if isinstance(c, Consumer) and c.name != own]


def _new_name(stream: Stream) -> str:
    while True:
        name = "".join(secrets.choice(_NAME_ALPHABET) for _ in range(8))
        if name not in stream.consumers:
            return name


# ---- other endpoints -------------------------------------------------------------------------------


def _lookup(req: Request) -> Consumer:
    return _lookup_in(req)[1]


def _lookup_in(req: Request) -> tuple[Stream, Consumer]:
    stream = req.js.lookup(req.token(4))
    consumer = stream.consumers.get(req.token(5))
    if not isinstance(consumer, Consumer):
        raise errors.CONSUMER_NOT_FOUND()
    return stream, consumer


def consumer_info(req: Request) -> dict[str, Any]:
    req.require_empty()
    return _lookup(req).info()


def _page(req: Request) -> tuple[Stream, list[Consumer], int]:
    raw = req.json_if_object()
    offset = max(get_int(raw, "offset"), 0)
    stream = req.js.lookup(req.token(4))
    consumers = sorted((c for c in stream.consumers.values() if isinstance(c, Consumer)), key=lambda c: c.name)
    return stream, consumers, offset


def consumer_names(req: Request) -> dict[str, Any]:
    _, consumers, offset = _page(req)
    page = [c.name for c in consumers[offset:offset + NAMES_LIMIT]]
    return {"total": len(consumers), "offset": min(offset, len(consumers)), "limit": NAMES_LIMIT, "consumers": page}


def consumer_list(req: Request) -> dict[str, Any]:
    _, consumers, offset = _page(req)
    page = [c.info(dynamic_metadata=False) for c in consumers[offset:offset + LIST_LIMIT]]
    return {"total": len(consumers), "offset": min(offset, len(consumers)), "limit": LIST_LIMIT, "consumers": page}


def consumer_delete(req: Request) -> dict[str, Any]:
    req.require_empty()
    stream, consumer = _lookup_in(req)
    req.js.consumers.delete(stream, consumer)
    return {"success": True}


def consumer_pause(req: Request) -> dict[str, Any]:
    raw = req.json_if_object()
    consumer = _lookup(req)
    until = get_time(raw, "pause_until") or 0
    now = now_ns()
    given = get_str(raw, "pause_until")
    consumer.pause(given)
    out: dict[str, Any] = {"paused": until > now, "pause_until": given or ZERO_TIME}
    if until > now:
        out["pause_remaining"] = min(until - now, MAX_DURATION)
    return out


def consumer_unpin(req: Request) -> dict[str, Any]:
    """Checks in nats-server's order: the body (which must be JSON), the group, then the consumer."""
    if not req.payload.strip():
        raise errors.INVALID_JSON(err="unexpected end of JSON input")
    raw = req.json()
    group = get_str(raw, "group")
    if not group:
        raise errors.INVALID_JSON(err="consumer group not specified")
    if not consumer_config.valid_group_name(group):
        raise errors.CONSUMER_INVALID_GROUP_NAME()
    consumer = _lookup(req)
    if group not in consumer.cfg.priority_groups:
        raise errors.CONSUMER_INVALID_PRIORITY_GROUP()
    consumer.pins.unpin(group)
    return {}


def consumer_reset(req: Request) -> dict[str, Any] | None:
    """RESET answers only when the consumer exists (nats-server's consumer subscribes it itself, and
    checks the API level only then). A request with a `Nats-Stream-Identity` header gets the stream's
    identity back in that header."""
    stream = req.js.streams.get(req.token(4))
    consumer = stream.consumers.get(req.token(5)) if stream is not None else None
    if stream is None or not isinstance(consumer, Consumer):
        return None
    try:
        if not api_level_supported(req.hdr):
            raise errors.REQUIRED_API_LEVEL()
        seq = get_int(req.json(), "seq", kind="uint64")
        target = consumer.reset(seq)
    except errors.ApiError as err:  # the reset response always carries reset_seq, even with an error
        return {"error": err.to_dict(), "reset_seq": 0}
    if headers.get(req.hdr, headers.STREAM_IDENTITY) is not None:
        req.response_hdr = headers.build([(headers.STREAM_IDENTITY, stream.identity())])
    return {**consumer.info(), "reset_seq": target}


CONSUMER_HANDLERS: list[Endpoint] = [
    Endpoint("$JS.API.CONSUMER.CREATE.*", "consumer_create_response", consumer_create),
    Endpoint("$JS.API.CONSUMER.CREATE.*.*", "consumer_create_response", consumer_create),
    Endpoint("$JS.API.CONSUMER.CREATE.*.*.>", "consumer_create_response", consumer_create),
    Endpoint("$JS.API.CONSUMER.DURABLE.CREATE.*.*", "consumer_create_response", consumer_create),
    Endpoint("$JS.API.CONSUMER.INFO.*.*", "consumer_info_response", consumer_info),
    Endpoint("$JS.API.CONSUMER.NAMES.*", "consumer_names_response", consumer_names),
    Endpoint("$JS.API.CONSUMER.LIST.*", "consumer_list_response", consumer_list),
    Endpoint("$JS.API.CONSUMER.DELETE.*.*", "consumer_delete_response", consumer_delete),
    Endpoint("$JS.API.CONSUMER.PAUSE.*.*", "consumer_pause_response", consumer_pause,
             error_fields={"paused": False, "pause_until": ZERO_TIME}),
    Endpoint("$JS.API.CONSUMER.UNPIN.*.*", "consumer_unpin_response", consumer_unpin),
    Endpoint("$JS.API.CONSUMER.RESET.*.*", "consumer_reset_response", consumer_reset, own_api_level=True),
]
