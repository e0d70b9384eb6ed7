"""A consumer's delivery and ack state, the pure part (`jsbroker.jetstream.delivery`): deliveries, acks and
the ack floor, AckAll, NAKs, the ack-wait check with backoff and max_deliver, purges, RESET and the
stored state. The end-to-end behaviour (the same rules against nats-server) is in test_ack_semantics.py,
test_consumer_policies.py and test_reset.py."""

from __future__ import annotations

from collections import deque

from jsbroker.jetstream.delivery import ACK_WAIT_SLACK, DeliveryState, Dropped
from jsbroker.store.base import ConsumerState

S = 1_000_000_000


def delivered(state: DeliveryState, *seqs: int, ts: int = 0) -> list[int]:
    """Deliver new messages `seqs` (in order) at `ts`: their consumer seqs."""
    out = []
    for seq in seqs:
        state.next_seq = seq + 1
        out.append(state.delivered(seq, ts))
    return out


def test_acks_in_order_move_the_floor_out_of_order_wait_for_the_gap() -> None:
    d = DeliveryState()
    assert delivered(d, 1, 2, 3, 5) == [1, 2, 3, 4]
    assert d.pending == {1: [1, 0], 2: [2, 0], 3: [3, 0], 5: [4, 0]}
    assert d.ack(2) == 2 and (d.ack_floor_delivery_seq, d.ack_floor_seq) == (0, 0)  # 1 still pending
    assert d.ack(1) == 1 and (d.ack_floor_delivery_seq, d.ack_floor_seq) == (2, 2)  # past 2, up to 3's gap
    assert d.ack(3) == 3 and (d.ack_floor_delivery_seq, d.ack_floor_seq) == (3, 4)  # 4 was never delivered
    assert d.ack(9) is None  # not pending: nothing moves
    assert d.ack(5) == 4 and (d.ack_floor_delivery_seq, d.ack_floor_seq) == (4, 5) and not d.pending


def test_ack_none_moves_the_floor_with_each_delivery() -> None:
    d = DeliveryState()
    d.start_at(7)
    assert d.delivered_unacked(7) == 1 and (d.ack_floor_delivery_seq, d.ack_floor_seq) == (1, 7)
    assert not d.pending


def test_ack_all_acks_everything_up_to_the_seq() -> None:
    d = DeliveryState()
    delivered(d, 1, 2, 3, 4)
    d.redelivered[2] = 1
    d.redeliver_queue.extend([2, 4])
    assert d.ack_up_to(3, 3) == [1, 2, 3]
    assert (d.ack_floor_delivery_seq, d.ack_floor_seq) == (3, 3)
    assert list(d.pending) == [4] and d.redelivered == {} and d.redeliver_queue == deque([4])


def test_a_redelivery_keeps_its_first_consumer_seq_and_clears_its_queue_entry_on_ack() -> None:
    d = DeliveryState()
    delivered(d, 1, 2, ts=5)
    d.redeliver_queue.append(1)
    assert d.take_redelivery(max_deliver=0) == (1, 2)  # the second delivery of seq 1
    assert d.delivered(1, ts=9) == 3 and d.pending[1] == [1, 9]  # a new consumer seq, the same pending entry
    d.redeliver_queue.append(1)
    assert d.ack(1) == 1 and not d.redeliver_queue and 1 not in d.redelivered


def test_naks_queue_once_a_delayed_one_is_backdated_and_stale_ones_count_for_nothing() -> None:
    d = DeliveryState()
    delivered(d, 1, 2, ts=100)
    assert d.nak(1, 1, None) == [1, 100] and d.redeliver_queue == deque([1])
    assert d.nak(1, 1, None) is not None and d.redeliver_queue == deque([1])  # queued once
    assert d.nak(1, 1, 50) == [1, 50] and not d.redeliver_queue  # delayed: out of the queue, backdated
    assert d.nak(2, 9, None) is None  # a consumer seq never delivered
    assert d.nak(7, 2, None) is None  # not pending
    d.ack(1)
    assert d.nak(1, 1, None) is None  # at or below the floor


def test_the_ack_wait_check_queues_due_messages_in_order_and_says_when_to_look_again() -> None:
    d = DeliveryState()
    delivered(d, 3, ts=0)
    delivered(d, 1, 2, ts=4 * S)
    d.start_at(1)  # keep the floor below everything delivered (the test delivered out of order)
    d.next_seq = 4
    expiry = d.expire(now=5 * S, first_seq=1, ack_wait=3 * S, backoff=[], max_deliver=0)
    assert expiry.due == [3] and expiry.dropped == [] and expiry.next_in == 2 * S
    assert d.redeliver_queue == deque([3]) and d.pending[3] == [1, 5 * S]  # its wait counts from now
    again = d.expire(now=7 * S, first_seq=1, ack_wait=3 * S, backoff=[], max_deliver=0)
    assert again.due == [1, 2] and d.redeliver_queue == deque([3, 1, 2])  # 3 is queued already


def test_backoff_picks_the_wait_by_redeliveries_and_messages_gone_are_forgotten() -> None:
    d = DeliveryState()
    backoff = [1 * S, 5 * S]
    delivered(d, 1, 2, 3, ts=0)
    d.redelivered[2] = 1
    assert d.ack_wait_for(1, 9 * S, backoff) == 1 * S + ACK_WAIT_SLACK
    assert d.ack_wait_for(2, 9 * S, backoff) == 5 * S + ACK_WAIT_SLACK
    assert d.ack_wait_for(2, 9 * S, []) == 9 * S + ACK_WAIT_SLACK
    expiry = d.expire(now=2 * S, first_seq=2, ack_wait=9 * S, backoff=backoff, max_deliver=0)
    assert 1 not in d.pending  # below the stream's first message now
    assert expiry.due == [3] and expiry.next_in == 3 * S  # seq 2 waits 5 s


def test_max_deliver_drops_at_the_limit_from_the_check_and_from_the_queue() -> None:
    d = DeliveryState()
    delivered(d, 1, 2, ts=0)
    d.redelivered[1] = 2
    expiry = d.expire(now=9 * S, first_seq=1, ack_wait=1 * S, backoff=[], max_deliver=2)
    assert expiry.dropped == [Dropped(1, 2, [1, 0])] and expiry.due == [2] and 1 not in d.pending
    taken = d.take_redelivery(max_deliver=2)
    assert taken == (2, 2)  # seq 2's second and last delivery
    d.redeliver_queue.append(2)
    assert d.take_redelivery(max_deliver=2) == Dropped(2, 2, [2, 9 * S])
    assert not d.pending and (d.ack_floor_delivery_seq, d.ack_floor_seq) == (2, 2)


def test_a_message_put_back_restores_the_position_or_the_queue() -> None:
    d = DeliveryState(next_seq=5, num_pending=3, last_per_subject=deque([5, 8]))
    saved = d.position()
    d.last_per_subject.popleft()
    d.next_seq, d.num_pending = 6, 2
    d.put_back(5, 1, saved)
    assert (d.next_seq, d.num_pending, d.last_per_subject) == (5, 3, deque([5, 8]))
    d.redeliver_queue.append(2)
    assert d.take_redelivery(0) == (2, 2)
    d.put_back(2, 2, d.position())
    assert d.redeliver_queue == deque([2]) and d.redelivered[2] == 0


def test_purge_moves_the_start_and_acks_what_it_removed() -> None:
    d = DeliveryState()
    delivered(d, 1, 2, 5, 6)
    d.redeliver_queue.extend([2, 6])
    assert d.purge(5, gone=lambda seq: seq == 6)
    assert d.pending == {5: [3, 0]} and (d.ack_floor_delivery_seq, d.ack_floor_seq) == (4, 4)
    assert d.next_seq == 7 and d.redeliver_queue == deque([])
    assert not d.purge(3, gone=None)  # below the floor: nothing to do


def test_reset_restore_and_the_stored_state() -> None:
    d = DeliveryState()
    delivered(d, 1, 2, ts=7)
    d.redelivered[2] = 1
    assert d.stored() == ConsumerState(2, 2, 0, 0, {1: (1, 7), 2: (2, 7)}, {2: 2})
    back = DeliveryState()
    assert not back.restore(d.stored(), last_seq=9)
    assert back == d
    d.reset(5)
    assert d.stored() == ConsumerState(0, 4, 0, 4) and not d.redelivered and d.next_seq == 5
    past = DeliveryState()
    assert past.restore(ConsumerState(0, 19, 0, 19), last_seq=9)  # past the end with nothing pending
    assert (past.next_seq, past.ack_floor_seq) == (10, 9)
    assert not DeliveryState().restore(ConsumerState(0, 19, 0, 19), last_seq=0)  # an empty stream keeps it


def test_needs_for_interest_retention() -> None:
    d = DeliveryState()
    delivered(d, 1, 2)
    d.ack(1)
    assert not d.needs(1, every_delivery=False)  # at the floor
    assert d.needs(2, every_delivery=False) and d.needs(3, every_delivery=False)
    d.ack(2)
    assert d.needs(3, every_delivery=True) and not d.needs(2, every_delivery=True)


def test_a_message_with_a_redelivery_count_is_still_needed() -> None:
    """nats-server's needAck: a message that reached max_deliver keeps its count and stays needed, even below
    the ack floor its drop moved; an ack (which drops the count) ends that."""
    d = DeliveryState()
    delivered(d, 1)
    d.redelivered[1] = 1
    d.drop(1)
    assert d.ack_floor_seq == 1 and d.needs(1, every_delivery=False)
    d.ack(1)
    assert not d.needs(1, every_delivery=False)
