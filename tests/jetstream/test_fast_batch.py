"""Fast batch publishing (`allow_batched`, nats-server 2.14 fast ingest, ADR-50) against nats-server: the
answers on the batch's reply subjects (flow acks, gaps, errors, the closing pub ack), what is stored, the
stream config rules, refusals (other clients unaffected, nothing lost), the idle timeout, restarts (SIGTERM,
kill -9: what was acknowledged survives, the open batch is forgotten), and the pure state machine alone."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest

from jsbroker.jetstream import errors, fast_batch
from jsbroker.jetstream.fast_batch import APPEND, COMMIT, EOB, PING, START, Batches, Inflight, Ref
from tests.polling import poll_async

Step = tuple[Any, ...]


class Batcher:
    """Publishes fast batch messages by hand (the reply subject carries the batch, as nats.go's fast
    publisher builds it) and records every answer on `<prefix>.>` in arrival order."""

    def __init__(self, nc: Any, name: str) -> None:
        self.nc, self.name, self.prefix = nc, name, f"_FB.{name}"
        self.answers: list[tuple[str, Any]] = []
        self._syncs = 0

    async def start(self) -> Batcher:
        async def record(msg: Any) -> None:
            self.answers.append((msg.subject[len(self.prefix) + 1:], json.loads(msg.data) if msg.data else None))
        await self.nc.subscribe(self.prefix + ".>", cb=record)
        return self

    async def send(self, batch: str, flow: Any, gap: str, seq: Any, op: int, hdrs: dict[str, str] | None = None,
                   subject: str = "a") -> None:
        reply = f"{self.prefix}.{batch}.{flow}.{gap}.{seq}.{op}.$FI"
        await self.nc.publish(f"{self.name}.{subject}", f"m{seq}".encode(), reply=reply, headers=hdrs)

    async def settle(self) -> None:
        """Wait until the stream answered everything sent before: a malformed batch message (10206, or the
        stream's earlier refusal) goes through the same queue without touching any batch."""
        self._syncs += 1
        tag = f"sync.{self._syncs}.$FI"
        await self.nc.publish(f"{self.name}.a", b"", reply=f"{self.prefix}.{tag}")
        await poll_async(lambda: any(r == tag for r, _ in self.answers), timeout=10, what="the sync answer")
        self.answers = [(r, a) for r, a in self.answers if not r.startswith("sync.")]


async def create(nc: Any, body: dict[str, Any]) -> dict[str, Any]:
    """STREAM.CREATE; a 10049 is retried: nats-server removes an account's stream directory when its last
    file stream is deleted, and a create racing that removal fails to make it (seen on 2.15.1)."""
    async def attempt() -> Any:
        answer = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{body['name']}", json.dumps(body).encode(),
                                              timeout=5)).data)
        return None if answer.get("error", {}).get("err_code") == 10049 else answer
    return await poll_async(attempt, timeout=5, what="a stream create past nats-server's directory race")  # type: ignore[no-any-return]


async def _stored(nc: Any, name: str) -> list[Any]:
    info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)).data)
    state = info["state"]
    out: list[Any] = [(state["messages"], state["first_seq"], state["last_seq"])]
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        got = json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{name}", json.dumps({"seq": seq}).encode(),
                                           timeout=5)).data)
        msg = got.get("message")
        out.append((seq, msg["subject"], msg.get("data"), msg.get("hdrs")) if msg else (seq, None))
    return out


def scenario(steps: list[Step], **config: Any) -> Any:
    async def run(nc: Any, name: str) -> list[Any]:
        body = {"name": name, "subjects": [f"{name}.>"], "allow_batched": True, **config}
        created = await create(nc, body)
        assert "error" not in created, created
        b = await Batcher(nc, name).start()
        out: list[Any] = []
        for step in steps:
            if step[0] == "plain":
                out.append(json.loads((await nc.request(f"{name}.a", b"p", timeout=5)).data))
            elif step[0] == "update":
                body = {"name": name, "subjects": [f"{name}.>"], **config, **step[1]}
                await b.settle()
                out.append(json.loads((await nc.request(f"$JS.API.STREAM.UPDATE.{name}", json.dumps(body).encode(),
                                                        timeout=5)).data)["config"].get("allow_batched"))
            elif step[0] == "atomic":  # an atomic batch message (allow_atomic), answered on the same inbox
                seq, extra = step[1], step[2] if len(step) > 2 else {}
                await nc.publish(f"{name}.a", f"a{seq}".encode(), reply=f"{b.prefix}.atomic.{seq}",
                                 headers={"Nats-Batch-Id": "A", "Nats-Batch-Sequence": str(seq), **extra})
            elif step[0] == "idle":
                await b.settle()
                await asyncio.sleep(step[1])  # the idle timeout itself is what is tested
            else:
                await b.send(*step)
        await b.settle()
        out += b.answers
        out += await _stored(nc, name)
        await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=5)
        return out
    return run


def run_of(batch: str, first: int, last: int, gap: str = "fail", flow: int = 10) -> list[Step]:
    return [(batch, flow, gap, seq, START if seq == 1 else APPEND) for seq in range(first, last + 1)]


M1 = {"Nats-Msg-Id": "m1"}
CASES: dict[str, tuple[list[Step], dict[str, Any]]] = {
    "commit_stores_the_last": (run_of("b", 1, 3) + [("b", 10, "fail", 4, COMMIT)], {}),
    "end_of_batch_stores_nothing_more": (run_of("b", 1, 2) + [("b", 10, "fail", 3, EOB)], {}),
    "flow_acks_every_n": (run_of("b", 1, 8, flow=2) + [("b", 2, "fail", 9, EOB)], {}),
    "flow_capped_at_500": (run_of("b", 1, 1199, flow=1000) + [("b", 1000, "fail", 1200, COMMIT)], {}),
    "flow_tokens_odd": ([("b", 0, "fail", 1, START), ("c", -3, "fail", 1, START), ("d", 70000, "fail", 1, START),
                         ("e", "x", "fail", 1, START)], {}),
    "second_batch_ramps_up": (run_of("b", 1, 1) + run_of("c", 1, 9) + run_of("b", 2, 6)
                              + [("c", 10, "fail", 10, COMMIT), ("b", 10, "fail", 7, EOB)], {}),
    "gap_fail_ends": (run_of("b", 1, 2) + [("b", 10, "fail", 5, APPEND), ("b", 10, "fail", 6, APPEND)], {}),
    "gap_ok_goes_on": (run_of("b", 1, 2, "ok") + [("b", 10, "ok", 5, APPEND), ("b", 10, "ok", 6, COMMIT)], {}),
    "backward_ends_even_gap_ok": (run_of("b", 1, 2, "ok") + [("b", 10, "ok", 2, APPEND), ("b", 10, "ok", 3, COMMIT)],
                                  {}),
    "ping_resends_and_reports_gaps": (run_of("b", 1, 2, "ok") + [("b", 10, "ok", 2, PING), ("b", 10, "ok", 5, PING),
                                                                 ("b", 10, "ok", 6, COMMIT)], {}),
    "ping_gap_ends_fail": (run_of("b", 1, 2) + [("b", 10, "fail", 5, PING), ("b", 10, "fail", 6, APPEND)], {}),
    "duplicates_skipped": ([("plain",), ("b", 10, "fail", 1, START, M1), ("b", 10, "fail", 2, APPEND, M1),
                            ("b", 10, "fail", 3, APPEND), ("b", 10, "fail", 4, COMMIT, M1)], {}),
    "duplicate_first": ([("b", 10, "fail", 1, START, M1), ("c", 10, "fail", 1, START, M1), ("c", 10, "fail", 2, APPEND),
                         ("d", 10, "fail", 1, COMMIT, M1), ("e", 10, "ok", 1, COMMIT, M1)], {}),
    "expected_last_seq_fail": (run_of("b", 1, 1) + [("b", 10, "fail", 2, APPEND, {"Nats-Expected-Last-Sequence": "7"}),
                                                    ("b", 10, "fail", 3, APPEND)], {}),
    "expected_last_seq_ok": (run_of("b", 1, 1, "ok") + [("b", 10, "ok", 2, APPEND, {"Nats-Expected-Last-Sequence": "7"}),
                                                        ("b", 10, "ok", 3, COMMIT)], {}),
    "first_message_refused": ([("b", 10, "fail", 1, START, {"Nats-Expected-Last-Sequence": "7"}),
                               ("b", 10, "fail", 2, APPEND),
                               ("c", 10, "ok", 1, START, {"Nats-Expected-Last-Subject-Sequence": "7"}),
                               ("c", 10, "ok", 2, COMMIT, {"Nats-Expected-Stream": "other"})], {}),
    "expected_last_msg_id_is_checked_while_storing": (
        [("b", 10, "fail", 1, START, {"Nats-Msg-Id": "x"}),
         ("b", 10, "fail", 2, APPEND, {"Nats-Expected-Last-Msg-Id": "nope"}),
         ("b", 10, "fail", 3, APPEND, {"Nats-Expected-Last-Sequence": "1"}),
         ("b", 10, "fail", 4, APPEND, {"Nats-Expected-Last-Sequence": "2"}), ("b", 10, "fail", 5, COMMIT)], {}),
    "a_commit_refused_while_storing_never_answers": (
        [("b", 10, "fail", 1, START, {"Nats-Msg-Id": "x"}),
         ("b", 10, "fail", 2, COMMIT, {"Nats-Expected-Last-Msg-Id": "nope"}),
         ("b", 10, "fail", 3, APPEND), ("b", 10, "fail", 2, PING), ("b", 10, "fail", 1, START)], {}),
    "bad_patterns": ([("a", 10, "fail", 1, COMMIT), ("b", 10, "fail", 1, EOB), ("c", 10, "fail", 1, 5),
                      ("d" * 65, 10, "fail", 1, START), ("e" * 64, 10, "fail", 1, START), ("f", 10, "fail", 2, APPEND),
                      ("g", 10, "maybe", 1, START), ("h", 10, "fail", 0, START), ("i", 10, "fail", 2, START),
                      ("j", 10, "fail", 1, APPEND), ("k", 10, "fail", "x", APPEND),
                      ("l", "", "fail", 1, START), ("m", "18446744073709551617", "fail", 1, START),
                      ("n", 10, "fail", 1, "18446744073709551616"), ("o", 10, "fail", "18446744073709551617", APPEND),
                      ("p", 10, "fail", "01", "02"), ("q", 10, "fail", 1, "+0")], {}),
    "too_large_is_not_taken": (run_of("b", 1, 1) + [("b", 10, "fail", 2, APPEND, {"Big": "x" * 200}),
                                                    ("b", 10, "fail", 3, APPEND)], {"max_msg_size": 100}),
    "discard_new_fail": (run_of("b", 1, 4), {"max_msgs": 2, "discard": "new"}),
    "discard_new_ok": (run_of("b", 1, 3, "ok") + [("b", 10, "ok", 4, COMMIT)], {"max_msgs": 2, "discard": "new"}),
    "ttl_and_api_level": ([("b", 10, "fail", 1, START, {"Nats-TTL": "5s"}),
                           ("c", 10, "ok", 1, START), ("c", 10, "ok", 2, APPEND, {"Nats-Required-Api-Level": "1"}),
                           ("c", 10, "ok", 3, APPEND, {"Nats-Required-Api-Level": "99"}),
                           ("c", 10, "ok", 4, APPEND)], {}),
    "atomic_headers_in_a_fast_batch": ([("b", 10, "fail", 1, START, {"Nats-Batch-Id": "x", "Nats-Batch-Sequence": "1"}),
                                        ("b", 10, "fail", 2, COMMIT, {"Nats-Batch-Commit": "1"})], {}),
    "interest_without_consumers": (run_of("b", 1, 3) + [("b", 10, "fail", 4, COMMIT)], {"retention": "interest"}),
    "counter_stream": ([("b", 10, "fail", 1, START, {"Nats-Incr": "2"}), ("b", 10, "fail", 2, APPEND, {"Nats-Incr": "3"}),
                        ("b", 10, "fail", 3, APPEND), ("c", 10, "ok", 1, START, {"Nats-Incr": "1"}),
                        ("c", 10, "ok", 2, APPEND, {"Nats-Incr": "x"}), ("c", 10, "ok", 3, COMMIT, {"Nats-Incr": "4"})],
                       {"allow_msg_counter": True}),
    "rollups_and_ttls": ([("b", 10, "fail", 1, START, {"Nats-TTL": "30s"}), ("b", 10, "fail", 2, APPEND),
                          ("b", 10, "fail", 3, APPEND, {"Nats-Rollup": "sub"}),
                          ("b", 10, "fail", 4, APPEND, {"Nats-Rollup": "bad"})],
                         {"allow_rollup_hdrs": True, "allow_msg_ttl": True}),
    "per_subject_limits": (run_of("b", 1, 4, "ok") + [("b", 10, "ok", 5, COMMIT, None, "b")],
                           {"max_msgs_per_subject": 2, "discard": "new", "discard_new_per_subject": True}),
    "expected_subject_sequence": ([("plain",), ("b", 10, "fail", 1, START, {"Nats-Expected-Last-Subject-Sequence": "1"}),
                                   ("b", 10, "fail", 2, APPEND, {"Nats-Expected-Last-Subject-Sequence": "2"}),
                                   ("b", 10, "fail", 3, COMMIT, {"Nats-Expected-Last-Subject-Sequence": "2"})], {}),
    "ping_opens_and_unknown": ([("p", 10, "ok", 1, PING), ("p", 10, "ok", 2, APPEND), ("q", 10, "fail", 1, PING),
                               ("q", 10, "fail", 2, APPEND), ("r", 10, "ok", 3, PING)], {}),
    "too_many_open_batches": ([(f"b{i}", 10, "ok", 1, START) for i in range(1001)]
                              + [("b0", 10, "ok", 2, COMMIT), ("x", 10, "ok", 1, START)], {}),
    "ids_quoted_as_nats_server": ([("bé\"\\q", 10, "fail", 1, START), ("bé\"\\q", 10, "fail", 2, COMMIT)], {}),
    "atomic_and_fast_batches_side_by_side": (
        [("b", 10, "fail", 1, START), ("atomic", 1), ("b", 10, "fail", 2, APPEND, {"Nats-Batch-Id": "A"}),
         ("atomic", 2), ("b", 10, "fail", 3, APPEND), ("atomic", 3, {"Nats-Batch-Commit": "1"}),
         ("b", 10, "fail", 4, COMMIT)], {"allow_atomic": True}),
    "transformed_subjects": (run_of("b", 1, 2) + [("b", 10, "fail", 3, COMMIT)],
                             {"subject_transform": {"src": "{S}.a", "dest": "{S}.t"}}),
    "disabling_drops_open_batches": (run_of("b", 1, 2) + [("update", {"allow_batched": False}),
                                                          ("b", 10, "fail", 3, APPEND),
                                                          ("update", {"allow_batched": True}),
                                                          ("b", 10, "fail", 3, APPEND)], {}),
    "sealed": (run_of("b", 1, 2) + [("update", {"allow_batched": True, "sealed": True}),
                                    ("b", 10, "fail", 3, APPEND)], {}),
}


def _with_name(config: dict[str, Any], name: str) -> dict[str, Any]:
    return json.loads(json.dumps(config).replace("{S}", name))


@pytest.mark.parametrize("storage", ["memory", "file"])
@pytest.mark.parametrize("case", sorted(CASES))
async def test_fast_batches_match_nats_server(on_both, case, storage):
    steps, config = CASES[case]

    async def run(nc: Any, name: str) -> list[Any]:
        return await scenario(steps, storage=storage, **_with_name(config, name))(nc, name)  # type: ignore[no-any-return]

    ours, theirs = await on_both(run, "FB")
    assert ours == theirs


async def test_answers_carry_flow_gap_err_and_the_closing_ack(on_both):
    """The wire shapes, asserted as values (the differential cases compare everything else)."""
    steps = run_of("b", 1, 4, "ok", flow=2) + [("b", 2, "ok", 7, APPEND),
                                                ("b", 2, "ok", 8, APPEND, {"Nats-Expected-Last-Sequence": "1"}),
                                                ("b", 2, "ok", 9, EOB)]
    ours, theirs = await on_both(scenario(steps), "FB")
    assert ours == theirs
    assert ours[:7] == [
        ("b.2.ok.1.0.$FI", {"type": "ack", "seq": 0, "msgs": 2}),
        ("b.2.ok.2.1.$FI", {"type": "ack", "seq": 2, "msgs": 2}),
        ("b.2.ok.4.1.$FI", {"type": "ack", "seq": 4, "msgs": 2}),
        ("b.2.ok.7.1.$FI", {"type": "gap", "last_seq": 5, "seq": 7}),
        ("b.2.ok.7.1.$FI", {"type": "ack", "seq": 6, "msgs": 2}),
        ("b.2.ok.8.1.$FI", {"type": "err", "seq": 8, "error": {
            "code": 400, "err_code": 10071, "description": "wrong last sequence: 5"}}),
        ("b.2.ok.9.3.$FI", {"stream": ours[6][1]["stream"], "seq": 5, "batch": "b", "count": 8})]
    assert ours[7] == (5, 1, 5)


async def test_no_ack_streams_still_get_flow_acks_and_the_closing_ack(on_both):
    async def run(nc: Any, name: str) -> list[Any]:
        await create(nc, {"name": name, "subjects": [f"{name}.>"], "allow_batched": True, "no_ack": True})
        b = await Batcher(nc, name).start()
        for step in run_of("b", 1, 3, flow=2) + [("b", 2, "fail", 4, COMMIT), ("c", 2, "fail", 3, APPEND)]:
            await b.send(*step)
        await poll_async(lambda: len(b.answers) >= 2, timeout=5, what="two answers")
        out = list(b.answers) + await _stored(nc, name)
        await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=5)
        return out

    ours, theirs = await on_both(run, "FB")
    assert ours == theirs
    assert [a for _, a in ours[:2]] == [{"type": "ack", "seq": 2, "msgs": 2},
                                         {"stream": ours[1][1]["stream"], "seq": 4, "batch": "b", "count": 4}]


async def test_config_rules_match_nats_server(on_both):
    async def run(nc: Any, name: str) -> list[Any]:
        async def api(subject: str, body: dict[str, Any]) -> Any:
            return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=5)).data)
        out = []
        made = await create(nc, {"name": name, "subjects": [f"{name}.>"], "allow_batched": True})
        out.append((made["config"].get("allow_batched"), made["config"]["metadata"]["_nats.req.level"]))
        out.append((await api(f"$JS.API.STREAM.CREATE.{name}m", {"name": f"{name}m", "mirror": {"name": name},
                                                                 "allow_batched": True}))["error"])
        plain = await create(nc, {"name": f"{name}p", "subjects": [f"{name}p.>"]})
        out.append(plain["config"].get("allow_batched"))
        turned = await api(f"$JS.API.STREAM.UPDATE.{name}p", {"name": f"{name}p", "subjects": [f"{name}p.>"],
                                                              "allow_batched": True})
        out.append((turned["config"].get("allow_batched"), turned["config"]["metadata"]["_nats.req.level"]))
        for stream in (name, f"{name}p"):
            await nc.request(f"$JS.API.STREAM.DELETE.{stream}", b"", timeout=5)
        return out

    ours, theirs = await on_both(run, "FB")
    assert ours == theirs
    assert ours == [(True, "4"), {"code": 400, "err_code": 10209,
                                  "description": "stream mirrors can not also use batch publishing"},
                    None, (True, "4")]


async def test_refusals_leave_other_clients_and_stored_messages_alone(jsbroker_server, unique):
    """A stream of malformed and refused batch messages: a plain publisher on another connection keeps
    getting its acks, the batch's good messages stay, the server keeps serving."""
    name = unique("FB")
    nc, other = await nats.connect(jsbroker_server.url), await nats.connect(jsbroker_server.url)
    try:
        js = other.jetstream()
        await create(nc, {"name": name, "subjects": [f"{name}.>"], "allow_batched": True, "max_msg_size": 100})
        b = await Batcher(nc, name).start()
        plain = []
        for step in run_of("good", 1, 3) + [("x", 10, "fail", 1, EOB), ("y" * 70, 10, "fail", 1, START),
                                              ("good", 10, "fail", 4, APPEND, {"Big": "x" * 300}),
                                              ("z", 10, "fail", 9, APPEND), ("w", 10, "never", 1, START)]:
            await b.send(*step)
            plain.append((await js.publish(f"{name}.p", b"p")).seq)
        await b.settle()
        codes = [a["error"]["err_code"] for _, a in b.answers if "error" in a]
        assert codes == [10206, 10207, 10054, 10208, 10206]
        await b.send("good", 10, "fail", 4, COMMIT)
        await b.settle()
        assert b.answers[-1] == ("good.10.fail.4.2.$FI", {"stream": name, "seq": 12, "batch": "good", "count": 4})
        assert plain == [2, 4, 6, 7, 8, 9, 10, 11]
        info = await js.stream_info(name)
        assert (info.state.messages, info.state.last_seq) == (12, 12)
    finally:
        await nc.close()
        await other.close()


@pytest.mark.slow
async def test_an_idle_batch_is_forgotten_after_ten_seconds(on_both):
    steps = run_of("b", 1, 2) + [("idle", 10.5), ("b", 10, "fail", 3, APPEND), ("b", 10, "fail", 1, START),
                                 ("b", 10, "fail", 2, COMMIT)]
    ours, theirs = await on_both(scenario(steps), "FB")
    assert ours == theirs
    assert ours[1][1]["error"]["err_code"] == 10208


# -- restarts ---------------------------------------------------------------------------------------


async def _restart_transcript(handle: Any) -> tuple[list[Any], list[Any]]:
    """(what happened up to the kill -9, what was there after it)."""
    out: list[Any] = []

    async def batch(steps: list[Step], then: Any = None) -> None:
        nc = await nats.connect(handle.url)
        b = await Batcher(nc, "FB").start()
        for step in steps:
            await b.send(*step)
        await b.settle()
        out.extend(b.answers)
        out.extend(await _stored(nc, "FB") if then == "stored" else [])
        await nc.close()

    nc = await nats.connect(handle.url)
    await nc.request("$JS.API.STREAM.CREATE.FB", json.dumps(
        {"name": "FB", "subjects": ["FB.>"], "allow_batched": True, "storage": "file"}).encode(), timeout=5)
    await nc.close()
    await batch(run_of("r1", 1, 25))  # flow acks at 10 and 20: acknowledged
    handle.restart()  # SIGTERM with r1 open
    await batch([("r1", 10, "fail", 26, APPEND)] + run_of("r2", 1, 5) + [("r2", 10, "fail", 6, COMMIT)])
    await batch(run_of("r3", 1, 12))
    handle.kill()  # kill -9 with r3 open
    handle.start()
    before, out = out, []
    await batch([("r3", 10, "fail", 13, APPEND)], then="stored")
    return before, out


@pytest.mark.slow
async def test_acknowledged_messages_survive_sigterm_and_kill_like_nats_server(server_factory):
    """Up to the kill -9 both servers must answer alike; after it jsbroker's promise is asserted in full
    (nats-server flushes its file store asynchronously and may lose what it acknowledged last)."""
    theirs, theirs_after = await _restart_transcript(server_factory("nats-server"))
    ours, ours_after = await _restart_transcript(server_factory("jsbroker"))
    assert ours == theirs
    unknown = {"code": 400, "err_code": 10208, "description": "batch publish ID unknown"}
    assert ("r1.10.fail.26.1.$FI", {"error": unknown, "stream": "FB", "seq": 0}) in ours
    assert ("r2.10.fail.6.2.$FI", {"stream": "FB", "seq": 31, "batch": "r2", "count": 6}) in ours
    assert ("r3.10.fail.10.1.$FI", {"type": "ack", "seq": 10, "msgs": 10}) in ours
    forgotten = ("r3.10.fail.13.1.$FI", {"error": unknown, "stream": "FB", "seq": 0})
    assert ours_after[0] == theirs_after[0] == forgotten
    assert ours_after[1] == (43, 1, 43)  # 25 + 6 + 12: every message stored before the kill survives
    assert [m[0] for m in ours_after[2:]] == list(range(1, 44)) and all(m[1] == "FB.a" for m in ours_after[2:])


# -- the state machine alone ------------------------------------------------------------------------


def test_parse_reads_the_reply_subject():
    assert fast_batch.parse("_INBOX.x.id.20.ok.3.1.$FI") == Ref("id", 3, 20, True, APPEND)
    assert fast_batch.parse("a.b.id.0.fail.1.0.$FI") == Ref("id", 1, 10, False, START)
    assert fast_batch.parse("p.id.99999.fail.1.0.$FI").flow == 65535
    for bad in ("p.id.10.fail.1.$FI", "id.10.fail.1.0.$FI", "p.id.10.fail.1.3.$FI", "p.id.10.fail.2.0.$FI",
                "p.id.10.fail.1.1.$FI", "p.id.10.fail.0.2.$FI", "p.id.10.nope.1.0.$FI", "p.id.10.ok.1.5.$FI",
                "p.id.10.ok.-1.1.$FI", f"p.id.10.ok.{2**64 - 1}.1.$FI", "p.id.10.ok.1.x.$FI"):
        with pytest.raises(errors.ApiError) as refused:
            fast_batch.parse(bad)
        assert refused.value.err_code == 10206, bad
    assert fast_batch.is_fast_batch("a.$FI") and not fast_batch.is_fast_batch(".$FI")


def _ref(seq: int, op: int = APPEND, batch: str = "b", gap_ok: bool = False, flow: int = 10) -> Ref:
    return Ref(batch, seq, flow, gap_ok, op)


def _kinds(answers: list[fast_batch.Answer]) -> list[tuple[str, int, int]]:
    return [(a.kind, a.a, a.b) for a in answers]


def test_a_batch_flows_and_commits():
    batches = Batches()
    answers, store = batches.receive(_ref(1, START, flow=2), 0)
    assert (_kinds(answers), store) == ([("flow", 0, 2)], True)
    assert batches.stored(_ref(1, START, flow=2), 7) == []
    assert batches.receive(_ref(2, flow=2), 0)[1]
    assert _kinds(batches.stored(_ref(2, flow=2), 8)) == [("flow", 2, 2)]
    answers, store = batches.receive(_ref(3, COMMIT, flow=2), 0)
    assert (answers, store) == ([], True)
    assert _kinds(batches.stored(_ref(3, COMMIT, flow=2), 9)) == [("ack", 9, 3)]
    assert len(batches) == 0
    rendered = fast_batch.render(fast_batch.Answer("ack", 9, 3), "b", b'{"stream":"S","seq":', b"", bytes)
    assert json.loads(rendered) == {"stream": "S", "seq": 9, "batch": "b", "count": 3}


def test_gaps_errors_and_timeouts():
    batches = Batches()
    batches.receive(_ref(1, START, gap_ok=True), 0)
    batches.stored(_ref(1, START, gap_ok=True), 1)
    answers, store = batches.receive(_ref(4, gap_ok=True), 0)
    assert (_kinds(answers), store) == ([("gap", 2, 4)], True)
    refused = batches.refused(_ref(4, gap_ok=True), errors.STREAM_NOT_MATCH(), late=False)
    assert [(a.kind, a.a, a.error.err_code if a.error else 0) for a in refused] == [("err", 4, 10060)]
    with pytest.raises(errors.ApiError) as unknown:
        batches.receive(_ref(5, gap_ok=True), fast_batch.TIMEOUT_NS + 1)  # idle too long: forgotten
    assert unknown.value.err_code == 10208 and len(batches) == 0


def test_a_refusal_while_storing_a_commit_leaves_the_batch_waiting_as_nats_server():
    batches = Batches()
    batches.receive(_ref(1, START), 0)
    batches.stored(_ref(1, START), 1)
    assert batches.receive(_ref(2, COMMIT), 0) == ([], True)
    late = batches.refused(_ref(2, COMMIT), errors.STREAM_WRONG_LAST_MSG_ID(id="x"), late=True)
    assert [(a.kind, a.needs_acks) for a in late] == [("error", True)]
    assert batches.receive(_ref(3), fast_batch.TIMEOUT_NS * 5) == ([], False)  # never expires, takes nothing
    assert len(batches) == 1


def test_inflight_limits_per_stream_and_per_server():
    inflight = Inflight()
    streams = [Batches(inflight) for _ in range(fast_batch.MAX_INFLIGHT_TOTAL // fast_batch.MAX_INFLIGHT_PER_STREAM)]
    for i in range(fast_batch.MAX_INFLIGHT_PER_STREAM):
        for stream in streams:
            stream.receive(_ref(1, START, batch=str(i)), 0)
    with pytest.raises(errors.ApiError) as per_stream:
        streams[0].receive(_ref(1, START, batch="one more"), 0)
    extra = Batches(inflight)
    with pytest.raises(errors.ApiError) as per_server:
        extra.receive(_ref(1, START, batch="one more"), 0)
    assert (per_stream.value.err_code, per_server.value.err_code, per_server.value.code) == (10211, 10211, 429)
    extra.receive(_ref(1, START, batch="later"), fast_batch.TIMEOUT_NS)  # the idle ones are gone by then
    assert inflight.total == 1
    streams[0].close()
    assert inflight.total == 1 and len(streams[0]) == 0
