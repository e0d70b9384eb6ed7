"""Push delivery, the pure part (`jsbroker.jetstream.push`): the flow control window and pacing (replay
original, rate limit). End to end, against nats-server, in test_push_delivery.py."""

from __future__ import annotations

from jsbroker.jetstream.push import WINDOW_LIMIT, WINDOW_START, FlowControl, Pacing
from jsbroker.jetstream.rate import Limiter

MS = 1_000_000


def test_flow_control_asks_at_half_the_window_and_grows_it_on_each_response() -> None:
    fc = FlowControl()
    assert not fc.delivered(WINDOW_START // 2, ack_pending_full=False)  # half: not past it yet
    assert fc.delivered(1, ack_pending_full=False)
    fc.requested("$JS.FC.S.C.ab12")
    assert not fc.delivered(WINDOW_START, ack_pending_full=True)  # one request at a time
    assert fc.blocked and fc.size == WINDOW_START // 2 + 1
    assert not fc.answered("$JS.FC.S.C.zz99")  # not the request awaiting a response
    assert fc.answered("$JS.FC.S.C.ab12")
    assert (fc.window, fc.pending_bytes, fc.reply, fc.size) == (2 * WINDOW_START, WINDOW_START, "", 0)
    assert not fc.blocked
    for _ in range(10):
        fc.requested("r")
        fc.answered("r")
    assert fc.window == WINDOW_LIMIT and fc.pending_bytes == 0


def test_flow_control_ack_policy_asks_when_ack_pending_is_full() -> None:
    assert FlowControl().delivered(10, ack_pending_full=True)


def test_replay_original_holds_for_the_stored_gaps() -> None:
    pacing = Pacing(replay_original=True, limiter=None)
    assert pacing.delay(ts=100 * MS, size=10, now=0) == 0  # the first message goes at once
    assert pacing.delay(ts=100 * MS + MS, size=10, now=0) == 0  # a gap of 1 ms or less is not waited for
    assert pacing.delay(ts=150 * MS, size=10, now=5) == 49 * MS and pacing.hold_until == 5 + 49 * MS
    assert pacing.delay(ts=150 * MS, size=10, now=49 * MS + 5) == 0  # its time came: it goes
    assert pacing.hold_until == 0 and pacing.replay_ts == 150 * MS


def test_rate_limit_reserves_once_for_a_held_message() -> None:
    pacing = Pacing(replay_original=False, limiter=Limiter(bytes_per_second=1000, burst=100))
    assert pacing.delay(ts=0, size=100, now=1) == 0  # the burst
    held = pacing.delay(ts=0, size=50, now=1)
    assert held == 50 * MS and pacing.rate_held
    assert pacing.delay(ts=0, size=50, now=1 + held) == 0 and not pacing.rate_held  # reserved already
