"""Subject transforms (ADR-36): nats-server's subject mapping from a source pattern to a destination (pure).

`parse(src, dest)` validates a {src, dest} pair as nats-server does for a stream's `subject_transform` (and
a source's or mirror's `subject_transforms`): `InvalidSource` when `src` is not a subject, and
`InvalidDestination` with nats-server's text for everything wrong with `dest` (callers wrap the text in
their error kind: 10155/10156 for streams, 10145/10146 for sources, 10151/10154 for mirrors). It returns
None for an empty `dest` (no transform). `Transform.apply(subject)` maps a literal subject, or returns None
when the subject does not match `src`.

Destination tokens are literals, `$n` (the n-th `*` of `src`), or one mustache function per token:
`{{wildcard(n)}}`, `{{partition(buckets[, n...])}}` (FNV-1a of the tokens, or of the whole subject),
`{{split(n, delimiter)}}`, `{{splitFromLeft(n, pos)}}`, `{{splitFromRight(n, pos)}}`,
`{{sliceFromLeft(n, size)}}`, `{{sliceFromRight(n, size)}}`, `{{left(n, len)}}`, `{{right(n, len)}}` and
`{{random(buckets)}}`. A `>` in `src` must be matched by a `>` ending `dest`, which takes the rest.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable

_WHITESPACE = " \t\n\r\f"
_INT32_MAX = 2**31 - 1


class InvalidSource(ValueError):
    """`src` is not a valid subject; the text is nats-server's ("invalid subject <src>")."""


class InvalidDestination(ValueError):
    """`dest` is not a valid mapping destination; the text is nats-server's."""


_INVALID = "invalid mapping destination"
_BAD_SUBJECT = "invalid subject"


def _mapping_error(reason: str, token: str = "") -> InvalidDestination:
    text = f"{_INVALID}: {reason}"
    return InvalidDestination(f"{text} in {token}" if token else text)


# Function name -> its pattern, in the order nats-server tries them (a token is one `{{...}}`).
_FUNCTIONS: dict[str, re.Pattern[str]] = {
    name: re.compile(r"\{\{[\t\n\f\r ]*" + "".join(f"[{c.lower()}{c.upper()}]" if c.isupper() or i == 0 else c
                                                  for i, c in enumerate(name))
                     + r"[\t\n\f\r ]*\((.*)\)[\t\n\f\r ]*\}\}")  # Go's \s is these five
    for name in ("wildcard", "partition", "splitFromLeft", "splitFromRight", "sliceFromLeft", "sliceFromRight",
                 "right", "left", "split", "random")
}
_ARG_SEPARATOR = re.compile(r",[\t\n\f\r ]*")
_GO_INT = re.compile(r"[+-]?[0-9]+")


def _go_int(text: str, bits: int = 64) -> int:
    """Go's strconv.Atoi / ParseInt(text, 10, bits): an optional sign and decimal digits, in range."""
    if not _GO_INT.fullmatch(text):
        raise ValueError(text)
    value = int(text)
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise ValueError(text)
    return value


def _is_mustache(token: str) -> bool:
    return len(token) > 4 and token.startswith("{{") and token.endswith("}}")


@dataclass(frozen=True, slots=True)
class _Token:
    """One destination token: a literal (`func` empty) or a function with its source token positions."""

    text: str
    func: str = ""
    positions: tuple[int, ...] = ()  # indexes into the subject's tokens
    number: int = -1  # buckets, position, size or length
    delimiter: str = ""


def _function(token: str) -> tuple[str, list[str]] | None:
    for name, pattern in _FUNCTIONS.items():
        found = pattern.search(token)
        if found:
            return name, _ARG_SEPARATOR.split(found.group(1))
    return None


def _placeholder(token: str) -> tuple[str, list[int], int, str]:
    """(function, wildcard numbers, number, delimiter) of a destination token; function "" for a literal."""
    if token.startswith("$") and len(token) > 1:
        try:
            return "wildcard", [_go_int(token[1:])], -1, ""
        except ValueError:
            return "", [], -1, ""  # `$name` is a literal token
    if not _is_mustache(token):
        return "", [], -1, ""
    found = _function(token)
    if found is None:
        raise _mapping_error("unknown function", token)
    name, args = found

    def number(text: str, bits: int = 64) -> int:
        try:
            return _go_int(text.strip(" "), bits)
        except ValueError:
            raise _mapping_error("function argument is invalid or in the wrong format", token) from None

    if name == "wildcard":
        if args == [""]:
            raise _mapping_error("not enough arguments passed to the function", token)
        if len(args) > 1:
            raise _mapping_error("too many arguments passed to the function", token)
        return name, [number(args[0])], -1, ""
    if name in ("partition", "random"):
        if name == "random" and len(args) != 1:
            raise _mapping_error("not enough arguments passed to the function", token)
        buckets = number(args[0])
        if buckets > _INT32_MAX:
            raise _mapping_error("function argument is invalid or in the wrong format", token)
        return name, [number(a) for a in args[1:]], _to_int32(buckets), ""
    if len(args) < 2:
        raise _mapping_error("not enough arguments passed to the function", token)
    if len(args) > 2:
        raise _mapping_error("too many arguments passed to the function", token)
    if name == "split":
        position = number(args[0])
        if " " in args[1] or "." in args[1]:
            raise _mapping_error("function argument is invalid or in the wrong format", token)
        return name, [position], -1, args[1]
    return name, [number(args[0])], number(args[1], 32), ""


def _to_int32(value: int) -> int:
    """Go's int32(x) conversion (wraps)."""
    return (value + 2**31) % 2**32 - 2**31


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    """nats-server's subjectInfo: (valid, tokens, number of `*`, ends with `>`)."""
    if not subject:
        return False, [], 0, False
    toks = subject.split(".")
    stars, tail = 0, False
    for tok in toks:
        if not tok or tail:
            return False, [], 0, False
        if tok == ">":
            tail = True
        elif tok == "*":
            stars += 1
    return True, toks, stars, tail


def is_valid_subject(subject: str) -> bool:
    """nats-server's IsValidSubject: no whitespace, no empty token, `>` only as the last token."""
    return not any(c in subject for c in _WHITESPACE) and _subject_info(subject)[0]


def _check_tokens(dest: str) -> None:
    """nats-server's ValidateMapping token pass, before the transform is built."""
    tail = False
    for tok in dest.split("."):
        if not tok or tail:
            raise _mapping_error("invalid transform", tok)
        if _is_mustache(tok):
            if _function(tok) is None:
                raise _mapping_error("unknown function", tok)
        elif tok == ">":
            tail = True
        elif any(c in tok for c in _WHITESPACE):
            raise _mapping_error("invalid transform")


def parse(src: str, dest: str, check_tokens: bool = True) -> Transform | None:
    """Validate a {src, dest} pair as a stream / source transform (None: no transform, `dest` empty).
    `check_tokens=False` is nats-server's bare transform check (a republish): whitespace in a
    destination token is then not an error."""
    if src and not is_valid_subject(src):
        raise InvalidSource(f"{_BAD_SUBJECT} {src}")
    if not dest:
        return None
    if check_tokens:
        _check_tokens(dest)
    return _build(src or ">", dest)


def _build(src: str, dest: str) -> Transform:
    src_ok, src_toks, stars, src_tail = _subject_info(src)
    dest_ok, dest_toks, dest_stars, dest_tail = _subject_info(dest)
    if not src_ok or not dest_ok or dest_stars or src_tail != dest_tail:
        raise InvalidDestination(_BAD_SUBJECT)
    star_at = [i for i, tok in enumerate(src_toks) if tok == "*"]  # wildcard n (1-based) -> token index
    out: list[_Token] = []
    for tok in dest_toks:
        func, numbers, number, delimiter = _placeholder(tok)
        if not func:
            out.append(_Token(tok))
        elif func == "random" or (func == "partition" and not (stars or src_tail)):
            out.append(_Token(tok, func, (), number))  # a partition of a literal source hashes the subject
        elif not (stars or src_tail):
            raise _mapping_error("wildcard index out of range", tok)
        else:
            for n in numbers:
                if n > stars:
                    raise _mapping_error("wildcard index out of range", f"{tok}: [{n}]")
            # nats-server maps an index below 1 to the subject's first token.
            positions = tuple(star_at[n - 1] if 1 <= n <= stars else 0 for n in numbers)
            out.append(_Token(tok, func, positions, number, delimiter))
    literals = tuple((i, tok) for i, tok in enumerate(src_toks) if tok not in ("*", ">"))
    return Transform(src, dest, tuple(src_toks), tuple(out), dest_tail, literals)


@dataclass(frozen=True, slots=True)
class Transform:
    src: str
    dest: str
    src_tokens: tuple[str, ...]
    dest_tokens: tuple[_Token, ...]
    tail: bool  # `>` ends both: the subject's remaining tokens are appended
    literals: tuple[tuple[int, str], ...]  # (position, token) of the source's literal tokens

    def apply(self, subject: str) -> str | None:
        """The mapped subject, or None when `subject` is not a literal subject matching `src`."""
        if self.src == ">" and self.dest == ">":
            return subject
        toks = subject.split(".")
        size = len(self.src_tokens)
        if (len(toks) < size if self.tail else len(toks) != size) or "" in toks or "*" in toks or ">" in toks:
            return None
        for i, literal in self.literals:
            if toks[i] != literal:
                return None
        parts: list[str] = []
        for tok in self.dest_tokens:
            if not tok.func:
                if tok.text == ">":
                    break
                parts.append(tok.text)
            else:
                parts.append(_APPLY[tok.func](tok, toks))
        mapped = ".".join(parts)
        if self.tail:
            rest = ".".join(toks[len(self.src_tokens) - 1:])
            mapped = f"{mapped}.{rest}" if parts else rest
        return mapped


def _fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def _partition(tok: _Token, toks: list[str]) -> str:
    key = "".join(toks[i] for i in tok.positions) if tok.positions else ".".join(toks)
    buckets = tok.number % 2**32  # Go's uint32(int32)
    return str(_fnv1a32(key.encode()) % buckets) if buckets else "0"


def _random(tok: _Token, toks: list[str]) -> str:
    if tok.number == 0:
        return "0"
    value = random.randrange(2**31) % abs(tok.number)  # Go's % keeps the dividend's sign
    return str(value)


def _wildcard(tok: _Token, toks: list[str]) -> str:
    i = tok.positions[0] if tok.positions else len(toks)
    return toks[i] if i < len(toks) else ""


def _split_from_left(tok: _Token, toks: list[str]) -> str:
    text, pos = toks[tok.positions[0]], tok.number
    return f"{text[:pos]}.{text[pos:]}" if 0 < pos < len(text) else text


def _split_from_right(tok: _Token, toks: list[str]) -> str:
    text, pos = toks[tok.positions[0]], tok.number
    return f"{text[:len(text) - pos]}.{text[len(text) - pos:]}" if 0 < pos < len(text) else text


def _slice_from_left(tok: _Token, toks: list[str]) -> str:
    text, size = toks[tok.positions[0]], tok.number
    if not 0 < size < len(text):
        return text
    return ".".join(text[i:i + size] for i in range(0, len(text), size))


def _slice_from_right(tok: _Token, toks: list[str]) -> str:
    text, size = toks[tok.positions[0]], tok.number
    if not 0 < size < len(text):
        return text
    head = len(text) % size
    pieces = [text[:head]] if head else []
    return ".".join(pieces + [text[i:i + size] for i in range(head, len(text), size)])


def _split(tok: _Token, toks: list[str]) -> str:
    text = toks[tok.positions[0]]
    parts = text.split(tok.delimiter) if tok.delimiter else list(text)
    out = []
    for j, part in enumerate(parts):  # nats-server's joining: "--b" split on "-" is ".b"
        out.append(part)
        if j < len(parts) - 1 and parts[j + 1] and not (j == 0 and not part):
            out.append(".")
    return "".join(out)


def _left(tok: _Token, toks: list[str]) -> str:
    text, size = toks[tok.positions[0]], tok.number
    return text[:size] if 0 < size < len(text) else text


def _right(tok: _Token, toks: list[str]) -> str:
    text, size = toks[tok.positions[0]], tok.number
    return text[len(text) - size:] if 0 < size < len(text) else text


_APPLY: dict[str, Callable[[_Token, list[str]], str]] = {
    "wildcard": _wildcard, "partition": _partition, "random": _random, "split": _split,
    "splitFromLeft": _split_from_left, "splitFromRight": _split_from_right, "sliceFromLeft": _slice_from_left,
    "sliceFromRight": _slice_from_right, "left": _left, "right": _right,
}
