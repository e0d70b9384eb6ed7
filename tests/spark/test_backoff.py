"""jsspark.backoff: the pauses between attempts of a failed request (pure: the test passes the time)."""

from __future__ import annotations

import random

import pytest

from jsspark.backoff import FIRST, LONGEST, Backoff


def test_pauses_double_up_to_the_longest_and_end_with_the_budget():
    backoff, now, pauses = Backoff(60.0, 0.0, jitter=random.Random(1)), 0.0, []
    while (pause := backoff.failed(now)) is not None:
        pauses.append(pause)
        now += pause
    nominal = [min(FIRST * 2 ** i, LONGEST) for i in range(len(pauses))]
    assert all(0.8 * n <= p <= 1.2 * n for p, n in zip(pauses[:-1], nominal))  # the last one is cut to the budget
    assert pauses[:5] == sorted(pauses[:5]) and max(pauses) <= 1.2 * LONGEST
    assert now == 60.0 and backoff.failures == len(pauses) + 1


def test_no_budget_means_no_retry_and_a_late_failure_ends_it():
    assert Backoff(0.0, 10.0).failed(10.0) is None
    assert Backoff(5.0, 10.0).failed(15.5) is None
    assert Backoff(5.0, 10.0).failed(14.9) == pytest.approx(0.1)  # the first pause (0.16..0.24 s), cut to the budget
