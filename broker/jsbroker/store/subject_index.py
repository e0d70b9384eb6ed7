"""Per-subject index of one stream store: subject -> sorted live sequences.

Owns subject interning (a small int `sid` per subject, so per-message memory holds 4 bytes instead of a
string), each subject's sorted seq list, and wildcard filter resolution with a small LRU cache kept up to
date as subjects come and go. It knows nothing of message bodies, limits or files.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import OrderedDict

from ..subjects import is_literal, subject_matches

_FILTER_CACHE = 64  # wildcard filters remembered with their matching subjects


def is_all(subject_filter: str | None) -> bool:
    return not subject_filter or subject_filter == ">"


def any_all(subject_filters: list[str]) -> bool:
    """Whether one of the filters matches everything (`is_all` of any, at C speed)."""
    return not all(subject_filters) or ">" in subject_filters


class SubjectEntry:
    """One subject's live seqs; `seqs[head:]` are valid (removals at the front only move `head`). The list
    is an array of 4-byte seqs until a seq needs more (a stream past 2^32 messages): appends that raise
    OverflowError call `widen()` and append again (a try costs nothing on the hot path until it raises)."""

    __slots__ = ("subject", "sid", "seqs", "head")

    def __init__(self, subject: str, sid: int, seqs: array[int] | None = None) -> None:
        self.subject = subject
        self.sid = sid
        self.seqs = array("I") if seqs is None else seqs
        self.head = 0

    def widen(self) -> None:
        """Make room for seqs of 2^32 and above."""
        self.seqs = array("Q", self.seqs)

    def append(self, seq: int) -> None:
        try:
            self.seqs.append(seq)
        except OverflowError:
            self.widen()
            self.seqs.append(seq)

    def extend(self, seqs: array[int]) -> None:
        """Append ascending seqs (another list's, either width)."""
        if seqs.typecode != self.seqs.typecode:
            if self.seqs.typecode == "I" and (not seqs or seqs[-1] >> 32 == 0):
                seqs = array("I", seqs)
            else:
                self.widen()
                seqs = array("Q", seqs)
        self.seqs.extend(seqs)

    @property
    def count(self) -> int:
        return len(self.seqs) - self.head

    @property
    def first(self) -> int:
        return self.seqs[self.head]

    @property
    def last(self) -> int:
        return self.seqs[-1]

    def next_at_or_after(self, seq: int) -> int:
        """The first live seq >= `seq`, or 0."""
        i = bisect_left(self.seqs, seq, self.head)
        return self.seqs[i] if i < len(self.seqs) else 0

    def count_at_or_after(self, seq: int) -> int:
        return len(self.seqs) - bisect_left(self.seqs, seq, self.head)

    def oldest(self, n: int) -> list[int]:
        return self.seqs[self.head : self.head + n].tolist()

    def remove(self, seq: int) -> None:
        seqs = self.seqs
        if seqs[self.head] == seq:
            self.head += 1
            if self.head > 64 and self.head * 2 > len(seqs):
                del seqs[: self.head]
                self.head = 0
            return
        i = bisect_left(seqs, seq, self.head)
        if i < len(seqs) and seqs[i] == seq:
            del seqs[i]


class SubjectIndex:
    def __init__(self) -> None:
        self._by_subject: dict[str, SubjectEntry] = {}
        self.get = self._by_subject.get  # the entry of a subject, or None (a bound dict method: hot path)
        self._by_sid: list[SubjectEntry | None] = [None]  # sid 0 means "no message"
        # The subject of each sid (None when free): `names[sid]` is `by_sid(sid).subject`, as a plain list
        # so batch reads map sids to subjects at C speed.
        self.names: list[str | None] = [None]
        self._free_sids: list[int] = []
        self._filters: OrderedDict[str, list[SubjectEntry]] = OrderedDict()
        self._drops = 0  # subjects dropped so far: a cached filter list made before a drop may hold it
        self._clean_at: dict[str, int] = {}  # per cached filter: `_drops` when its list was last cleaned

    @classmethod
    def loaded(cls, names: list[str], seq_lists: list[array[int]]) -> SubjectIndex:
        """An index of exactly these subjects, `names[k]` with sid k + 1 and live seqs `seq_lists[k]`,
        built in bulk (a snapshot's subjects, often one per message); ValueError when a name repeats or
        has no seqs."""
        index = cls()
        entries = list(map(SubjectEntry, names, range(1, len(names) + 1), seq_lists))
        index._by_subject.update(zip(names, entries))
        if len(index._by_subject) != len(names) or not all(seq_lists):
            bad = next(name for k, name in enumerate(names) if not seq_lists[k] or index._by_subject[name].sid != k + 1)
            raise ValueError(f"subject {bad!r} is listed twice or without messages")
        index._by_sid.extend(entries)
        index.names.extend(names)
        return index

    def __len__(self) -> int:
        return len(self._by_subject)

    def by_sid(self, sid: int) -> SubjectEntry:
        entry = self._by_sid[sid]
        assert entry is not None, sid
        return entry

    def intern(self, subject: str) -> SubjectEntry:
        """The entry for `subject`, created (and added to cached filters it matches) when new."""
        entry = self._by_subject.get(subject)
        if entry is not None:
            return entry
        if self._free_sids:
            sid = self._free_sids.pop()
        else:
            sid = len(self._by_sid)
            self._by_sid.append(None)
            self.names.append(None)
        entry = SubjectEntry(subject, sid)
        self._by_subject[subject] = entry
        self._by_sid[sid] = entry
        self.names[sid] = subject
        for pattern, entries in self._filters.items():
            if subject_matches(pattern, subject):
                entries.append(entry)
        return entry

    def add(self, subject: str, seq: int) -> int:
        """Append `seq` (the newest) to the subject's list; returns its sid."""
        entry = self.intern(subject)
        entry.append(seq)
        return entry.sid

    def remove(self, sid: int, seq: int) -> SubjectEntry:
        entry = self.by_sid(sid)
        entry.remove(seq)
        if entry.count == 0:
            self._drop(entry)
        return entry

    def sole(self) -> str | None:
        """The subject when there is exactly one."""
        return next(iter(self._by_subject)) if len(self._by_subject) == 1 else None

    def drop_empty(self) -> None:
        """Forget subjects left without messages (after bulk loads that filled lists directly)."""
        for entry in [e for e in self._by_subject.values() if e.count == 0]:
            self._drop(entry)

    def _drop(self, entry: SubjectEntry) -> None:
        del self._by_subject[entry.subject]
        self._by_sid[entry.sid] = None
        self.names[entry.sid] = None
        self._free_sids.append(entry.sid)
        entry.sid = 0  # dead: cached filter lists drop it when next used
        self._drops += 1

    def matching(self, subject_filter: str | None) -> list[SubjectEntry]:
        """Live entries whose subject matches the filter (None or ">" = all)."""
        if is_all(subject_filter):
            return list(self._by_subject.values())
        assert subject_filter is not None
        entries = self._filters.get(subject_filter)  # only wildcards are cached
        if entries is not None:
            self._filters.move_to_end(subject_filter)
            if self._clean_at[subject_filter] != self._drops:
                entries[:] = [e for e in entries if e.sid != 0]
                self._clean_at[subject_filter] = self._drops
            return entries
        if is_literal(subject_filter):
            entry = self._by_subject.get(subject_filter)
            return [entry] if entry is not None else []
        entries = [e for s, e in self._by_subject.items() if subject_matches(subject_filter, s)]
        self._filters[subject_filter] = entries
        self._clean_at[subject_filter] = self._drops
        if len(self._filters) > _FILTER_CACHE:
            del self._clean_at[self._filters.popitem(last=False)[0]]
        return entries

    def matching_union(self, filters: list[str] | None) -> list[SubjectEntry]:
        """Entries matching any of the filters, each once."""
        if filters is None or any_all(filters):
            return self.matching(None)
        if len(filters) == 1:
            return self.matching(filters[0])
        seen: dict[int, SubjectEntry] = {}
        for f in filters:
            for entry in self.matching(f):
                seen[entry.sid] = entry
        return list(seen.values())

    def sid_matcher(self, subject_filter: str) -> bytearray:
        """A flag per sid: 1 when that subject matches (for scanning per-message sids)."""
        flags = bytearray(len(self._by_sid))
        for entry in self.matching(subject_filter):
            flags[entry.sid] = 1
        return flags
