"""StreamStore semantics shared by the memory and file stores, over a compact in-memory index.

Owns everything a store decides without looking at message bodies: sequence bookkeeping (first/last,
gaps, skips), per-message metadata in parallel arrays (subject id, timestamp, size, location: 24 bytes
a message), the per-subject index (4 more: subject seq lists), the limits (max_msgs, max_bytes, max_msgs_per_subject, max_age,
per-message TTL; always discard-old), purge rules and filtered lookups. A backend subclass keeps the
bodies and persists changes through a handful of hooks (`_put`, `_get`, `_drop`, `_drop_all`,
`_log_delete`, `_log_floor`, `_commit`); the index never does I/O itself.
"""

from __future__ import annotations

import heapq
import re
import time
from array import array
from bisect import bisect_left, bisect_right
from itertools import accumulate, chain, compress, islice, repeat
from operator import sub
from typing import Iterable, Iterator

_time_ns = time.time_ns

from ..subjects import is_literal, subject_matches
from .base import RemoveCallback, StoreClosed, StoredMsg, StoreError, StoreLimits, StoreState, new_stored_msg
from .index_snapshot import IndexImage
from .record import encode_msg, memory_size
from .subject_index import SubjectEntry, SubjectIndex, any_all, is_all

_NONZERO = re.compile(rb"[^\x00]")
_WILDCARD_FANOUT = 16  # up to this many matching subjects, next-match uses per-subject bisects
_SCAN_WINDOW = 512  # above it, scan this many seqs before falling back to per-subject bisects


class IndexedStore:
    """Base of MemoryStore and FileStore; see the module docstring for the hooks."""

    # Bytes one message counts for (state bytes, max_bytes) from (subject, header, payload) lengths:
    # each backend accounts as its nats-server counterpart does.
    _account = staticmethod(memory_size)

    def __init__(self, limits: StoreLimits) -> None:
        self._limits = limits
        self._subjects = SubjectIndex()
        self._base = 1  # seq of row 0 in the arrays below
        self._sids = array("I")  # subject id per seq, 0 = no message (deleted, skipped)
        self._ts = array("q")  # store time per seq (kept for gaps too, so it stays sorted)
        self._sizes = array("I")  # accounted size per seq (`_account`)
        self._locs = array("Q")  # backend location per seq (file: block << 40 | offset)
        self._first = 0  # first live seq, 0 when there are no messages
        self._last = 0
        # nats-server's first_seq of an empty store is last_seq + 1 once it was set, and a purge sets it
        # even when nothing was ever stored (first_seq 1, last_seq 0); before that it is 0
        self._first_set = False
        self._last_ts = 0
        self._msgs = 0
        self._bytes = 0
        self._ttl: list[tuple[int, int]] = []  # heap of (expires_at_ns, seq)
        self._never: set[int] = set()  # seqs with TTL "never": exempt from max_age
        self._on_remove: RemoveCallback | None = None
        self._lost: list[int] | None = None
        self._listed = 0  # recovery: the seqs up to here are in the subject lists already (a loaded snapshot)
        self._closed = False
        self._failed: str | None = None  # set by a backend after a write error: the store stops
        self._count_limited = self._has_count_limits(limits)

    @staticmethod
    def _has_count_limits(limits: StoreLimits) -> bool:
        return limits.max_msgs > 0 or limits.max_bytes > 0 or limits.max_msgs_per_subject > 0

    # ---- backend hooks ------------------------------------------------------------------------------
    def _put(self, seq: int, ts: int, ttl: int, subject: bytes, hdr: bytes, data: bytes) -> int:
        """Persist a new message; returns its location (stored in `_locs`)."""
        raise NotImplementedError

    def _get(self, seq: int, loc: int, size: int) -> tuple[bytes, bytes] | None:
        raise NotImplementedError

    def _read_records(self, seqs: list[int], rows: list[int]) -> list[bytes]:
        """The message records of `seqs` (live, ascending) as pieces of record.py's format to be joined;
        a backend whose bodies are not records builds them."""
        msgs = self._load_many(seqs, None)
        return [encode_msg(m.seq, m.ts, 0, m.subject.encode(), m.hdr, m.data) for m in msgs]

    def _read_many(self, seqs: list[int], rows: list[int]) -> tuple[list[int], Iterable[bytes], Iterable[bytes]]:
        """The bodies of several live seqs in ascending order (`rows`: their rows in the arrays):
        (the seqs read, their headers, their payloads). Unreadable bodies (logged) are left out."""
        raise NotImplementedError

    def _drop(self, seq: int, loc: int, size: int) -> None:
        """The body of `seq` (accounted size `size`) is no longer live."""

    def _drop_all(self) -> None:
        """Every body is gone (purge of everything)."""

    def _erase(self, seq: int, loc: int, size: int) -> None:
        """Overwrite the body of `seq` before it is dropped (remove_msg with erase)."""

    def _log_delete(self, seq: int) -> None:
        """Persist the removal of an interior seq."""

    def _log_floor(self) -> None:
        """Persist first/last after they moved (front removals, purges, skips)."""

    def _commit(self) -> None:
        """Make everything logged since the last commit reach the OS (and the disk per sync policy)."""

    # ---- index primitives ---------------------------------------------------------------------------
    def _check_readable(self) -> None:
        """Reads go on after a write error stopped the store (what reached the disk is served; STREAM.INFO
        answers): only a closed store refuses them."""
        if self._closed:
            raise StoreClosed("the store is closed")

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")
        if self._failed is not None:
            raise StoreError(self._failed)

    def _live(self, seq: int) -> bool:
        i = seq - self._base
        return 0 <= i < len(self._sids) and self._sids[i] != 0

    def _next_live(self, seq: int) -> int:
        """The first live seq >= `seq`, or 0."""
        i = max(seq - self._base, 0)
        if i >= len(self._sids):
            return 0
        if self._sids[i]:
            return self._base + i
        with memoryview(self._sids) as raw, raw.cast("B") as view:
            m = _NONZERO.search(view, i * 4)
            pos = m.start() if m is not None else -1
        return self._base + pos // 4 if pos >= 0 else 0

    def _prev_live(self, seq: int) -> int:
        """The last live seq <= `seq`, or 0."""
        i = min(seq - self._base, len(self._sids) - 1)
        while i >= 0:
            chunk = self._sids[max(i - 4095, 0) : i + 1]
            for j in range(len(chunk) - 1, -1, -1):
                if chunk[j]:
                    return self._base + i - (len(chunk) - 1 - j)
            i -= len(chunk)
        return 0

    def _grow_to(self, seq: int) -> None:
        """Extend the arrays with empty rows up to (not including) `seq`."""
        missing = seq - (self._base + len(self._sids))
        if missing > 0:
            self._sids.extend(array("I", bytes(4 * missing)))
            self._ts.extend(array("q", [self._last_ts]) * missing)
            self._sizes.extend(array("I", bytes(4 * missing)))
            self._locs.extend(array("Q", bytes(8 * missing)))

    def _trim(self) -> None:
        """Drop rows below the first live seq once they are a large share of the arrays."""
        if self._msgs == 0:
            for col in (self._sids, self._ts, self._sizes, self._locs):
                del col[:]
            self._base = self._last + 1
            return
        k = self._first - self._base
        if k > 1024 and k * 2 > len(self._sids):
            for col in (self._sids, self._ts, self._sizes, self._locs):
                del col[:k]
            self._base = self._first

    def _index(self, seq: int, subject: str, ts: int, size: int, ttl: int, loc: int) -> SubjectEntry:
        """Add a message row (seq must be above every row present)."""
        if seq - self._base != len(self._sids):
            if self._msgs == 0 and not self._sids:
                self._base = seq
            self._grow_to(seq)
        subjects = self._subjects
        entry = subjects.get(subject) or subjects.intern(subject)
        try:
            entry.seqs.append(seq)
        except OverflowError:
            entry.append(seq)
        self._sids.append(entry.sid)
        self._ts.append(ts)
        self._sizes.append(size)
        self._locs.append(loc)
        self._msgs += 1
        self._bytes += size
        if not self._first:
            self._first = seq
        self._last = seq
        self._last_ts = ts
        if ttl == 0:
            return entry
        if ttl > 0:
            heapq.heappush(self._ttl, (ts + ttl, seq))
        elif ttl < 0:
            self._never.add(seq)
        return entry

    # ---- recovery (file store): rows first, per-subject lists built once at the end ----------------
    def _restore_msg(self, seq: int, subject: str, ts: int, size: int, ttl: int, loc: int) -> None:
        if self._msgs == 0 and not self._sids:
            self._base = seq
        self._grow_to(seq)
        self._sids.append(self._subjects.intern(subject).sid)
        self._ts.append(ts)
        self._sizes.append(size)
        self._locs.append(loc)
        self._msgs += 1
        self._bytes += size
        self._last, self._last_ts = seq, ts
        if ttl > 0:
            heapq.heappush(self._ttl, (ts + ttl, seq))
        elif ttl < 0:
            self._never.add(seq)

    def _restore_delete(self, seq: int) -> tuple[int, int] | None:
        """Forget a restored row; returns its (location, size), None when it was not live."""
        i = seq - self._base
        if i < 0 or i >= len(self._sids) or not self._sids[i]:
            return None
        if seq <= self._listed:  # emptied subjects are dropped by _finish_restore
            self._subjects.by_sid(self._sids[i]).remove(seq)
        self._sids[i] = 0
        self._msgs -= 1
        self._bytes -= self._sizes[i]
        self._never.discard(seq)
        return self._locs[i], self._sizes[i]

    def _finish_restore(self, floor: int) -> list[tuple[int, int]]:
        """Apply the recovered floor and build the per-subject lists (of the rows above `_listed`);
        returns (location, size) dropped."""
        dropped = [gone for seq in range(self._base, min(floor, self._base + len(self._sids)))
                   if (gone := self._restore_delete(seq)) is not None]
        self._last = max(self._last, floor - 1)
        self._first_set = self._first_set or floor > 0  # a floor record: the first seq was set (a purge)
        self._list_rows()
        self._listed = 0
        self._subjects.drop_empty()
        self._first = self._next_live(self._base) if self._msgs else 0
        if self._msgs:
            self._grow_to(self._last + 1)  # skips after the last message are gaps too
        self._trim()
        return dropped

    def _list_rows(self) -> None:
        """Add the rows above `_listed` to their subjects' seq lists (recovery builds them in one pass)."""
        base, by_sid = self._base, self._subjects.by_sid
        start = max(self._listed + 1 - base, 0)
        for i, sid in enumerate(self._sids[start:], start):
            if sid:
                entry = by_sid(sid)
                try:
                    entry.seqs.append(base + i)
                except OverflowError:
                    entry.append(base + i)
        self._listed = base + len(self._sids) - 1

    # ---- index snapshot (file store): the whole index as arrays, and back --------------------------
    def _index_image(self) -> IndexImage:
        """The index, its subject ids renumbered 1..n in subject order unless they already are."""
        entries = self._subjects.matching(None)
        sids = self._sids
        if any(e.sid != k for k, e in enumerate(entries, 1)):
            renumber = [0] * len(self._subjects.names)
            for k, e in enumerate(entries, 1):
                renumber[e.sid] = k
            sids = array("I", map(renumber.__getitem__, sids))
        ttl = [(at, seq) for at, seq in self._ttl if self._live(seq)]
        return IndexImage(
            self._base, self._first or self._empty_first(), self._last, self._last_ts, self._msgs, self._bytes, sids,
            self._ts, self._sizes, self._locs, [e.subject for e in entries],
            [e.seqs[e.head :] if e.head else e.seqs for e in entries],
            array("q", [at for at, _ in ttl]), array("Q", [seq for _, seq in ttl]), array("Q", sorted(self._never)))

    def _range_image(self, lo: int, hi: int) -> IndexImage:
        """The rows of seqs lo..hi (one sealed block's, hi its last message) with their own subject ids
        1..n; `first` is the store's floor as of now (nothing below it exists), `last` is hi."""
        a = min(max(lo - self._base, 0), len(self._sids))
        b = max(min(hi + 1 - self._base, len(self._sids)), a)
        rows = self._sids[a:b]
        used = [sid for sid in set(rows) if sid]
        local = dict(zip(used, range(1, len(used) + 1)))
        local[0] = 0
        entries = list(map(self._subjects.by_sid, used))
        seqs = []
        for e in entries:
            i = bisect_left(e.seqs, lo, e.head)
            seqs.append(e.seqs[i : bisect_left(e.seqs, hi + 1, i)])
        sizes = self._sizes[a:b]
        ttl = [(at, seq) for at, seq in self._ttl if lo <= seq <= hi and self._live(seq)]
        return IndexImage(
            self._base + a, self._first if self._msgs else self._last + 1, hi, self._ts[b - 1] if b > a else 0,
            len(rows) - rows.count(0), sum(compress(sizes, rows)), array("I", map(local.__getitem__, rows)),
            self._ts[a:b], sizes, self._locs[a:b], [e.subject for e in entries], seqs,
            array("q", [at for at, _ in ttl]), array("Q", [seq for _, seq in ttl]),
            array("Q", sorted(seq for seq in self._never if lo <= seq <= hi)))

    def _append_index(self, image: IndexImage) -> None:
        """Append the rows of a `_range_image` (recovery: a sealed block's, after every row present, their
        per-subject lists included); ValueError, with nothing changed, when they do not come after them."""
        rows = len(image.sids)
        if rows and image.base <= self._last:
            raise ValueError(f"its rows from seq {image.base} do not come after seq {self._last}")
        if image.last < self._last:
            raise ValueError(f"its last seq {image.last} is below seq {self._last}")
        self._list_rows()
        if rows:
            if self._msgs == 0 and not self._sids:
                self._base = image.base
            self._grow_to(image.base)
            intern = self._subjects.intern
            entries = [intern(subject) for subject in image.subjects]
            sids = [0, *(e.sid for e in entries)]
            if sids == list(range(len(sids))):  # the store numbers the subjects as the image does (usual)
                self._sids.extend(image.sids)
            else:
                self._sids.extend(array("I", map(sids.__getitem__, image.sids)))
            self._ts.extend(image.ts)
            self._sizes.extend(image.sizes)
            self._locs.extend(image.locs)
            for e, seqs in zip(entries, image.subject_seqs):
                e.extend(seqs)
        self._msgs += image.msgs
        self._bytes += image.bytes
        self._last, self._last_ts = image.last, image.last_ts
        for item in zip(image.ttl_at, image.ttl_seqs):
            heapq.heappush(self._ttl, item)
        self._never.update(image.never)
        self._listed = self._base + len(self._sids) - 1

    def _load_index(self, image: IndexImage) -> None:
        """Take over the index of a snapshot (into a store just created); ValueError, with nothing changed,
        when it does not hold together."""
        subjects = SubjectIndex.loaded(image.subjects, image.subject_seqs)
        rows = len(image.sids)
        if image.msgs and not (0 <= image.first - image.base < rows and image.sids[image.first - image.base]
                               and image.base + rows == image.last + 1):
            raise ValueError(f"first/last seq {image.first}/{image.last} do not fit rows from {image.base}")
        self._subjects = subjects
        self._base, self._last, self._last_ts = image.base, image.last, image.last_ts
        self._first = image.first if image.msgs else 0
        self._first_set = bool(image.first or image.last)
        self._msgs, self._bytes = image.msgs, image.bytes
        self._sids, self._ts, self._sizes, self._locs = image.sids, image.ts, image.sizes, image.locs
        self._ttl = list(zip(image.ttl_at, image.ttl_seqs))
        heapq.heapify(self._ttl)
        self._never = set(image.never)
        self._listed = image.last

    def _remove(self, seq: int, notify: bool, erase: bool = False) -> bool:
        i = seq - self._base
        if i < 0 or i >= len(self._sids) or not self._sids[i]:
            return False
        sid, loc, size = self._sids[i], self._locs[i], self._sizes[i]
        subject = self._subjects.by_sid(sid).subject
        if erase:
            self._erase(seq, loc, size)
        self._sids[i] = 0
        self._msgs -= 1
        self._bytes -= size
        self._subjects.remove(sid, seq)
        self._never.discard(seq)
        if seq == self._first:
            self._first = self._next_live(seq + 1)
            self._log_floor()
        else:
            self._log_delete(seq)
        self._drop(seq, loc, size)
        self._trim()
        if notify and self._on_remove is not None:
            self._on_remove(seq, subject)
        return True

    def _remove_below(self, floor: int) -> int:
        """Remove every seq below `floor`; past the end, the next message will get `floor`."""
        if floor > self._last:
            removed = self._msgs
            self._first_set = True
            self._subjects = SubjectIndex()
            self._msgs = self._bytes = self._first = 0
            self._ttl.clear()
            self._never.clear()
            self._last = max(self._last, floor - 1)
            self._drop_all()
            self._trim()
            self._log_floor()
            return removed
        removed = 0
        while self._first and self._first < floor:
            removed += self._remove(self._first, notify=False)
        return removed

    def _enforce_limits(self, entry: SubjectEntry | None) -> None:
        """Count/size limits after a store (`entry`: the subject just stored) or a limits update. A store
        trims its subject first; an update (or a start) trims by count and size first, then per subject, as
        nats-server's UpdateConfig: the order decides which messages go when both limits bite."""
        if entry is not None:
            self._enforce_per_subject([entry])
            self._enforce_totals()
        else:
            self._enforce_totals()
            self._enforce_per_subject(self._subjects.matching(None))

    def _enforce_per_subject(self, entries: Iterable[SubjectEntry]) -> None:
        per_subject = self._limits.max_msgs_per_subject
        if per_subject > 0:
            for e in entries:
                if e.sid and e.count > per_subject:
                    for seq in e.oldest(e.count - per_subject):
                        self._remove(seq, notify=True)

    def _enforce_totals(self) -> None:
        if self._limits.max_msgs > 0:
            while self._msgs > self._limits.max_msgs:
                self._remove(self._first, notify=True)
        if self._limits.max_bytes > 0:
            while self._bytes > self._limits.max_bytes:
                self._remove(self._first, notify=True)

    def _next_matching(self, start: int, subject_filter: str) -> int:
        """First live seq >= start on a subject matching a wildcard filter, or 0."""
        entries = self._subjects.matching(subject_filter)
        if not entries:
            return 0
        if len(entries) > _WILDCARD_FANOUT:
            # Dense filters find a match within a few rows; sparse ones fall through to the bisects.
            i = start - self._base
            matches: dict[int, bool] = {}
            for sid in islice(self._sids, i, i + _SCAN_WINDOW):
                if sid:
                    hit = matches.get(sid)
                    if hit is None:
                        hit = matches[sid] = subject_matches(subject_filter, self._subjects.by_sid(sid).subject)
                    if hit:
                        return self._base + i
                i += 1
        found = [s for e in entries if (s := e.next_at_or_after(start))]
        return min(found) if found else 0

    def _live_count_from(self, start: int) -> int:
        if start <= self._first:
            return self._msgs
        if start > self._last:
            return 0
        i, j, end = self._first - self._base, start - self._base, self._last - self._base + 1
        if j - i < end - j:
            return self._msgs - ((j - i) - self._sids[i:j].count(0))
        return (end - j) - self._sids[j:end].count(0)

    # ---- StreamStore --------------------------------------------------------------------------------
    def _store_one(self, subject: str, hdr: bytes, data: bytes, ttl_ns: int, ts_ns: int = 0) -> tuple[int, int]:
        seq = self._last + 1
        ts = ts_ns or _time_ns()
        if ts < self._last_ts and not ts_ns:
            ts = self._last_ts  # never backwards: time lookups bisect on it (a mirror's are its origin's)
        subj = subject.encode()
        loc = self._put(seq, ts, ttl_ns, subj, hdr, data)
        entry = self._index(seq, subject, ts, self._account(len(subj), len(hdr), len(data)), ttl_ns, loc)
        if self._count_limited:
            self._enforce_limits(entry)
        return seq, ts

    def store_msg(self, subject: str, hdr: bytes, data: bytes, ttl_ns: int = 0, ts_ns: int = 0) -> tuple[int, int]:
        if self._closed or self._failed is not None:
            self._check_open()
        stored = self._store_one(subject, hdr, data, ttl_ns, ts_ns)
        self._commit()
        return stored

    def store_deferred(self, subject: str, hdr: bytes, data: bytes, ttl_ns: int = 0, ts_ns: int = 0) -> tuple[int, int]:
        if self._closed or self._failed is not None:
            self._check_open()
        return self._store_one(subject, hdr, data, ttl_ns, ts_ns)

    def flush(self) -> None:
        self._check_open()
        self._commit()

    def store_batch(self, msgs: list[tuple[str, bytes, bytes, int]]) -> list[tuple[int, int]]:
        """store_msg for each (subject, hdr, data, ttl_ns) in order, with one write (and fsync) for all."""
        self._check_open()
        try:
            return [self._store_one(subject, hdr, data, ttl) for subject, hdr, data, ttl in msgs]
        finally:
            self._commit()

    def accounted_size(self, subject: str, hdr: bytes, data: bytes) -> int:
        return self._account(len(subject.encode()), len(hdr), len(data))

    def check_room(self, size: int) -> None:
        """Memory needs no room check (max_memory_store is the stream layer's)."""

    def skip_msgs(self, next_seq: int, stamp: bool = True) -> None:
        self._check_open()
        if next_seq <= self._last + 1:
            return
        self._last = next_seq - 1
        if stamp:
            self._last_ts = max(time.time_ns(), self._last_ts)  # nats-server's SkipMsg stamps the skip
        if self._msgs == 0:
            self._trim()
        else:
            self._grow_to(next_seq)
        self._log_floor()
        self._commit()

    def load_msg(self, seq: int) -> StoredMsg | None:
        if self._closed:
            self._check_readable()
        i = seq - self._base
        if i < 0 or i >= len(self._sids) or not self._sids[i]:
            return None
        body = self._get(seq, self._locs[i], self._sizes[i])
        if body is None:
            return None
        return new_stored_msg((seq, self._subjects.names[self._sids[i]], body[0], body[1], self._ts[i]))

    def _next_seq(self, start: int, subject_filter: str | None) -> int:
        """The first live seq >= start on a subject matching the filter, or 0."""
        start = max(start, self._first)
        if is_all(subject_filter):
            return self._next_live(start)
        if is_literal(subject_filter):  # type: ignore[arg-type]
            entry = self._subjects.get(subject_filter)  # type: ignore[arg-type]
            return entry.next_at_or_after(start) if entry is not None else 0
        return self._next_matching(start, subject_filter)  # type: ignore[arg-type]

    def load_next_msg(self, start_seq: int, subject_filter: str | None = None) -> StoredMsg | None:
        self._check_readable()
        while self._msgs:
            seq = self._next_seq(start_seq, subject_filter)
            if not seq:
                return None
            msg = self.load_msg(seq)
            if msg is not None:
                return msg
            start_seq = seq + 1  # unreadable body (logged by the backend): skip it
        return None

    def load_next_msgs(self, start_seq: int, subject_filters: list[str] | None, max_count: int,
                       max_bytes: int = 0) -> list[StoredMsg]:
        if self._closed:
            self._check_readable()
        start = max(start_seq, self._first)
        if not self._msgs or start > self._last or max_count <= 0:
            return []
        subjects = self._subjects
        if not subject_filters or any_all(subject_filters):
            entries = None
        elif len(subject_filters) == 1 and (entry := subjects.get(subject_filters[0])) is not None:
            entries = [entry]  # the usual filter: one subject, that has messages
        else:
            entries = subjects.matching_union(subject_filters)
        if entries is None or len(entries) == len(subjects):
            seqs = self._live_seqs(start, max_count)
            subject = subjects.sole()
        elif len(entries) <= _WILDCARD_FANOUT:
            seqs = self._merged_seqs(entries, start, max_count)
            subject = entries[0].subject if len(entries) == 1 else None
        else:
            seqs = self._scanned_seqs(start, subject_filters, entries, max_count)  # type: ignore[arg-type]  # set here
            subject = None
        if max_bytes and seqs:
            seqs = self._within_bytes(seqs, max_bytes)
        return self._load_many(seqs, subject) if seqs else []

    def load_records(self, start_seq: int, last_seq: int, max_count: int) -> tuple[bytes, int]:
        if self._closed:
            self._check_readable()
        start = max(start_seq, self._first)
        if not self._msgs or start > min(last_seq, self._last) or max_count <= 0:
            return b"", 0
        seqs = self._live_seqs(start, max_count)
        if seqs and seqs[-1] > last_seq:
            del seqs[bisect_right(seqs, last_seq):]
        if not seqs:
            return b"", 0
        pieces = self._read_records(seqs, list(map(sub, seqs, repeat(self._base))))
        return (pieces[0] if len(pieces) == 1 else b"".join(pieces)), seqs[-1] + 1

    # Batch reads pick their seqs first (at C speed where the index allows), then read the bodies together.
    def _live_seqs(self, start: int, max_count: int) -> list[int]:
        """Up to max_count live seqs >= start (first <= start <= last)."""
        sids, base = self._sids, self._base
        seqs: list[int] = []
        i = start - base
        while True:
            rows = sids[i : i + max_count - len(seqs)]  # holds at most as many live seqs as still wanted
            seqs += compress(range(base + i, base + i + len(rows)), rows)
            if len(seqs) == max_count:
                return seqs
            i = self._next_live(base + i + len(rows)) - base
            if i < 0:
                return seqs

    @staticmethod
    def _merged_seqs(entries: list[SubjectEntry], start: int, max_count: int) -> list[int]:
        """Up to max_count seqs >= start of a few subjects, merged from their seq lists."""
        runs = []
        for e in entries:
            j = bisect_left(e.seqs, start, e.head)
            runs.append(e.seqs[j : j + max_count])
        if len(runs) == 1:
            return runs[0].tolist()
        # Nothing past the smallest last seq of a full run can be among the first max_count.
        cut = min((r[-1] for r in runs if len(r) == max_count), default=0)
        if cut:
            runs = [r[: bisect_left(r, cut + 1)] for r in runs]
        return sorted(chain.from_iterable(runs))[:max_count]

    def _scanned_seqs(self, start: int, filters: list[str], entries: list[SubjectEntry], max_count: int) -> list[int]:
        """Up to max_count seqs >= start on subjects matching the filters when many subjects match: walks
        the rows, matching each subject id once per call, and jumps through the subjects' seq lists over
        rows that hold no match."""
        sids, base, names = self._sids, self._base, self._subjects.names
        hits: dict[int, bool] = {0: False}
        seqs: list[int] = []
        i = start - base
        while i < len(sids):
            rows = sids[i : i + min(2 * (max_count - len(seqs)) + 16, _SCAN_WINDOW)]
            for sid in set(rows).difference(hits):
                subject = names[sid]
                hits[sid] = any(subject_matches(f, subject) for f in filters)  # type: ignore[arg-type]
            found = list(compress(range(base + i, base + i + len(rows)), map(hits.__getitem__, rows)))
            seqs += found[: max_count - len(seqs)]
            if len(seqs) == max_count:
                break
            i += len(rows)
            if not found:
                nxt = min((s for e in entries if (s := e.next_at_or_after(base + i))), default=0)
                if not nxt:
                    break
                i = nxt - base
        return seqs

    def _within_bytes(self, seqs: list[int], max_bytes: int) -> list[int]:
        """The leading seqs up to the one whose accounted size makes the total reach max_bytes."""
        sizes = map(self._sizes.__getitem__, map(sub, seqs, repeat(self._base)))
        return seqs[: bisect_left(list(accumulate(sizes)), max_bytes) + 1]

    def _load_many(self, seqs: list[int], subject: str | None) -> list[StoredMsg]:
        """The messages `seqs` (live, ascending); `subject`: the one subject they all have, when known."""
        rows = list(map(sub, seqs, repeat(self._base)))
        got, hdrs, datas = self._read_many(seqs, rows)
        if len(got) != len(seqs):
            rows = list(map(sub, got, repeat(self._base)))
        subjects = repeat(subject) if subject is not None else \
            map(self._subjects.names.__getitem__, map(self._sids.__getitem__, rows))
        return list(map(new_stored_msg, zip(got, subjects, hdrs, datas, map(self._ts.__getitem__, rows))))

    def load_last_msg(self, subject_filter: str) -> StoredMsg | None:
        seq = self.last_seq(subject_filter)
        return self.load_msg(seq) if seq else None

    def last_seq(self, subject_filter: str) -> int:
        self._check_readable()
        if self._msgs == 0:
            return 0
        if is_all(subject_filter):
            return self._prev_live(self._last)
        return max((e.last for e in self._subjects.matching(subject_filter)), default=0)

    def first_seq_at_or_after_time(self, ts: int) -> int:
        self._check_readable()
        if self._msgs == 0:
            return self._last + 1
        i = bisect_left(self._ts, ts, self._first - self._base)
        seq = self._next_live(self._base + i)
        return seq if seq else self._last + 1

    def remove_msg(self, seq: int, erase: bool = False) -> bool:
        self._check_open()
        removed = self._remove(seq, notify=False, erase=erase)
        if removed:
            self._commit()
        return removed

    def purge(self, subject_filter: str | None = None, up_to_seq: int = 0, keep: int = 0) -> int:
        self._check_open()
        if is_all(subject_filter):
            if keep == 0 and up_to_seq == 0:
                removed = self._remove_below(self._last + 1)
            elif up_to_seq > 1:
                removed = self._remove_below(up_to_seq)
            elif keep > 0:
                removed = 0
                while self._msgs > keep:
                    removed += self._remove(self._first, notify=False)
            else:
                removed = 0
        else:
            entries = self._subjects.matching(subject_filter)
            total = sum(e.count for e in entries)
            if keep >= total or up_to_seq == 1:
                return 0
            below = up_to_seq if up_to_seq > 0 else self._last + 1
            oldest = heapq.merge(*(islice(e.seqs, e.head, None) for e in entries))
            doomed = [s for s in islice(oldest, total - keep) if s < below]
            removed = sum(self._remove(s, notify=False) for s in doomed)
        self._commit()
        return removed

    def state(self, deleted_details: bool = False) -> StoreState:
        self._check_readable()
        st = StoreState(
            msgs=self._msgs,
            bytes=self._bytes,
            last_seq=self._last,
            last_ts=self._last_ts,
            num_subjects=len(self._subjects),
            lost=list(self._lost) if self._lost else None,
        )
        if self._msgs:
            st.first_seq = self._first
            st.first_ts = self._ts[self._first - self._base]
            st.num_deleted = self._last - self._first + 1 - self._msgs
            if deleted_details:
                i = self._first - self._base
                st.deleted = [self._base + k for k in range(i, self._last - self._base + 1) if not self._sids[k]]
        else:
            st.first_seq = self._empty_first()
            if deleted_details:
                st.deleted = []
        return st

    def _empty_first(self) -> int:
        return self._last + 1 if self._last or self._first_set else 0

    def subjects_state(self, subject_filter: str) -> dict[str, int]:
        self._check_readable()
        return {e.subject: e.count for e in self._subjects.matching(subject_filter)}

    def num_pending(self, start_seq: int, subject_filters: list[str] | None, last_per_subject: bool = False) -> int:
        self._check_readable()
        if self._msgs == 0:
            return 0
        start = max(start_seq, self._first)
        if start > self._last:
            return 0
        every = not subject_filters or any(is_all(f) for f in subject_filters)
        if every and not last_per_subject:
            return self._live_count_from(start)
        entries = self._subjects.matching_union(None if every else subject_filters)
        if last_per_subject:
            return sum(1 for e in entries if e.last >= start)
        return sum(e.count if start <= e.first else e.count_at_or_after(start) for e in entries)

    def _each_live(self, start_seq: int) -> Iterator[int]:
        """Live seqs from `start_seq`, one at a time (found as they are wanted)."""
        seq = self._next_live(max(start_seq, self._first)) if self._msgs else 0
        while seq:
            yield seq
            seq = self._next_live(seq + 1)

    def header_seqs(self, start_seq: int) -> Iterator[int]:
        """Every live seq from `start_seq`: a backend that knows which messages have headers says less."""
        self._check_readable()
        yield from self._each_live(start_seq)

    def messages(self, start_seq: int = 0) -> Iterator[StoredMsg]:
        self._check_readable()
        for seq in self._each_live(start_seq):
            msg = self.load_msg(seq)
            if msg is not None:
                yield msg

    def subject_of(self, seq: int) -> str | None:
        self._check_readable()
        i = seq - self._base
        if i < 0 or i >= len(self._sids) or not self._sids[i]:
            return None
        return self._subjects.by_sid(self._sids[i]).subject

    def seqs(self, start_seq: int = 0) -> Iterator[tuple[int, str]]:
        self._check_readable()
        if not self._msgs:
            return
        base, by_sid = self._base, self._subjects.by_sid
        start = max(start_seq, self._first) - base
        rows = self._sids[start : self._last - base + 1]  # a copy: the caller may remove as it goes
        for k, sid in enumerate(rows, start + base):
            if sid:
                yield k, by_sid(sid).subject

    def update_limits(self, limits: StoreLimits) -> None:
        self._check_open()
        self._limits = limits
        self._count_limited = self._has_count_limits(limits)
        self._enforce_limits(None)
        self._commit()

    def expire(self, now_ns: int) -> int:
        removed = sum(self._remove(seq, notify=True) for seq in self.take_expired(now_ns))
        if removed:
            self._commit()
        return removed

    def take_expired(self, now_ns: int) -> list[int]:
        self._check_open()
        due = set()
        while self._ttl and self._ttl[0][0] <= now_ns:
            seq = heapq.heappop(self._ttl)[1]
            if self._live(seq):
                due.add(seq)
        if self._limits.max_age_ns > 0:
            cutoff = now_ns - self._limits.max_age_ns
            seq = self._first
            while seq and self._ts[seq - self._base] <= cutoff:
                if seq not in self._never:
                    due.add(seq)
                seq = self._next_live(seq + 1)
        return sorted(due)

    def next_expiry(self) -> int | None:
        self._check_readable()
        while self._ttl and not self._live(self._ttl[0][1]):
            heapq.heappop(self._ttl)
        due = [self._ttl[0][0]] if self._ttl else []
        if self._limits.max_age_ns > 0:
            seq = self._first
            while seq and seq in self._never:
                seq = self._next_live(seq + 1)
            if seq:
                due.append(self._ts[seq - self._base] + self._limits.max_age_ns)
        return min(due) if due else None

    def set_on_remove(self, cb: RemoveCallback | None) -> None:
        self._on_remove = cb
