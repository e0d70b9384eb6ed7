"""Priority groups, the pure part (`jsbroker.jetstream.priority`): request checks, which queued request may
take a message, the pin and its TTL, the prioritized wait queue. Expectations are what nats-server 2.15.1
answers (tests/jetstream/test_priority.py shows the same on both servers)."""

from __future__ import annotations

from jsbroker.jetstream import pull
from jsbroker.jetstream.priority import PIN_MISMATCH, Ask, Choice, Priority, wrong_pin

S = 1_000_000_000


def bad(reason: str) -> bytes:
    return f"NATS/1.0 400 Bad Request - {reason}\r\n\r\n".encode()


def test_request_checks_in_nats_server_order() -> None:
    none = Priority("none", [], 0)
    assert none.refusal(None, 0) is None and none.refusal(Ask(), 0) is None
    assert none.refusal(Ask(min_pending=1, pin_id="x"), 0) == bad("Not a Overflow Priority consumer")
    assert none.refusal(Ask(pin_id="x", priority=12), 0) == bad("Not a Pinned Client Priority consumer")
    assert none.refusal(Ask(priority=10), 0) == bad("Priority must be between 0 and 9")
    overflow = Priority("overflow", ["g"], 0)
    assert overflow.refusal(None, 0) is None  # a plain-number body has no group to check
    assert overflow.refusal(Ask(min_ack_pending=2), 0) == bad("Priority Group missing")
    assert overflow.refusal(Ask(group="h"), 0) == bad("Invalid Priority Group")
    assert overflow.refusal(Ask(group="g", min_pending=-1), 0) is None
    prioritized = Priority("prioritized", ["g"], 0)
    assert prioritized.refusal(Ask(group="g", priority=-1), 0) == bad("Priority must be between 0 and 9")


def test_pin_lifecycle_and_ttl() -> None:
    p = Priority("pinned_client", ["g", "h"], 2 * S)
    first = Ask(group="h")
    assert p.choose(first, 5, 0) is Choice.PIN
    p.assign(first, "PIN1", now=10 * S, wall_ns=123)
    assert (first.pin_id, p.pin, p.pinned_group, p.deadline) == ("PIN1", "PIN1", "h", 12 * S)
    assert p.header() == "PIN1"
    assert p.state() == [{"group": "g", "pinned_client_id": "PIN1", "pinned_ts": "1970-01-01T00:00:00.000000123Z"}]
    assert p.choose(first, 5, 0) is Choice.SERVE
    assert p.choose(Ask(group="g"), 5, 0) is Choice.SKIP and p.choose(None, 5, 0) is Choice.SKIP
    assert p.choose(Ask(group="g", pin_id="OLD"), 5, 0) is Choice.WRONG_PIN
    assert p.refusal(Ask(group="g", pin_id="OLD"), 11 * S) == PIN_MISMATCH
    assert p.refusal(Ask(group="g", pin_id="PIN1"), 11 * S) is None and p.deadline == 13 * S  # renewed
    assert p.expired(12 * S) is None and p.pin == "PIN1"  # a timer firing early changes nothing
    assert p.expired(13 * S) == "h" and p.pin == "" and p.state()[0] == {"group": "g", "pinned_ts": "0001-01-01T00:00:00Z"}
    assert p.header() == ""  # deliveries still carry the header, empty
    assert p.choose(first, 5, 0) is Choice.WRONG_PIN  # the old pin id after the pin went
    assert p.choose(None, 5, 0) is Choice.SERVE  # no group: served without a pin
    assert not p.unassign()
    assert wrong_pin(3, 0) == b"NATS/1.0 423 Nats-Wrong-Pin-Id\r\nNats-Pending-Messages: 3\r\nNats-Pending-Bytes: 0\r\n\r\n"


def test_overflow_waits_for_either_threshold() -> None:
    p = Priority("overflow", ["g"], 0)
    ask = Ask(group="g", min_pending=5, min_ack_pending=3)
    assert p.choose(ask, 5, 0) is Choice.SERVE and p.choose(ask, 4, 3) is Choice.SERVE
    assert p.choose(ask, 4, 2) is Choice.SKIP
    assert p.choose(Ask(group="g"), 0, 0) is Choice.SERVE and p.choose(None, 0, 0) is Choice.SERVE
    assert not Priority.runs(ask) and Priority.runs(Ask(group="g")) and Priority.runs(None)
    assert Priority("pinned_client", ["g"], S).choose(Ask(group="g", min_pending=5), 1, 0) is Choice.PIN
    assert [Priority(policy, ["g"], S).chooses for policy in ("none", "overflow", "pinned_client", "prioritized")] == [
        False, True, True, False]


def _w(reply: str, n: int, ask: Ask | None) -> pull.Waiting:
    return pull.Waiting(reply, n, 0, 0, False, 0, 0, ask=ask)


def test_prioritized_queue_serves_lowest_first_round_robin_within_a_level() -> None:
    q = pull.WaitQueue(10, prioritized=True)
    for reply, n, pri in (("a", 2, 5), ("b", 2, 1), ("c", 2, 5), ("d", 2, 0)):
        q.add(_w(reply, n, Ask(group="g", priority=pri)))
    q.add(_w("e", 2, None))  # a plain-number body comes last
    order = []
    while (w := q.peek()) is not None:
        order.append(w.reply)
        q.take(w)
    assert order == ["d", "d", "b", "b", "a", "c", "a", "c", "e", "e"]


def test_cycle_moves_the_head_back() -> None:
    q = pull.WaitQueue(10)
    for reply in "abc":
        q.add(_w(reply, 1, None))
    q.cycle()
    assert [w.reply for w in q] == ["b", "c", "a"]


def test_pull_request_priority_fields() -> None:
    assert pull.parse_request(b"3").ask is None
    req = pull.parse_request(b'{"batch":2,"group":"g","min_pending":4,"min_ack_pending":1,"id":"X","priority":3}')
    assert req.ask == Ask(group="g", min_pending=4, min_ack_pending=1, pin_id="X", priority=3)
    for body, text in ((b'{"group":5}', "cannot unmarshal number into Go struct field .group of type string"),
                       (b'{"min_pending":"x"}', "cannot unmarshal string into Go struct field .min_pending of type int64"),
                       (b'{"priority":1.5}', "cannot unmarshal number 1.5 into Go struct field .priority of type int")):
        try:
            pull.parse_request(body)
        except pull.BadRequest as e:
            assert str(e) == f"json: {text}"
        else:
            raise AssertionError(body)
