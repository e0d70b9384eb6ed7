"""The subject index: which subscriptions a published subject reaches (pure data structure, no I/O).

Literal subscriptions live in a dict, wildcard ones in a token trie; results are cached per published
subject (bytes from the wire or str from the internal bus, never both for one key) and the whole cache
is dropped on any change, which is cheap because subscriptions change far less often than messages flow.
A subject with an empty token reaches nobody (as in nats-server); that is checked on cache misses only.
Subjects that are unique per message (`$JS.ACK.<stream>.<consumer>.…`) bypass that cache so they cannot
evict useful entries; their wildcard matches are cached instead per (first four tokens, token count), which
is exact as long as no wildcard subscription that could match them has a literal token after the fourth
(counted in `_deep_ack`; while any exists they take the full path).
"""

from __future__ import annotations

from typing import Any, Callable, Final, NamedTuple

_CACHE_MAX: Final = 4096  # Final: compiled, a plain module global is a dict lookup at every use
_ACK_PREFIX: Final = "$JS.ACK."


class Subscription:
    """One SUB (client is the owning connection) or internal subscription (handler is set)."""

    __slots__ = ("client", "handler", "subject", "queue", "sid", "head", "line", "line_subject", "line_tail", "max_msgs",
                 "delivered", "closed", "batch", "deny", "rename", "sublist", "shadows")

    def __init__(
        self, client: Any, subject: str, queue: str | None, sid: bytes, handler: Callable[..., None] | None = None
    ) -> None:
        self.client = client
        self.handler = handler
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.head = b" " + sid  # the " <sid>" part of a MSG line
        # The last MSG line built for it (router.py), kept while a publisher repeats the subject and line end
        # (the parser hands the same bytes objects over for a repeated PUB line; identity tells).
        self.line = b""
        self.line_subject = b""
        self.line_tail = b""
        self.max_msgs = 0  # auto-unsubscribe after this many deliveries (0 = never)
        self.delivered = 0
        self.closed = False
        self.batch: list[Any] | None = None  # a batched internal handler's held messages (router.py)
        self.deny: Callable[[bytes], bool] | None = None  # subjects its user may not receive (permissions.py)
        # a stream import's shadow subscription shows its deliveries under the importer's subject (accounts.py)
        self.rename: Callable[[bytes], bytes] | None = None
        self.sublist: Sublist | None = None  # the account's sublist it is in (router.py)
        self.shadows: list[Subscription] | None = None  # its shadow subscriptions in exporting accounts


class Result(NamedTuple):
    """A match result. A named tuple, not a bare one: compiled (mypyc) code would unbox a bare pair and box
    a new one on every return, and the router tells "nobody" apart by identity (`is EMPTY`)."""

    plain: tuple[Subscription, ...]
    groups: tuple[tuple[Subscription, ...], ...]  # queue groups as tuples of members


EMPTY: Final = Result((), ())


class _Node:
    __slots__ = ("children", "subs")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.subs: list[Subscription] = []


class Sublist:
    def __init__(self) -> None:
        self._literal: dict[str, list[Subscription]] = {}
        self._root = _Node()
        self._wild_count = 0
        self.cache: dict[bytes | str, Result] = {}
        self._ack_cache: dict[tuple[str, int], Result] = {}  # (first 4 tokens, token count) -> wildcard matches
        self._deep_ack = 0  # wildcard subscriptions that constrain an ack subject past its 4th token
        self.count = 0

    def insert(self, sub: Subscription) -> None:
        subject = sub.subject
        if _is_literal(subject):
            self._literal.setdefault(subject, []).append(sub)
        else:
            node = self._root
            for tok in subject.split("."):
                node = node.children.setdefault(tok, _Node())
            node.subs.append(sub)
            self._wild_count += 1
            self._deep_ack += _constrains_ack_tail(subject)
        self.count += 1
        self._changed()

    def _changed(self) -> None:
        self.cache.clear()
        self._ack_cache.clear()

    def has_literal(self, subject: str) -> bool:
        """Whether a subscription names exactly this literal subject (wildcards matching it do not count)."""
        return subject in self._literal

    def remove(self, sub: Subscription) -> bool:
        subject = sub.subject
        if _is_literal(subject):
            subs = self._literal.get(subject)
            if not subs or sub not in subs:
                return False
            subs.remove(sub)
            if not subs:
                del self._literal[subject]
        elif not self._remove_wild(sub):
            return False
        else:
            self._deep_ack -= _constrains_ack_tail(subject)
        self.count -= 1
        self._changed()
        return True

    def _remove_wild(self, sub: Subscription) -> bool:
        path = [self._root]
        toks = sub.subject.split(".")
        for tok in toks:
            node = path[-1].children.get(tok)
            if node is None:
                return False
            path.append(node)
        if sub not in path[-1].subs:
            return False
        path[-1].subs.remove(sub)
        self._wild_count -= 1
        for i in range(len(toks), 0, -1):  # prune empty branches
            node = path[i]
            if node.subs or node.children:
                break
            del path[i - 1].children[toks[i - 1]]
        return True

    def match(self, subject: bytes | str) -> Result:
        """Subscriptions reached by a literal published subject."""
        cached = self.cache.get(subject)
        if cached is not None:
            return cached
        text = subject.decode("utf-8", "replace") if isinstance(subject, bytes) else subject
        if text.startswith(_ACK_PREFIX):
            return self._match_ack(text)
        result = self._match_full(text)
        if len(self.cache) >= _CACHE_MAX:
            self.cache.clear()
        self.cache[subject] = result
        return result

    def _match_full(self, text: str) -> Result:
        if _has_empty_token(text):  # nats-server delivers "a..b", ".a", "a." to nobody
            return EMPTY
        found = list(self._literal.get(text, ()))
        if self._wild_count:
            _collect(self._root, text.split("."), 0, found)
        return _group(found) if found else EMPTY

    def _match_ack(self, text: str) -> Result:
        """An ack subject: the wildcard part depends only on its first four tokens and its length unless
        a subscription constrains a later token (`_deep_ack`) or the exact subject is subscribed."""
        dot = text.find(".", len(_ACK_PREFIX))
        cut = text.find(".", dot + 1) if dot > 0 else -1
        if cut < 0 or self._deep_ack or text in self._literal or _has_empty_token(text):
            return self._match_full(text)
        key = (text[:cut], text.count("."))
        result = self._ack_cache.get(key)
        if result is None:
            found: list[Subscription] = []
            if self._wild_count:
                _collect(self._root, text.split("."), 0, found)
            result = _group(found) if found else EMPTY
            if len(self._ack_cache) >= _CACHE_MAX:
                self._ack_cache.clear()
            self._ack_cache[key] = result
        return result


def _has_empty_token(subject: str) -> bool:
    return not subject or subject[0] == "." or subject[-1] == "." or ".." in subject


def _constrains_ack_tail(pattern: str) -> bool:
    """Whether a wildcard pattern could match a `$JS.ACK.` subject and has a literal token after the
    fourth (its matches then depend on more than the ack subject's head and length)."""
    toks = pattern.split(".")
    return (len(toks) > 4 and toks[0] in ("$JS", "*") and toks[1] in ("ACK", "*")
            and any(t != "*" and t != ">" for t in toks[4:]))


def _is_literal(subject: str) -> bool:
    if "*" not in subject and ">" not in subject:
        return True
    return not any(t == "*" or t == ">" for t in subject.split("."))


def _collect(node: _Node, toks: list[str], i: int, out: list[Subscription]) -> None:
    """Add the trie's subscriptions matching toks[i:], starting at `node` (which matched toks[:i])."""
    last = len(toks)
    while i < last:
        children = node.children
        if not children:
            return
        fwc = children.get(">")
        if fwc is not None:
            out.extend(fwc.subs)
        pwc = children.get("*")
        if pwc is not None:
            if i + 1 == last:
                out.extend(pwc.subs)
            else:
                _collect(pwc, toks, i + 1, out)
        tok = toks[i]
        nxt = children.get(tok) if tok != "*" and tok != ">" else None
        if nxt is None:
            return
        i += 1
        if i == last:
            out.extend(nxt.subs)
            return
        node = nxt


def _group(found: list[Subscription]) -> Result:
    plain: list[Subscription] = []
    groups: dict[str, list[Subscription]] = {}
    for sub in found:
        if sub.queue is None:
            plain.append(sub)
        else:
            groups.setdefault(sub.queue, []).append(sub)
    return Result(tuple(plain), tuple(tuple(g) for g in groups.values()))
