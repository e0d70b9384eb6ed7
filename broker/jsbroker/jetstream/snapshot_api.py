"""`$JS.API.STREAM.SNAPSHOT.<stream>` and `$JS.API.STREAM.RESTORE.<stream>`: `SNAPSHOT_HANDLERS` and
the two transfers, with nats-server's protocol (what `nats stream backup` / `restore` speak).

Snapshot: the request names a `deliver_subject`; the response carries the stream's config and state;
then the archive (`snapshot.py`) goes to the deliver subject in `chunk_size` pieces (default 128 KiB,
clamped to 1 KiB-1 MiB). Each full chunk has the reply `$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<n>`;
any message there frees a place in the window (`window_size`, default 8 MiB, 1 KiB-32 MiB, at least a
chunk). The last, shorter chunk has no reply, and an empty message ends the transfer: with
`NATS/1.0 204` once a full chunk went out, `408 No Interest` when the receiver went away, `408 No Flow
Response` after 5 s without an ack while the window is full, `500 <error>` when reading failed.

Restore: the request carries the config (the restored stream's identity) and state; the response names
`$JS.SNAPSHOT.RESTORE.<stream>.<id>`, where the client sends the archive in chunks, each a request
answered with an empty message, and then an empty request, answered with a stream_create_response once
the stream is restored (or its error). A chunk without a reply, or 5 s without any chunk, abandons it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import IO, TYPE_CHECKING, Any, Coroutine, Iterator

from jsbroker import subjects
from jsbroker.jetstream import errors, snapshot, stream_config, times
from jsbroker.jetstream.api import Endpoint, Request
from jsbroker.jetstream.responses import TYPE_PREFIX, dumps
from jsbroker.jetstream.consumer import Consumer
from jsbroker.jetstream.requests import get_bool, get_int, get_object, get_str, parse_json
from jsbroker.jetstream.stream_api import stream_info
from jsbroker.store.base import StoredMsg, StoreError

if TYPE_CHECKING:
    from jsbroker.internal import InternalBus, InternalSubscription, Origin
    from jsbroker.jetstream.registry import StreamRegistry
    from jsbroker.jetstream.stream import Stream

log = logging.getLogger(__name__)

CHUNK_SIZE, MIN_CHUNK, MAX_CHUNK = 128 * 1024, 1024, 1024 * 1024
WINDOW_SIZE, MIN_WINDOW, MAX_WINDOW = 8 * 1024 * 1024, 1024, 32 * 1024 * 1024
ACK_TIMEOUT = 5.0  # nats-server's snapshotAckTimeout
INTEREST_WAIT = 2.0  # how long a snapshot waits for its deliver subject's subscriber to show up
RESTORE_IDLE = 5.0  # a restore that gets no chunk for this long is abandoned
_READ_BATCH = 1024  # messages per store read

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_OK = b"NATS/1.0 204\r\n\r\n"
_NO_INTEREST = b"NATS/1.0 408 No Interest\r\n\r\n"
_NO_FLOW = b"NATS/1.0 408 No Flow Response\r\n\r\n"
_tasks: set[asyncio.Task[None]] = set()  # running transfers (the loop keeps only weak references)


def _id() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(22))


def _is_empty(body: bytes) -> bool:
    """nats-server's isEmptyRequest: nothing, or a JSON object without fields."""
    if not body.strip():
        return True
    try:
        return parse_json(body) == {}
    except errors.ApiError:
        return False


def _spawn(coro: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


# -- snapshot -----------------------------------------------------------------------------------------


def stream_snapshot(req: Request) -> None:
    if _is_empty(req.payload):
        raise errors.BAD_REQUEST()
    stream = req.js.lookup(req.token(4))
    raw = req.json()
    deliver = get_str(raw, "deliver_subject")
    if not subjects.is_valid_publish_subject(deliver):
        raise errors.SNAPSHOT_DELIVER_SUBJECT_INVALID()
    chunk = min(max(MIN_CHUNK, get_int(raw, "chunk_size") or CHUNK_SIZE), MAX_CHUNK)
    window = max(min(max(MIN_WINDOW, get_int(raw, "window_size") or WINDOW_SIZE), MAX_WINDOW), chunk)
    check, with_consumers = get_bool(raw, "jsck"), not get_bool(raw, "no_consumers")
    assert req.reply is not None  # the router drops requests without one
    _spawn(_snapshot(stream, req.reply, deliver, chunk, window // chunk, check, with_consumers))


async def _snapshot(stream: Stream, reply: str, deliver: str, chunk: int, slots: int, check: bool,
                    with_consumers: bool) -> None:
    bus = stream.bus

    def respond(body: dict[str, Any]) -> None:
        bus.publish(reply, None, b"", dumps({"type": TYPE_PREFIX + "stream_snapshot_response", **body}))

    if check:
        unreadable = _health_check(stream)
        if unreadable:
            err = errors.STREAM_SNAPSHOT(err=f"{unreadable} stored messages could not be read back")
            respond({"error": err.to_dict()})
            return
    state = stream.info_state()
    consumers = [snapshot.ConsumerSnapshot(c.name, c.cfg.to_json(), c.snapshot_state())
                 for c in stream.consumers.values() if with_consumers and isinstance(c, Consumer)]
    head = snapshot.header_bytes(snapshot.Header(state, consumers), times.now_ns())
    frames = snapshot.write(head, _records(stream, state["last_seq"]))
    respond({"config": stream.config.to_json(dynamic_metadata=False), "state": state})
    await Sender(bus, stream.name, deliver, chunk, slots).run(frames)


def _health_check(stream: Stream) -> int:
    """jsck: how many stored messages cannot be read back (nats-server verifies its checksums). In one
    go, so no message comes or goes meanwhile: an explicit, occasional request."""
    state = stream.store.state()
    return max(state.msgs - sum(len(batch) for batch in _batches(stream, state.last_seq)), 0)


def _batches(stream: Stream, last_seq: int) -> Iterator[list[StoredMsg]]:
    """The messages up to the snapshot's last sequence (later ones are not part of it), in batches."""
    seq = 1
    while seq <= last_seq:
        batch = stream.store.load_next_msgs(seq, None, _READ_BATCH)
        if batch and batch[-1].seq > last_seq:
            batch = [m for m in batch if m.seq <= last_seq]
        if not batch:
            return
        yield batch
        seq = batch[-1].seq + 1


def _records(stream: Stream, last_seq: int) -> Iterator[bytes]:
    """The messages up to the snapshot's last sequence as runs of the store's records, read as the
    archive is sent: a message removed meanwhile is left out, as one stored after the snapshot began."""
    seq = 1
    while seq:
        run, seq = stream.store.load_records(seq, last_seq, _READ_BATCH)
        if run:
            yield run


class Sender:
    """Sends an archive's frames as chunks under the window of acks (one snapshot)."""

    def __init__(self, bus: InternalBus, stream: str, deliver: str, chunk: int, slots: int) -> None:
        self.bus, self.deliver, self.chunk = bus, deliver, chunk
        self.free = self.slots = slots
        self.acked = asyncio.Event()
        self.ack_subject = f"$JS.SNAPSHOT.ACK.{stream}.{_id()}"

    def _on_ack(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
        self.free = min(self.free + 1, self.slots)
        self.acked.set()

    async def run(self, frames: Iterator[bytes]) -> None:
        sub = self.bus.subscribe_internal(self.ack_subject + ".>", self._on_ack)
        try:
            end = await self._send(frames)
        except (StoreError, OSError) as err:  # the stream went away or its store failed while being read
            end = b"NATS/1.0 500 %s\r\n\r\n" % str(err).encode()
        except Exception:  # a bug must not leave the receiver waiting
            log.exception("snapshot failed", extra={"subject": self.deliver})
            end = b"NATS/1.0 500 internal error\r\n\r\n"
        finally:
            self.bus.unsubscribe_internal(sub)
        self.bus.publish(self.deliver, None, end, b"")

    async def _send(self, frames: Iterator[bytes]) -> bytes:
        """Send every chunk; the header of the closing empty message."""
        deadline = time.monotonic() + INTEREST_WAIT
        while not self.bus.has_literal_interest(self.deliver) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        end, pending, index = b"", bytearray(), 1
        while True:
            for frame in frames:  # a frame is ~64 KiB of messages (~1 ms of encoding): others run between
                pending += frame
                if len(pending) >= self.chunk:
                    break
                await asyncio.sleep(0)
            if len(pending) < self.chunk:
                if pending:
                    self.bus.publish(self.deliver, None, b"", bytes(pending))
                return end
            failure = await self._slot()
            if failure:
                return failure
            size = self.chunk
            self.bus.publish(self.deliver, f"{self.ack_subject}.{size}.{index}", b"", bytes(pending[:size]))
            del pending[:size]
            index, end = index + 1, _OK
            await asyncio.sleep(0)

    async def _slot(self) -> bytes:
        """Wait for room in the window; the closing header when the receiver is gone or silent."""
        deadline = time.monotonic() + ACK_TIMEOUT
        while True:
            if not self.bus.has_interest(self.deliver):
                return _NO_INTEREST
            if self.free > 0:
                self.free -= 1
                return b""
            self.acked.clear()
            try:
                await asyncio.wait_for(self.acked.wait(), max(deadline - time.monotonic(), 0))
            except TimeoutError:
                return _NO_FLOW


# -- restore ------------------------------------------------------------------------------------------


def stream_restore(req: Request) -> dict[str, Any]:
    if _is_empty(req.payload):
        raise errors.BAD_REQUEST()
    raw = req.json()
    name = req.token(4)
    config = get_object(raw, "config") or {}
    if not get_str(config, "name"):
        config = {**config, "name": name}
    if get_str(config, "name") != name:
        raise errors.STREAM_MISMATCH()
    if "\\" in name or "/" in name:
        raise errors.STREAM_NAME_CONTAINS_PATH_SEPARATORS()
    cfg = req.js.check_restore(stream_config.parse(config))
    receiver = Receiver(req.js, cfg)
    receiver.start()
    return {"deliver_subject": receiver.subject}


class Receiver:
    """Takes one restore's chunks into a staging file and restores the stream at the closing request."""

    def __init__(self, js: StreamRegistry, cfg: stream_config.StreamConfig) -> None:
        self.js, self.cfg, self.bus = js, cfg, js.bus
        self.subject = f"$JS.SNAPSHOT.RESTORE.{cfg.name}.{_id()}"
        self.file: IO[bytes] = js.staging_file()
        self._sub: InternalSubscription | None = None
        self._idle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._sub = self.bus.subscribe_internal(self.subject, self._on_chunk)
        self._arm()

    def _arm(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = self.bus.loop.call_later(RESTORE_IDLE, self._abandon, "stalled: no chunk for 5 s")

    def _stop(self) -> None:
        """Take no more chunks."""
        if self._idle is not None:
            self._idle.cancel()
        if self._sub is not None:
            self.bus.unsubscribe_internal(self._sub)
            self._sub = None

    def _abandon(self, why: str) -> None:
        log.warning("restore abandoned: %s", why, extra={"stream": self.cfg.name})
        self._stop()
        self.file.close()

    def _on_chunk(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: Origin | None) -> None:
        if self._sub is None:
            return
        if not reply:
            self._abandon("a chunk came without a reply subject")
            return
        if not payload:
            self._stop()
            _spawn(self._finish(reply))
            return
        try:
            self.file.write(payload)
        except OSError as err:
            self._abandon(f"the staging file could not be written: {err}")
            self._answer(reply, {"error": errors.STREAM_RESTORE(err=str(err)).to_dict()})
            return
        self._arm()
        self.bus.publish(reply, None, b"", b"")

    async def _finish(self, reply: str) -> None:
        try:
            stream = await self.js.restore_stream(self.cfg, self.file)
            body = stream_info(stream, with_domain=False)
        except errors.ApiError as err:
            body = {"error": err.to_dict()}
        except (snapshot.ArchiveError, OSError, StoreError) as err:
            body = {"error": errors.STREAM_RESTORE(err=str(err)).to_dict()}
        except Exception:  # a bug must not leave the client waiting; answered like the router's 500s
            log.exception("restore failed", extra={"stream": self.cfg.name})
            body = {"error": errors.STREAM_RESTORE(err="internal error (see the broker's log)").to_dict()}
        finally:
            self.file.close()
        self._answer(reply, body)

    def _answer(self, reply: str, body: dict[str, Any]) -> None:
        self.bus.publish(reply, None, b"", dumps({"type": TYPE_PREFIX + "stream_create_response", **body}))


SNAPSHOT_HANDLERS: list[Endpoint] = [
    Endpoint("$JS.API.STREAM.SNAPSHOT.*", "stream_snapshot_response", stream_snapshot),
    Endpoint("$JS.API.STREAM.RESTORE.*", "stream_restore_response", stream_restore, {"deliver_subject": ""}),
]
