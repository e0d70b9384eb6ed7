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

`Sourcing(stream, lookup, bus)` runs one stream's links; jetstream/service.py owns it: started after the
stream starts (create, restore), stopped before the stream stops or changes its mirror/sources.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Callable

from jsbroker import store as storage
from jsbroker import subjects
from jsbroker.internal import InternalBus
from jsbroker.jetstream import errors, headers, times
from jsbroker.jetstream.stream import Stream
from jsbroker.jetstream.stream_config import SourceConfig, StreamConfig
from jsbroker.store.base import StoreError, StoredMsg

log = logging.getLogger(__name__)

HEALTH_INTERVAL = 1.0  # s, nats-server's sourcing heartbeat: origins looked up again, `active` refreshed
BATCH = 512  # messages one link copies per loop turn before it lets other work run
_STRIP_PREFIXES = ("Nats-Expected-", "Nats-Batch-")  # the origin checked these; the copy does not again


def check_origins(cfg: StreamConfig, lookup: Callable[[str], StreamConfig | None]) -> StreamConfig:
    """The rules that need the other streams, as nats-server's checkStreamCfg: message sizes against an
    origin that exists, no cycle of sources / mirrors, mirror_direct taken from the origin's allow_direct."""
    if cfg.mirror is not None and (origin := lookup(cfg.mirror.name)) is not None:
        if _smaller_max_msg_size(cfg, origin):
            raise errors.MIRROR_MAX_MESSAGE_SIZE_TOO_BIG()
        cfg = dataclasses.replace(cfg, mirror_direct=origin.allow_direct)
    for source in cfg.sources:
        if (origin := lookup(source.name)) is not None and _smaller_max_msg_size(cfg, origin):
            raise errors.SOURCE_MAX_MESSAGE_SIZE_TOO_BIG()
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
            if source.name in visited:
                if not source.filter_subject or any(subjects.subjects_overlap(s, source.filter_subject)
                                                    for s in current.subjects):
                    raise errors.STREAM_INVALID_CONFIG(err="detected cycle")
            elif (other := lookup(source.name)) is not None:
                to_visit.append(other)
        if current.mirror is not None:
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


class Link:
    """One mirror or source: where it reads in its origin and what STREAM.INFO shows about it. It is
    also the origin's `SourceWatch`: kicked on new messages, and an interest for interest retention."""

    def __init__(self, spec: SourceConfig, is_mirror: bool, kick: Callable[[], None]) -> None:
        self.spec = spec
        self.is_mirror = is_mirror
        self.kick = kick
        self._filters = spec.filters
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
        (the last one copied, or the one the stream refused), minus one, never below 0."""
        pending = self.origin.store.num_pending(self.next_seq, self._filters) if self.origin is not None else 0
        self.lag = max(pending - (2 if self.stalled else 1), 0)

    def read(self) -> list[StoredMsg]:
        assert self.origin is not None
        return self.origin.store.load_next_msgs(self.next_seq, self._filters, BATCH)

    def info(self, now: int) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.spec.name, "lag": self.lag}
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

    def __init__(self, stream: Stream, lookup: Callable[[str], Stream | None], bus: InternalBus) -> None:
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
            origin = self._lookup(link.spec.name)
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

    def _positions_from_headers(self) -> None:
        """Where each source stopped: the newest stored message with its Nats-Stream-Source header (the
        stream's own messages, the mirror's last sequence, need no scan)."""
        waiting = {link.spec.index_name: link for link in self.links if not link.is_mirror}
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
                seq, ident = saved.get(link.spec.index_name, (0, ""))
                if seq:
                    link.seq, link.ident, link.next_seq = int(seq), str(ident), int(seq) + 1
            self._saved = saved
        except (OSError, ValueError, TypeError):
            log.warning("unreadable source positions; using the stored messages only",
                        extra={"stream": self.stream.name})

    def _save_positions(self) -> None:
        if self._directory is None:
            return
        positions = {link.spec.index_name: [link.seq, link.ident] for link in self.links if link.seq}
        if positions == self._saved:
            return
        try:
            storage.save_sources(self._directory, json.dumps(positions).encode())
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
            if link.origin is not None and not link.stalled:
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
                if link.refused != msg.seq:  # said once, not at every retry
                    link.refused = msg.seq
                    log.warning("sourcing stalled: the stream refused a message", extra={
                        "stream": self.stream.name, "source": link.spec.name, "seq": msg.seq, "error": str(exc)})
                break
            link.next_seq = msg.seq + 1
            if release:
                origin.acked(msg.seq)
        if msgs:
            self._flush(link)
            link.last_active = times.now_ns()
        link.update_lag()
        return len(msgs) == BATCH and not link.stalled

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
        name, _, filters_and_dests = link.spec.index_name.partition(" ")
        value = f"{name} {msg.seq} {filters_and_dests} {msg.subject} {link.ident}"
        _, duplicate = self.stream.process(link.map(msg.subject),
                                           headers.append(hdr, ((headers.STREAM_SOURCE, value),)), msg.data,
                                           sourced=True)
        if not duplicate:
            link.seq = msg.seq

    def _tick(self) -> None:
        """The health check: origins looked up again, live links marked active, stalled ones retried."""
        self._tick_handle = self._bus.loop.call_later(HEALTH_INTERVAL, self._tick)
        self.relink()
        self._save_positions()
        now = times.now_ns()
        for link in self.links:
            if link.origin is not None:
                link.last_active = now
                link.update_lag()
                link.stalled = False
        self.kick()
