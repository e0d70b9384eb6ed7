"""The `$JS.API.*` request router: subject -> handler table, request decoding, response encoding.

Owns: matching an API subject against the handler table (the core's subject rules), the checks every
request gets before its handler (`Nats-Required-Api-Level`, read by `requests.py` like every request
field), and the only place responses and `ApiError`s are serialised (`{"type": "io.nats.jetstream.api.v1.<x>", ...}`, errors as
exactly `{"code", "err_code", "description"}`).

Handlers (`stream_api.STREAM_HANDLERS`, `consumer_api.CONSUMER_HANDLERS`) are short: read the request,
call the stream or consumer, return the response body as a dict (or None when they answered themselves,
as DIRECT.GET does). They raise `errors.X(...)` for failures and never build error JSON.

Subjects nobody handles: nats-server answers an unknown `$JS.API.` subject with nothing at all, but a
DIRECT.GET to a stream without `allow_direct` or a CONSUMER.MSG.NEXT to a consumer that does not exist
gets the 503 no-responders status. The router subscribes `$JS.API.>` (and the domain form), so it
answers those two cases itself; streams and consumers subscribe their DIRECT.GET / MSG.NEXT subjects.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from jsbroker import subjects
from jsbroker.jetstream import errors
from jsbroker.jetstream.requests import api_level_supported, parse_json
from jsbroker.jetstream.responses import TYPE_PREFIX, ApiCounts, dumps

if TYPE_CHECKING:
    from jsbroker.internal import InternalBus, InternalSubscription, Origin
    from jsbroker.jetstream.registry import StreamRegistry

log = logging.getLogger(__name__)

API_PREFIX = "$JS.API."


@dataclass(slots=True)
class Request:
    """One API request as a handler sees it. `subject` is always the `$JS.API.` form (domain mapped)."""

    js: StreamRegistry
    subject: str
    reply: str | None
    hdr: bytes
    payload: bytes
    tokens: list[str] = field(default_factory=list)
    response_hdr: bytes = b""  # headers a handler wants on its (successful) response

    def token(self, index: int) -> str:
        """Token `index` of the subject (`$JS.API.STREAM.INFO.<name>`: the name is token 4)."""
        return self.tokens[index]

    def tail(self, index: int) -> str:
        """Tokens from `index` to the end, joined (a subject embedded in an API subject)."""
        return ".".join(self.tokens[index:])

    def json(self) -> dict[str, Any]:
        """The body as a JSON object; an empty body is `{}`. Malformed JSON or a non-object is 10025."""
        return parse_json(self.payload)

    def json_if_object(self) -> dict[str, Any]:
        """Like nats-server's optional bodies: parsed only when it looks like JSON, otherwise `{}`."""
        body = self.payload.lstrip()
        if not body.startswith((b"{", b"[")):
            return {}
        return parse_json(body)

    def require_empty(self) -> None:
        """Bodies that must be empty or `{}` (10038 otherwise)."""
        body = self.payload.strip()
        if body and body != b"{}":
            raise errors.NOT_EMPTY_REQUEST()

    def require_body(self) -> dict[str, Any]:
        """Bodies that must not be empty (10003 when they are)."""
        if not self.payload.strip():
            raise errors.BAD_REQUEST()
        return self.json()


Handler = Callable[[Request], "dict[str, Any] | None"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    pattern: str  # `$JS.API.` subject pattern with wildcards
    response_type: str  # suffix after `io.nats.jetstream.api.v1.`
    handler: Handler
    error_fields: dict[str, Any] = field(default_factory=dict)  # non-omitempty fields Go also sends with errors
    own_api_level: bool = False  # the handler checks Nats-Required-Api-Level itself (after deciding to answer)


def match(endpoints: list[Endpoint], subject: str) -> Endpoint | None:
    for endpoint in endpoints:
        if subjects.subject_matches(endpoint.pattern, subject):
            return endpoint
    return None


def refusal(endpoints: list[Endpoint], subject: str) -> bytes | None:
    """The answer to a request in an account without JetStream (10039), None for a subject nobody handles."""
    endpoint = match(endpoints, subject)
    if endpoint is None:
        return None
    err = errors.NOT_ENABLED_FOR_ACCOUNT().to_dict()
    return dumps({"type": TYPE_PREFIX + endpoint.response_type, "error": err, **endpoint.error_fields})


class ApiRouter:
    """Subscribes the API subjects, dispatches requests to the handler table and sends the answers."""

    def __init__(self, js: StreamRegistry, bus: InternalBus, endpoints: Callable[[], list[Endpoint]],
                 domain: str | None, counts: ApiCounts) -> None:
        """`endpoints`: the handler table, asked for at the first request (its modules are imported then)."""
        self._js = js
        self._bus = bus
        self._endpoints = endpoints
        self._domain_prefix = f"$JS.{domain}.API." if domain else None
        self._subs: list[InternalSubscription] = []
        self._counts = counts
        self._held: list[tuple[str, str | None, bytes, bytes, Origin | None]] | None = None

    @property
    def started(self) -> bool:
        return bool(self._subs)

    def start(self, held: bool = False) -> None:
        """Subscribe the API; `held`: its requests wait until `release` (the account's streams are being read)."""
        self._held = [] if held else None
        self._subs.append(self._bus.subscribe_internal(API_PREFIX + ">", self._on_request))
        if self._domain_prefix:
            self._subs.append(self._bus.subscribe_internal(self._domain_prefix + ">", self._on_request))

    def release(self) -> None:
        """The requests held since `start(held=True)` answered, in order, and the next ones at once."""
        held, self._held = self._held or [], None
        for request in held:
            self._on_request(*request)

    def stop(self) -> None:
        for sub in self._subs:
            self._bus.unsubscribe_internal(sub)
        self._subs.clear()

    def _on_request(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
        if self._held is not None:
            self._held.append((subject, reply, hdr, payload, origin))
            return
        if self._domain_prefix and subject.startswith(self._domain_prefix):
            subject = API_PREFIX + subject[len(self._domain_prefix):]
        endpoint = self._match(subject)
        if endpoint is None:
            self._unhandled(subject, reply)
            return
        if not reply:
            return  # nats-server drops API requests without a reply subject
        request = Request(self._js, subject, reply, hdr, payload, subject.split("."))
        self._js.before_request()
        failure: errors.ApiError | None = None
        body = None
        try:
            if not endpoint.own_api_level and not api_level_supported(hdr):
                raise errors.REQUIRED_API_LEVEL()
            body = endpoint.handler(request)
        except errors.ApiError as err:
            failure = err
        except Exception:  # a bug must not take the connection down; answer like nats-server's 500s
            log.exception("jetstream api handler failed", extra={"subject": subject})
            failure = errors.STREAM_GENERAL_ERROR(err="internal error")
        # what the handler wrote is durable before the answer goes (layout fsyncs run in the syncer's thread)
        self._js.answer_when_durable(lambda late: self._answer(endpoint, request, body, failure or late))

    def _answer(self, endpoint: Endpoint, request: Request, body: dict[str, Any] | None,
                failure: errors.ApiError | None) -> None:
        assert request.reply is not None  # requests without one are dropped before their handler
        if failure is not None:
            self._send_error(endpoint, request.reply, failure)
            return
        self._counts.total += 1
        if body is not None:
            self._bus.publish(request.reply, None, request.response_hdr,
                              dumps({"type": TYPE_PREFIX + endpoint.response_type, **body}))

    def _send_error(self, endpoint: Endpoint, reply: str, err: errors.ApiError) -> None:
        self._counts.total += 1
        self._counts.errors += 1
        body = {"type": TYPE_PREFIX + endpoint.response_type, "error": err.to_dict(), **endpoint.error_fields}
        self._bus.publish(reply, None, b"", dumps(body))

    def _match(self, subject: str) -> Endpoint | None:
        return match(self._endpoints(), subject)

    def _unhandled(self, subject: str, reply: str | None) -> None:
        """Answer 503 where nats-server has no responder; stay silent for unknown subjects."""
        if reply and self._js.wants_no_responders(subject.split(".")):
            # nats-server names the subject nobody answered, as the router's own 503 does
            self._bus.publish(reply, None, b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n" % subject.encode(), b"")
