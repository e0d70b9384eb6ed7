"""A model-based differential restart fuzzer: random JetStream operation sequences, with server restarts
(SIGTERM and kill -9) at random points, run against jsbroker and nats-server and compared after every step.

A sequence is a list of plain tuples (readable, so a shrunk failing one is pasted into a test as it is):

    ("add_stream", "S1", {config})            subjects are relative: "a" means "<stream name>.a"
    ("update_stream", "S1", {config})
    ("delete_stream", "S1")
    ("add_consumer", "S1", "C1", {config})    push when config has "deliver_subject": True (made unique);
                                              "opt_start_time": {"seq": k} is the stored time of message k
    ("delete_consumer", "S1", "C1")
    ("pub", "S1", "a", payload, msg_id)       msg_id None publishes without Nats-Msg-Id
    ("fetch", "S1", "C1", batch)              a no_wait pull request
    ("ack", "S1", "C1", kind, index)          kind +ACK / -NAK / +TERM / +WPI, sent as a request (ack_sync);
                                              index picks one of the client's unacked deliveries
    ("delete_msg", "S1", seq)
    ("purge", "S1", {request})                {} / {"filter": "a"} / {"seq": n} / {"keep": n}, filter relative
    ("reset", "S1", "C1", seq)                CONSUMER.RESET, body {"seq": seq}, or empty when seq is None
    ("pause", "S1", "C1", paused)             CONSUMER.PAUSE until 2099 (True) or resume (False)
    ("restart", "term" | "kill")

After every step the pair is compared: the step's answer, then the normalised STREAM.INFO and CONSUMER.INFO
of everything the model knows, and the messages every push consumer delivered so far (a pull consumer's
deliveries are the answer of its fetch step). nats-server does some work after it answers (interest and
work-queue removals, push deliveries), so the comparison is retried for a short while before it counts.

The kill -9 rule: jsbroker promises that everything it confirmed (a pub ack, an ack_sync reply, an API
answer, a delivery it sent) is on disk before the next output, so a `kill -9` loses nothing a client saw;
nats-server flushes consumer state lazily and may forget recent deliveries and acks on `kill -9`. So a
"kill" step SIGKILLs jsbroker but stops nats-server with SIGTERM: jsbroker after a crash must equal
nats-server after a clean stop. A "term" step stops both with SIGTERM.

`shrink` reduces a failing sequence by delta debugging over its steps (ddmin) and `regression_source`
prints it as a test case. Used by tests/jetstream/test_restart_fuzz.py (fixed seeds, every CI run) and
bench/fuzz/restart_fuzz.py (the long mode).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import pprint
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import nats
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

from tests.differential import normalise
from tests.servers import JSBROKER, NATS_SERVER, ServerHandle

Op = tuple[Any, ...]
ACK_WAIT_NS = 3600 * 10**9  # an hour: no ack wait expires during a sequence, so redeliveries are the naks'
PAUSE_UNTIL = "2099-01-01T00:00:00Z"
SETTLE_TIMEOUT = 2.0  # how long a difference may last before it counts (nats-server's asynchronous work)
REQUEST_TIMEOUT = 1.0
SUBJECTS = ("a", "b", "c.x", "c.y")
# Volatile beyond tests/differential.py: the leader's name, time left in a pause
VOLATILE = ("leader", "pause_remaining")
PUSH_PROGRESS = ("delivered", "ack_floor", "num_ack_pending", "num_pending", "num_redelivered", "num_waiting")


# ----------------------------------------------------------------------------------------------------
# generation


@dataclass
class _Stream:
    retention: str
    consumers: dict[str, dict[str, Any]] = field(default_factory=dict)
    published: int = 0


class Generator:
    """Random valid operation sequences from a seed. It keeps a small model (which streams and consumers
    exist, how many messages were published) so most steps are valid; a few are not, on purpose."""

    def __init__(self, seed: int, length: int = 20, restarts: tuple[int, int] = (1, 3)) -> None:
        self.rng = random.Random(seed)
        self.length = length
        self.restarts = restarts
        self.streams: dict[str, _Stream] = {}
        self.names = itertools.count(1)
        self.payloads = itertools.count(1)

    def sequence(self) -> list[Op]:
        rng = self.rng
        ops: list[Op] = [self._add_stream()]
        if rng.random() < 0.5:  # consumers applied with their stream (GitOps): created on an empty stream
            s = next(iter(self.streams))
            ops += [self._add_consumer(s, self.streams[s]) for _ in range(rng.randint(1, 2))]
        restart_at = set(rng.sample(range(2, self.length + 1), rng.randint(*self.restarts)))
        while len(ops) < self.length:
            if len(ops) in restart_at:
                ops.append(("restart", rng.choice(("term", "kill"))))
                if rng.random() < 0.8:
                    ops.append(self._fetch_any() or ("restart", "term"))
                continue
            ops.append(self._step())
        return ops

    def _step(self) -> Op:
        rng = self.rng
        live = {s: st for s, st in self.streams.items()}
        if not live:
            return self._add_stream()
        s = rng.choice(sorted(live))
        st = live[s]
        consumers = sorted(st.consumers)
        weights = {
            "pub": 30, "fetch": 14 if consumers else 0, "ack": 12 if consumers else 0,
            "add_consumer": 14 if len(consumers) < 3 else 2, "delete_msg": 3, "purge": 3, "reset": 3 if consumers else 0,
            "pause": 2 if consumers else 0, "update_stream": 2, "delete_consumer": 1 if consumers else 0,
            "add_stream": 2 if len(live) < 2 else 0, "delete_stream": 1,
        }
        kind = rng.choices(list(weights), list(weights.values()))[0]
        c = rng.choice(consumers) if consumers else ""
        if kind == "pub":
            st.published += 1
            msg_id = f"id{rng.randint(1, max(2, st.published))}" if rng.random() < 0.25 else None
            return ("pub", s, rng.choice(SUBJECTS), f"m{next(self.payloads)}", msg_id)
        if kind == "fetch":
            return ("fetch", s, c, rng.choice((1, 1, 2, 3, 5, 10)))
        if kind == "ack":
            ack = rng.choices(("+ACK", "-NAK", "+TERM", "+WPI"), (10, 3, 2, 1))[0]
            return ("ack", s, c, ack, rng.randint(0, 4))
        if kind == "add_consumer":
            return self._add_consumer(s, st)
        if kind == "delete_msg":
            return ("delete_msg", s, rng.randint(1, st.published + 2))
        if kind == "purge":
            req = rng.choice(({}, {"filter": rng.choice(SUBJECTS[:3] + ("c.*",))}, {"seq": rng.randint(1, st.published + 2)},
                              {"keep": rng.randint(0, 3)}))
            return ("purge", s, req)
        if kind == "reset":
            seq = rng.choice((None, 0, rng.randint(1, st.published + 2)))
            return ("reset", s, c, seq)
        if kind == "pause":
            return ("pause", s, c, rng.random() < 0.7)
        if kind == "update_stream":
            return ("update_stream", s, self._stream_config(st.retention))
        if kind == "delete_consumer":
            del st.consumers[c]
            return ("delete_consumer", s, c)
        if kind == "delete_stream":
            del self.streams[s]
            return ("delete_stream", s)
        return self._add_stream()

    def _fetch_any(self) -> Op | None:
        pulls = [(s, c) for s, st in sorted(self.streams.items()) for c, cfg in sorted(st.consumers.items())
                 if "deliver_subject" not in cfg]
        if not pulls:
            return None
        s, c = self.rng.choice(pulls)
        return ("fetch", s, c, self.rng.choice((1, 3, 10)))

    def _stream_config(self, retention: str) -> dict[str, Any]:
        rng = self.rng
        cfg: dict[str, Any] = {"subjects": ["a", "b", "c.*"], "retention": retention,
                               "storage": "memory" if rng.random() < 0.15 else "file"}
        if rng.random() < 0.3:
            cfg["max_msgs"] = rng.randint(2, 12)
        if rng.random() < 0.2:
            cfg["max_msgs_per_subject"] = rng.randint(1, 4)
        if rng.random() < 0.15:
            cfg["discard"] = "new"
        return cfg

    def _add_stream(self) -> Op:
        s = f"S{next(self.names)}"
        retention = self.rng.choices(("limits", "interest", "workqueue"), (6, 2, 2))[0]
        self.streams[s] = _Stream(retention)
        return ("add_stream", s, self._stream_config(retention))

    def _add_consumer(self, s: str, st: _Stream) -> Op:
        rng = self.rng
        name = f"C{next(self.names)}"
        push = rng.random() < 0.35
        cfg: dict[str, Any] = {"ack_policy": rng.choices(("explicit", "all", "none"), (6, 2, 2))[0],
                               "ack_wait": ACK_WAIT_NS}
        policy = rng.choice(("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"))
        filters = rng.choice(([], [], ["a"], ["c.*"], ["a", "c.x"], ["b"]))
        if st.retention == "workqueue":  # nats-server's rules for work-queue consumers
            policy, cfg["ack_policy"] = "all", "explicit"
            taken = [f for other in st.consumers.values() for f in other.get("filter_subjects", [])]
            filters = [rng.choice([f for f in SUBJECTS if f not in taken] or ["a"])]
        cfg["deliver_policy"] = policy
        if policy == "by_start_sequence":
            cfg["opt_start_seq"] = rng.randint(1, st.published + 3)
        if policy == "by_start_time":
            cfg["opt_start_time"] = {"seq": rng.randint(1, st.published + 2)}
        if filters:
            cfg["filter_subjects"] = filters
        if rng.random() < 0.3:
            cfg["max_deliver"] = rng.randint(2, 4)
        if push:
            cfg["deliver_subject"] = True
            if cfg["ack_policy"] != "none":
                cfg["max_ack_pending"] = rng.randint(1, 5)
        elif rng.random() < 0.3 and cfg["ack_policy"] != "none":
            cfg["max_ack_pending"] = rng.randint(1, 6)
        st.consumers[name] = cfg
        return ("add_consumer", s, name, cfg)


def generate(seed: int, length: int = 20, restarts: tuple[int, int] = (1, 3)) -> list[Op]:
    return Generator(seed, length, restarts).sequence()


# ----------------------------------------------------------------------------------------------------
# running one side


@dataclass
class _Delivery:
    reply: str
    dseq: int
    sseq: int


class Side:
    """One server and the client's view of it: connection, push subscriptions, unacked deliveries."""

    def __init__(self, handle: ServerHandle) -> None:
        self.handle = handle
        self.nc: Any = None
        self.push: dict[tuple[str, str], list[Any]] = {}  # (stream, consumer) -> deliveries seen
        self.deliver_subjects: dict[tuple[str, str], str] = {}
        self.unacked: dict[tuple[str, str], list[_Delivery]] = {}

    async def connect(self) -> None:
        self.nc = await nats.connect(self.handle.url, allow_reconnect=False, max_reconnect_attempts=0)
        for key, subject in self.deliver_subjects.items():
            await self._subscribe(key, subject)

    async def close(self) -> None:
        if self.nc is not None:
            try:
                await self.nc.close()
            except Exception:  # noqa: BLE001 - the server may be gone already
                pass
            self.nc = None

    async def _subscribe(self, key: tuple[str, str], subject: str) -> None:
        async def got(msg: Any) -> None:
            self.push.setdefault(key, []).append(delivery_value(msg, key[0]))
            self._remember(key, msg)

        await self.nc.subscribe(subject, cb=got)

    def _remember(self, key: tuple[str, str], msg: Any) -> None:
        meta = ack_metadata(msg.reply)
        if meta is not None:
            self.unacked.setdefault(key, []).append(_Delivery(msg.reply, meta[2], meta[1]))

    async def request(self, subject: str, body: Any = b"", timeout: float = REQUEST_TIMEOUT) -> Any:
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        try:
            msg = await self.nc.request(subject, data, timeout=timeout)
        except NoRespondersError:
            return ("status", "503")
        except NatsTimeout:
            return "no reply"
        status = (msg.headers or {}).get("Status")
        if status:
            return ("status", status, (msg.headers or {}).get("Description", ""))
        if not msg.data:
            return "empty"
        try:
            return json.loads(msg.data)
        except ValueError:
            return ("raw", msg.data.decode(errors="replace"))

    async def fetch(self, stream: str, consumer: str, batch: int) -> Any:
        """A no_wait pull request: the messages, then the status that ends it (or "timeout")."""
        inbox = self.nc.new_inbox()
        got: asyncio.Queue[Any] = asyncio.Queue()
        sub = await self.nc.subscribe(inbox, cb=got.put)
        await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
                              json.dumps({"batch": batch, "no_wait": True}).encode(), reply=inbox)
        out: list[Any] = []
        key = (stream, consumer)
        try:
            while len(out) < batch:
                try:
                    msg = await asyncio.wait_for(got.get(), REQUEST_TIMEOUT)
                except asyncio.TimeoutError:
                    out.append("timeout")
                    break
                status = (msg.headers or {}).get("Status")
                if status:
                    out.append(("status", status, (msg.headers or {}).get("Description", "")))
                    break
                out.append(delivery_value(msg, stream))
                self._remember(key, msg)
        finally:
            await sub.unsubscribe()
        return out

    async def ack(self, stream: str, consumer: str, kind: str, index: int) -> Any:
        pending = self.unacked.get((stream, consumer), [])
        if not pending:
            return "nothing to ack"
        d = pending[index % len(pending)]
        if kind in ("+ACK", "+TERM", "-NAK"):
            pending.remove(d)  # a nak'ed one comes back as a new delivery
        return (d.sseq, await self.request(d.reply, kind.encode()))

    def forget(self, stream: str, consumer: str | None = None) -> None:
        for table in (self.push, self.deliver_subjects, self.unacked):
            for key in [k for k in table if k[0] == stream and consumer in (None, k[1])]:
                del table[key]


def ack_metadata(reply: str | None) -> tuple[int, int, int, int] | None:
    """(delivery count, stream seq, consumer seq, pending) from a v1 or v2 ack subject."""
    parts = (reply or "").split(".")
    if parts[:2] != ["$JS", "ACK"] or len(parts) not in (9, 11, 12):
        return None
    at = 4 if len(parts) == 9 else 6
    return int(parts[at]), int(parts[at + 1]), int(parts[at + 2]), int(parts[at + 4])


def delivery_value(msg: Any, stream: str) -> tuple[Any, ...]:
    """(subject without the stream prefix, payload, delivery count, stream seq, consumer seq, pending)."""
    subject = msg.subject.removeprefix(stream + ".")
    meta = ack_metadata(msg.reply)
    return (subject, msg.data.decode(), *(meta or (msg.reply,)))


# ----------------------------------------------------------------------------------------------------
# running a sequence on both sides


@dataclass
class Difference:
    step: int  # index into the ops
    op: Op
    what: str
    jsbroker: Any
    nats_server: Any

    @property
    def changed(self) -> dict[str, tuple[Any, Any]]:
        """The differing top-level fields of two dicts ({"": both values} otherwise)."""
        ours, theirs = self.jsbroker, self.nats_server
        if not (isinstance(ours, dict) and isinstance(theirs, dict)):
            return {"": (ours, theirs)}
        return {k: (ours.get(k), theirs.get(k)) for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)}

    @property
    def signature(self) -> tuple[str, ...]:
        """What shrinking keeps and the long mode counts: the kind of step, what differed (answer, stream,
        consumer, push) and which fields."""
        return (self.op[0], self.what.split()[0], *self.changed)

    @property
    def known(self) -> str | None:
        """The open difference (a REGRESSIONS xfail of test_restart_fuzz.py) this one is an instance of."""
        return next((name for name, matches in KNOWN.items() if matches(self)), None)

    def __str__(self) -> str:
        fields = "".join(f"\n  {k or 'value'}: jsbroker {a!r} | nats-server {b!r}" for k, (a, b) in self.changed.items())
        return f"step {self.step} {self.op!r}: {self.what} differs{fields}"


def _limit_removal_pending_race(d: Difference) -> bool:
    """Push deliveries that differ only in the pending count of their ack replies (the last field): nats-server
    terminates a pending message a limit removed in a goroutine, racing the count of the new message."""
    ours, theirs = d.changed.get("", (None, None))
    return (d.what.startswith("push") and isinstance(ours, list) and isinstance(theirs, list)
            and len(ours) == len(theirs) and all(a[:-1] == b[:-1] for a, b in zip(ours, theirs)))


def _skip_time_before_message(d: Difference) -> bool:
    """A by_start_time consumer that nats-server starts further on (past the end): its skip records carry a
    100 ms-coarse time, which can be before the message stored just before, and its time lookup then misses."""
    if d.op[0] != "add_consumer" or d.op[3].get("deliver_policy") != "by_start_time":
        return False
    delivered = d.changed.get("delivered")
    return (set(d.changed) <= {"delivered", "ack_floor", "num_pending"} and delivered is not None
            and delivered[0]["stream_seq"] < delivered[1]["stream_seq"])


def _compact_tombstone_first_seq(d: Difference) -> bool:
    """A purge up to a sequence that empties nats-server's file store: its live state shows the first removed
    message again as first_seq (with its time and the rest as deleted) while jsbroker shows the empty stream
    past its last sequence, as nats-server itself does after a restart (seen with a purge all before: its
    compaction of the emptied last block leaves the stream's first at the removed message until a restart)."""
    if d.op[0] != "purge" or not d.what.startswith("stream") or set(d.changed) != {"state"}:
        return False
    ours, theirs = d.changed["state"]
    return (isinstance(ours, dict) and isinstance(theirs, dict) and ours["messages"] == theirs["messages"] == 0
            and ours["last_seq"] == theirs["last_seq"] and ours["first_seq"] == ours["last_seq"] + 1
            and theirs.get("num_deleted") == theirs["last_seq"] - theirs["first_seq"] + 1)


def _nats_server_store_error(d: Difference) -> bool:
    """nats-server failing a STREAM.CREATE with 10049 "error creating store for stream" (its log: mkdir of the
    account's streams directory, no such file): it removes that directory when an account's last file stream
    is deleted, and a create racing the removal fails. Seen a few times per thousand sequences, never twice."""
    theirs = d.changed.get("error", (None, None))[1]
    return d.op[0] == "add_stream" and isinstance(theirs, dict) and theirs.get("err_code") == 10049


# Open differences, by the shape they show after the step (names as in test_restart_fuzz.XFAIL): a
# difference matching one is counted, not shrunk again. They come from nats-server's timing, from a live
# state nats-server itself corrects at a restart, or from nats-server's store directory race.
KNOWN: dict[str, Callable[[Difference], bool]] = {
    "limit_removal_pending_race": _limit_removal_pending_race,
    "skip_time_before_message": _skip_time_before_message,
    "compact_tombstone_first_seq": _compact_tombstone_first_seq,
    "nats_server_store_error": _nats_server_store_error,
}


@dataclass
class Stats:
    sequences: int = 0
    steps: int = 0
    restarts: int = 0
    kills: int = 0


class Pair:
    """jsbroker and nats-server, reused across sequences (each sequence uses fresh stream names)."""

    def __init__(self, jsbroker: ServerHandle, nats_server: ServerHandle) -> None:
        self.sides = {JSBROKER: Side(jsbroker), NATS_SERVER: Side(nats_server)}
        self.stats = Stats()
        self.runs = itertools.count()

    async def connect(self) -> None:
        await asyncio.gather(*(s.connect() for s in self.sides.values()))

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.sides.values()))

    async def restart(self, how: str) -> None:
        await self.close()
        ours, theirs = self.sides[JSBROKER].handle, self.sides[NATS_SERVER].handle
        # the kill -9 rule (module docstring): a crashed jsbroker against a cleanly stopped nats-server
        await asyncio.gather(asyncio.to_thread(ours.kill if how == "kill" else ours.stop),
                             asyncio.to_thread(theirs.stop))
        await asyncio.gather(asyncio.to_thread(ours.start), asyncio.to_thread(theirs.start))
        self.stats.restarts += 1
        self.stats.kills += how == "kill"
        await self.connect()

    async def ensure_running(self) -> None:
        """After a failed sequence a server may be down or a connection closed: bring both back."""
        for side in self.sides.values():
            proc = side.handle.proc
            if proc is None or proc.poll() is not None:
                await side.close()
                await asyncio.to_thread(side.handle.start)
            if side.nc is None or side.nc.is_closed:
                await side.close()
                await side.connect()

    async def run(self, ops: Sequence[Op], prefix: str | None = None) -> Difference | None:
        """Run one sequence on both servers; the first difference, or None. Streams are deleted after."""
        prefix = prefix or f"F{time.time_ns() % 10**9}x{next(self.runs)}"
        await self.ensure_running()
        runner = _Run(self, prefix)
        try:
            for i, op in enumerate(ops):
                diff = await runner.step(i, op)
                self.stats.steps += 1
                if diff is not None:
                    return diff
            return None
        finally:
            self.stats.sequences += 1
            await runner.cleanup()


class _Run:
    """One sequence's names and the model of what exists (for the comparison after each step)."""

    def __init__(self, pair: Pair, prefix: str) -> None:
        self.pair = pair
        self.prefix = prefix
        self.streams: dict[str, set[str]] = {}  # logical stream -> logical consumers that may exist

    def sname(self, s: str) -> str:
        return f"{self.prefix}_{s}"

    async def step(self, i: int, op: Op) -> Difference | None:
        if op[0] == "restart":
            await self.pair.restart(op[1])
            answers = {kind: "restarted" for kind in self.pair.sides}
        else:
            kinds = list(self.pair.sides)
            results = await asyncio.gather(*(self.apply(self.pair.sides[k], op) for k in kinds))
            answers = dict(zip(kinds, results))
        self.track(op)
        volatile = VOLATILE + (PUSH_PROGRESS if self.pushes(op) else ())
        ours, theirs = (normalise(answers[k], volatile) for k in (JSBROKER, NATS_SERVER))
        if ours != theirs:
            return Difference(i, op, "answer", ours, theirs)
        return await self.compare(i, op)

    def pushes(self, op: Op) -> bool:
        """A RESET of a push consumer: nats-server answers it while its delivery goroutine may already be
        sending again, so the answer's progress fields depend on timing (seen under load: delivered 2 vs 0).
        The settled CONSUMER.INFO after the step compares them instead."""
        return op[0] == "reset" and any((self.sname(op[1]), op[2]) in side.deliver_subjects
                                        for side in self.pair.sides.values())

    def track(self, op: Op) -> None:
        kind = op[0]
        if kind == "add_stream":
            self.streams.setdefault(op[1], set())
        elif kind == "delete_stream":
            self.streams.pop(op[1], None)
        elif kind == "add_consumer" and op[1] in self.streams:
            self.streams[op[1]].add(op[2])
        elif kind == "delete_consumer" and op[1] in self.streams:
            self.streams[op[1]].discard(op[2])

    async def observe(self, side: Side) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for s, consumers in sorted(self.streams.items()):
            name = self.sname(s)
            info = await side.request(f"$JS.API.STREAM.INFO.{name}")
            out[f"stream {s}"] = info
            for c in sorted(consumers):
                out[f"consumer {s}/{c}"] = await side.request(f"$JS.API.CONSUMER.INFO.{name}.{c}")
                if (name, c) in side.deliver_subjects:
                    out[f"push {s}/{c}"] = list(side.push.get((name, c), []))
        return normalise(out, VOLATILE)

    async def compare(self, i: int, op: Op) -> Difference | None:
        ours_side, theirs_side = self.pair.sides[JSBROKER], self.pair.sides[NATS_SERVER]
        deadline = time.monotonic() + SETTLE_TIMEOUT
        pushing = any(ours_side.deliver_subjects.values()) or any(theirs_side.deliver_subjects.values())
        previous = None
        while True:
            ours, theirs = await asyncio.gather(self.observe(ours_side), self.observe(theirs_side))
            if ours == theirs:
                # push deliveries are asynchronous: equal twice in a row, a moment apart, means settled
                if not pushing or previous == ours:
                    return None
                previous = ours
                await asyncio.sleep(0.02)  # let in-flight push deliveries arrive before the second look
                continue
            previous = None
            if time.monotonic() > deadline:
                # the first difference that is not an open one (KNOWN), if any: a known one means all are
                diffs = [Difference(i, op, k, ours.get(k), theirs.get(k))
                         for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
                return next((d for d in diffs if d.known is None), diffs[0])
            await asyncio.sleep(0.05)  # nats-server finishes removals and deliveries after it answers

    async def apply(self, side: Side, op: Op) -> Any:
        kind, s = op[0], self.sname(op[1])
        if kind in ("add_stream", "update_stream"):
            verb = "CREATE" if kind == "add_stream" else "UPDATE"
            return await side.request(f"$JS.API.STREAM.{verb}.{s}", self.stream_config(s, op[2]))
        if kind == "delete_stream":
            side.forget(s)
            return await side.request(f"$JS.API.STREAM.DELETE.{s}")
        if kind == "add_consumer":
            return await self.add_consumer(side, s, op[2], op[3])
        if kind == "delete_consumer":
            side.forget(s, op[2])
            return await side.request(f"$JS.API.CONSUMER.DELETE.{s}.{op[2]}")
        if kind == "pub":
            _, _, subject, payload, msg_id = op
            headers = {"Nats-Msg-Id": msg_id} if msg_id else None
            try:
                msg = await side.nc.request(f"{s}.{subject}", payload.encode(), timeout=REQUEST_TIMEOUT,
                                            headers=headers)
            except NoRespondersError:
                return ("status", "503")
            except NatsTimeout:
                return "no reply"
            return json.loads(msg.data)
        if kind == "fetch":
            return await side.fetch(s, op[2], op[3])
        if kind == "ack":
            return await side.ack(s, op[2], op[3], op[4])
        if kind == "delete_msg":
            return await side.request(f"$JS.API.STREAM.MSG.DELETE.{s}", {"seq": op[2], "no_erase": True})
        if kind == "purge":
            req = dict(op[2])
            if "filter" in req:
                req["filter"] = f"{s}.{req['filter']}"
            return await side.request(f"$JS.API.STREAM.PURGE.{s}", req)
        if kind == "reset":
            body = b"" if op[3] is None else {"seq": op[3]}
            return await side.request(f"$JS.API.CONSUMER.RESET.{s}.{op[2]}", body)
        if kind == "pause":
            body = {"pause_until": PAUSE_UNTIL} if op[3] else {}
            return await side.request(f"$JS.API.CONSUMER.PAUSE.{s}.{op[2]}", body)
        raise ValueError(f"unknown op {op!r}")

    def stream_config(self, s: str, cfg: dict[str, Any]) -> dict[str, Any]:
        return {**cfg, "name": s, "subjects": [f"{s}.{subj}" for subj in cfg["subjects"]]}

    async def add_consumer(self, side: Side, s: str, c: str, spec: dict[str, Any]) -> Any:
        cfg = {**spec, "durable_name": c}
        if "filter_subjects" in cfg:
            cfg["filter_subjects"] = [f"{s}.{f}" for f in cfg["filter_subjects"]]
        if "opt_start_time" in cfg:
            cfg["opt_start_time"] = await self.message_time(side, s, cfg["opt_start_time"]["seq"])
        if cfg.get("deliver_subject"):
            cfg["deliver_subject"] = f"_P.{s}.{c}"
        answer = await side.request(f"$JS.API.CONSUMER.CREATE.{s}.{c}", {"stream_name": s, "config": cfg})
        if isinstance(answer, dict) and "error" not in answer and cfg.get("deliver_subject"):
            key = (s, c)
            if key not in side.deliver_subjects:
                side.deliver_subjects[key] = cfg["deliver_subject"]
                await side._subscribe(key, cfg["deliver_subject"])
        return answer

    async def message_time(self, side: Side, s: str, seq: int) -> str:
        """The stored time of the first message at or after `seq`; now when there is none (all later
        messages are after it on both servers)."""
        got = await side.request(f"$JS.API.STREAM.MSG.GET.{s}", {"seq": seq, "next_by_subj": f"{s}.>"})
        if isinstance(got, dict) and "message" in got:
            return str(got["message"]["time"])
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{time.time_ns() % 10**9:09d}Z"

    async def cleanup(self) -> None:
        for side in self.pair.sides.values():
            if side.nc is None or side.nc.is_closed:
                continue
            for s in self.streams:
                await side.request(f"$JS.API.STREAM.DELETE.{self.sname(s)}")
                side.forget(self.sname(s))
            side.unacked.clear()


# ----------------------------------------------------------------------------------------------------
# shrinking and reporting


async def reproduces(pair: Pair, ops: Sequence[Op], like: Difference | None = None, tries: int = 2
                     ) -> Difference | None:
    """The difference if `ops` shows one (of `like`'s signature) in any of `tries` runs (a few nats-server
    timings vary)."""
    for _ in range(tries):
        diff = await pair.run(ops)
        if diff is not None and (like is None or diff.signature == like.signature):
            return diff
    return None


async def shrink(pair: Pair, ops: Sequence[Op], budget: float = 300.0,
                 log: Callable[[str], None] = lambda _: None) -> tuple[list[Op], Difference | None]:
    """ddmin over the steps: the smallest failing list found within `budget` seconds, and its difference.
    Only the steps up to the first failing one matter, so the list is cut there first."""
    deadline = time.monotonic() + budget
    first = await reproduces(pair, ops)
    if first is None:
        return list(ops), None
    current, diff = list(ops[: first.step + 1]), first
    n = 2
    while len(current) >= 2 and time.monotonic() < deadline:
        chunk = max(1, len(current) // n)
        reduced = False
        for start in range(0, len(current), chunk):
            candidate = current[:start] + current[start + chunk:]
            if not candidate or time.monotonic() > deadline:
                continue
            got = await reproduces(pair, candidate, first)
            if got is not None:
                current, diff = candidate[: got.step + 1], got
                log(f"shrunk to {len(current)} steps")
                n = max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(current), n * 2)
    return current, diff


def regression_source(ops: Sequence[Op], diff: Difference | None) -> str:
    """The shrunk sequence as a readable list for tests/jetstream/test_restart_fuzz.py's REGRESSIONS."""
    body = pprint.pformat(list(ops), width=110, sort_dicts=False)
    note = f"# {str(diff).splitlines()[0]}\n" if diff is not None else ""
    return note + body
