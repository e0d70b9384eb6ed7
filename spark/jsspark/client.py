"""jsspark's NATS client: connecting with bounded failure, the stream's state, and reading a range of
stream sequences deterministically from inside a Spark task.

Connecting tries each server `reconnectAttempts + 1` times (forever with -1), `connectTimeout` each, and
then fails with one line naming the servers and the cause; Spark's task retries do any further retrying.
nats-py's error callback is jsspark's, so failed attempts are counted, not printed as tracebacks.

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
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from collections.abc import Coroutine
from typing import Any, TypeVar

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

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
    """No server of the `servers` option could be reached (or it refused the connection)."""


class JetStreamError(RuntimeError):
    """A JetStream API request failed; the message names the stream and the server."""


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


def server_url(nc: Client) -> str:
    """The server a client is connected to, without credentials."""
    url = nc.connected_url
    return f"{url.scheme}://{url.hostname}:{url.port}" if url else "?"


async def connect(conn: Connection) -> Client:
    """A connected client, or ConnectError after the attempts `conn` allows."""
    servers = conn.server_list()
    budget = None if conn.reconnect_attempts < 0 else len(servers) * (conn.reconnect_attempts + 1)
    failures: list[BaseException] = []
    nc = Client()

    async def on_error(exc: Exception) -> None:
        if nc.is_connected:
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
        cause = _cause(failures[-1] if failures else exc, conn)
        tries = f"{conn.reconnect_attempts + 1} attempt(s) per server" if budget else "the attempts allowed"
        raise ConnectError(f"cannot connect to NATS at {', '.join(servers)}: {cause} ({tries}, connectTimeout="
                           f"{conn.connect_timeout:g} s); check the servers option and that the server is up "
                           "(reconnectAttempts=-1 waits for it)") from None
    return nc


async def _api(nc: Client, conn: Connection, subject: str, stream: str, payload: bytes = b"") -> dict[str, Any]:
    """A JetStream API request; JetStreamError names the stream and the server when it fails."""
    what = subject.split(".")[2].lower()  # $JS.API.STREAM.INFO.<stream> -> "stream"
    try:
        reply = await nc.request(subject, payload, timeout=conn.request_timeout)
    except nats.errors.NoRespondersError:
        raise JetStreamError(f"stream {stream}: no JetStream at {server_url(nc)} (is JetStream enabled for this "
                             "account?)") from None
    except nats.errors.TimeoutError:
        raise JetStreamError(f"stream {stream}: {server_url(nc)} did not answer a {what} request within requestTimeout="
                             f"{conn.request_timeout:g} s") from None
    body: dict[str, Any] = json.loads(reply.data)
    error = body.get("error")
    if error:
        if error.get("err_code") == _STREAM_NOT_FOUND:
            raise JetStreamError(f"stream {stream} not found on {server_url(nc)}: create it, or fix the stream option "
                                 "(or servers, if it lives on another server or account)")
        raise JetStreamError(f"stream {stream} on {server_url(nc)}: {error.get('description')} "
                             f"(code {error.get('code')}, err_code {error.get('err_code')})")
    return body


async def stream_state(conn: Connection, stream: str) -> StreamState:
    nc = await connect(conn)
    try:
        info = await _api(nc, conn, f"$JS.API.STREAM.INFO.{stream}", stream)
        state = info["state"]
        return StreamState(int(state["first_seq"]), int(state["last_seq"]), str(info["created"]))
    finally:
        await nc.close()


async def mirror_progress(conn: Connection, stream: str, consumer: str, next_seq: int) -> None:
    """Move a durable consumer's ack floor to `next_seq - 1` ($JS.API.CONSUMER.RESET), so its info (and the
    operator's Consumer status) shows what a streaming query has committed and what is left."""
    nc = await connect(conn)
    try:
        await nc.jsm().reset_consumer(stream, consumer, seq=max(next_seq, 1), timeout=conn.request_timeout)
    finally:
        await nc.close()


async def _add_consumer(nc: Client, conn: Connection, stream: str, config: ConsumerConfig) -> None:
    await _api(nc, conn, f"$JS.API.CONSUMER.CREATE.{stream}.{config.name}", stream,
               json.dumps({"stream_name": stream, "config": config.as_dict()}).encode())


async def _delete_consumer(nc: Client, conn: Connection, stream: str, name: str) -> None:
    with contextlib.suppress(Exception):  # best effort: its inactive threshold removes it anyway
        await _api(nc, conn, f"$JS.API.CONSUMER.DELETE.{stream}.{name}", stream)


async def seq_at_time(conn: Connection, stream: str, epoch_ms: int) -> int:
    """The first stream sequence stored at or after `epoch_ms` (the server finds it: a consumer with
    deliver policy by_start_time), or the one after the last when there is none."""
    nc = await connect(conn)
    try:
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
                raise JetStreamError(f"stream {stream}: {server_url(nc)} did not answer a pull request within "
                                     f"requestTimeout={conn.request_timeout:g} s") from None
            if first.reply:
                return _ack_fields(first.reply)[0]
            return int((await _api(nc, conn, f"$JS.API.STREAM.INFO.{stream}", stream))["state"]["last_seq"]) + 1
        finally:
            await _delete_consumer(nc, conn, stream, name)
    finally:
        await nc.close()


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
    """Messages with first <= seq <= last, in chunks of at most `batch` rows.

    Pull requests go to the consumer and its messages come back to one inbox subscription whose callback
    fills the columns: no per-message queue or metadata objects (the stream sequence, time and pending
    count are read straight from the ack subject)."""
    nc = await connect(conn)
    url = server_url(nc)
    name = f"jsspark-{uuid.uuid4().hex[:16]}"
    config = ConsumerConfig(
        name=name, deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first, ack_policy=AckPolicy.NONE,
        mem_storage=True, inactive_threshold=60.0, max_ack_pending=-1, filter_subjects=list(subjects) or None)
    pull = _Pull(batch, last, with_headers)
    try:
        await _add_consumer(nc, conn, stream, config)
        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=pull.on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
        request = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"
        next_request = json.dumps({"batch": batch, "no_wait": True}).encode()
        while not pull.done.is_set():
            pull.asked = 0
            pull.batch_done.clear()
            await nc.publish(request, next_request, reply=inbox)
            await pull.wait(conn.request_timeout, f"stream {stream}: {url}")
        await _delete_consumer(nc, conn, stream, name)
    finally:
        await nc.close()
    if pull.error:
        raise JetStreamError(f"stream {stream}, sequences {first}..{last} on {url}: {pull.error}")
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

    async def wait(self, idle_timeout: float, where: str) -> None:
        """Until the current pull request is answered; JetStreamError when nothing arrives for
        `idle_timeout` seconds (the server is gone or stuck)."""
        while not self.batch_done.is_set():
            self.activity.clear()
            try:
                await asyncio.wait_for(self.activity.wait(), idle_timeout)
            except asyncio.TimeoutError:
                raise JetStreamError(f"{where} sent nothing for requestTimeout={idle_timeout:g} s while reading "
                                     "(the connection was lost, or the server is overloaded)") from None

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
                self.error = f"the server ended the read with status {status} {(msg.headers or {}).get('Description', '')}"
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
