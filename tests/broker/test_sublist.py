"""The subject index against the pure matching rules, on random subscriptions and subjects."""

from __future__ import annotations

import random

import pytest

from jsbroker.subjects import subject_matches
from jsbroker.sublist import EMPTY, Sublist, Subscription

TOKENS = ["a", "b", "c", "*", ">"]


def random_filter(rng: random.Random) -> str:
    n = rng.randint(1, 4)
    toks = [rng.choice(TOKENS[:4]) for _ in range(n)]
    if rng.random() < 0.3:
        toks[-1] = ">"
    return ".".join(toks)


@pytest.mark.parametrize("seed", range(10))
def test_matches_agree_with_subject_rules(seed):
    rng = random.Random(seed)
    sl = Sublist()
    subs = []
    for i in range(40):
        sub = Subscription(None, random_filter(rng), rng.choice([None, None, "q1", "q2"]), b"%d" % i)
        sl.insert(sub)
        subs.append(sub)
    for _ in range(3):  # match, then remove some, then match again (cache must follow)
        for _ in range(60):
            subject = ".".join(rng.choice(TOKENS[:3]) for _ in range(rng.randint(1, 5)))
            key = subject.encode() if rng.random() < 0.5 else subject
            plain, groups = sl.match(key)
            got = {id(s) for s in plain} | {id(s) for g in groups for s in g}
            want = {id(s) for s in subs if subject_matches(s.subject, subject)}
            assert got == want, subject
            assert all(s.queue is None for s in plain)
            assert all(len({s.queue for s in g}) == 1 for g in groups)
        for sub in rng.sample(subs, 10):
            assert sl.remove(sub)
            subs.remove(sub)
    assert sl.count == len(subs)


def test_remove_prunes_and_unknown_remove_is_false():
    sl = Sublist()
    sub = Subscription(None, "a.*.c", None, b"1")
    sl.insert(sub)
    assert sl.match("a.b.c")[0] == (sub,)
    assert sl.remove(sub)
    assert not sl.remove(sub)
    assert sl.match("a.b.c") is EMPTY
    assert sl.count == 0


@pytest.mark.parametrize("subject", ["a..b", ".a", "a.", "", "a.b.", b"a..b", "$JS.API.STREAM.CREATE."])
def test_subject_with_an_empty_token_reaches_nobody(subject):
    sl = Sublist()
    for flt in (">", "a.>", "a.*.b", "*.a", "a..b", "$JS.API.>"):
        sl.insert(Subscription(None, flt, None, b"1"))
    assert sl.match(subject) is EMPTY
    assert sl.match(subject) is EMPTY  # cached the same way
