"""Mirrors and sources: a stream that copies the messages of other streams of this server.

nats-server sources through an internal push consumer on the origin; jsbroker reads the origin's store
in-process (the origins are in the same registry), with nats-server's results:

- a **mirror** stores each message under its origin sequence and time, headers untouched, gaps (removed
  origin messages, a filter) kept as gaps; it reads on from its own last sequence + 1;
- a **source** publishes each message into the stream (the stream's checks, its `Nats-Msg-Id` window,
  limits) with a `Nats-Stream-Source: <stream> <origin seq> <filter> <transform> <subject> <identity>`
  header, the origin's `Nats-Expected-*` / `Nats-Batch-*` / older source headers removed (a mirror
  drops the first two as well).

Where to read on is taken from the stored messages themselves (the mirror's last sequence, the newest
Nats-Stream-Source header of each source), so a restart after SIGTERM or kill -9 neither loses nor
repeats a message: a message and its position are one write. A source none of whose copies is left
(purged, limits) falls back on the positions saved on every health tick and at stop (nats-server keeps
such a per-source state in its store). An origin that is missing, deleted or
created later is looked up again when streams come and go and on every health tick; a recreated origin
(another identity) is read from its start by a source, from the mirror's last sequence + 1 by a mirror.

A **durable** source or mirror (2.14's `consumer: {name, deliver_subject}`, ADR-58) is fed by a consumer
the user created on the origin (ack_policy flow_control), as on nats-server: the link resets it (as the
CONSUMER.RESET request nats-server sends: delivery restarts after its ack floor), subscribes its deliver
subject, skips what it already holds, and answers its flow control requests with the last delivery and
origin sequence it stored, which acks them on the origin (an interest or workqueue origin then drops
them). The consumer's ack floor is the durable position; the copies are written before that answer goes
out, so a restart (SIGTERM or kill -9) loses nothing, and what it redelivers is skipped.

An **external** link (`external: {api, deliver}`) never copies and stays inactive: nats-server 2.15.1's
consumer request through an api prefix is never answered on one server (its own `$JS.API` is refused).

`Sourcing(stream, lookup, bus, sync)` runs one stream's links; jetstream/service.py owns it: started after the
stream starts (create, restore), stopped before the stream stops or changes its mirror/sources.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from typing import Any, Callable

from jsbroker import store as storage
from jsbroker import subjects
from jsbroker.internal import InternalBus, InternalSubscription, Origin
from jsbroker.jetstream import ack, errors, headers, times
from jsbroker.jetstream.consumer import Consumer
from jsbroker.jetstream.stream import Stream
from jsbroker.jetstream.stream_config import SourceConfig, StreamConfig
from jsbroker.store.base import StoreError, StoredMsg

log = logging.getLogger(__name__)

HEALTH_INTERVAL = 1.0  # s, nats-server's sourcing heartbeat: origins looked up again, `active` refreshed
SILENT_NS = 10_000_000_000  # a durable link that heard nothing (not even a heartbeat) this long is set up again
BATCH = 512  # messages one link copies per loop turn before it lets other work run
_STRIP_PREFIXES = ("Nats-Expected-", "Nats-Batch-")  # the origin checked these; the copy does not again


def check_origins(cfg: StreamConfig, lookup: Callable[[str], StreamConfig | None]) -> StreamConfig:
    """The rules that need the other streams, as nats-server's checkStreamCfg: message sizes against an
    origin that exists, no cycle of sources / mirrors, mirror_direct taken from the origin's allow_direct,
    external deliver prefixes away from the origins' subjects. An external origin is another
    JetStream's: none of these look at it."""
    subjects_read: list[str] = []
    mirror = cfg.mirror
    if mirror is not None and mirror.external is None and (origin := lookup(mirror.name)) is not None:
        subjects_read += origin.subjects
        if _smaller_max_msg_size(cfg, origin):
            raise errors.MIRROR_MAX_MESSAGE_SIZE_TOO_BIG()
        cfg = dataclasses.replace(cfg, mirror_direct=origin.allow_direct)
    for source in cfg.sources:
        if source.external is None and (origin := lookup(source.name)) is not None:
            subjects_read += origin.subjects
            if _smaller_max_msg_size(cfg, origin):
                raise errors.SOURCE_MAX_MESSAGE_SIZE_TOO_BIG()
    for spec in (cfg.mirror, *cfg.sources):
        deliver = spec.external[1] if spec is not None and spec.external is not None else ""
        for subject in subjects_read if deliver else ():
            if subjects.subjects_overlap(subject, f"{deliver}.{subject}"):
                raise errors.STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS(prefix=deliver, subject=subject)
    _check_cycle(cfg, lookup)
    return cfg


def _smaller_max_msg_size(cfg: StreamConfig, origin: StreamConfig) -> bool:
    return 0 < cfg.max_msg_size < origin.max_msg_size


def _check_cycle(cfg: StreamConfig, lookup: Callable[[str], StreamConfig | None]) -> None:
    """Walk what the stream reads from, transitively; reaching a visited stream is a cycle when the
    source's filter takes the reader's own subjects (a mirror always)."""
    to_visit, visited = [cfg], set()
    while to_visit:
        current = to_visit.pop(0)
        visited.add(current.name)
        for source in current.sources:
            if source.external is not None:
                continue
            if source.name in visited:
                if not source.filter_subject or any(subjects.subjects_overlap(s, source.filter_subject)
                                                    for s in current.subjects):
                    raise errors.STREAM_INVALID_CONFIG(err="detected cycle")
            elif (other := lookup(source.name)) is not None:
                to_visit.append(other)
        if current.mirror is not None and current.mirror.external is None:
            if current.mirror.name in visited:
                raise errors.STREAM_INVALID_CONFIG(err="detected cycle")
            if (other := lookup(current.mirror.name)) is not None:
                to_visit.append(other)


def parse_source_header(value: str) -> tuple[str, int, str] | None:
    """(index name, origin seq, origin identity) of a Nats-Stream-Source value; None when unreadable."""
    fields = value.split(" ")
    if len(fields) < 4 or not fields[1].isdigit():
        return None
    return f"{fields[0]} {fields[2]} {fields[3]}", int(fields[1]), fields[5] if len(fields) > 5 else ""


def parse_delivery(reply: str) -> tuple[int, int, int, int, int] | None:
    """(delivery count, origin seq, delivery seq, time ns, pending) of a consumer delivery's ack reply."""
    toks = reply.split(".")
    if len(toks) != 9:
        return None
    try:
        delivery_count, stream_seq, delivery_seq, ts, pending = (int(t) for t in toks[4:])
    except ValueError:
        return None
    return delivery_count, stream_seq, delivery_seq, ts, pending


class Link:
    """One mirror or source: where it reads in its origin and what STREAM.INFO shows about it. It is
    also the origin's `SourceWatch`: kicked on new messages, and an interest for interest retention."""

    def __init__(self, spec: SourceConfig, is_mirror: bool, kick: Callable[[], None]) -> None:
        self.spec = spec
        self.is_mirror = is_mirror
        self.kick = kick
        self._filters = spec.filters
        self.index_name = spec.index_name  # computed once: a durable source's holds a hash
        self._transforms = spec.transforms()
        self.next_seq = 0  # the next origin seq to read; 0 until positioned
        self.ident = ""  # the identity of the origin the position belongs to
        self.seq = 0  # the last origin seq a source stored (INFO "seq")
        self.lag = 0
        self.last_active = 0  # ns; 0: has not reached its origin yet ("active": -1)
        self.error: errors.ApiError | None = None
        self.origin: Stream | None = None
        self.stalled = False  # the stream refused a message: retried on the next health tick
        self.refused = 0  # the origin seq last refused (logged once)
        # durable links: the origin's consumer feeding this link, the subscription of its deliver subject,
        # the last delivery seq taken in order
        self.durable = spec.consumer is not None
        self.consumer: Consumer | None = None
        self.sub: InternalSubscription | None = None
        self.delivery_seq = 0
        self.acks = ""  # the ack reply prefix of the consumer's deliveries

    def wants(self, subject: str) -> bool:
        return self._filters is None or any(subjects.subject_matches(f, subject) for f in self._filters)

    def map(self, subject: str) -> str:
        """The subject the copy is stored under: the first subject transform that takes it, else its own."""
        for transform in self._transforms:
            mapped = transform.apply(subject)
            if mapped is not None:
                return mapped
        return subject

    def update_lag(self) -> None:
        """nats-server's lag: the origin's pending count after the last message its consumer delivered
        (the last one copied, or the one the stream refused), minus one, never below 0. A durable link
        takes it from the pending count of each delivery instead."""
        if self.durable:
            return
        pending = self.origin.store.num_pending(self.next_seq, self._filters) if self.origin is not None else 0
        self.lag = max(pending - (2 if self.stalled else 1), 0)

    def read(self) -> list[StoredMsg]:
        assert self.origin is not None
        return self.origin.store.load_next_msgs(self.next_seq, self._filters, BATCH)

    def info(self, now: int) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.spec.name}
        if self.spec.external is not None:
            out["external"] = {"api": self.spec.external[0], "deliver": self.spec.external[1]}
        out["lag"] = self.lag
        if self.seq and not self.is_mirror:
            out["seq"] = self.seq
        out["active"] = now - self.last_active if self.last_active else -1
        if self.spec.filter_subject:
            out["filter_subject"] = self.spec.filter_subject
        if self.spec.subject_transforms:
            out["subject_transforms"] = [{"src": src, "dest": dest} for src, dest in self.spec.subject_transforms]
        if self.error is not None:
            out["error"] = self.error.to_dict()
        return out


class Sourcing:
    """The mirror or the sources of one stream, copied on the loop turn after their origins store."""

    def __init__(self, stream: Stream, lookup: Callable[[str], Stream | None], bus: InternalBus,
                 sync: storage.SyncPolicy | None = None) -> None:
        self._sync = sync  # how the positions file is made durable (the syncer's threads; None: at once)
        self.stream = stream
        self._lookup = lookup
        self._bus = bus
        cfg = stream.config
        specs = [(cfg.mirror, True)] if cfg.mirror is not None else [(s, False) for s in cfg.sources]
        self.links = [Link(spec, is_mirror, self.kick) for spec, is_mirror in specs]
        self._scheduled = False
        self._closed = False
        self._tick_handle: Any = None
        persisted = stream.directory is not None and cfg.storage == "file" and bool(cfg.sources)
        self._directory = stream.directory if persisted else None
        self._saved: dict[str, list[Any]] = {}
        self._write_armed = False  # a durable link's copies wait for one write before any output

    def start(self) -> None:
        self._positions_from_file()
        self._positions_from_headers()
        self.stream.source_info = self.info
        self.relink(report_missing=False)  # nats-server reports a missing origin only once it looked
        self._tick_handle = self._bus.loop.call_later(HEALTH_INTERVAL, self._tick)

    def stop(self) -> None:
        self._closed = True
        if self._tick_handle is not None:
            self._tick_handle.cancel()
            self._tick_handle = None
        for link in self.links:
            self._unwatch(link)
        self.stream.source_info = None
        self._save_positions()

    def info(self) -> dict[str, Any]:
        now = times.now_ns()
        if self.stream.config.mirror is not None:
            return {"mirror": self.links[0].info(now)}
        return {"sources": [link.info(now) for link in self.links]}

    # -- origins ----------------------------------------------------------------------------------------

    def relink(self, report_missing: bool = True) -> None:
        """Look every origin up again (streams were created or deleted) and position new ones."""
        for link in self.links:
            if link.spec.external is not None:
                continue  # nats-server's link through an api prefix is never answered on one server
            origin = self._lookup(link.spec.name)
            if link.durable:  # an origin without the consumer is no error: a reset request gets no answer
                self._attach(link, origin)
                continue
            if origin is None:
                self._unwatch(link)
                if report_missing:
                    link.error = errors.STREAM_NOT_FOUND()
                continue
            if origin is link.origin:
                continue
            self._unwatch(link)
            link.origin, link.error = origin, None
            origin.watchers.append(link)
            self._position(link, origin)
        self.kick()

    def _unwatch(self, link: Link) -> None:
        if link.origin is not None and link in link.origin.watchers:
            link.origin.watchers.remove(link)
        link.origin = None
        if link.sub is not None:
            self._bus.unsubscribe_internal(link.sub)
            link.sub = None
        link.consumer = None

    # -- durable links: fed by the origin's consumer ----------------------------------------------------

    def _attach(self, link: Link, origin: Stream | None) -> None:
        """Set a durable link up on its origin's consumer, as nats-server's reset request does: a consumer
        that is missing leaves the link waiting; one without ack_policy flow_control is an error."""
        assert link.spec.consumer is not None
        found = origin.consumers.get(link.spec.consumer[0]) if origin is not None else None
        consumer = found if isinstance(found, Consumer) else None
        if consumer is not None and consumer is link.consumer and not link.stalled:
            return
        self._unwatch(link)
        if origin is None or consumer is None:
            return
        consumer.reset(0)  # delivery restarts after the ack floor: the durable position
        if consumer.cfg.ack_policy != "flow_control":
            link.error = (errors.MIRROR_CONSUMER_REQUIRES_ACK_FC if link.is_mirror
                          else errors.SOURCE_CONSUMER_REQUIRES_ACK_FC)()
            return
        link.error, link.stalled, link.delivery_seq, link.lag = None, False, 0, 0
        ident = origin.identity()
        if link.ident and link.ident != ident and not link.is_mirror:
            link.seq = 0  # a recreated origin: its sequences start again
        link.ident = ident
        delivered = consumer.ack_floor_seq
        if link.is_mirror:
            self._mirror_from(delivered)
            link.seq = max(delivered, self.stream.last_seq)
        else:
            link.seq = max(link.seq, delivered)
        link.origin, link.consumer = origin, consumer
        link.acks = ack.reply_prefix(origin.name, consumer.name)
        link.last_active = times.now_ns()
        link.sub = self._bus.subscribe_internal(link.spec.consumer[1], functools.partial(self._on_delivery, link))

    def _mirror_from(self, delivered: int) -> None:
        """A mirror behind its consumer's start (a consumer created after the messages it skips) moves its
        sequence there, as nats-server does: an empty one starts after it, another one skips to it."""
        if self.stream.last_seq >= delivered:
            return
        if self.stream.store.state().msgs == 0:
            self.stream.store.purge(up_to_seq=delivered + 1)
        else:
            self.stream.store.skip_msgs(delivered + 1)
        self.stream.last_seq = delivered

    def _on_delivery(self, link: Link, subject: str, reply: str | None, hdr: bytes, payload: bytes,
                     origin: Origin | None) -> None:
        if self._closed or link.sub is None:
            return
        link.last_active = times.now_ns()
        if not payload and hdr.startswith(b"NATS/1.0 100"):
            self._on_control(link, reply, hdr)
            return
        if not reply or not reply.startswith(link.acks):
            return  # not from the link's consumer
        delivery = parse_delivery(reply)
        if delivery is None or delivery[0] > 1 or link.stalled:
            return  # a redelivery: the link is set up again instead, as nats-server does
        _, stream_seq, delivery_seq, ts, pending = delivery
        if stream_seq <= link.seq:  # held already (a reset redelivers from the ack floor)
            if delivery_seq == link.delivery_seq + 1:
                link.delivery_seq = delivery_seq
            return
        if delivery_seq != link.delivery_seq + 1 and not (link.is_mirror and stream_seq == link.seq + 1):
            self._again(link)  # a delivery was missed
            return
        self._write_soon()
        try:
            self._store(link, StoredMsg(stream_seq, subject, hdr, payload, ts))
        except (errors.ApiError, StoreError, OSError) as exc:
            self._refused(link, stream_seq, exc)
            link.stalled = True  # set up again on the next health tick, from the consumer's ack floor
            return
        link.delivery_seq, link.seq = delivery_seq, stream_seq
        link.lag = max(pending - 1, 0)

    def _on_control(self, link: Link, reply: str | None, hdr: bytes) -> None:
        """A flow control request is answered with what the link stored (the consumer acks up to it); a
        heartbeat naming another last delivery means one was missed."""
        if reply:
            self._write()  # the copies are on disk before the origin may drop them
            answer = headers.build(((headers.LAST_CONSUMER, str(link.delivery_seq)),
                                    (headers.LAST_STREAM, str(link.seq))))
            self._bus.publish(reply, None, answer, b"")
            return
        last = headers.get(hdr, headers.LAST_CONSUMER)
        if last and last.isdigit() and int(last) > 0 and int(last) != link.delivery_seq:
            self._again(link)
        elif stalled := headers.get(hdr, headers.CONSUMER_STALLED):
            self._bus.publish(stalled, None, b"", b"")

    def _again(self, link: Link) -> None:
        """Set a durable link up again (reset its consumer) on the next loop turn, out of the delivery."""
        if not link.stalled:
            link.stalled = True
            self._bus.loop.call_soon(self._reattach, link)

    def _reattach(self, link: Link) -> None:
        if not self._closed:
            self._attach(link, self._lookup(link.spec.name))

    def _write_soon(self) -> None:
        if not self._write_armed:
            self._write_armed = True
            self._bus.before_output(self._write)

    def _write(self) -> None:
        self._write_armed = False
        try:
            self.stream.store.flush()
        except (StoreError, OSError) as exc:
            log.error("sourcing could not write its copies", extra={"stream": self.stream.name, "error": str(exc)})

    def _positions_from_headers(self) -> None:
        """Where each source stopped: the newest stored message with its Nats-Stream-Source header (the
        stream's own messages, the mirror's last sequence, need no scan)."""
        waiting = {link.index_name: link for link in self.links if not link.is_mirror}
        store = self.stream.store
        state = store.state()
        if not waiting or state.msgs == 0:
            return
        for seq in reversed(list(store.header_seqs(state.first_seq))):
            msg = store.load_msg(seq)
            value = headers.get(msg.hdr, headers.STREAM_SOURCE) if msg is not None else None
            found = parse_source_header(value) if value else None
            if found is not None and (link := waiting.pop(found[0], None)) is not None:
                if found[2] != link.ident or found[1] > link.seq:  # the saved one may be newer (a purge)
                    link.seq, link.ident = found[1], found[2]
                    link.next_seq = found[1] + 1
                if not waiting:
                    return

    def _positions_from_file(self) -> None:
        if self._directory is None:
            return
        try:
            saved = json.loads(storage.load_sources(self._directory) or b"{}")
            for link in self.links:
                seq, ident = saved.get(link.index_name, (0, ""))
                if seq:
                    link.seq, link.ident, link.next_seq = int(seq), str(ident), int(seq) + 1
            self._saved = saved
        except (OSError, ValueError, TypeError):
            log.warning("unreadable source positions; using the stored messages only",
                        extra={"stream": self.stream.name})

    def _save_positions(self) -> None:
        if self._directory is None:
            return
        positions = {link.index_name: [link.seq, link.ident] for link in self.links if link.seq}
        if positions == self._saved:
            return
        try:
            storage.save_sources(self._directory, json.dumps(positions).encode(), self._sync)
            self._saved = positions
        except OSError:
            log.exception("could not save the source positions", extra={"stream": self.stream.name})

    def _position(self, link: Link, origin: Stream) -> None:
        ident = origin.identity()
        if link.is_mirror:
            if link.next_seq == 0:
                link.next_seq = self._mirror_start(link.spec, origin)
        else:
            recreated = bool(link.ident) and link.ident != ident
            if recreated:
                log.warning("source stream was recreated; sourcing it from its start",
                            extra={"stream": self.stream.name, "source": link.spec.name})
                link.next_seq = link.seq = 0
            if link.next_seq == 0:
                link.next_seq = self._source_start(link.spec, origin, recreated)
        link.ident = ident

    def _mirror_start(self, spec: SourceConfig, origin: Stream) -> int:
        state = self.stream.store.state()
        if state.first_seq or state.last_seq:
            return self.stream.last_seq + 1
        if spec.opt_start_seq > 1:  # an empty mirror starts where it is told, as nats-server compacts it
            self.stream.store.purge(up_to_seq=spec.opt_start_seq)
            self.stream.last_seq = spec.opt_start_seq - 1
            return spec.opt_start_seq
        if spec.opt_start_seq == 0 and spec.opt_start_time is not None:
            return origin.store.first_seq_at_or_after_time(spec.opt_start_time)
        return 1

    def _source_start(self, spec: SourceConfig, origin: Stream, recreated: bool) -> int:
        """A source without a stored position (nats-server's setupSourceConsumer): its opt_start_seq or
        opt_start_time (not before the stream's last message), else after the stream's last message time
        when the stream lost its first messages, else the origin's first message."""
        if spec.opt_start_seq > 0:
            return spec.opt_start_seq
        state = self.stream.store.state()
        if spec.opt_start_time is not None:
            return origin.store.first_seq_at_or_after_time(max(spec.opt_start_time, state.last_ts))
        if state.first_seq > 1 and state.last_ts and not recreated:
            return origin.store.first_seq_at_or_after_time(state.last_ts)
        return 1

    # -- copying ----------------------------------------------------------------------------------------

    def kick(self) -> None:
        if not self._scheduled and not self._closed:
            self._scheduled = True
            self._bus.loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._scheduled = False
        if self._closed:
            return
        more = False
        for link in self.links:
            if link.origin is not None and not link.stalled and not link.durable:
                more = self._copy(link) or more
        if more:
            self.kick()

    def _copy(self, link: Link) -> bool:
        """Copy up to BATCH messages; True when there may be more."""
        origin = link.origin
        assert origin is not None
        msgs = link.read()
        release = origin.config.retention != "limits"  # the link is an ack-none consumer of the origin
        for msg in msgs:
            try:
                self._store(link, msg)
            except (errors.ApiError, StoreError, OSError) as exc:
                link.stalled = True  # nats-server retries the same message: so does the next tick
                self._refused(link, msg.seq, exc)
                break
            link.next_seq = msg.seq + 1
            if release:
                origin.acked(msg.seq)
        if msgs:
            self._flush(link)
            link.last_active = times.now_ns()
        link.update_lag()
        return len(msgs) == BATCH and not link.stalled

    def _refused(self, link: Link, seq: int, exc: Exception) -> None:
        if link.refused != seq:  # said once, not at every retry
            link.refused = seq
            log.warning("sourcing stalled: the stream refused a message", extra={
                "stream": self.stream.name, "source": link.spec.name, "seq": seq, "error": str(exc)})

    def _flush(self, link: Link) -> None:
        """One write for the batch, before any consumer of the stream delivers from it (its passes run on
        a later loop turn); what a crash loses here is copied again at the restart."""
        try:
            self.stream.store.flush()
        except (StoreError, OSError) as exc:
            link.stalled = True
            log.error("sourcing could not write its copies", extra={"stream": self.stream.name, "error": str(exc)})

    def _store(self, link: Link, msg: StoredMsg) -> None:
        if link.is_mirror:
            if msg.seq > self.stream.last_seq:  # what the mirror has already is not stored again
                hdr = headers.without(msg.hdr, prefixes=_STRIP_PREFIXES)
                self.stream.store_mirrored(msg.seq, msg.ts, link.map(msg.subject), hdr, msg.data)
            return
        hdr = headers.without(msg.hdr, headers.STREAM_SOURCE, prefixes=_STRIP_PREFIXES)
        name, _, filters_and_dests = link.index_name.partition(" ")
        value = f"{name} {msg.seq} {filters_and_dests} {msg.subject} {link.ident}"
        _, duplicate = self.stream.process(link.map(msg.subject),
                                           headers.append(hdr, ((headers.STREAM_SOURCE, value),)), msg.data,
                                           sourced=True)
        if not duplicate or link.durable:  # nats-server's durable link moves on past a duplicate too
            link.seq = msg.seq

    def _tick(self) -> None:
        """The health check: origins looked up again, live links marked active, stalled ones retried."""
        self._tick_handle = self._bus.loop.call_later(HEALTH_INTERVAL, self._tick)
        self.relink()
        self._save_positions()
        now = times.now_ns()
        for link in self.links:
            if link.durable:
                if link.sub is not None and now - link.last_active > SILENT_NS:
                    self._again(link)
            elif link.origin is not None:
                link.last_active = now
                link.update_lag()
                link.stalled = False
        self.kick()
