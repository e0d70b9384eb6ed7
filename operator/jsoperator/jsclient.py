"""The only module that talks to NATS: a pool of nats-py clients and the JetStream API calls the operator needs.

Requests are raw `$JS.API.*` JSON requests so the configs built by `mapping` go to the server byte for
byte (no round trip through nats-py's dataclasses, which would drop fields they do not know).
Every failure becomes one of three typed exceptions:

- `ApiError` (and subclasses): the server answered with `{"error": {code, err_code, description}}`;
- `BrokerUnavailable`: no connection, a timeout, or no JetStream responder — retry later, change nothing;
- `ResetUnsupported`: CONSUMER.RESET got no reply although the consumer exists (nats-server < 2.14).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import functools
import json
import logging
import ssl
import time
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client, RawCredentials

from . import features

log = logging.getLogger(__name__)

# err_code values the operator branches on (nats-server errors.json).
STREAM_NOT_FOUND = 10059
CONSUMER_NOT_FOUND = 10014
NO_MESSAGE_FOUND = 10037
INVALID_RESET = 10204
_NOT_FOUND_CODES = frozenset({STREAM_NOT_FOUND, CONSUMER_NOT_FOUND, NO_MESSAGE_FOUND})


class ApiError(Exception):
    """The server refused a JetStream API request."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{description} (err_code {err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description


class NotFound(ApiError):
    """Stream, consumer or message not found (404 with 10059/10014/10037)."""


class InvalidReset(ApiError):
    """CONSUMER.RESET refused by the consumer's deliver policy (10204)."""


class BrokerUnavailable(Exception):
    """The broker cannot be reached (connect failure, timeout, JetStream not enabled)."""


class ResetUnsupported(Exception):
    """The broker does not answer `$JS.API.CONSUMER.RESET`."""

    def __init__(self) -> None:
        super().__init__(
            "the server does not support $JS.API.CONSUMER.RESET (nats-server >= 2.14 needed); "
            "upgrade the server or remove the reset annotation"
        )


class RoundTripFailed(Exception):
    """`round_trip` got back another message than it sent."""


def _api_error(err: dict[str, Any]) -> ApiError:
    err_code = int(err.get("err_code", 0))
    cls = NotFound if err_code in _NOT_FOUND_CODES else InvalidReset if err_code == INVALID_RESET else ApiError
    return cls(int(err.get("code", 0)), err_code, str(err.get("description", "")))


@dataclasses.dataclass(frozen=True)
class ConnectionSettings:
    """Everything needed to open one NATS connection; resolved (Secrets already read). Pool key."""

    servers: tuple[str, ...]
    creds: str | None = None  # contents of a .creds file
    token: str | None = None
    user: str | None = None
    password: str | None = None
    tls_ca: str | None = None  # PEM contents
    tls_cert: str | None = None  # PEM contents
    tls_key: str | None = None  # PEM contents
    js_domain: str | None = None

    def api_prefix(self) -> str:
        return f"$JS.{self.js_domain}.API" if self.js_domain else "$JS.API"

    def describe(self) -> str:
        """Servers and domain only: safe for logs and status messages."""
        domain = f" (domain {self.js_domain})" if self.js_domain else ""
        return ",".join(self.servers) + domain


def _tls_context(settings: ConnectionSettings) -> ssl.SSLContext | None:
    if not (settings.tls_ca or settings.tls_cert):
        return None
    ctx = ssl.create_default_context(cadata=settings.tls_ca) if settings.tls_ca else ssl.create_default_context()
    if settings.tls_cert and settings.tls_key:
        _load_cert_chain(ctx, settings.tls_cert, settings.tls_key)
    return ctx


def _load_cert_chain(ctx: ssl.SSLContext, cert_pem: str, key_pem: str) -> None:
    # ssl only loads a client certificate from files: write both to a private temp dir just for the call.
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="jsoperator-tls-") as tmp:
        cert_path, key_path = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        for path, pem in ((cert_path, cert_pem), (key_path, key_pem)):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(pem)
        ctx.load_cert_chain(cert_path, key_path)


def _version(nc: Client) -> str:
    """INFO's version of the server `nc` is connected to (nats-py parses it; "unknown" when it is no semver)."""
    found = nc.connected_server_version
    try:
        return f"{found.major}.{found.minor}.{found.patch}" + (f"-{found.dev}" if found.dev else "")
    except ValueError:
        return "unknown"


class JetStreamClient:
    """JetStream API calls over one pooled connection."""

    def __init__(self, nc: Client, settings: ConnectionSettings, timeout: float,
                 servers: dict[ConnectionSettings, features.Server] | None = None) -> None:
        self._nc = nc
        self._prefix = settings.api_prefix()
        self._timeout = timeout
        self._servers = {} if servers is None else servers  # the pool's, emptied on every (re)connect
        self.settings = settings

    async def server(self) -> features.Server:
        """The release of the server this connection reached: INFO's version and $JS.API.INFO's API level,
        asked once per connection (a reconnect may reach another server)."""
        known = self._servers.get(self.settings)
        if known is None:
            info = await self._request("INFO")
            level = int((info.get("api") or {}).get("level") or 0)
            known = features.Server(_version(self._nc), level)
            self._servers[self.settings] = known
        return known

    async def _request(self, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = json.dumps(body).encode() if body is not None else b""
        try:
            msg = await self._nc.request(f"{self._prefix}.{subject}", payload, timeout=self._timeout)
        except nats.errors.NoRespondersError as exc:
            raise BrokerUnavailable(
                f"no JetStream responder at {self.settings.describe()}: is JetStream enabled?"
            ) from exc
        except (nats.errors.TimeoutError, asyncio.TimeoutError) as exc:
            raise BrokerUnavailable(f"request {subject} to {self.settings.describe()} timed out") from exc
        except nats.errors.OutboundBufferLimitError as exc:  # pending_size=0: nothing waits for a reconnect
            raise BrokerUnavailable(f"{self.settings.describe()}: connection lost, reconnecting") from exc
        except nats.errors.Error as exc:
            raise BrokerUnavailable(f"{self.settings.describe()}: {exc}") from exc
        data: dict[str, Any] = json.loads(msg.data)
        if "error" in data:
            raise _api_error(data["error"])
        return data

    # Streams -----------------------------------------------------------------------------------

    async def stream_info(self, name: str) -> dict[str, Any] | None:
        """StreamInfo, or None when the stream does not exist."""
        try:
            return await self._request(f"STREAM.INFO.{name}")
        except NotFound:
            return None

    async def create_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        return await self._request(f"STREAM.CREATE.{config['name']}", config)

    async def update_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        return await self._request(f"STREAM.UPDATE.{config['name']}", config)

    async def delete_stream(self, name: str) -> bool:
        """Delete; False when it was already gone (which counts as success)."""
        try:
            await self._request(f"STREAM.DELETE.{name}")
        except NotFound:
            return False
        return True

    # Consumers ---------------------------------------------------------------------------------

    async def consumer_info(self, stream: str, name: str) -> dict[str, Any] | None:
        """ConsumerInfo, or None when the consumer (or its stream) does not exist."""
        try:
            return await self._request(f"CONSUMER.INFO.{stream}.{name}")
        except NotFound:
            return None

    async def put_consumer(self, stream: str, config: dict[str, Any], action: str) -> dict[str, Any]:
        """Create ("create") or update ("update") a durable consumer; the server checks which one holds."""
        name = config.get("durable_name") or config["name"]
        body = {"stream_name": stream, "config": config, "action": action}
        return await self._request(f"CONSUMER.CREATE.{stream}.{name}", body)

    async def pause_consumer(self, stream: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """CONSUMER.PAUSE: `{"pause_until": RFC3339}` pauses, `{}` resumes."""
        return await self._request(f"CONSUMER.PAUSE.{stream}.{name}", body)

    async def delete_consumer(self, stream: str, name: str) -> bool:
        """Delete; False when it (or its stream) was already gone."""
        try:
            await self._request(f"CONSUMER.DELETE.{stream}.{name}")
        except NotFound:
            return False
        return True

    async def reset_consumer(self, stream: str, name: str, seq: int) -> dict[str, Any]:
        """CONSUMER.RESET to stream sequence `seq` (0 = the ack floor). Returns the response with reset_seq.

        The server sends no reply both for a missing consumer and when it lacks the API, so existence is
        checked first: a timeout after that means the API is missing.
        """
        if await self.consumer_info(stream, name) is None:
            raise NotFound(404, CONSUMER_NOT_FOUND, f"consumer {name} not found on stream {stream}")
        try:
            return await self._request(f"CONSUMER.RESET.{stream}.{name}", {"seq": seq} if seq else None)
        except BrokerUnavailable as exc:
            # The broker just answered CONSUMER.INFO: silence (or no responder) now means no RESET API.
            unanswered = (nats.errors.TimeoutError, asyncio.TimeoutError, nats.errors.NoRespondersError)
            if self._nc.is_connected and isinstance(exc.__cause__, unanswered):
                raise ResetUnsupported() from exc
            raise

    async def unpin_consumer(self, stream: str, name: str, group: str) -> dict[str, Any]:
        """CONSUMER.UNPIN (nats-server >= 2.11): the client pinned in priority group `group` is let go."""
        return await self._request(f"CONSUMER.UNPIN.{stream}.{name}", {"group": group})

    async def stream_list(self) -> dict[str, dict[str, Any]]:
        """StreamInfo of every stream, by name (all pages of STREAM.LIST)."""
        return {info["config"]["name"]: info for info in await self._paged("STREAM.LIST", "streams")}

    async def consumer_list(self, stream: str) -> dict[str, dict[str, Any]]:
        """ConsumerInfo of every consumer of `stream`, by name; empty when the stream does not exist."""
        try:
            return {info["name"]: info for info in await self._paged(f"CONSUMER.LIST.{stream}", "consumers")}
        except NotFound:
            return {}

    async def _paged(self, subject: str, key: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        while True:
            page = await self._request(subject, {"offset": len(items)})
            items += page.get(key) or []
            if not page.get(key) or len(items) >= int(page.get("total", 0)):
                return items

    async def first_seq_at(self, stream: str, when: datetime.datetime) -> int | None:
        """The first stream sequence stored at or after `when`; None when no such message exists."""
        stamp = when.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
        try:
            data = await self._request(f"STREAM.MSG.GET.{stream}", {"start_time": stamp, "no_hdr": True})
        except NotFound as exc:
            if exc.err_code == NO_MESSAGE_FOUND:
                return None
            raise
        return int(data["message"]["seq"])

    # Connectivity check (`jsoperator check`) ------------------------------------------------------

    async def round_trip(self, name: str) -> list[str]:
        """Send one message to ourselves over core NATS, then store one in a memory stream `name` (subject
        `name`) and read it back; the stream is deleted again. Returns what was checked, one line each."""
        payload = name.encode()
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox, max_msgs=1)
        try:
            await self._nc.publish(inbox, payload)
            got = await sub.next_msg(timeout=self._timeout)
        except (nats.errors.TimeoutError, asyncio.TimeoutError) as exc:
            raise BrokerUnavailable(f"a message to {inbox} did not come back within {self._timeout:g}s") from exc
        if got.data != payload:
            raise RoundTripFailed(f"the message to {inbox} came back changed: {got.data!r}")
        done = [f"core NATS: a message to {inbox} came back"]
        await self.create_stream({"name": name, "subjects": [name], "storage": "memory", "max_msgs": 1})
        try:
            try:
                ack = json.loads((await self._nc.request(name, payload, timeout=self._timeout)).data)
            except nats.errors.Error as exc:
                raise BrokerUnavailable(f"publish to stream {name}: {exc}") from exc
            if "error" in ack:
                raise _api_error(ack["error"])
            stored = await self._request(f"STREAM.MSG.GET.{name}", {"seq": ack["seq"]})
            if base64.b64decode(stored["message"].get("data", "")) != payload:
                raise RoundTripFailed(f"stream {name} returned another message than the one stored")
        finally:
            await self.delete_stream(name)
        done.append(f"JetStream: a message stored in memory stream {name} (seq {ack['seq']}) read back, stream deleted")
        return done


OUT_OF_STORAGE = "$JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE"
ADVISORIES = ("$JS.EVENT.ADVISORY.STREAM.>", "$JS.EVENT.ADVISORY.CONSUMER.>", OUT_OF_STORAGE)
"""Subscribed on every pooled connection: stream and consumer actions (created, deleted, updated, leader
elected, max deliveries ...) and a server out of storage. Not `$JS.EVENT.ADVISORY.API`: the audit of every
API call, ours included. (nats-server sends OUT_OF_STORAGE in its system account, which the operator's
connections do not see unless they are system users; jsbroker sends it in the account it serves.)"""


@dataclasses.dataclass(frozen=True)
class Advisory:
    """A JetStream advisory, reduced to what it is about: `$JS.EVENT.ADVISORY.STREAM.<EVENT>.<stream>`,
    `$JS.EVENT.ADVISORY.CONSUMER.<EVENT>.<stream>.<consumer>`, or OUT_OF_STORAGE (event OUT_OF_STORAGE,
    the stream and `server` from its JSON body; stream "" when the server names none: all its streams)."""

    event: str  # e.g. DELETED, CREATED, UPDATED, MAX_DELIVERIES, OUT_OF_STORAGE
    stream: str
    consumer: str | None
    server: str = ""

    @classmethod
    def parse(cls, subject: str, data: bytes = b"") -> Advisory | None:
        if subject == OUT_OF_STORAGE:
            try:
                body = json.loads(data)
                return cls("OUT_OF_STORAGE", str(body.get("stream") or ""), None, str(body.get("server") or ""))
            except (ValueError, AttributeError):
                return None
        tokens = subject.split(".")
        if len(tokens) == 6 and tokens[3] == "STREAM":
            return cls(tokens[4], tokens[5], None)
        if len(tokens) == 7 and tokens[3] == "CONSUMER":
            return cls(tokens[4], tokens[5], tokens[6])
        return None


class Listener:
    """What the pool reports about its connections; the operator's scheduler overrides these."""

    def advisory(self, settings: ConnectionSettings, advisory: Advisory) -> None:
        """A stream or consumer changed on that server."""

    def connection(self, settings: ConnectionSettings, connected: bool) -> None:
        """The connection was lost (False) or is back (True)."""


class Pool:
    """One live nats-py client per distinct ConnectionSettings, opened on first use."""

    def __init__(self, *, timeout: float = 3.0, connect_timeout: float = 2.0, idle_close: float = 900.0,
                 listener: Listener | None = None) -> None:
        self._listener = listener or Listener()
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._idle_close = idle_close  # close connections no resource used for this long (rotated Secrets)
        self._last_used: dict[ConnectionSettings, float] = {}
        self._clients: dict[ConnectionSettings, Client] = {}
        self._servers: dict[ConnectionSettings, features.Server] = {}
        # One lock per connection: a broker that is slow to answer never delays the others.
        self._locks: dict[ConnectionSettings, asyncio.Lock] = {}

    async def client(self, settings: ConnectionSettings) -> JetStreamClient:
        now = time.monotonic()
        self._last_used[settings] = now
        await self._close_idle(now)
        return JetStreamClient(await self._client(settings), settings, self._timeout, self._servers)

    async def _close_idle(self, now: float) -> None:
        idle = [key for key, used in self._last_used.items() if now - used > self._idle_close]
        for key in idle:
            del self._last_used[key]
            nc = self._clients.pop(key, None)
            if nc is not None:
                await self._close(nc)

    async def _client(self, settings: ConnectionSettings) -> Client:
        async with self._locks.setdefault(settings, asyncio.Lock()):
            nc = self._clients.get(settings)
            if nc is not None and not nc.is_closed:
                return nc
            nc = await self._connect(settings)
            self._servers.pop(settings, None)
            self._clients[settings] = nc
            for subject in ADVISORIES:
                await nc.subscribe(subject, cb=functools.partial(self._on_advisory, settings))
            return nc

    async def _connect(self, settings: ConnectionSettings) -> Client:
        last_error: list[Exception] = []  # what the client last complained about, for the failure message
        options: dict[str, Any] = dict(
            servers=list(settings.servers),
            name="jsoperator",
            connect_timeout=self._connect_timeout,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            # Requests made while reconnecting must fail fast, not wait on a buffer.
            pending_size=0,
            error_cb=functools.partial(self._on_error, last_error),
            disconnected_cb=functools.partial(self._on_state, "disconnected", settings),
            reconnected_cb=functools.partial(self._on_state, "reconnected", settings),
        )
        if settings.creds:
            options["user_credentials"] = RawCredentials(settings.creds)
        if settings.token:
            options["token"] = settings.token
        if settings.user:
            options["user"], options["password"] = settings.user, settings.password or ""
        if (tls := _tls_context(settings)) is not None:
            options["tls"] = tls
        nc = Client()
        # With reconnects on, nats-py retries a failed first connect forever: bound it ourselves.
        budget = self._connect_timeout * len(settings.servers) + 1.0
        try:
            await asyncio.wait_for(nc.connect(**options), timeout=budget)
        except (OSError, asyncio.TimeoutError, nats.errors.Error) as exc:
            await nc.close()
            cause = last_error[-1] if last_error else exc
            reason = str(cause) or f"{type(cause).__name__} within {budget:.0f}s"
            raise BrokerUnavailable(f"cannot connect to {settings.describe()}: {reason}") from exc
        return nc

    async def _on_error(self, last_error: list[Exception], exc: Exception) -> None:
        # A server's own complaint ("Authorization Violation") says more than the reset that follows it.
        if not (last_error and isinstance(last_error[0], nats.errors.Error) and isinstance(exc, OSError)):
            last_error[:] = [exc]
        log.debug("nats client error: %s", exc)

    async def _on_state(self, state: str, settings: ConnectionSettings) -> None:
        self._servers.pop(settings, None)
        log.info("broker %s", state, extra={"servers": settings.describe()})
        self._listener.connection(settings, state == "reconnected")

    async def _on_advisory(self, settings: ConnectionSettings, msg: Any) -> None:
        advisory = Advisory.parse(msg.subject, msg.data)
        if advisory is not None:
            self._listener.advisory(settings, advisory)

    def connected(self) -> bool:
        """True when no pooled connection is stuck disconnected (used by the liveness probe)."""
        return all(nc.is_connected or nc.is_reconnecting for nc in self._clients.values() if not nc.is_closed)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for nc in clients:
            await self._close(nc)

    @staticmethod
    async def _close(nc: Client) -> None:
        try:
            await nc.close()
        except Exception:  # closing a broken client must not hide the shutdown
            log.debug("close failed", exc_info=True)
