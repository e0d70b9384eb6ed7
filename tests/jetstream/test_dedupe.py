"""The Nats-Msg-Id window on its own (the publish paths that use it are differential tests in
test_publish.py and test_stream_restart.py): checked against a plain model, through expiry, ids added
again after they expired, and the compaction of its columns."""

from __future__ import annotations

import random

from jsbroker.jetstream.dedupe import MsgIdWindow

WINDOW = 1_000


class Model:
    """The obvious version: each id's newest (seq, ts); an id is in the window if that ts is."""

    def __init__(self) -> None:
        self.added: dict[str, tuple[int, int]] = {}

    def newest(self, now: int) -> dict[str, tuple[int, int]]:
        return {i: v for i, v in self.added.items() if v[1] >= now - WINDOW}


def test_the_window_matches_a_plain_model_through_expiry_and_ids_added_again() -> None:
    rng = random.Random(7)
    window, model = MsgIdWindow(WINDOW), Model()
    now, seq = 0, 0
    for _ in range(30_000):
        now += rng.choice([0, 1, 1, 2, 50])
        msg_id = f"m{rng.randrange(400)}"
        if rng.random() < 0.6:
            found = window.find(msg_id, now)
            expected = model.newest(now).get(msg_id)
            assert found == (expected[0] if expected else 0)
            if not found:  # a new message, as the stream stores it
                seq += 1
                window.add(msg_id, seq, now)
                model.added[msg_id] = (seq, now)
        else:
            window.prune(now)
            want = model.newest(now)
            assert sorted(window.entries()) == sorted((i, s, t) for i, (s, t) in want.items())
            assert len(window) == len(want)


def test_an_id_added_again_outlives_its_first_entry() -> None:
    window = MsgIdWindow(WINDOW)
    window.add("a", 1, 0)
    window.add("a", 2, 900)  # a rebuild after a window change can see one id twice
    window.prune(1_500)  # the first entry expired, the second did not
    assert window.find("a", 1_500) == 2
    assert list(window.entries()) == [("a", 2, 900)]
    assert window.find("a", 1_901) == 0 and len(window) == 0


def test_the_columns_are_compacted_and_the_window_stays_correct() -> None:
    window = MsgIdWindow(WINDOW)
    for k in range(20_000):
        window.add(f"id{k}", k + 1, k)
        window.prune(k)
    assert len(window._ids) <= 2 * (WINDOW + 1) + 4096  # not every id ever added
    assert len(window) == WINDOW + 1
    assert window.find("id19999", 19_999) == 20_000 and window.find("id18998", 19_999) == 0
    assert [e[0] for e in window.entries()][:2] == ["id18999", "id19000"]
    window.clear()
    assert len(window) == 0 and list(window.entries()) == [] and window.find("id19999", 19_999) == 0
