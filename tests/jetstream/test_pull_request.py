"""MSG.NEXT body parsing, the round-robin wait queue and status texts (pure)."""

from __future__ import annotations

import pytest

from jsbroker.jetstream import pull


def test_bodies() -> None:
    assert pull.parse_request(b"").batch == 1
    assert pull.parse_request(b" 7 ").batch == 7
    assert pull.parse_request(b"nonsense").batch == 1
    req = pull.parse_request(b'{"batch":5,"expires":1000,"no_wait":true,"max_bytes":10}')
    assert (req.batch, req.expires, req.no_wait, req.max_bytes) == (5, 1000, True, 10)
    with pytest.raises(pull.BadRequest, match="heartbeat value too large"):
        pull.parse_request(b'{"batch":1,"expires":1000,"idle_heartbeat":600}')
    with pytest.raises(pull.BadRequest):
        pull.parse_request(b"{not json")


def test_limits_of_the_consumer_in_nats_server_order() -> None:
    req = pull.PullRequest(batch=20, expires=5_000_000_000, max_bytes=2048)
    assert pull.limit_refusal(req, 0, 0, 0) is None
    assert pull.limit_refusal(req, 10, 1_000_000_000, 1024) == b"NATS/1.0 409 Exceeded MaxRequestBatch of 10\r\n\r\n"
    assert pull.limit_refusal(req, 20, 1_000_000_000, 1024) == b"NATS/1.0 409 Exceeded MaxRequestExpires of 1s\r\n\r\n"
    assert pull.limit_refusal(req, 0, 0, 1024) == b"NATS/1.0 409 Exceeded MaxRequestMaxBytes of 1024\r\n\r\n"
    assert pull.limit_refusal(pull.PullRequest(batch=20), 0, 1, 1) is None  # no expiry, no byte limit asked


def test_status_texts() -> None:
    assert pull.request_timeout(5, 0) == b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\nNats-Pending-Bytes: 0\r\n\r\n"
    assert pull.idle_heartbeat(2, 3) == b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 2\r\nNats-Last-Stream: 3\r\n\r\n"
    assert len(pull.idle_heartbeat(2, 3)) == 75


def _w(reply: str, n: int, expires_at: int = 0, no_wait: bool = False) -> pull.Waiting:
    return pull.Waiting(reply, n, 0, expires_at, no_wait, 0, 0)


def test_round_robin_and_sweep() -> None:
    q = pull.WaitQueue(10)
    a, b = _w("a", 2), _w("b", 1, expires_at=100)
    q.add(a)
    q.add(b)
    order = []
    while (w := q.peek()) is not None:
        order.append(w.reply)
        q.take(w)
    assert order == ["a", "b", "a"]
    q.add(_w("c", 3, expires_at=100))
    q.add(_w("d", 3, no_wait=True))
    out, due, nxt = q.sweep(50, end_of_stream=True)
    assert out == [("d", pull.NO_MESSAGES)] and due == [] and nxt == 100
    out, due, nxt = q.sweep(100, end_of_stream=False)
    assert out == [("c", pull.request_timeout(3, 0))] and due == [] and nxt == 0 and len(q) == 0


def test_sweep_sends_due_heartbeats_only_to_requests_that_stay() -> None:
    q = pull.WaitQueue(10)
    beating = pull.Waiting("a", 1, 0, 0, False, 10, 20)
    ending = pull.Waiting("b", 1, 0, 20, False, 10, 20)  # expires as its heartbeat falls due
    q.add(beating)
    q.add(ending)
    out, due, nxt = q.sweep(20, end_of_stream=False)
    assert out == [("b", pull.request_timeout(1, 0))] and due == [beating] and beating.next_heartbeat == nxt == 30
    assert q.sweep(25, end_of_stream=True) == ([], [], 30)
