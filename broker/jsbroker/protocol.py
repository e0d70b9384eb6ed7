"""Sans-IO parser of the NATS client protocol (bytes in, callbacks out; no sockets, no asyncio).

The parser owns framing only: it splits control lines, slices payloads and reports each operation to its
handler. What an operation means (auth, routing, limits other than framing) belongs to `connection.py`.

Speed rules (see /work/shared/reference/broker-performance.md): a buffer is never rescanned (the search
for the next newline resumes where the previous op ended), PUB is tested first, a payload is copied once
(together with its trailing CRLF, so it can be forwarded as is), and a partial payload is kept as a list of
chunks until it is complete. Quirks copied from nats-server 2.15.1 as seen on the wire: a control line
may end in a bare LF, verbs are case-insensitive, arguments are split on runs of blanks, anything after
PING/PONG on the line is ignored, `+OK`/`INFO` from a client are ignored, `-ERR` from a client closes it.
"""

from __future__ import annotations

import re
from typing import Callable, Protocol

CRLF = b"\r\n"
UNKNOWN_OP = "Unknown Protocol Operation"
MAX_CONTROL_LINE = "maximum control line exceeded"
MAX_PAYLOAD = "Maximum Payload Violation"
AUTH_VIOLATION = "Authorization Violation"

# Verbs a well-behaved client may start a line with; used to reject garbage before its line ends.
_VERBS = (b"PUB", b"HPUB", b"SUB", b"UNSUB", b"PING", b"PONG", b"CONNECT", b"INFO", b"+OK", b"-ERR")
_STRICT = (b"PUB", b"HPUB", b"SUB", b"UNSUB")  # a blank must follow these verbs
_LENIENT = (b"CONNECT", b"INFO", b"-ERR", b"PING", b"PONG", b"+OK")  # nats-server takes anything after these
_LINE_CACHE = 256  # remembered PUB argument lines per connection
# One PUB of a run without reply or payload (see `Parser.on_empty_pubs`): its subject.
_EMPTY_PUB = re.compile(rb"PUB ([!-~]+)  ?0\r\n\r\n")


class ProtocolError(Exception):
    """The connection must close. `err` is the text for `-ERR '<err>'`, or None to close silently
    (nats-server closes without a reason on malformed arguments)."""

    def __init__(self, err: str | None) -> None:
        super().__init__(err or "protocol violation")
        self.err = err


class Handler(Protocol):
    def on_msg(self, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> None:
        """PUB (hdr_len == -1) or HPUB. `data` is header block + payload + CRLF."""

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None: ...

    def on_unsub(self, sid: bytes, max_msgs: int) -> None: ...

    def on_ping(self) -> None: ...

    def on_pong(self) -> None: ...

    def on_connect(self, options: bytes) -> None: ...


def _size(token: bytes) -> int:
    """A byte count; nats-server treats a malformed count as a reason to close without an error."""
    if not token.isdigit():
        raise ProtocolError(None)
    return int(token)


def plausible_start(tail: bytes) -> bool:
    """Whether an incomplete line could still become a valid operation (nats-server rejects garbage
    byte by byte, before the line ends)."""
    head = tail[:8].upper()
    for verb in _VERBS:
        if verb.startswith(head):
            return True
        if head.startswith(verb):  # a whole verb: PUB, SUB... need a blank next, the others take anything
            after = head[len(verb):len(verb) + 1]
            return verb.startswith(_LENIENT) or after == b"" or after.isspace()
    return False


def _known(verb: bytes) -> bool:
    """Whether a line's first word is an operation (as `plausible_start` judges it before the line ends)."""
    return verb in _STRICT or verb.startswith(_LENIENT)


class Parser:
    """Feed it bytes; it calls the handler once per complete operation, in order."""

    __slots__ = (
        "handler", "on_pub", "on_empty_pubs", "max_control_line", "max_payload", "gate", "_tail", "_chunks",
        "_have", "_want", "_op", "_lines", "_empty_run",
    )

    def __init__(self, handler: Handler, max_control_line: int = 4096, max_payload: int = 1 << 20) -> None:
        self.handler = handler
        # Where a plain PUB goes; the connection may point it straight at the router once CONNECT
        # turned verbose and pedantic off (nothing per-message is left to check then); its result is unused.
        self.on_pub: Callable[[bytes, bytes | None, int, bytes], object] = handler.on_msg
        # Where a run of plain PUBs without reply or payload goes, as one list of subjects (acks arrive
        # that way); by default each one goes to `on_pub`.
        self.on_empty_pubs: Callable[[list[bytes]], object] = self.each_empty_pub
        self.max_control_line = max_control_line
        # Such a run, "PUB <subject> 0" lines (nats-py puts two blanks for its empty reply) within the
        # control-line limit: one regex match finds its end, one findall (`_EMPTY_PUB`) its subjects.
        self._empty_run = re.compile(rb"(?:PUB [!-~]{1,%d}  ?0\r\n\r\n)+" % max(max_control_line - 8, 1))
        self.max_payload = max_payload
        # While True, any operation other than CONNECT is an Authorization Violation.
        self.gate = False
        self._tail = b""  # unparsed start of a control line
        self._chunks: list[bytes] = []  # a payload still arriving
        self._have = 0
        self._want = 0  # payload + CRLF bytes needed to finish `_op`
        self._op: tuple[bytes, bytes | None, int] | None = None
        self._lines: dict[bytes, tuple[bytes, bytes | None, int]] = {}

    def feed(self, data: bytes) -> None:
        op = self._op
        pos = 0
        if op is not None:
            pos = self._continue_payload(op, data)
            if pos < 0:
                return
        elif self._tail:
            data = self._tail + data
            self._tail = b""
        self._parse(data, pos)

    def _continue_payload(self, op: tuple[bytes, bytes | None, int], data: bytes) -> int:
        """Where in `data` parsing resumes once the awaited payload is complete, or -1 while it is not.
        Only the payload's own bytes are copied: most reads end inside one, and joining the whole read
        (then slicing off its rest) copied every read twice."""
        need = self._want - self._have
        if len(data) < need:
            self._chunks.append(data)
            self._have += len(data)
            return -1
        self._chunks.append(data[:need])
        payload = b"".join(self._chunks)
        self._chunks = []
        if payload[-2:] != CRLF:
            raise ProtocolError(UNKNOWN_OP)
        subject, reply, hdr_len = op
        self._op = None
        self.handler.on_msg(subject, reply, hdr_len, payload)
        return need

    def _parse(self, buf: bytes, pos: int) -> None:
        on_pub = self.on_pub
        find = buf.find
        n = len(buf)
        gate = self.gate
        seen = self._lines.get
        # The previous PUB control line, line end included: publishers repeat it, and recognising the
        # repeat with one comparison skips the newline search and the argument lookup. (Slices and indexes,
        # not startswith(x, pos): compiled, that call parses its arguments from a tuple each time, 15% of a
        # compiled server's ingest CPU; in CPython the two cost about the same.)
        last = b""
        last_len = 0
        subject: bytes = b""
        reply: bytes | None = None
        size = 0
        while pos < n:
            if last_len and buf[pos:pos + last_len] == last:
                start = pos + last_len
            else:
                nl = find(b"\n", pos)
                if nl < 0:
                    self._keep_tail(buf[pos:])
                    return
                if gate or buf[pos:pos + 4] != b"PUB ":
                    end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
                    pos = self._control(buf, pos, end, nl)
                    if pos < 0:
                        return
                    gate = self.gate
                    on_pub = self.on_pub  # a CONNECT may have changed where PUBs go
                    continue
                line = buf[pos + 4 : nl]
                subject, reply, size = seen(line) or self._pub_args(line, nl - pos)
                start = nl + 1
                if not size and reply is None and (run := self._empty_run.match(buf, pos)) is not None:
                    end = run.end()
                    self.on_empty_pubs(_EMPTY_PUB.findall(buf, pos, end))
                    pos = end
                    last_len = 0
                    continue
                last = buf[pos:start]
                last_len = start - pos
            stop = start + size + 2
            if stop > n:
                self._await_payload(subject, reply, -1, size, buf[start:])
                return
            if buf[stop - 2] != 13 or buf[stop - 1] != 10:  # CRLF
                raise ProtocolError(UNKNOWN_OP)
            on_pub(subject, reply, -1, buf[start:stop])
            pos = stop

    def each_empty_pub(self, subjects: list[bytes]) -> None:
        for subject in subjects:
            self.on_pub(subject, None, -1, CRLF)

    def _pub_args(self, line: bytes, length: int) -> tuple[bytes, bytes | None, int]:
        """Parse and remember a PUB argument line: publishers repeat the same few lines, so a dict hit
        replaces split() and int() for most messages (unique reply inboxes just cycle the cache)."""
        if length > self.max_control_line:
            raise ProtocolError(MAX_CONTROL_LINE)
        args = line.split()
        try:
            size = int(args[-1])
        except (ValueError, IndexError):
            raise ProtocolError(None) from None
        op: tuple[bytes, bytes | None, int]
        if len(args) == 2:
            op = (args[0], None, size)
        elif len(args) == 3:
            op = (args[0], args[1], size)
        else:
            raise ProtocolError(None)
        if not 0 <= size <= self.max_payload:
            raise ProtocolError(MAX_PAYLOAD if size > 0 else None)
        if len(self._lines) >= _LINE_CACHE:
            self._lines.clear()
        self._lines[line] = op
        return op

    def _control(self, buf: bytes, pos: int, end: int, nl: int) -> int:
        """Any operation but the fast-path PUB. Returns where the next operation starts, or -1 when
        the rest of the buffer was stored as a partial payload."""
        line = buf[pos:end]
        if line[:1].isspace():  # nats-server: an operation starts at the line's first byte (found by fuzzing)
            raise ProtocolError(AUTH_VIOLATION if self.gate else UNKNOWN_OP)
        parts = line.split(None, 1)
        verb = parts[0].upper() if parts else b""
        has_args = len(parts) == 2
        rest = parts[1] if has_args else b""
        if self.gate and not verb.startswith(b"CONNECT"):
            raise ProtocolError(AUTH_VIOLATION)
        if nl - pos > self.max_control_line and _known(verb):  # an unknown verb is reported as such first
            raise ProtocolError(MAX_CONTROL_LINE)
        h = self.handler
        if verb == b"PUB" or verb == b"HPUB":
            if not has_args:
                raise ProtocolError(UNKNOWN_OP)
            return self._pub(buf, nl, verb == b"HPUB", rest.split())
        if verb.startswith(b"PING"):
            h.on_ping()
        elif verb.startswith(b"PONG"):
            h.on_pong()
        elif verb == b"SUB" and has_args:
            args = rest.split()
            if len(args) == 2:
                h.on_sub(args[0], None, args[1])
            elif len(args) == 3:
                h.on_sub(args[0], args[1], args[2])
            else:
                raise ProtocolError(None)
        elif verb == b"UNSUB" and has_args:
            args = rest.split()
            if len(args) == 1:
                h.on_unsub(args[0], 0)
            elif len(args) == 2:
                h.on_unsub(args[0], int(args[1]) if args[1].isdigit() else 0)
            else:
                raise ProtocolError(None)
        elif verb.startswith(b"CONNECT"):
            h.on_connect(line[7:].strip())
        elif verb.startswith(b"+OK") or (verb.startswith(b"INFO") and has_args):
            pass
        elif verb.startswith(b"-ERR"):
            raise ProtocolError(None)
        else:
            raise ProtocolError(UNKNOWN_OP)
        return nl + 1

    def _pub(self, buf: bytes, nl: int, has_hdr: bool, args: list[bytes]) -> int:
        want_args = 3 if has_hdr else 2
        if len(args) == want_args:
            subject, reply = args[0], None
        elif len(args) == want_args + 1:
            subject, reply = args[0], args[1]
        else:
            raise ProtocolError(None)
        size = _size(args[-1])
        hdr_len = _size(args[-2]) if has_hdr else -1
        if hdr_len > size:
            raise ProtocolError(None)
        if size > self.max_payload:
            raise ProtocolError(MAX_PAYLOAD)
        start = nl + 1
        stop = start + size + 2
        if stop > len(buf):
            self._await_payload(subject, reply, hdr_len, size, buf[start:])
            return -1
        if buf[stop - 2 : stop] != CRLF:
            raise ProtocolError(UNKNOWN_OP)
        self.handler.on_msg(subject, reply, hdr_len, buf[start:stop])
        return stop

    def _await_payload(self, subject: bytes, reply: bytes | None, hdr_len: int, size: int, part: bytes) -> None:
        self._op = (subject, reply, hdr_len)
        self._want = size + 2
        self._chunks = [part]
        self._have = len(part)

    def _keep_tail(self, tail: bytes) -> None:
        if not plausible_start(tail):
            raise ProtocolError(AUTH_VIOLATION if self.gate else UNKNOWN_OP)
        if len(tail) > self.max_control_line:
            raise ProtocolError(MAX_CONTROL_LINE)
        self._tail = tail
