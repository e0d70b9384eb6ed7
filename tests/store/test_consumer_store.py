"""ConsumerStore: nats-server's delivered/ack rules, for the memory and the file store (file: across
restarts, log compaction, torn log tails)."""

from __future__ import annotations

import pytest

from jsbroker.store import SyncPolicy, open_consumer_store
from jsbroker.store.base import ConsumerState, StoreClosed


@pytest.fixture(params=["memory", "file"])
def open_store(request, tmp_path):
    def opener(sync: SyncPolicy = SyncPolicy()):
        return open_consumer_store(request.param, tmp_path / "c", sync)

    opener.kind = request.param
    return opener


def reopen(open_store, store):
    if open_store.kind == "memory":
        return store
    store.close()
    return open_store()


def snapshot(st: ConsumerState) -> tuple:
    return (st.delivered_consumer_seq, st.delivered_stream_seq, st.ack_floor_consumer_seq,
            st.ack_floor_stream_seq, dict(st.pending), dict(st.redelivered))


def test_explicit_acks_move_the_floor(open_store):
    s = open_store()
    assert snapshot(s.load()) == (0, 0, 0, 0, {}, {})
    for cseq, sseq in ((1, 10), (2, 11), (3, 13)):
        s.update_delivered(cseq, sseq, 1, 1000 + cseq)
    assert snapshot(s.load()) == (3, 13, 0, 0, {10: (1, 1001), 11: (2, 1002), 13: (3, 1003)}, {})
    s.update_acks(2, 11)  # out of order: the floor stays
    assert snapshot(s.load())[2:4] == (0, 0)
    s.update_acks(1, 10)  # the floor jumps to just below the next pending (3, 13)
    assert snapshot(s.load()) == (3, 13, 2, 12, {13: (3, 1003)}, {})
    s = reopen(open_store, s)
    assert snapshot(s.load()) == (3, 13, 2, 12, {13: (3, 1003)}, {})
    s.update_acks(3, 13)
    assert snapshot(s.load()) == (3, 13, 3, 13, {}, {})
    s.update_acks(3, 13)  # at or below the floor: nothing
    assert snapshot(s.load()) == (3, 13, 3, 13, {}, {})


def test_redelivery_keeps_original_consumer_seq_and_counts(open_store):
    s = open_store()
    s.update_delivered(1, 5, 1, 100)
    s.update_delivered(2, 5, 2, 200)  # redelivered with a new consumer seq
    s.update_delivered(3, 5, 3, 300)
    st = s.load()
    assert st.pending == {5: (1, 300)} and st.redelivered == {5: 3} and st.delivered_consumer_seq == 3
    s = reopen(open_store, s)
    assert s.load().redelivered == {5: 3}
    s.update_acks(3, 5)
    assert snapshot(s.load()) == (3, 5, 3, 5, {}, {})


def test_ack_all_and_acks_of_unknown_seqs(open_store):
    s = open_store()
    for cseq in range(1, 6):
        s.update_delivered(cseq, cseq + 100, 1, cseq)
    s.update_delivered(6, 103, 2, 60)
    s.update_acks(9, 999)  # not pending: ignored
    s.update_acks(3, 103, ack_all=True)
    assert snapshot(s.load()) == (6, 105, 3, 103, {104: (4, 4), 105: (5, 5)}, {})
    s = reopen(open_store, s)
    assert snapshot(s.load()) == (6, 105, 3, 103, {104: (4, 4), 105: (5, 5)}, {})


def test_a_message_past_max_deliver_leaves_pending_and_later_acks_move_the_floor(open_store):
    """nats-server's UpdateDelivered with a delivery count past MaxDeliver: the message is no longer pending
    (the floor does not move for it), so acks of the others move the floor past it."""
    s = open_store()
    s.update_delivered(1, 1, 1, 10)
    s.update_dropped(1, 1, 2, 10)  # max_deliver 1: delivered once, its ack wait ran out
    assert snapshot(s.load()) == (1, 1, 0, 0, {}, {1: 2})
    s.update_delivered(2, 2, 1, 20)
    s.update_delivered(3, 3, 1, 30)
    s = reopen(open_store, s)
    assert snapshot(s.load()) == (3, 3, 0, 0, {2: (2, 20), 3: (3, 30)}, {1: 2})
    s.update_acks(2, 2)  # consumer seq 2 is not floor + 1: the floor stays
    s.update_acks(3, 3)  # nothing pending: the floor is the delivered pair
    s = reopen(open_store, s)
    assert snapshot(s.load()) == (3, 3, 3, 3, {}, {1: 2})


def test_load_returns_a_copy_and_reset_replaces(open_store):
    s = open_store()
    s.update_delivered(1, 1, 1, 1)
    s.load().pending.clear()
    assert s.load().pending == {1: (1, 1)}
    s.reset(ConsumerState(10, 20, 10, 20))
    s = reopen(open_store, s)
    assert snapshot(s.load()) == (10, 20, 10, 20, {}, {})
    s.update_delivered(11, 25, 1, 7)
    s = reopen(open_store, s)
    assert snapshot(s.load()) == (11, 25, 10, 20, {25: (11, 7)}, {})
    s.close()
    with pytest.raises(StoreClosed):
        s.load()


def test_file_log_is_compacted_and_restored(tmp_path):
    s = open_consumer_store("file", tmp_path / "c", SyncPolicy())
    for cseq in range(1, 40_001):  # ~1.6 MB of log: forces at least one snapshot
        s.update_delivered(cseq, cseq, 1, cseq)
        if cseq % 10:
            s.update_acks(cseq, cseq)
    want = snapshot(s.load())
    files = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert "state.snap" in files and len([f for f in files if f.startswith("state.log.")]) == 1
    s.close()
    s = open_consumer_store("file", tmp_path / "c", SyncPolicy())
    assert snapshot(s.load()) == want and len(want[4]) == 4000


def test_crash_between_snapshot_and_new_log_loses_nothing(tmp_path):
    d = tmp_path / "c"
    s = open_consumer_store("file", d, SyncPolicy(always=True))
    s.update_delivered(1, 1, 1, 1)
    s.update_delivered(2, 2, 1, 2)
    old_log = next(d.glob("state.log.*")).read_bytes()
    s.reset(s.load())  # snapshot of generation 1, log 0 removed
    s.close()
    (d / "state.log.0").write_bytes(old_log + b"junk")  # as if the crash left the old log behind
    (d / "state.log.1").unlink()
    s = open_consumer_store("file", d, SyncPolicy())
    assert snapshot(s.load()) == (2, 2, 0, 0, {1: (1, 1), 2: (2, 2)}, {})
    assert not (d / "state.log.0").exists()


def test_torn_log_tail_is_dropped(tmp_path):
    d = tmp_path / "c"
    s = open_consumer_store("file", d, SyncPolicy(always=True))
    s.update_delivered(1, 1, 1, 1)
    s.update_delivered(2, 2, 1, 2)
    s.close()
    log = next(d.glob("state.log.*"))
    log.write_bytes(log.read_bytes()[:-5])
    s = open_consumer_store("file", d, SyncPolicy())
    assert snapshot(s.load()) == (1, 1, 0, 0, {1: (1, 1)}, {})
    s.update_delivered(2, 2, 1, 3)
    s.close()
    s = open_consumer_store("file", d, SyncPolicy())
    assert s.load().pending == {1: (1, 1), 2: (2, 3)}
    s.delete()
    assert not d.exists()


def test_ack_none_floor_survives_a_restart(open_store):
    s = open_store()
    for n in range(1, 6):
        s.update_floor(n, n + 10, n)
    s = reopen(open_store, s)
    assert snapshot(s.load()) == (5, 15, 5, 15, {}, {})
    s.close()


def test_with_a_flush_hook_updates_are_written_at_flush(tmp_path):
    d = tmp_path / "c"
    s = open_consumer_store("file", d, SyncPolicy())
    calls: list[int] = []
    s.set_flush_hook(lambda: calls.append(1))
    s.update_delivered(1, 1, 1, 1)
    s.update_delivered(2, 2, 1, 2)
    s.update_acks(1, 1)
    log = next(d.glob("state.log.*"))
    assert (calls, log.stat().st_size) == ([1], 0)  # one hook call for the whole batch, nothing written yet
    s.flush()
    written = log.stat().st_size
    s.update_acks(2, 2)
    assert (calls, written > 0) == ([1, 1], True)
    s.flush()
    reread = open_consumer_store("file", d, SyncPolicy())
    assert snapshot(reread.load()) == (2, 2, 2, 2, {}, {})
    reread.close()
    s.close()


@pytest.mark.parametrize("seed", range(4))
def test_random_updates_replay_to_the_same_state(tmp_path, seed):
    """Deliveries, redeliveries, acks (in and out of order, ack-all, unknown seqs) and flushes at random
    points: the memory and file stores agree, the file store replays its log to the
    same state, and the hook is called once each time the buffer stops being empty."""
    import random

    rng = random.Random(seed)
    mem = open_consumer_store("memory", None, SyncPolicy())
    f = open_consumer_store("file", tmp_path / "c", SyncPolicy())
    calls: list[int] = []
    f.set_flush_hook(lambda: calls.append(1))
    buffered, hooks = False, 0
    cseq = sseq = 0
    delivered: list[tuple[int, int]] = []
    for _ in range(600):
        r = rng.random()
        if r < 0.35:
            cseq, sseq = cseq + 1, sseq + rng.randrange(1, 3)
            delivered.append((cseq, sseq))
            op = ("update_delivered", cseq, sseq, 1, rng.randrange(10**9))
        elif r < 0.45 and delivered:
            c, s = rng.choice(delivered)
            cseq += 1
            op = ("update_delivered", rng.choice((c, cseq)), s, rng.randrange(2, 5), rng.randrange(10**9))
        elif r < 0.85 and delivered:
            c, s = delivered[0] if rng.random() < 0.5 else rng.choice(delivered)
            op = ("update_acks", c, s, rng.random() < 0.1)
        else:
            f.flush()
            buffered = False
            continue
        for store in (mem, f):
            getattr(store, op[0])(*op[1:])
        hooks += not buffered
        buffered = True
        assert len(calls) == hooks and snapshot(mem.load()) == snapshot(f.load()), op
    f.flush()
    want = snapshot(f.load())
    f.close()
    again = open_consumer_store("file", tmp_path / "c", SyncPolicy())
    assert snapshot(again.load()) == want
    again.close()


@pytest.mark.parametrize("seed", range(4))
def test_update_acks_many_is_update_acks_in_order(open_store, tmp_path, seed):
    """Acks applied as runs (in and out of order, repeated, unknown seqs, redeliveries about) leave the
    same state as one by one, and the file store replays that state after a restart."""
    import random

    rng = random.Random(seed)
    one = open_consumer_store(open_store.kind, tmp_path / "one", SyncPolicy())
    many = open_store()
    delivered: list[tuple[int, int]] = []
    for step in range(300):
        if rng.random() < 0.5 or not delivered:
            c, s = len(delivered) + 1, len(delivered) * 2 + 1
            delivered.append((c, s))
            dc = 1 if rng.random() < 0.8 else rng.randrange(2, 4)
            for store in (one, many):
                store.update_delivered(c, s, dc, step)
            continue
        run = [rng.choice(delivered) if rng.random() < 0.9 else (rng.randrange(1, 900), rng.randrange(1, 900))
               for _ in range(rng.randrange(1, 12))]
        for c, s in run:
            one.update_acks(c, s)
        many.update_acks_many(run)
        assert snapshot(many.load()) == snapshot(one.load()), run
    many.flush()
    want = snapshot(many.load())
    assert snapshot(reopen(open_store, many).load()) == want


def test_update_acks_many_calls_the_flush_hook_once(tmp_path):
    s = open_consumer_store("file", tmp_path / "c", SyncPolicy())
    calls: list[int] = []
    s.set_flush_hook(lambda: calls.append(1))
    s.update_delivered(1, 1, 1, 0)
    s.update_delivered(2, 2, 1, 0)
    s.update_acks_many([(1, 1), (2, 2)])
    assert calls == [1]  # the buffer stopped being empty once
    s.flush()
    s.update_acks_many([])
    assert calls == [1]
    s.update_acks_many([(9, 9)])
    assert calls == [1, 1]
    s.close()
