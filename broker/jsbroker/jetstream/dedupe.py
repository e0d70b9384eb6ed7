"""The Nats-Msg-Id window of a stream: msg id -> seq of the messages published within `duplicate_window`.

Time order is arrival order, so expiry pops the front. Held compactly, because a stream published to at
a steady rate holds rate x window entries (5,000 msgs/s over the default 2 minutes: 600,000): one dict
entry per id (msg id -> seq) plus three parallel columns in arrival order (id, seq, timestamp) instead of
an OrderedDict of tuples, about half the memory per entry.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator


class MsgIdWindow:
    def __init__(self, window_ns: int) -> None:
        self.window_ns = window_ns
        self._seqs_by_id: dict[str, int] = {}
        self._ids: list[str] = []  # arrival order from `_head`; an id added again appears twice
        self._seqs = array("Q")
        self._ts = array("q")
        self._head = 0

    def __len__(self) -> int:
        return len(self._seqs_by_id)

    def find(self, msg_id: str, now: int) -> int:
        """The seq of `msg_id` if it was published within the window, else 0."""
        self.prune(now)
        return self._seqs_by_id.get(msg_id, 0)

    def add(self, msg_id: str, seq: int, ts: int) -> None:
        """Record the newest message (ts not older than any recorded)."""
        self._seqs_by_id[msg_id] = seq
        self._ids.append(msg_id)
        self._seqs.append(seq)
        self._ts.append(ts)

    def prune(self, now: int) -> None:
        horizon = now - self.window_ns
        head, ts, end = self._head, self._ts, len(self._ts)
        if head == end or ts[head] >= horizon:
            return
        seqs_by_id, ids, seqs = self._seqs_by_id, self._ids, self._seqs
        while head < end and ts[head] < horizon:
            if seqs_by_id.get(ids[head]) == seqs[head]:  # not added again since
                del seqs_by_id[ids[head]]
            head += 1
        self._head = head
        if head == end or (head > 4096 and head * 2 > end):
            for column in (ids, seqs, ts):
                del column[:head]
            self._head = 0

    def entries(self) -> Iterator[tuple[str, int, int]]:
        """(msg id, seq, ts) of every id in the window, oldest first."""
        seqs_by_id = self._seqs_by_id
        for k in range(self._head, len(self._ids)):
            msg_id, seq = self._ids[k], self._seqs[k]
            if seqs_by_id.get(msg_id) == seq:
                yield msg_id, seq, self._ts[k]

    def clear(self) -> None:
        self._seqs_by_id.clear()
        for column in (self._ids, self._seqs, self._ts):
            del column[:]
        self._head = 0
