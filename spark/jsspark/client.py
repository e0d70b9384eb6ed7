"""jsspark's NATS client: connecting with bounded failure, the stream's state, and reading a range of
stream sequences deterministically from inside a Spark task.

Connecting tries each server `reconnectAttempts + 1` times (forever with -1), `connectTimeout` each, and
then fails with one line naming the servers and the cause. nats-py's error callback is jsspark's, so
failed attempts are counted, not printed as tracebacks.

Every request to JetStream (the stream's info, a range's read, the sink's publishes) runs in `retrying`:
on a connection of its own, again on a new one after a transient failure (the server restarting or
failing over: connection refused or lost, no responders, no answer within requestTimeout, JetStream's
503) with a growing pause (jsspark.backoff), until `retryTimeout` has passed; then one error saying what
failed, for how long, and what to do. A stream that does not exist, a request the server refused
(permissions) and other answers that asking again cannot change fail at once. An attempt is repeatable
as a whole: a read starts its range again (the same rows), the sink sends what was not acknowledged again
with the same message ids (the stream's duplicate window drops what was stored).

Each range is read by its own short-lived consumer: ephemeral, ack none, in memory, starting at the
range's first sequence, with the source's subject filters, pulled in requests of `fetchBatchSize` that
end at once when nothing more matches (`no_wait`: every sequence of the range is already stored).
Delivery is in stream order, so the rows of a range are the same however often Spark runs the task;
deleted and purged sequences are simply absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from .backoff import Backoff
from .offsets import StreamState
from .options import Connection

log = logging.getLogger("jsspark")

_STREAM_NOT_FOUND = 10059  # nats-server's JSStreamNotFoundErr


T = TypeVar("T")


def run(work: Coroutine[Any, Any, T]) -> T:
    """A task's NATS work on an event loop of its own: uvloop's when installed (a dependency on Linux:
    nats-py's per-message callbacks and socket writes cost less there)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(work)
    return uvloop.run(work)


class ConnectError(ConnectionError):
    """No server of the `servers` option could be reached (or it refused the connection). `denied`: it
    refused the credentials, which asking again does not change."""

    def __init__(self, message: str, denied: bool = False) -> None:
        super().__init__(message)
        self.denied = denied


class JetStreamError(RuntimeError):
    """A JetStream request failed; the message names the stream and the server. `transient`: asking again
    may succeed (the server was restarting, unreachable or did not answer), so `retrying` does."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class RetriesExhaustedError(JetStreamError):
    """A request kept failing transiently for the whole `retryTimeout`."""


class NatsClient(Client):
    """nats-py's client, remembering the first permissions violation its server reported: to nats-py a
    request the server refused looks like one that is never answered."""

    refused = ""
    last_url = "?"  # the server it was connected to last (a closed client has none)


_TRANSIENT = (OSError, asyncio.TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError,
              nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError,
              nats.errors.StaleConnectionError, nats.errors.OutboundBufferLimitError)  # OSError: ConnectError too


def transient(exc: BaseException) -> bool:
    """Whether asking again may succeed: the server was away or did not answer (not what it answered)."""
    if isinstance(exc, JetStreamError):
        return exc.transient
    if isinstance(exc, ConnectError):
        return not exc.denied
    return isinstance(exc, _TRANSIENT)


class _GiveUp(Exception):
    """Raised from nats-py's error callback to end its connection attempts (not an OSError: it passes
    nats-py's own handlers)."""


def _cause(exc: BaseException, conn: Connection) -> str:
    if isinstance(exc, (asyncio.TimeoutError, nats.errors.TimeoutError)):
        return f"no answer within connectTimeout={conn.connect_timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    text = str(exc).removeprefix("nats: ")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def server_url(nc: NatsClient) -> str:
    """The server a client is (or was last) connected to, without credentials."""
    url = nc.connected_url
    if url:
        nc.last_url = f"{url.scheme}://{url.hostname}:{url.port}"
    return nc.last_url


async def connect(conn: Connection) -> NatsClient:
    """A connected client, or ConnectError after the attempts `conn` allows."""
    servers = conn.server_list()
    budget = None if conn.reconnect_attempts < 0 else len(servers) * (conn.reconnect_attempts + 1)
    failures: list[BaseException] = []
    nc = NatsClient()

    async def on_error(exc: Exception) -> None:
        if nc.is_connected:
            if "permissions violation" in str(exc):
                nc.refused = nc.refused or str(exc).removeprefix("nats: ").strip("'")
            log.warning("nats %s: %s", server_url(nc), _cause(exc, conn))
            return
        failures.append(exc)
        if budget is None and len(failures) == 1:
            log.warning("waiting for NATS at %s: %s (reconnectAttempts=-1)", conn.servers, _cause(exc, conn))
        if budget is not None and len(failures) >= budget:
            raise _GiveUp

    try:
        await nc.connect(**conn.connect_kwargs(), error_cb=on_error)
    except (_GiveUp, OSError, asyncio.TimeoutError, nats.errors.Error) as exc:
        with contextlib.suppress(Exception):
            await nc.close()
        last = failures[-1] if failures else exc
        cause = _cause(last, conn)
        denied = isinstance(last, nats.errors.AuthorizationError) or "authorization violation" in str(last).lower()
        tries = f"{conn.reconnect_attempts + 1} attempt(s) per server" if budget else "the attempts allowed"
        raise ConnectError(f"cannot connect to NATS at {', '.join(servers)}: {cause} ({tries}, connectTimeout="
                           f"{conn.connect_timeout:g} s); check the servers option and that the server is up "
                           "(reconnectAttempts=-1 waits for it)", denied) from None
    server_url(nc)  # remembered for messages after the connection is lost
    return nc


async def retrying(conn: Connection, what: str, attempt: Callable[[NatsClient], Awaitable[T]]) -> T:
    """`attempt` on a new connection, and again on another one after each transient failure, until it
    succeeds, fails otherwise (raised as it is), or `retryTimeout` has passed (RetriesExhaustedError
    naming `what`, how long and how often it failed, and the last cause). retryTimeout=0: one attempt."""
    backoff = Backoff(conn.retry_timeout, time.monotonic())
    while True:
        try:
            nc = await connect(conn)
            try:
                result = await attempt(nc)
            finally:
                with contextlib.suppress(Exception):
                    await nc.close()
        except Exception as exc:
            if not transient(exc):
                raise
            pause = backoff.failed(time.monotonic())
            if pause is None and backoff.failures == 1:
                raise  # no retrying asked for (retryTimeout=0): the failure as it is
            if pause is None:
                raise RetriesExhaustedError(
                    f"{what} kept failing for {backoff.elapsed(time.monotonic()):.0f} s ({backoff.failures} attempts, "
                    f"retryTimeout={conn.retry_timeout:g} s): {exc}; raise retryTimeout (seconds) to wait longer "
                    "for a server's restart or failover") from None
            if backoff.failures == 1:
                log.warning("%s failed, retrying for up to retryTimeout=%g s: %s", what, conn.retry_timeout, exc)
            await asyncio.sleep(pause)
            continue
        if backoff.failures:
            log.warning("%s succeeded after %d failed attempt(s) in %.1f s", what, backoff.failures,
                        backoff.elapsed(time.monotonic()))
        return result


def unanswered(nc: NatsClient, where: str, what: str) -> JetStreamError:
    """No answer: transient, unless the server reported refusing one of this connection's requests."""
    if nc.refused:
        return JetStreamError(f"{where}: {server_url(nc)} refused a request: {nc.refused}; grant the user the "
                              "permissions jsspark needs (spark/README.md)")
    return JetStreamError(f"{where}: {what}", transient=True)


async def _api(nc: NatsClient, conn: Connection, subject: str, stream: str, payload: bytes = b"") -> dict[str, Any]:
    """A JetStream API request; JetStreamError names the stream and the server when it fails."""
    what = ".".join(subject.split(".")[2:4])  # $JS.API.STREAM.INFO.<stream> -> "STREAM.INFO"
    try:
        reply = await nc.request(subject, payload, timeout=conn.request_timeout)
    except nats.errors.NoRespondersError:
        raise JetStreamError(f"stream {stream}: no JetStream at {server_url(nc)} answered {what} (is it starting, "
                             "and is JetStream enabled for this account?)", transient=True) from None
    except nats.errors.TimeoutError:
        raise unanswered(nc, f"stream {stream}", f"{server_url(nc)} did not answer {what} within requestTimeout="
                                                  f"{conn.request_timeout:g} s") from None
    body: dict[str, Any] = json.loads(reply.data)
    error = body.get("error")
    if error:
        if error.get("err_code") == _STREAM_NOT_FOUND:
            raise JetStreamError(f"stream {stream} not found on {server_url(nc)}: create it, or fix the stream option "
                                 "(or servers, if it lives on another server or account)")
        raise JetStreamError(f"stream {stream} on {server_url(nc)}: {error.get('description')} "
                             f"(code {error.get('code')}, err_code {error.get('err_code')})",
                             transient=error.get("code") == 503)  # JetStream temporarily unavailable
    return body


async def no_stream_takes(nc: NatsClient, conn: Connection, subject: str) -> bool:
    """Whether JetStream answers that no stream takes `subject` (False when it does not answer)."""
    try:
        reply = await nc.request("$JS.API.STREAM.NAMES", json.dumps({"subject": subject}).encode(),
                                 timeout=conn.request_timeout)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        return False
    body = json.loads(reply.data)
    return "error" not in body and not body.get("streams")


async def stream_state(conn: Connection, stream: str) -> StreamState:
    async def attempt(nc: NatsClient) -> StreamState:
        info = await _api(nc, conn, f"$JS.API.STREAM.INFO.{stream}", stream)
        state = info["state"]
        return StreamState(int(state["first_seq"]), int(state["last_seq"]), str(info["created"]))
    return await retrying(conn, f"stream {stream}: STREAM.INFO", attempt)


async def mirror_progress(conn: Connection, stream: str, consumer: str, next_seq: int) -> None:
    """Move a durable consumer's ack floor to `next_seq - 1` ($JS.API.CONSUMER.RESET), so its info (and the
    operator's Consumer status) shows what a streaming query has committed and what is left."""
    nc = await connect(conn)
    try:
        await nc.jsm().reset_consumer(stream, consumer, seq=max(next_seq, 1), timeout=conn.request_timeout)
    finally:
        await nc.close()


async def _add_consumer(nc: NatsClient, conn: Connection, stream: str, config: ConsumerConfig) -> None:
    await _api(nc, conn, f"$JS.API.CONSUMER.CREATE.{stream}.{config.name}", stream,
               json.dumps({"stream_name": stream, "config": config.as_dict()}).encode())


async def _delete_consumer(nc: NatsClient, conn: Connection, stream: str, name: str) -> None:
    with contextlib.suppress(Exception):  # best effort: its inactive threshold removes it anyway
        await _api(nc, conn, f"$JS.API.CONSUMER.DELETE.{stream}.{name}", stream)


async def seq_at_time(conn: Connection, stream: str, epoch_ms: int) -> int:
    """The first stream sequence stored at or after `epoch_ms` (the server finds it: a consumer with
    deliver policy by_start_time), or the one after the last when there is none."""
    async def attempt(nc: NatsClient) -> int:
        name = f"jsspark-time-{uuid.uuid4().hex[:12]}"
        start = datetime.fromtimestamp(epoch_ms / 1000, timezone.utc)
        await _add_consumer(nc, conn, stream, ConsumerConfig(
            name=name, deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start, ack_policy=AckPolicy.NONE,
            mem_storage=True, inactive_threshold=30.0))
        try:
            inbox = nc.new_inbox()  # not nc.request: a delivered message keeps its own subject, not the inbox
            sub = await nc.subscribe(inbox, max_msgs=1)
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", b'{"batch": 1, "no_wait": true}',
                             reply=inbox)
            try:
                first = await sub.next_msg(timeout=conn.request_timeout)
            except nats.errors.TimeoutError:
                raise unanswered(nc, f"stream {stream}", f"{server_url(nc)} did not answer a pull request within "
                                                          f"requestTimeout={conn.request_timeout:g} s") from None
            if first.reply:
                return _ack_fields(first.reply)[0]
            return int((await _api(nc, conn, f"$JS.API.STREAM.INFO.{stream}", stream))["state"]["last_seq"]) + 1
        finally:
            await _delete_consumer(nc, conn, stream, name)
    return await retrying(conn, f"stream {stream}: the sequence at {epoch_ms} ms", attempt)


@dataclass
class Rows:
    """One range's messages, column by column (what `arrow.record_batch` turns into a RecordBatch)."""

    subjects: list[str] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    micros: list[int] = field(default_factory=list)
    headers: list[dict[str, list[str]] | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.seqs)


async def read_range(conn: Connection, stream: str, subjects: tuple[str, ...], first: int, last: int,
                     batch: int, with_headers: bool) -> list[Rows]:
    """Messages with first <= seq <= last, in chunks of at most `batch` rows (the whole range again, with
    the same rows, when a transient failure interrupted it)."""
    async def attempt(nc: NatsClient) -> list[Rows]:
        return await _read(nc, conn, stream, subjects, first, last, _Pull(batch, last, with_headers))
    return await retrying(conn, f"stream {stream}: reading sequences {first}..{last}", attempt)


async def _read(nc: NatsClient, conn: Connection, stream: str, subjects: tuple[str, ...], first: int, last: int,
                pull: _Pull) -> list[Rows]:
    """Pull requests go to the range's consumer and its messages come back to one inbox subscription
    whose callback fills the columns: no per-message queue or metadata objects (the stream sequence, time
    and pending count are read straight from the ack subject)."""
    url = server_url(nc)
    name = f"jsspark-{uuid.uuid4().hex[:16]}"
    config = ConsumerConfig(
        name=name, deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first, ack_policy=AckPolicy.NONE,
        mem_storage=True, inactive_threshold=60.0, max_ack_pending=-1, filter_subjects=list(subjects) or None)
    await _add_consumer(nc, conn, stream, config)
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=pull.on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
    request = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"
    next_request = json.dumps({"batch": pull.batch, "no_wait": True}).encode()
    where = f"stream {stream}, sequences {first}..{last}"
    while not pull.done.is_set():
        pull.asked = 0
        pull.batch_done.clear()
        await nc.publish(request, next_request, reply=inbox)
        if not await pull.answered(conn.request_timeout):
            raise unanswered(nc, where, f"{url} sent nothing for requestTimeout={conn.request_timeout:g} s while "
                                         "reading (the connection was lost, or the server is overloaded)")
    if pull.error:
        # 503: no consumer any more (the server restarted; it was in memory); 409 Consumer Deleted: likewise
        again = pull.error.startswith(("503", "409 Consumer Deleted"))
        raise JetStreamError(f"{where} on {url}: the server ended the read with status {pull.error}", transient=again)
    await _delete_consumer(nc, conn, stream, name)
    return pull.chunks


class _Pull:
    """The inbox side of `read_range`: fills `chunks` until the range's end (or nothing more matches)."""

    def __init__(self, batch: int, last: int, with_headers: bool) -> None:
        self.batch, self.last, self.with_headers = batch, last, with_headers
        self.chunks: list[Rows] = []
        self.rows = Rows()
        self.asked = 0
        self.error = ""
        self.done = asyncio.Event()
        self.batch_done = asyncio.Event()
        self.activity = asyncio.Event()

    async def answered(self, idle_timeout: float) -> bool:
        """Until the current pull request is answered (True), or nothing arrived for `idle_timeout` seconds
        (False: the server is gone or stuck)."""
        while not self.batch_done.is_set():
            self.activity.clear()
            try:
                await asyncio.wait_for(self.activity.wait(), idle_timeout)
            except asyncio.TimeoutError:
                return False
        return True

    def _finish(self, everything: bool) -> None:
        if self.rows:
            self.chunks.append(self.rows)
            self.rows = Rows()
        if everything:
            self.done.set()
        self.batch_done.set()

    async def on_msg(self, msg: Msg) -> None:
        self.activity.set()
        if self.done.is_set():
            return
        reply = msg.reply
        if not reply:  # a status: 404/408 (nothing more matches) ends the range
            status = (msg.headers or {}).get("Status", "")
            if status not in ("404", "408"):
                self.error = f"{status} {(msg.headers or {}).get('Description', '')}".strip()
            self._finish(everything=True)
            return
        seq, micros, pending = _ack_fields(reply)
        if seq > self.last:
            self._finish(everything=True)
            return
        rows = self.rows
        rows.subjects.append(msg.subject)
        rows.seqs.append(seq)
        rows.data.append(msg.data)
        rows.micros.append(micros)
        if self.with_headers:
            rows.headers.append(_headers(msg.headers) if msg.headers else None)
        self.asked += 1
        if seq == self.last or pending == "0":
            self._finish(everything=True)
        elif self.asked >= self.batch:
            self._finish(everything=False)


def _ack_fields(reply: str) -> tuple[int, int, str]:
    """(stream sequence, stored time in µs, pending) from a JetStream message's ack subject."""
    tokens = reply.split(".")
    base = 2 if len(tokens) == 9 else 4  # $JS.ACK.<stream>... or $JS.ACK.<domain>.<account>.<stream>...
    return int(tokens[base + 3]), int(tokens[base + 5]) // 1000, tokens[base + 6]


def _headers(header: dict[str, str]) -> dict[str, list[str]]:
    # nats-py keeps the last value of a repeated header; the column's type has room for all of them.
    return {k: [v] for k, v in header.items()}
