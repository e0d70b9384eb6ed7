"""StreamStore behaviour, the same test bodies for the memory and the file store (file: also after restart)."""

from __future__ import annotations

import random
import time

import pytest

from jsbroker.store.base import StoreClosed, StoreLimits

from .helpers import StoreFactory, dump

SEC = 1_000_000_000


@pytest.fixture(params=["memory", "file"])
def factory(request, tmp_path):
    return StoreFactory(request.param, tmp_path / "stream")


def fill(store, subjects, n, payload=b"x"):
    return [store.store_msg(subjects[i % len(subjects)], b"", payload + str(i).encode())[0] for i in range(n)]


def test_empty_store(factory):
    s = factory.open()
    st = s.state(deleted_details=True)
    assert (st.msgs, st.bytes, st.first_seq, st.last_seq, st.num_deleted, st.deleted) == (0, 0, 0, 0, 0, [])
    assert s.load_msg(1) is None and s.load_next_msg(0) is None and s.load_last_msg(">") is None
    assert s.num_pending(0, None) == 0 and s.subjects_state(">") == {}
    assert s.first_seq_at_or_after_time(0) == 1
    assert s.next_expiry() is None and s.expire(10**20) == 0
    assert s.remove_msg(1) is False and s.purge("a") == 0 and s.purge(keep=2) == 0 and s.purge(up_to_seq=1) == 0
    assert s.state().first_seq == 0  # nothing stored, nothing purged: nats-server's first_seq is still 0
    assert list(s.messages()) == []


@pytest.mark.parametrize("purge", [{}, {"subject_filter": ">"}])
def test_a_purge_of_a_never_used_store_sets_its_first_seq(factory, purge):
    """nats-server's purge sets first_seq to last_seq + 1 even when nothing was ever stored: 1, then kept."""
    s = factory.open()
    assert s.purge(**purge) == 0
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.first_ts, st.last_ts) == (0, 1, 0, 0, 0)
    s = factory.reopen(s)
    assert (s.state().first_seq, s.state().last_seq) == (1, 0)
    assert s.store_msg("a", b"", b"")[0] == 1 and s.state().first_seq == 1


def test_store_and_load(factory):
    s = factory.open()
    hdr = b"NATS/1.0\r\nA: b\r\n\r\n"
    seq1, ts1 = s.store_msg("orders.new", hdr, b"one")
    seq2, ts2 = s.store_msg("orders.old", b"", b"")
    assert (seq1, seq2) == (1, 2) and ts2 >= ts1 > 0
    m = s.load_msg(1)
    assert (m.seq, m.subject, m.hdr, m.data, m.ts) == (1, "orders.new", hdr, b"one", ts1)
    st = s.state()
    assert st.bytes == factory.size("orders.new", hdr, b"one") + factory.size("orders.old", b"", b"")
    assert st.bytes == ((10 + 3 + 16 + len(hdr)) + (10 + 16) if factory.kind == "memory"
                        else (22 + 10 + 4 + len(hdr) + 3 + 8) + (22 + 10 + 8))
    assert (st.msgs, st.first_seq, st.first_ts, st.last_seq, st.last_ts, st.num_subjects) == (2, 1, ts1, 2, ts2, 2)
    s = factory.reopen(s)
    m = s.load_msg(1)
    assert (m.subject, m.hdr, m.data, m.ts) == ("orders.new", hdr, b"one", ts1)
    assert s.store_msg("x", b"", b"")[0] == 3


def test_remove_at_edges(factory):
    s = factory.open()
    fill(s, ["a"], 5)
    assert s.remove_msg(1) and not s.remove_msg(1) and not s.remove_msg(99)
    assert s.state().first_seq == 2
    assert s.remove_msg(5)
    st = s.state(deleted_details=True)
    assert (st.first_seq, st.last_seq, st.msgs, st.num_deleted, st.deleted) == (2, 5, 3, 1, [5])
    assert s.remove_msg(3)
    assert s.state(deleted_details=True).deleted == [3, 5]
    assert s.load_next_msg(3).seq == 4
    for seq in (2, 4):
        assert s.remove_msg(seq)
    st = s.state()
    assert (st.msgs, st.bytes, st.first_seq, st.last_seq, st.num_deleted, st.first_ts) == (0, 0, 6, 5, 0, 0)
    s = factory.reopen(s)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 6, 5)
    assert s.store_msg("a", b"", b"")[0] == 6


def test_remove_erase(factory):
    s = factory.open()
    fill(s, ["a", "b"], 4)
    assert s.remove_msg(2, erase=True)
    assert s.load_msg(2) is None
    s = factory.reopen(s)
    assert [m.seq for m in s.messages()] == [1, 3, 4] and s.state().lost is None


def test_filters(factory):
    s = factory.open()
    # 40 subjects (above the wildcard fan-out), one sparse subject at the end
    for i in range(200):
        s.store_msg(f"t.{i % 40}.x", b"", b"")
    s.store_msg("t.rare.y", b"", b"r")
    s.store_msg("u.1", b"", b"")
    assert s.load_next_msg(0, "t.3.x").seq == 4
    assert s.load_next_msg(5, "t.3.x").seq == 44
    assert s.load_next_msg(0, "t.*.y").seq == 201  # sparse wildcard: far from the start
    assert s.load_next_msg(0, "t.>").seq == 1
    assert s.load_next_msg(150, "t.*.x").seq == 150
    assert s.load_next_msg(0, "u.*").seq == 202
    assert s.load_next_msg(0, "nope") is None and s.load_next_msg(0, "nope.*") is None
    assert s.load_next_msg(202, None).seq == 202 and s.load_next_msg(203, ">") is None
    assert s.load_last_msg("t.*.x").seq == 200
    assert s.load_last_msg("t.>").seq == 201
    assert s.load_last_msg(">").seq == 202
    assert s.load_last_msg("t.0.x").seq == 161
    assert s.subjects_state("t.1*.x") == {}  # "1*" is a literal token
    assert s.subjects_state("t.*.y") == {"t.rare.y": 1}
    assert len(s.subjects_state("t.*.x")) == 40
    assert s.num_pending(0, ["t.*.x"]) == 200
    assert s.num_pending(100, ["t.*.x", "t.>"]) == 102  # overlapping filters counted once
    assert s.num_pending(101, ["t.*.x"], last_per_subject=True) == 40
    assert s.num_pending(181, ["t.*.x"], last_per_subject=True) == 20
    assert s.num_pending(0, None) == 202 and s.num_pending(150, None) == 53
    assert s.num_pending(0, ["u.1", ">"]) == 202
    s.remove_msg(201)
    assert s.load_next_msg(0, "t.*.y") is None and s.subjects_state("t.*.y") == {}
    s = factory.reopen(s)
    assert s.load_next_msg(0, "u.*").seq == 202 and s.state().num_subjects == 41


def test_sparse_wildcard_far_away_and_filter_cache_updates(factory):
    s = factory.open()
    for i in range(2000):  # more than the scan window, on more subjects than the bisect fan-out
        s.store_msg(f"w.{i % 50}.a", b"", b"")
    assert s.load_next_msg(0, "w.*.b") is None  # cached with no match
    s.store_msg("w.new.b", b"", b"")
    assert s.load_next_msg(10, "w.*.b").seq == 2001 and s.load_last_msg("w.*.b").seq == 2001
    assert s.load_next_msg(1990, "w.>").seq == 1990
    s.remove_msg(2001)
    assert s.load_next_msg(0, "w.*.b") is None and s.num_pending(0, ["w.*.b"]) == 0
    s.store_msg("w.new.b", b"", b"")
    assert s.load_next_msg(0, "w.*.b").seq == 2002 and s.subjects_state("w.*.b") == {"w.new.b": 1}


def test_purge_all_and_then_store(factory):
    s = factory.open()
    fill(s, ["a", "b"], 10)
    assert s.purge() == 10
    st = s.state()
    assert (st.msgs, st.bytes, st.first_seq, st.last_seq, st.num_subjects, st.first_ts) == (0, 0, 11, 10, 0, 0)
    assert st.last_ts > 0
    s = factory.reopen(s)
    assert s.state().first_seq == 11
    assert s.store_msg("a", b"", b"")[0] == 11
    assert s.state().first_seq == 11


def test_purge_up_to_seq_and_beyond_the_end(factory):
    s = factory.open()
    fill(s, ["a", "b"], 10)
    assert s.purge(up_to_seq=1) == 0
    assert s.purge(up_to_seq=4) == 3 and s.state().first_seq == 4
    assert s.purge(up_to_seq=20) == 7
    st = s.state()
    assert (st.first_seq, st.last_seq, st.msgs) == (20, 19, 0)
    s = factory.reopen(s)
    assert s.store_msg("a", b"", b"")[0] == 20


def test_purge_keep_without_filter_keeps_the_newest_messages(factory):
    s = factory.open()
    fill(s, ["a"], 10)
    assert s.purge(keep=20) == 0
    s.remove_msg(9)
    assert s.purge(keep=3) == 6  # nats-server 2.15.1: gaps do not count, 3 messages stay
    assert [m.seq for m in s.messages()] == [7, 8, 10]


def test_purge_with_filter(factory):
    s = factory.open()
    fill(s, ["k.a", "k.b", "z"], 12)  # k.a: 1,4,7,10  k.b: 2,5,8,11  z: 3,6,9,12
    assert s.purge("k.a") == 4
    assert s.subjects_state(">") == {"k.b": 4, "z": 4}
    assert s.purge("k.*", up_to_seq=6) == 2  # k.b 2 and 5
    assert s.subjects_state(">") == {"k.b": 2, "z": 4}
    assert s.state().first_seq == 3


def test_purge_filter_keep_is_over_all_matching_subjects(factory):
    s = factory.open()
    fill(s, ["k.a", "k.b", "z"], 12)
    assert s.purge("k.*", keep=3) == 5  # 8 matching, the newest 3 (8, 10, 11) stay
    assert [m.seq for m in s.messages() if m.subject != "z"] == [8, 10, 11]
    assert s.purge("k.*", keep=3) == 0
    assert s.purge("z", keep=1) == 3 and s.subjects_state("z") == {"z": 1}
    s = factory.reopen(s)
    assert s.subjects_state(">") == {"k.a": 1, "k.b": 2, "z": 1}


def test_skip_msgs(factory):
    s = factory.open()
    s.skip_msgs(100)
    st = s.state()
    assert (st.first_seq, st.last_seq, st.msgs) == (100, 99, 0)
    assert s.store_msg("a", b"", b"")[0] == 100
    s.skip_msgs(50)  # never backwards
    s.skip_msgs(105)
    assert s.store_msg("a", b"", b"")[0] == 105
    st = s.state(deleted_details=True)
    assert (st.first_seq, st.last_seq, st.msgs, st.num_deleted, st.deleted) == (100, 105, 2, 4, [101, 102, 103, 104])
    before = time.time_ns()
    s.skip_msgs(110)
    skipped_at = s.state().last_ts
    assert skipped_at >= before  # a skip stamps last_ts, as nats-server's SkipMsg
    s = factory.reopen(s)
    assert s.state().last_seq == 109 and s.state().last_ts == skipped_at
    assert s.store_msg("a", b"", b"")[0] == 110


def test_max_msgs_and_bytes(factory):
    removed = []
    s = factory.open(StoreLimits(max_msgs=5))
    s.set_on_remove(lambda seq, subj: removed.append((seq, subj)))
    fill(s, ["a", "b"], 8)
    assert removed == [(1, "a"), (2, "b"), (3, "a")]
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (5, 4, 8)
    one = factory.size("a", b"", b"x5")
    s.update_limits(StoreLimits(max_bytes=3 * one))
    assert [m.seq for m in s.messages()] == [6, 7, 8] and removed[-1] == (5, "a")
    s = factory.reopen(s, StoreLimits(max_bytes=3 * one))
    assert [m.seq for m in s.messages()] == [6, 7, 8]


def test_max_msgs_per_subject(factory):
    removed = []
    s = factory.open(StoreLimits(max_msgs_per_subject=2))
    s.set_on_remove(lambda seq, subj: removed.append(seq))
    fill(s, ["a", "b", "c"], 9)
    assert removed == [1, 2, 3]
    assert s.subjects_state(">") == {"a": 2, "b": 2, "c": 2}
    s.update_limits(StoreLimits(max_msgs_per_subject=1))
    assert sorted(removed) == [1, 2, 3, 4, 5, 6]
    assert s.load_last_msg("b").seq == 8
    s = factory.reopen(s, StoreLimits(max_msgs_per_subject=1))
    assert [m.seq for m in s.messages()] == [7, 8, 9]


def test_max_age(factory):
    s = factory.open(StoreLimits(max_age_ns=10 * SEC))
    removed = []
    s.set_on_remove(lambda seq, subj: removed.append(seq))
    fill(s, ["a"], 3)
    t0 = s.load_msg(1).ts
    t2 = s.load_msg(3).ts
    assert s.next_expiry() == t0 + 10 * SEC
    assert s.expire(t0 + 10 * SEC - 1) == 0
    assert s.expire(t0 + 10 * SEC) >= 1 and removed[0] == 1
    gone = len(removed)
    assert s.expire(t2 + 10 * SEC) == 3 - gone
    assert s.state().msgs == 0 and s.next_expiry() is None and removed == [1, 2, 3]


def test_ttl_and_never(factory):
    s = factory.open(StoreLimits(max_age_ns=100 * SEC))
    s.store_msg("a", b"", b"", ttl_ns=5 * SEC)
    s.store_msg("b", b"", b"", ttl_ns=-1)  # never: exempt from max_age
    s.store_msg("c", b"", b"")
    t = s.load_msg(1).ts
    assert s.next_expiry() == t + 5 * SEC
    s = factory.reopen(s, StoreLimits(max_age_ns=100 * SEC))  # TTLs survive a restart
    assert s.next_expiry() == t + 5 * SEC
    assert s.expire(t + 5 * SEC) == 1 and s.load_msg(1) is None
    assert s.next_expiry() == s.load_msg(3).ts + 100 * SEC
    assert s.expire(t + 1000 * SEC) == 1
    assert [m.seq for m in s.messages()] == [2] and s.next_expiry() is None


def test_take_expired_hands_over_without_removing(factory):
    """The subject delete marker path: the due seqs (TTL and max_age, in seq order, never-TTLs exempt)
    come back without being removed; their TTL entries go with them."""
    s = factory.open(StoreLimits(max_age_ns=100 * SEC))
    s.store_msg("a", b"", b"")
    s.store_msg("b", b"", b"", ttl_ns=5 * SEC)
    s.store_msg("c", b"", b"", ttl_ns=-1)
    s.store_msg("d", b"", b"", ttl_ns=1 * SEC)
    t, t4 = s.load_msg(1).ts, s.load_msg(4).ts
    assert s.take_expired(t) == []
    assert s.take_expired(t4 + 5 * SEC) == [2, 4]
    assert s.state().msgs == 4 and s.take_expired(t4 + 5 * SEC) == []  # handed over once
    assert s.take_expired(t + 200 * SEC) == [1, 2, 4]  # max_age still sees them; "never" is exempt
    assert s.remove_msg(2) and s.take_expired(t + 200 * SEC) == [1, 4]


def test_first_seq_at_or_after_time(factory):
    s = factory.open()
    fill(s, ["a"], 5)
    ts = {m.seq: m.ts for m in s.messages()}

    def expected(t):
        return min((seq for seq in ts if ts[seq] >= t), default=6)

    for t in [0, *ts.values(), ts[5] + 1]:
        assert s.first_seq_at_or_after_time(t) == expected(t)
    s.remove_msg(3)
    del ts[3]
    for t in ts.values():
        assert s.first_seq_at_or_after_time(t) == expected(t)


def test_messages_iterates_from_start(factory):
    s = factory.open()
    fill(s, ["a", "b"], 20)
    s.remove_msg(12)
    assert [m.seq for m in s.messages(10)] == [10, 11] + list(range(13, 21))
    assert [m.seq for m in s.messages(25)] == []


def test_closed_store_refuses(factory):
    s = factory.open()
    s.close()
    with pytest.raises(StoreClosed):
        s.store_msg("a", b"", b"")


def _random_ops(store, rng, n, limits):
    """`n` random operations; `limits` (a one-item list) gets the limits last set, for reopening."""
    subjects = [f"s.{i}" for i in range(12)] + ["t.x.1", "t.y.2"]
    for _ in range(n):
        r = rng.random()
        if r < 0.7:
            store.store_msg(rng.choice(subjects), b"", rng.randbytes(rng.randint(0, 300)))
        elif r < 0.85:
            st = store.state()
            if st.msgs:
                store.remove_msg(rng.randint(st.first_seq, st.last_seq))
        elif r < 0.9:
            store.purge(rng.choice(["s.1", "t.*.*", "s.>"]), keep=rng.randint(0, 3))
        elif r < 0.93:
            store.purge(up_to_seq=store.state().first_seq + rng.randint(0, 10))
        elif r < 0.955:
            store.skip_msgs(store.state().last_seq + rng.randint(1, 5))
        elif r < 0.958:
            store.purge()
        else:
            limits[0] = StoreLimits(max_msgs_per_subject=rng.randint(2, 30))
            store.update_limits(limits[0])


@pytest.mark.parametrize("seed", range(6))
def test_file_store_matches_memory_store_and_survives_restarts(tmp_path, seed):
    """Random operations on both stores (file with tiny blocks): same content; the file store keeps it
    across restarts, and no removed message ever comes back."""
    rng_m, rng_f = random.Random(seed), random.Random(seed)
    mem = StoreFactory("memory", tmp_path).open()
    files = StoreFactory("file", tmp_path / "f")
    fs = files.open()
    limits = [StoreLimits()]
    for round_ in range(5):
        _random_ops(mem, rng_m, 300, [StoreLimits()])
        _random_ops(fs, rng_f, 300, limits)
        want, got = dump(mem), dump(fs)
        # timestamps differ between the two stores: compare everything else
        assert [m[:4] for m in got[1]] == [m[:4] for m in want[1]]
        # no headers: a file message counts 14 bytes more than in memory (nats-server's formulas)
        assert got[0].bytes == want[0].bytes + 14 * want[0].msgs
        for field in ("msgs", "first_seq", "last_seq", "num_subjects", "num_deleted", "deleted"):
            assert getattr(got[0], field) == getattr(want[0], field), (round_, field)
        assert got[2] == want[2]
        before = dump(fs)
        fs = files.reopen(fs, limits[0])
        assert dump(fs) == before
        assert fs.state().lost is None
    blocks = list((tmp_path / "f" / "msgs").glob("*.blk"))
    assert len(blocks) <= 2 + fs.state().msgs  # emptied blocks were removed


def test_store_batch_equals_one_by_one(factory, tmp_path):
    limits = StoreLimits(max_msgs_per_subject=2, max_msgs=5)
    s = factory.open(limits)
    removed = []
    s.set_on_remove(lambda seq, subj: removed.append(seq))
    got = s.store_batch([(f"b.{i % 3}", b"", b"%d" % i, 0) for i in range(9)])
    assert [seq for seq, _ in got] == list(range(1, 10))
    assert [m.seq for m in s.messages()] == [5, 6, 7, 8, 9] and removed == [1, 2, 3, 4]
    s = factory.reopen(s, limits)
    assert [(m.seq, m.data) for m in s.messages()] == [(i, b"%d" % (i - 1)) for i in range(5, 10)]


def test_file_store_disk_stays_bounded_for_a_kv_workload(tmp_path):
    """Keys updated over and over (one live message per key): emptied blocks are removed and mostly
    dead ones rewritten, so the disk holds about the live data, and a restart sees the same."""
    limits = StoreLimits(max_msgs_per_subject=1)
    files = StoreFactory("file", tmp_path / "kv")
    s = files.open(limits)
    for i in range(3000):
        s.store_msg(f"$KV.b.k{i % 20 if i % 500 else 'cold' + str(i)}", b"", b"v" * 200 + b"%d" % i)
    before = dump(s)
    disk = sum(p.stat().st_size for p in (tmp_path / "kv" / "msgs").glob("*.blk"))
    live = (200 + 4 + 12 + 39) * before[0].msgs  # payload, digits, subject, record overhead
    assert disk < 4 * live + 2 * 4096, (disk, live)
    s = files.reopen(s, limits)
    assert dump(s) == before and s.state().lost is None
    assert s.load_last_msg("$KV.b.kcold500").data.endswith(b"500")


def test_file_store_messages_with_headers_survive_erase_rewrite_and_restart(tmp_path):
    """Record lengths come back from the accounted size and the header flag: erase, block rewrites and
    recovery must find every header message byte-exact."""
    files = StoreFactory("file", tmp_path / "h")
    s = files.open()
    hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
    for i in range(120):
        s.store_msg(f"h.{i % 3}", hdr if i % 2 else b"", b"p" * (i % 50))
    assert s.remove_msg(7, erase=True) and s.remove_msg(8, erase=True)
    for seq in range(10, 60):
        if seq % 5:
            s.remove_msg(seq)
    s = files.reopen(s)
    msgs = list(s.messages())
    assert [m.hdr == hdr for m in msgs] == [m.seq % 2 == 0 for m in msgs]  # seq = i + 1
    assert all(m.data == b"p" * ((m.seq - 1) % 50) for m in msgs)
    assert s.state().bytes == sum(files.size(m.subject, m.hdr, m.data) for m in msgs)


def test_seqs_lists_the_index_without_bodies(factory):
    s = factory.open()
    fill(s, ["a", "b", "c"], 9)
    s.remove_msg(1)
    s.remove_msg(5)
    assert list(s.seqs()) == [(2, "b"), (3, "c"), (4, "a"), (6, "c"), (7, "a"), (8, "b"), (9, "c")]
    assert list(s.seqs(7)) == [(7, "a"), (8, "b"), (9, "c")] and list(s.seqs(20)) == []
    for seq, _ in s.seqs():  # removing while iterating is allowed
        s.remove_msg(seq)
    assert s.state().msgs == 0 and list(s.seqs()) == []


def test_subject_of_reads_the_index(factory):
    s = factory.open()
    fill(s, ["a", "b"], 3)
    s.remove_msg(2)
    assert [s.subject_of(q) for q in (0, 1, 2, 3, 4)] == [None, "a", None, "a", None]


def test_store_deferred_waits_for_flush_and_reads_see_it(factory, tmp_path):
    s = factory.open()
    s.store_msg("a", b"", b"written")
    seq, _ = s.store_deferred("a", b"", b"pending")
    assert seq == 2 and s.state().msgs == 2
    if factory.kind == "file":
        blocks = sorted((tmp_path / "stream" / "msgs").glob("*.blk"))
        assert b"pending" not in b"".join(p.read_bytes() for p in blocks)  # not written yet
    assert s.load_msg(2).data == b"pending"  # a read of a pending record writes it first
    s.store_deferred("b", b"", b"later")
    s.flush()
    if factory.kind == "file":
        blocks = sorted((tmp_path / "stream" / "msgs").glob("*.blk"))
        assert b"later" in b"".join(p.read_bytes() for p in blocks)
    s = factory.reopen(s)
    assert [m.data for m in s.messages()] == [b"written", b"pending", b"later"]


def one_by_one(s, start, filters, count):
    """What `load_next_msgs` must equal: repeated load_next_msg over each filter, lowest seq first."""
    out = []
    while len(out) < count:
        found = [m for f in (filters or [None]) if (m := s.load_next_msg(start, f)) is not None]
        if not found:
            break
        m = min(found, key=lambda m: m.seq)
        out.append(m)
        start = m.seq + 1
    return out


@pytest.mark.parametrize("seed", range(3))
def test_load_next_msgs_equals_one_by_one(factory, seed):
    """Batched reads across gaps, block boundaries, headers and records not yet flushed."""
    rng = random.Random(seed)
    s = factory.open()
    hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
    for i in range(300):
        s.store_msg(f"a.{rng.choice('xyz')}", hdr if i % 7 == 0 else b"", bytes(rng.randrange(300)))
    for seq in rng.sample(range(1, 301), 40):
        s.remove_msg(seq)
    for i in range(5):
        s.store_deferred("a.x", b"", b"deferred %d" % i)
    for filters in (None, ["a.x"], ["a.*"], ["a.y", "a.z"], ["b.>"]):
        for start, count in ((0, 500), (1, 8), (150, 64), (290, 20), (306, 5)):
            want = one_by_one(s, start, filters, count)
            got = s.load_next_msgs(start, filters, count)
            assert [(m.seq, m.subject, m.hdr, m.data, m.ts) for m in got] == \
                   [(m.seq, m.subject, m.hdr, m.data, m.ts) for m in want], (filters, start, count)
    sizes = [factory.size(m.subject, m.hdr, m.data) for m in one_by_one(s, 0, None, 3)]
    assert len(s.load_next_msgs(0, None, 100, max_bytes=sizes[0] + sizes[1])) == 2
    s = factory.reopen(s)
    assert [m.seq for m in s.load_next_msgs(0, ["a.x"], 1000)] == [m.seq for m in one_by_one(s, 0, ["a.x"], 1000)]
