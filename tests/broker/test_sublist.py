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


def random_ack_pattern(rng: random.Random) -> str:
    """Patterns over ack-like subjects: some constrain only the head, some a later token, some are literal."""
    toks = [rng.choice(["$JS", "$JS", "*"]), rng.choice(["ACK", "ACK", "*"])]
    toks += [rng.choice(["s", "t", "*"]), rng.choice(["c", "*"])]
    toks += [rng.choice(["*", "*", "1", "2"]) for _ in range(rng.randint(0, 5))]
    if rng.random() < 0.3:
        toks[rng.randint(1, len(toks) - 1):] = [">"]
    return ".".join(toks)


def random_ack_subject(rng: random.Random) -> str:
    return ".".join(["$JS", "ACK", rng.choice(["s", "t"]), "c"] + [rng.choice(["1", "2"])
                                                                   for _ in range(rng.randint(0, 5))])


@pytest.mark.parametrize("seed", range(10))
def test_ack_subjects_match_as_any_other_subject(seed):
    """The per-head cache of `$JS.ACK.` subjects gives what the subject rules say, while subscriptions
    that constrain later tokens (or exact ack subjects) come and go."""
    rng = random.Random(seed)
    sl = Sublist()
    subs: list[Subscription] = []
    for i in range(60):
        flt = random_ack_subject(rng) if rng.random() < 0.1 else random_ack_pattern(rng)
        sub = Subscription(None, flt, rng.choice([None, None, "q1"]), b"%d" % i)
        sl.insert(sub)
        subs.append(sub)
        if rng.random() < 0.3:
            gone = rng.choice(subs)
            assert sl.remove(gone)
            subs.remove(gone)
        for _ in range(20):
            subject = random_ack_subject(rng)
            plain, groups = sl.match(subject.encode() if rng.random() < 0.5 else subject)
            got = {id(s) for s in plain} | {id(s) for g in groups for s in g}
            assert got == {id(s) for s in subs if subject_matches(s.subject, subject)}, subject
    assert sl.match("$JS.ACK.s.c.1..2") is EMPTY
