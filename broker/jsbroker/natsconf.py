"""nats-server's configuration file format, parsed as its `conf` package (lex.go, parse.go) parses it.

The grammar: `key value`, `key = value` or `key: value` entries ended by a new line, `,` or `;`;
maps `{ ... }` (a key before a map needs no separator), arrays `[ ... ]` (items ended by `,` or new
lines), double-quoted strings with the escapes `\\t \\n \\r \\" \\\\ \\xHH`, single-quoted raw strings, bare
strings, `( ... )` block strings ended by `)` on its own line, integers with size suffixes (`k` 1000,
`kb`/`ki`/`kib` 1024, and `m g t p e` alike), floats, booleans `true/false/yes/no/on/off`, Zulu datetimes
`2006-01-02T15:04:05Z`, `#` and `//` comments, `include <file>` (relative to the including file, parsed
on its own and merged into the enclosing map), and `$NAME` references to a key defined earlier in an
enclosing map (block scoping, as nats-server), else to an environment variable (its text parsed as a
value). A later key replaces an earlier one, as in nats-server (so an included base can be overridden).

Pure: the caller passes the text, a reader for included files and the environment. Every value is a
`Node` that keeps the file, line and column of its key (of itself in an array), for error messages.
Where nats-server's lexer accepts a malformed size (`1kbb`) and then mis-assigns the following keys,
this parser refuses it instead.
"""

from __future__ import annotations

import datetime
import posixpath
from dataclasses import dataclass, field
from typing import Callable, Mapping, Union

Value = Union[str, int, float, bool, datetime.datetime, dict[str, "Node"], list["Node"]]
Reader = Callable[[str], str]  # path -> text; raises OSError

_SIZES = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4, "p": 1000**5, "e": 1000**6}
_BINARY = {"kb": 1, "mb": 2, "gb": 3, "tb": 4, "pb": 5, "eb": 6}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_INT64 = 1 << 63
_BCRYPT_PREFIX = "2a$"  # $2a$... is a bcrypt password, not a variable (as nats-server)


class ConfSyntaxError(ValueError):
    """A file that is not valid nats-server configuration; the message starts with file:line:column."""


@dataclass
class Node:
    value: Value
    file: str
    line: int
    col: int
    used_as_variable: bool = field(default=False, compare=False)  # nats-server: such keys are not unknown
    suffix: str = ""  # an integer's size suffix as written (`2m` is 2,000,000: a duration needs quotes)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def plain(self) -> object:
        """The value with every Node unwrapped (for tests and messages)."""
        if isinstance(self.value, dict):
            return {k: v.plain() for k, v in self.value.items()}
        if isinstance(self.value, list):
            return [v.plain() for v in self.value]
        return self.value


def _size_multiplier(suffix: str) -> int | None:
    suffix = suffix.lower()
    if suffix in _SIZES:
        return _SIZES[suffix]
    binary = suffix[:1] + "b" if suffix[1:] in ("i", "ib") else suffix
    return 1024 ** _BINARY[binary] if binary in _BINARY else None


def _is_number_suffix(c: str) -> bool:
    return c != "" and c in "kKmMgGtTpPeE"


def _ends_number(c: str) -> bool:
    """What may follow a whole number (nats-server's lexer: not `]`)."""
    return c in ("", "\n", "\r", "}", ";", ",", " ", "\t")


def _ends_bare_string(c: str) -> bool:
    return c in ("", "\n", "\r", ";", ",", "]", "}", " ", "\t")


class _Parser:
    def __init__(self, text: str, file: str, read: Reader, env: Mapping[str, str], resolving: frozenset[str],
                 including: frozenset[str]) -> None:
        self.s, self.file, self.read, self.env = text, file, read, env
        self.resolving = resolving  # environment variables being parsed (a cycle is an error)
        self.including = including  # files being included, this one among them (a cycle is an error)
        self.i = 0
        self.line = 1
        self.line_start = 0
        self.scopes: list[dict[str, Node]] = []

    # -- characters --------------------------------------------------------------------------------
    def peek(self, ahead: int = 0) -> str:
        j = self.i + ahead
        return self.s[j] if j < len(self.s) else ""

    def advance(self) -> str:
        c = self.peek()
        self.i += 1
        if c == "\n":
            self.line += 1
            self.line_start = self.i
        return c

    def col(self) -> int:
        return self.i - self.line_start + 1

    def error(self, message: str, line: int | None = None, col: int | None = None) -> ConfSyntaxError:
        # "Parse error on line N" is nats-server's wording, which tools look for (nats.py's server helper)
        line = line or self.line
        return ConfSyntaxError(f"{self.file}:{line}:{col or self.col()}: Parse error on line {line}: {message}")

    def at_comment(self) -> bool:
        return self.peek() == "#" or (self.peek() == "/" and self.peek(1) == "/")

    def skip(self, newlines: bool) -> None:
        """Skip blanks and comments, and new lines too when `newlines`."""
        while True:
            c = self.peek()
            if c in (" ", "\t") or (newlines and c in ("\n", "\r")):
                self.advance()
            elif self.at_comment():
                while self.peek() not in ("", "\n"):
                    self.advance()
            else:
                return

    # -- structure ---------------------------------------------------------------------------------
    def document(self) -> dict[str, Node]:
        top: dict[str, Node] = {}
        self.scopes.append(top)
        while True:
            self.skip(newlines=True)
            if self.peek() == "":
                return top
            if self.peek() == "{":  # a whole file in braces (JSON): its keys are the top level
                line, col = self.line, self.col()
                self.advance()
                self.entries(top, line, col)
                continue
            self.entry(top, closing=None)

    def entries(self, target: dict[str, Node], open_line: int, open_col: int) -> None:
        """Entries up to and including the `}` of a map opened at open_line:open_col."""
        while True:
            self.skip(newlines=True)
            c = self.peek()
            if c == "}":
                self.advance()
                return
            if c == "":
                raise self.error(f"unexpected end of file: the map opened at line {open_line} column {open_col} "
                                 "has no closing '}'")
            self.entry(target, closing="}")

    def entry(self, target: dict[str, Node], closing: str | None) -> None:
        line, col = self.line, self.col()
        if self.peek() in (",", ";", "=", ":", "]", "}"):
            raise self.error(f"unexpected {self.peek()!r} where a key was expected")
        key, quoted = self.key()
        if not quoted and key.lower() == "include" and self.peek() in (" ", "\t", "\n", "\r"):
            self.include(target, line, col)
        else:
            self.skip_key_end()
            node = self.value(line, col, after=key)
            node.line, node.col = line, col  # nats-server reports a setting at its key
            target[key] = node
        self.value_end(closing, key)

    def key(self) -> tuple[str, bool]:
        quote = self.peek()
        if quote in ('"', "'"):
            line, col = self.line, self.col()
            self.advance()
            start = self.i
            while self.peek() != quote:
                if self.peek() == "":
                    raise self.error(f"unterminated quoted key opened at line {line} column {col}", line, col)
                self.advance()
            key = self.s[start:self.i]
            self.advance()
            return key, True
        start = self.i
        while self.peek() not in ("", " ", "\t", "\n", "\r", "=", ":"):
            self.advance()
        return self.s[start:self.i], False

    def skip_key_end(self) -> None:
        while self.peek() in (" ", "\t", "\n", "\r"):  # nats-server allows the value on the next line
            self.advance()
        if self.peek() in ("=", ":"):
            self.advance()
            self.skip(newlines=False)

    def value_end(self, closing: str | None, key: str) -> None:
        self.skip(newlines=False)
        c = self.peek()
        if c in ("", "\n", "\r", ",", ";"):
            if c:
                self.advance()
        elif c != closing:
            raise self.error(f"expected a new line, ',' or ';' after the value of {key!r}, found {c!r}")

    def include(self, target: dict[str, Node], line: int, col: int) -> None:
        self.skip(newlines=False)
        c = self.peek()
        if c in ('"', "'"):
            name = self.quoted_raw(c)
        elif c in ("", "\n", "\r", "[", "{", "(") or c.isdigit() or c == "-":
            raise self.error("include needs a file name (a bare or quoted path)")
        else:
            start = self.i
            while self.peek() not in ("", "\n", "\r", ";", "}", " ", "\t", "'"):
                self.advance()
            name = self.s[start:self.i]
        path = posixpath.normpath(posixpath.join(posixpath.dirname(self.file), name))
        if path in self.including:
            raise ConfSyntaxError(f"{self.file}:{line}:{col}: {name!r} includes itself through {path}: remove one "
                                  "of the includes")
        try:
            text = self.read(path)
        except OSError as e:
            raise ConfSyntaxError(f"{self.file}:{line}:{col}: cannot include {name!r}: "
                                  f"{e.strerror or e} ({path})") from None
        # parsed on its own, as nats-server does: it sees none of our keys as variables
        target.update(parse(text, path, self.read, self.env, _including=self.including))

    # -- values ------------------------------------------------------------------------------------
    def value(self, line: int, col: int, after: str) -> Node:
        vline, vcol = self.line, self.col()

        def node(v: Value) -> Node:
            return Node(v, self.file, vline, vcol)

        c = self.peek()
        if c in ("", "\n", "\r"):
            raise self.error(f"{after!r} has no value" if after else "expected a value", line, col)
        if c == "[":
            return node(self.array())
        if c == "{":
            self.advance()
            inner: dict[str, Node] = {}
            self.scopes.append(inner)
            self.entries(inner, vline, vcol)
            self.scopes.pop()
            return node(inner)
        if c == "'":
            return node(self.quoted_raw("'"))
        if c == '"':
            return node(self.double_quoted())
        if c == "(":
            return node(self.block_string())
        if c == "-":
            return node(self.negative_number())
        if c.isdigit():
            return self.number_like(vline, vcol)
        if c == ".":
            raise self.error("floats must start with a digit")
        return self.bare(vline, vcol)

    def array(self) -> list[Node]:
        line, col = self.line, self.col()
        self.advance()
        items: list[Node] = []
        while True:
            self.skip(newlines=True)
            c = self.peek()
            if c == "]":
                self.advance()
                return items
            if c == "":
                raise self.error(f"unexpected end of file: the array opened at line {line} column {col} has no "
                                 "closing ']'")
            if c == ",":
                raise self.error("unexpected ',' in an array (a value is missing)")
            items.append(self.value(self.line, self.col(), after=""))
            self.skip(newlines=False)
            c = self.peek()
            if c in (",", "\n", "\r"):
                self.advance()
            elif c not in ("]", ""):
                raise self.error(f"expected ',' or ']' after an array value, found {c!r}")

    def quoted_raw(self, quote: str) -> str:
        line, col = self.line, self.col()
        self.advance()
        start = self.i
        while self.peek() != quote:
            if self.peek() == "":
                raise self.error(f"unterminated string opened at line {line} column {col}", line, col)
            self.advance()
        text = self.s[start:self.i]
        self.advance()
        return text

    def double_quoted(self) -> str:
        line, col = self.line, self.col()
        self.advance()
        parts: list[str] = []
        while True:
            c = self.advance()
            if c == '"':
                return "".join(parts)
            if c == "":
                raise self.error(f"unterminated string opened at line {line} column {col}", line, col)
            parts.append(self.escape() if c == "\\" else c)

    def escape(self) -> str:
        c = self.advance()
        if c in _ESCAPES:
            return _ESCAPES[c]
        if c == "x":
            digits = self.advance() + self.advance()
            try:
                return bytes.fromhex(digits).decode("latin-1")
            except ValueError:
                raise self.error(f"expected two hexadecimal digits after '\\x', got {digits!r}") from None
        raise self.error(f"invalid escape character {c!r}; allowed: \\xXX, \\t, \\n, \\r, \\\", \\\\")

    def block_string(self) -> str:
        line, col = self.line, self.col()
        self.advance()
        start = self.i
        while True:
            c = self.advance()
            if c == "":
                raise self.error(f"unterminated block string opened at line {line} column {col} (it ends with ')' "
                                 "alone on a line)", line, col)
            if c == ")" and self.s[self.i - 2:self.i - 1] == "\n" and self.peek() in ("", "\n"):
                return self.s[start:self.i - 2]

    def negative_number(self) -> int | float:
        start = self.i
        self.advance()
        if not self.peek().isdigit():
            raise self.error(f"expected a digit after '-', found {self.peek()!r}")
        while self.peek().isdigit():
            self.advance()
        if self.peek() == ".":
            return self.float_rest(start)
        suffix = self.size_suffix()
        return self.integer(self.s[start:self.i], suffix)

    def size_suffix(self) -> str:
        if not _is_number_suffix(self.peek()):
            return ""
        start = self.i
        self.advance()
        while self.peek() in ("b", "B", "i", "I"):
            self.advance()
        return self.s[start:self.i]

    def integer(self, text: str, suffix: str) -> int:
        multiplier = _size_multiplier(suffix)
        if multiplier is None:
            raise self.error(f"{text} is not a size: the suffixes are k, kb, ki, kib, m, mb, mi, mib, g, "
                             "gb, gi, gib, t, p, e and their ...b / ...i / ...ib forms")
        n = int(text[:len(text) - len(suffix)] if suffix else text)
        if not -_INT64 <= n < _INT64:
            raise self.error(f"integer {text!r} is out of the range of a 64-bit integer")
        n *= multiplier
        if not -_INT64 <= n < _INT64:
            raise self.error(f"{text} is out of the range of a 64-bit integer")
        return n

    def float_rest(self, start: int) -> float:
        self.advance()  # the '.'
        if not self.peek().isdigit():
            raise self.error(f"floats must have a digit after the '.', found {self.peek()!r}")
        while self.peek().isdigit():
            self.advance()
        return float(self.s[start:self.i])

    def number_like(self, line: int, col: int) -> Node:
        """A number, a datetime, an IP address (a string) or a bare string starting with a digit."""
        start = self.i
        while self.peek().isdigit():
            self.advance()
        c = self.peek()
        if c == "-":
            if self.i - start != 4:
                raise self.error("all ISO8601 dates must be in full Zulu form (2006-01-02T15:04:05Z)")
            return Node(self.datetime(start), self.file, line, col)
        if c == ".":
            self.advance()
            if not self.peek().isdigit():
                raise self.error(f"floats must have a digit after the '.', found {self.peek()!r}")
            while self.peek().isdigit():
                self.advance()
            if self.peek() != ".":
                return Node(float(self.s[start:self.i]), self.file, line, col)
            while self.peek().isdigit() or self.peek() in (".", ":", "-"):  # 127.0.0.1:4222
                self.advance()
            return Node(self.s[start:self.i], self.file, line, col)
        if _is_number_suffix(c):
            digits_end = self.i
            suffix = self.size_suffix()
            self.refuse_bracket_after_number()
            if _ends_number(self.peek()):
                value = self.integer(self.s[start:digits_end] + suffix, suffix)
                return Node(value, self.file, line, col, suffix=suffix)
        elif _ends_number(c):
            return Node(self.integer(self.s[start:self.i], ""), self.file, line, col)
        self.refuse_bracket_after_number()
        self.i = start  # a bare string after all (1x, 2]); no new line was crossed
        return self.bare(line, col)

    def refuse_bracket_after_number(self) -> None:
        if self.peek() == "]":  # nats-server's lexer fails on `[1, 2]`: refused alike, with a way out
            raise self.error("a whole number directly before ']' is a syntax error for nats-server: "
                             "put a space or a new line before the ']'")

    def datetime(self, start: int) -> datetime.datetime:
        shape = "0000-00-00T00:00:00Z"
        for expected in shape[4:]:
            c = self.peek()
            if (expected == "0" and not c.isdigit()) or (expected != "0" and c != expected):
                raise self.error(f"expected {'a digit' if expected == '0' else repr(expected)} in an ISO8601 "
                                 f"datetime (2006-01-02T15:04:05Z), found {c!r}")
            self.advance()
        text = self.s[start:self.i]
        try:
            return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            raise self.error(f"{text} is not a valid Zulu datetime") from None

    def bare(self, line: int, col: int) -> Node:
        parts: list[str] = []
        escaped = False
        while not _ends_bare_string(self.peek()) and self.peek() != "'":
            c = self.advance()
            if c == "\\":
                escaped = True
                parts.append(self.escape())
            else:
                parts.append(c)
        text = "".join(parts)
        if escaped:
            return Node(text, self.file, line, col)
        if text.lower() in _BOOLS:
            return Node(_BOOLS[text.lower()], self.file, line, col)
        if text.startswith("$"):
            return self.variable(text[1:], line, col)
        if self.peek() == "'":  # nats-server: a quote ends a bare string and is dropped
            self.advance()
        return Node(text, self.file, line, col)

    def variable(self, name: str, line: int, col: int) -> Node:
        if name.startswith(_BCRYPT_PREFIX):
            return Node("$" + name, self.file, line, col)
        for scope in reversed(self.scopes):
            if name in scope:
                found = scope[name]
                found.used_as_variable = True
                return Node(found.value, self.file, line, col, suffix=found.suffix)
        if name in self.env:
            if name in self.resolving:
                raise self.error(f"variable reference cycle for ${name} through the environment", line, col)
            try:
                value = parse(f"pk={self.env[name]}", f"${name}", self.read, self.env,
                              _resolving=self.resolving | {name})["pk"]
            except (ConfSyntaxError, KeyError) as e:
                raise self.error(f"the environment variable {name} could not be parsed as a value: {e}", line, col)
            return Node(value.value, self.file, line, col)
        raise self.error(f"variable ${name} is not defined: define `{name}: ...` before this line in this block "
                         "or an enclosing one, or set the environment variable", line, col)


def parse(text: str, file: str, read: Reader, env: Mapping[str, str], *, _resolving: frozenset[str] = frozenset(),
          _including: frozenset[str] = frozenset()) -> dict[str, Node]:
    """The top-level map of a nats-server configuration text; `read` opens included files."""
    return _Parser(text, file, read, env, _resolving, _including | {posixpath.normpath(file)}).document()


__all__ = ["ConfSyntaxError", "Node", "Reader", "parse"]
