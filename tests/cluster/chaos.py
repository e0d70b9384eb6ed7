"""The chaos run (issue 35, part 1): the ORDERS pipeline on the real one-node cluster while its parts fail.

The chart with its defaults (only the image set) runs the broker StatefulSet and the two operator
replicas; the ORDERS example's Stream and Consumers are applied. On the host (this machine is the node):
- a generator publishes orders 1, 2, ... to ORDERS.received through the broker's client Service, each
  with Nats-Msg-Id order:<i> and retried until acknowledged, remembering each ack's sequence;
- a worker pulls from the NEW consumer and acknowledges every message (ack_sync);
- the Spark driver (tests/cluster/chaos_driver.py, its own process; a driver on the host, executors in
  local mode) runs the pipeline's processing query into the de-duplicating sink (ORDERS.processed /
  ORDERS.rejected, msgId processed:<order id>) and writes the same micro-batches to parquet.

Faults come from a seeded schedule (`schedule`): each round is every fault kind once, shuffled, after a
random quiet gap, and every resource action once, dealt to the round's faults at random (the others get
none); an action is applied while its fault is still unrecovered:

    broker-delete    the broker pod deleted (graceful: preStop lame duck mode, then the StatefulSet's new pod)
    broker-kill      SIGKILL of the broker container's process (from the host, its pid from crictl)
    broker-oom       the broker container's memory limit (its cgroup v1 memory.limit_in_bytes) set just
                     above its usage, then a publish burst to a subscriber that never reads: the kernel's
                     OOM killer ends it (the container's last state says OOMKilled)
    operator-delete  the pod holding the operators' Lease deleted
    operator-kill    SIGKILL of the leading operator container's process
    spark-kill       SIGKILL of the driver's process group, restarted at once from its checkpoint
    actions: reset   (DISPATCH reset-to-sequence), pause (Consumer new: spec.pauseUntil an hour ahead,
                     so the server stops delivering to the worker; removed after recovery: it drains the
                     backlog), hold (pause-reconciliation on Stream orders, lifted after recovery), apply (a
                     new spec.description for Consumer dispatch)

Recovery, from the fault to: broker - its pod Ready again with a new container and a publish acknowledged
after that; operator - a probe Stream created after the fault is Synced; spark - both queries commit a new
batch. At the end (`check`): every generated order is once in the sink stream and once in the parquet
output, every acknowledged order is in ORDERS at its acknowledged sequence with its payload, the
consumers' positions equal those nats-server gives the same messages and operations, every resource is
Ready with its status equal to the server's, and no container restarted more than the faults explain.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client
import nats
import pyarrow.parquet as pq
import yaml
from kubernetes.client.rest import ApiException
from nats.js.errors import APIError

from jsoperator import status as operator_status
from jsspark.pipeline import generator as orders
from tests.cluster import e2e
from tests.cluster.e2e import BROKER, BROKER_PODS, GROUP, OPERATOR_PODS, RELEASE, STARTUP, VERSION, Kube
from tests.polling import poll
from tests.servers import start_nats_server

NAMESPACE = "jk-chaos"
FAULTS = ("broker-delete", "broker-kill", "broker-oom", "operator-delete", "operator-kill", "spark-kill")
ACTIONS = ("reset", "pause", "hold", "apply")
RECOVERY = 300.0  # seconds a fault may take to recover on the loaded 2-core machine
DRAIN = 900.0  # seconds for the pipeline to catch up at the end (Spark batches take minutes on a loaded machine)
DURABLES = {"new": "NEW", "dispatch": "DISPATCH", "monitor": "MONITOR"}
Crictl = Callable[..., subprocess.CompletedProcess[str]]


# The schedule ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    gap: float  # quiet seconds before the fault
    fault: str
    action: str | None  # applied while the fault is unrecovered


def schedule(seed: int, gap: tuple[float, float] = (5.0, 20.0)) -> Iterator[Step]:
    """Rounds of every fault kind once, in a seeded order, each with a seeded gap; every action once a
    round, on seeded faults (so one round, as in CI, draws each action)."""
    rng = random.Random(seed)
    while True:
        kinds = list(FAULTS)
        rng.shuffle(kinds)
        actions: list[str | None] = [*ACTIONS, *[None] * (len(FAULTS) - len(ACTIONS))]
        rng.shuffle(actions)
        for kind, action in zip(kinds, actions):
            yield Step(round(rng.uniform(*gap), 1), kind, action)


@dataclass
class Done:
    """One step as it happened: when (seconds from the first fault), how long recovery took."""

    at: float
    step: Step
    recovered: float
    action_done: float | None = None
    detail: str = ""


# The host's clients ---------------------------------------------------------------------------------

async def _connect(url: str, token: str) -> Any:
    async def quiet(_: Exception) -> None:
        pass
    return await nats.connect(url, token=token, max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                              connect_timeout=2, error_cb=quiet, disconnected_cb=None)


class Loop:
    """An asyncio loop in a thread of its own, running `work(stop)` until `stop` is set."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            asyncio.run(self.work())
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    async def work(self) -> None:
        raise NotImplementedError

    def join(self, timeout: float = 120) -> None:
        self.stop.set()
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} did not stop within {timeout}s"
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error


class Generator(Loop):
    """Orders 1, 2, ... on ORDERS.received, `rate` per second, each retried until acknowledged."""

    def __init__(self, url: str, token: str, rate: float, seed: int) -> None:
        super().__init__("generator")
        self.url, self.token, self.rate, self.seed = url, token, rate, seed
        self.payloads: dict[int, bytes] = {}
        self.acked: dict[int, int] = {}  # order id -> stream sequence of its ack
        self.retries = 0
        self.duplicate_acks = 0
        self.refused: dict[int, int] = {}  # JetStream err_code -> publishes refused with it

    async def work(self) -> None:
        nc = await _connect(self.url, self.token)
        js = nc.jetstream(timeout=3)
        rng = random.Random(self.seed)
        due = time.monotonic()
        i = 0
        while not self.stop.is_set():
            i += 1
            payload = self.payloads[i] = json.dumps(orders.order(i, rng)).encode()
            while True:
                try:
                    ack = await js.publish("ORDERS.received", payload, headers={"Nats-Msg-Id": f"order:{i}"})
                    break
                except Exception as exc:  # noqa: BLE001 - the broker is away or full: retry, the message id de-duplicates
                    if isinstance(exc, APIError) and exc.err_code:
                        self.refused[exc.err_code] = self.refused.get(exc.err_code, 0) + 1
                    self.retries += 1
                    await asyncio.sleep(0.2)
            self.acked[i] = ack.seq
            self.duplicate_acks += bool(ack.duplicate)
            due = max(due + 1 / self.rate, time.monotonic() - 1)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        await nc.close()


class Worker(Loop):
    """Pulls from the NEW consumer and acknowledges each message, confirmed by the server (ack_sync)."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__("worker")
        self.url, self.token = url, token
        self.confirmed = 0

    async def work(self) -> None:
        nc = await _connect(self.url, self.token)
        js = nc.jetstream(timeout=5)
        subscription = None
        while not self.stop.is_set():
            try:
                if subscription is None:
                    subscription = await js.pull_subscribe_bind("NEW", "ORDERS")
                for message in await subscription.fetch(100, timeout=1):
                    await message.ack_sync(timeout=3)
                    self.confirmed += 1
            except Exception:  # noqa: BLE001 - nothing to fetch, or the broker is away
                await asyncio.sleep(0.1)
        await nc.close()


class Driver:
    """The Spark driver process (tests/cluster/chaos_driver.py): started, killed, restarted when it ends."""

    def __init__(self, url: str, token: str, work: Path) -> None:
        self.url, self.token, self.work = url, token, work
        self.proc: subprocess.Popen[bytes] | None = None
        self.exits: list[str] = []  # how each run that ended by itself ended

    def start(self) -> None:
        with (self.work / "driver.log").open("ab") as log:
            # Spark gives the Python worker that runs a streaming source 10 s (fixed) to connect back at a
            # query's start: on a loaded machine the imports alone take longer, and the query fails.
            self.proc = subprocess.Popen(["nice", "-n", "-10", sys.executable, "-m", "tests.cluster.chaos_driver",
                                          self.url, self.token,
                                          str(self.work)], cwd=e2e.REPO, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def kill(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the JVM and its Python workers
        self.proc.wait()

    def supervise(self) -> None:
        """Restart a driver that ended by itself (a query failed), as a supervisor would; remember why."""
        if self.proc is not None and self.proc.poll() is not None:
            tail = (self.work / "driver.log").read_text(errors="replace").strip().splitlines()[-3:]
            self.exits.append(f"exit {self.proc.returncode}: {' | '.join(tail)[-300:]}")
            self.kill()
            self.start()

    def commits(self) -> int:
        """The last committed micro-batch's id + 1. Not the number of commit files: Spark keeps only the last
        100 (spark.sql.streaming.minBatchesToRetain), so a count stays at 100 and shows 101 only between a
        commit and the purge after it."""
        ids = [int(p.name) for p in (self.work / "checkpoint" / "commits").glob("[0-9]*") if p.name.isdigit()]
        return max(ids, default=-1) + 1


# The cluster side -------------------------------------------------------------------------------------

@dataclass
class Chaos:
    kube: Kube
    crictl: Crictl
    generator: Generator
    driver: Driver
    url: str
    token: str
    rng: random.Random
    steps: int = 0
    # Container restarts the faults explain: broker (since its pod was last replaced), operator per pod.
    broker_restarts: int = 0
    operator_restarts: dict[str, int] = field(default_factory=dict)
    last_reset: int | None = None
    description: str | None = None
    oom_reasons: list[str] = field(default_factory=list)

    ns = NAMESPACE

    # Containers ---------------------------------------------------------------------------------------

    def _container(self, pod: str, name: str) -> dict[str, Any]:
        """crictl's inspection of container `name` of `pod` (the running one)."""
        ids = self.crictl("ps", "--quiet", "--state", "running", "--name", f"^{name}$", "--label",
                          f"io.kubernetes.pod.name={pod}", "--label", f"io.kubernetes.pod.namespace={self.ns}").stdout.split()
        assert len(ids) == 1, f"running containers {name} of {pod}: {ids}"
        info: dict[str, Any] = json.loads(self.crictl("inspect", ids[0]).stdout)["info"]
        return info

    def _broker_pod(self) -> kubernetes.client.V1Pod:
        return poll(lambda: self.kube.ready_pod(self.ns, BROKER_PODS), timeout=STARTUP, what="a Ready broker pod")

    @staticmethod
    def _restarts(pod: kubernetes.client.V1Pod, name: str) -> int:
        return next(s.restart_count for s in pod.status.container_statuses if s.name == name)

    def _leader(self) -> kubernetes.client.V1Pod:
        leases = kubernetes.client.CoordinationV1Api(self.kube.client)
        lease = f"{RELEASE}-jetstream-kopf-operator"

        def leader() -> kubernetes.client.V1Pod | None:
            holder = leases.read_namespaced_lease(lease, self.ns).spec.holder_identity or ""
            return next((p for p in self.kube.pods(self.ns, OPERATOR_PODS)
                         if holder.startswith(p.metadata.name + "/") and p.metadata.deletion_timestamp is None
                         and all(s.ready for s in p.status.container_statuses or [])), None)
        return poll(leader, timeout=STARTUP, what=f"a Ready pod holding Lease {lease}")

    # Faults -------------------------------------------------------------------------------------------

    def inject(self, fault: str) -> Callable[[], str]:
        """Cause `fault`; returns the wait for its recovery (which says what it saw)."""
        if fault.startswith("broker-"):
            pod = self._broker_pod()
            restarts = self._restarts(pod, "jsbroker")
            if fault == "broker-delete":
                self.kube.core.delete_namespaced_pod(pod.metadata.name, self.ns)
                self.broker_restarts = 0
            elif fault == "broker-kill":
                os.kill(self._container(pod.metadata.name, "jsbroker")["pid"], signal.SIGKILL)
                self.broker_restarts += 1
            else:
                self._oom(pod)
                self.broker_restarts += 1
            return lambda: self._broker_back(pod, restarts, fault)
        if fault.startswith("operator-"):
            leader = self._leader()
            if fault == "operator-delete":
                self.kube.core.delete_namespaced_pod(leader.metadata.name, self.ns)
            else:
                os.kill(self._container(leader.metadata.name, "jsoperator")["pid"], signal.SIGKILL)
                name = leader.metadata.name
                self.operator_restarts[name] = self.operator_restarts.get(name, 0) + 1
            return lambda: self._operator_back(leader.metadata.name)
        assert fault == "spark-kill", fault
        before = self.driver.commits()
        self.driver.kill()
        self.driver.start()
        return lambda: self._spark_back(before)

    def _oom(self, pod: kubernetes.client.V1Pod) -> None:
        """Lower the container's memory limit to just above its usage, then make the broker buffer a burst
        for a subscriber that never reads: the kernel's OOM killer ends it."""
        path = self._container(pod.metadata.name, "jsbroker")["runtimeSpec"]["linux"]["cgroupsPath"]
        memory = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
        usage = int((memory / "memory.usage_in_bytes").read_text())
        (memory / "memory.limit_in_bytes").write_text(str(usage + 16 * 2**20))

        def killed() -> bool:
            with contextlib.suppress(OSError):  # the cgroup goes with the container
                return "oom_kill 0" not in (memory / "memory.oom_control").read_text()
            return True
        asyncio.run(_burst(self.url, self.token, killed))

    def _broker_back(self, old: kubernetes.client.V1Pod, restarts: int, fault: str) -> str:
        def back() -> kubernetes.client.V1Pod | None:
            pod = self.kube.ready_pod(self.ns, BROKER_PODS)
            if pod is None or (pod.metadata.uid == old.metadata.uid and self._restarts(pod, "jsbroker") <= restarts):
                return None
            return pod
        pod = poll(back, timeout=RECOVERY, interval=0.2, what=f"the broker back after {fault}")
        acked = len(self.generator.acked)
        poll(lambda: len(self.generator.acked) > acked, timeout=RECOVERY, interval=0.1,
             what=f"an order acknowledged after {fault}")
        if fault == "broker-delete":
            return f"pod {pod.metadata.name} uid {pod.metadata.uid[:8]}"
        last = next(s for s in pod.status.container_statuses if s.name == "jsbroker").last_state.terminated
        reason = f"{last.reason} (exit {last.exit_code})" if last else "?"
        if fault == "broker-oom":
            self.oom_reasons.append(reason)
        return f"last state {reason}"

    def _operator_back(self, old: str) -> str:
        self.steps += 1
        name = f"probe-{self.steps}"
        self.kube.create(self.ns, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Stream", "metadata": {"name": name},
                                   "spec": {"subjects": [f"chaos.{name}"], "storage": "memory"}})
        poll(lambda: self.kube.ready(self.ns, "Stream", name) == ("True", "Synced"), timeout=RECOVERY, interval=0.2,
             what=f"Stream {name} Synced after the operator leader {old} went")
        leader = self._leader().metadata.name
        self.kube.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, "streams", name)
        poll(lambda: e2e._missing(lambda: self.kube.resource(self.ns, "Stream", name)), timeout=RECOVERY,
             what=f"Stream {name} deleted")
        return f"leader {old} -> {leader}"

    def _spark_back(self, before: int) -> str:
        poll(lambda: self.driver.supervise() or self.driver.commits() > before, timeout=RECOVERY * 2, interval=0.2,
             what="the Spark query committing again")
        return f"batches {before} -> {self.driver.commits()}"

    # Actions ------------------------------------------------------------------------------------------

    def act(self, action: str | None) -> Callable[[], str] | None:
        """Apply `action` now; returns the wait for the operator to have done it."""
        self.steps += 1
        token = f"c{self.steps}"
        if action == "reset":
            last = max(self.generator.acked.values(), default=1)
            seq = self.rng.randint(1, last)
            request = f"reset-to-sequence={seq}@{token}"
            self.kube.annotate(self.ns, "Consumer", "dispatch", {"jsoperator.io/reset-to-sequence": f"{seq}@{token}"})
            self.last_reset = seq

            def reset_done() -> str:
                last = poll(lambda: (lambda r: r if r and r.get("request") == request else None)(
                    self.kube.resource(self.ns, "Consumer", "dispatch").get("status", {}).get("lastReset")),
                    timeout=RECOVERY, interval=0.2, what=f"Consumer dispatch lastReset {request}")
                assert last["result"] == "Succeeded", last
                return request
            return reset_done
        if action == "pause":
            return self._pause_new()
        if action == "hold":
            self.kube.annotate(self.ns, "Stream", "orders", {"jsoperator.io/pause-reconciliation": "true"})

            def paused() -> str:
                poll(lambda: _condition(self.kube.resource(self.ns, "Stream", "orders"), "ReconciliationPaused")
                     == "True", timeout=RECOVERY, interval=0.2, what="Stream orders ReconciliationPaused")
                self.kube.annotate(self.ns, "Stream", "orders", {"jsoperator.io/pause-reconciliation": None})
                poll(lambda: _condition(self.kube.resource(self.ns, "Stream", "orders"), "ReconciliationPaused")
                     in (None, "False") and self.kube.ready(self.ns, "Stream", "orders") == ("True", "Synced"),
                     timeout=RECOVERY, interval=0.2, what="Stream orders resumed and Synced")
                return "held and released"
            return paused
        if action == "apply":
            self.description = f"chaos step {token}"
            self.kube.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, "consumers", "dispatch",
                                                            {"spec": {"description": self.description}})

            def applied() -> str:
                self._synced("dispatch")
                return f"description {self.description!r}"
            return applied
        return None

    def _pause_new(self) -> Callable[[], str]:
        """Pause Consumer new (the worker's) through spec.pauseUntil; the wait resumes it and sees the worker
        served again."""
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
        self.kube.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, "consumers", "new",
                                                        {"spec": {"pauseUntil": until}})

        def resumed() -> str:
            self._synced("new")
            poll(lambda: self._server_consumer("NEW").get("paused") is True, timeout=RECOVERY, interval=0.5,
                 what=f"consumer NEW paused until {until} on the server")
            held = asyncio.run(_consumer(self.url, self.token, "NEW"))[0]
            self.kube.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, "consumers", "new",
                                                            {"spec": {"pauseUntil": None}})
            self._synced("new")
            poll(lambda: not self._server_consumer("NEW").get("paused"), timeout=RECOVERY, interval=0.5,
                 what="consumer NEW resumed on the server")
            poll(lambda: asyncio.run(_consumer(self.url, self.token, "NEW"))[0] > held, timeout=RECOVERY,
                 interval=0.5, what="consumer NEW delivering to the worker again")
            return f"NEW paused until {until} at delivered {held}, resumed"
        return resumed

    def _synced(self, name: str) -> None:
        """Wait until the operator has applied Consumer `name`'s latest spec."""
        def synced() -> bool:
            obj = self.kube.resource(self.ns, "Consumer", name)
            return (obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]
                    and self.kube.ready(self.ns, "Consumer", name) == ("True", "Synced"))
        poll(synced, timeout=RECOVERY, interval=0.2, what=f"Consumer {name} Synced with its latest spec")

    def _server_consumer(self, durable: str) -> dict[str, Any]:
        """The server's raw ConsumerInfo of `durable` on ORDERS (its "paused" is what pauseUntil did)."""
        return asyncio.run(_infos(self.url, self.token))[durable]

    def step(self, step: Step, started: float) -> Done:
        at = time.monotonic()
        recovery = self.inject(step.fault)
        action = self.act(step.action)
        detail = recovery()
        done = Done(round(at - started, 1), step, time.monotonic() - at, detail=detail)
        if action is not None:
            done.detail += f"; {action()}"
            done.action_done = time.monotonic() - at
        return done


def _condition(obj: dict[str, Any], type_: str) -> str | None:
    found = operator_status.condition(obj.get("status"), type_)
    return None if found is None else str(found["status"])


async def _burst(url: str, token: str, killed: Callable[[], bool], timeout: float = 120,
                 stalled: int = 8) -> None:
    """Publish 512 KB messages to `stalled` subscribers that never read (the broker buffers up to its
    max_pending for each) until `killed()`."""
    nc = await _connect(url, token)
    host, port = url.removeprefix("nats://").split(":")
    writers = []
    for _ in range(stalled):
        reader, writer = await asyncio.open_connection(host, int(port))
        await reader.readline()  # INFO
        connect = json.dumps({"auth_token": token, "verbose": False})
        writer.write(f"CONNECT {connect}\r\nSUB chaos.ballast 1\r\nPING\r\n".encode())
        await writer.drain()
        writers.append(writer)
    deadline = time.monotonic() + timeout
    chunk = os.urandom(512 * 1024)
    try:
        while not killed():
            assert time.monotonic() < deadline, "the broker was not OOM-killed by the burst"
            with contextlib.suppress(Exception):  # cut off by the OOM kill
                await nc.publish("chaos.ballast", chunk)
                await nc.flush(timeout=1)
    finally:
        for writer in writers:
            writer.close()
        with contextlib.suppress(Exception):
            await nc.close()


# Setup, run and the final check -----------------------------------------------------------------------

@dataclass
class Report:
    seed: int
    steps: list[Done]
    orders: int
    publish_retries: int
    duplicate_acks: int
    worker_acks: int
    spark_exits: list[str]
    lost: int
    twice: int

    def recovery(self) -> dict[str, tuple[int, float, float]]:
        """fault or action kind -> (count, p50, max) seconds."""
        times: dict[str, list[float]] = {}
        for done in self.steps:
            times.setdefault(done.step.fault, []).append(done.recovered)
            if done.action_done is not None:
                times.setdefault(f"action {done.step.action}", []).append(done.action_done)
        return {k: (len(v), statistics.median(v), max(v)) for k, v in sorted(times.items())}

    def text(self) -> str:
        lines = [f"seed {self.seed}: {len(self.steps)} faults", "", "| t (s) | fault | action | recovered (s) | seen |",
                 "|---:|---|---|---:|---|"]
        lines += [f"| {d.at:.0f} | {d.step.fault} | {d.step.action or ''} | {d.recovered:.1f} | {d.detail} |"
                  for d in self.steps]
        lines += ["", "| kind | n | p50 (s) | max (s) |", "|---|---:|---:|---:|"]
        lines += [f"| {k} | {n} | {p50:.1f} | {mx:.1f} |" for k, (n, p50, mx) in self.recovery().items()]
        lines += ["", f"orders generated and acknowledged: {self.orders} (publish retries {self.publish_retries}, "
                      f"duplicate acks {self.duplicate_acks}); worker acks {self.worker_acks}",
                  f"lost: {self.lost}; twice in the output: {self.twice}; Spark driver exits by itself: "
                  f"{len(self.spark_exits)}", *self.spark_exits]
        return "\n".join(lines)


def run(target: e2e.Target, crictl: Crictl, image: str, helm: Path, workdir: Path, seed: int, *,
        faults: int | None = None, minutes: float | None = None, rate: float = 10.0,
        gap: tuple[float, float] = (5.0, 20.0)) -> Report:
    """Install, run the pipeline, inject faults from `schedule(seed)` (`faults` of them, or for `minutes`),
    then check everything; returns the report (an AssertionError when a check fails)."""
    kube, release, url, token = install(target, image, helm, workdir, NAMESPACE)
    generator, worker = Generator(url, token, rate, seed), Worker(url, token)
    driver = Driver(url, token, workdir)
    chaos = Chaos(kube, crictl, generator, driver, url, token, random.Random(seed))
    generator.start()
    worker.start()
    driver.start()
    try:
        poll(lambda: driver.supervise() or driver.commits(), timeout=RECOVERY * 2, interval=0.5,
             what="the Spark query's first batch")
        started = time.monotonic()
        done: list[Done] = []
        for step in schedule(seed, gap):
            if (faults is not None and len(done) >= faults) or (
                    minutes is not None and time.monotonic() - started > minutes * 60):
                break
            _quiet(step.gap, driver)
            done.append(chaos.step(step, started))
            print(f"chaos: {done[-1].at:.0f}s {step.fault} {step.action or ''}: recovered in "
                  f"{done[-1].recovered:.1f}s ({done[-1].detail})", file=sys.stderr, flush=True)
        generator.join(RECOVERY)
        lost, twice = check(chaos, worker)
    finally:
        generator.stop.set()
        worker.stop.set()
        if driver.proc is not None:
            driver.kill()
    uninstall(kube, release, NAMESPACE)
    return Report(seed, done, len(generator.acked), generator.retries, generator.duplicate_acks, worker.confirmed,
                  driver.exits, lost, twice)


def install(target: e2e.Target, image: str, helm: Path, workdir: Path, namespace: str,
            values: dict[str, Any] | None = None, before: Callable[[Kube], None] = lambda _: None,
            ) -> tuple[Kube, e2e.Helm, str, str]:
    """The chart with its defaults (the image set, `values` merged) in `namespace` (what an earlier run left
    there removed first; `before(kube)` runs after that), the ORDERS example Synced; returns the Kubernetes
    client, the release, the broker's client URL and token."""
    target.load_image(image)
    kube = Kube(target.kubeconfig)
    repository, tag = image.rsplit(":", 1)
    release = e2e.Helm(helm, target.kubeconfig, namespace,
                       e2e._merge({"image": {"repository": repository, "tag": tag}}, values or {}), workdir)
    if not e2e._missing(lambda: kube.core.read_namespace(namespace)):  # left by a failed run, for diagnosis
        release("uninstall", RELEASE, "--ignore-not-found", "--wait")
        kube.core.delete_namespace(namespace)
        poll(lambda: e2e._missing(lambda: kube.core.read_namespace(namespace)), timeout=STARTUP,
             what=f"namespace {namespace} of an earlier run gone")
    before(kube)
    release.install()
    for selector in (BROKER_PODS, OPERATOR_PODS):
        poll(lambda: kube.ready_pod(namespace, selector), timeout=STARTUP, what=f"a Ready pod {selector}")
    kube.create(namespace, *yaml.safe_load_all(e2e.EXAMPLE.read_text()))
    kube.wait_synced(namespace, e2e.EXAMPLE_OBJECTS, timeout=STARTUP)
    token = base64.b64decode(kube.core.read_namespaced_secret(f"{BROKER}-auth", namespace).data["token"]).decode()
    service = kube.core.read_namespaced_service(BROKER, namespace)
    return kube, release, f"nats://{service.spec.cluster_ip}:4222", token


def uninstall(kube: Kube, release: e2e.Helm, namespace: str) -> None:
    release.uninstall()
    kube.core.delete_namespace(namespace)  # with the resources (their finalizers released by the hook) and volume claim


def _quiet(seconds: float, driver: Driver) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        driver.supervise()
        time.sleep(0.5)  # the schedule's gap: faults are spaced in time on purpose


def check(chaos: Chaos, worker: Worker) -> tuple[int, int]:
    """The final assertions; returns (lost, twice) counts for the report (both must be 0)."""
    kube, ns, generator, driver = chaos.kube, NAMESPACE, chaos.generator, chaos.driver
    expected = set(generator.acked)
    out = driver.work / "out"

    def archived() -> list[int]:
        if not out.exists():
            return []
        with contextlib.suppress(Exception):  # a file being written
            table = pq.read_table(out, columns=["data"])
            return [json.loads(d)["id"] for d in table.column("data").to_pylist()]
        return []

    poll(lambda: driver.supervise() or set(archived()) >= expected, timeout=DRAIN, interval=2,
         what=f"all {len(expected)} orders in the parquet output")
    driver.kill()
    ids = archived()
    twice = len(ids) - len(set(ids))
    lost = len(expected - set(ids))
    stored = asyncio.run(_stream(chaos.url, chaos.token))
    poll(lambda: asyncio.run(_consumer(chaos.url, chaos.token, "NEW"))[2:4] == (0, 0), timeout=DRAIN, interval=1,
         what="the worker to have acknowledged everything NEW delivers")
    worker.join()
    problems = [f"parquet output: {lost} orders lost, {twice} twice"] if lost or twice else []
    problems += _check_stream(stored, generator)[:20]
    for verify in (lambda: _check_positions(chaos, stored), lambda: _check_resources(chaos), lambda: _check_pods(chaos)):
        try:  # every check runs: one failure does not hide the others
            verify()
        except AssertionError as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(problems)
    return lost, twice


async def _stream(url: str, token: str) -> list[tuple[int, str, bytes, str | None]]:
    """(seq, subject, data, Nats-Msg-Id) of every message of ORDERS."""
    nc = await _connect(url, token)
    js = nc.jetstream(timeout=10)
    state = (await js.stream_info("ORDERS")).state
    out = []
    for start in range(state.first_seq, state.last_seq + 1, 200):
        found = await asyncio.gather(*(js.get_msg("ORDERS", seq) for seq in range(start, min(start + 200, state.last_seq + 1))),
                                     return_exceptions=True)
        out += [(m.seq, m.subject, m.data or b"", (m.headers or {}).get("Nats-Msg-Id")) for m in found
                if not isinstance(m, BaseException)]
    await nc.close()
    return out


def _check_stream(stored: list[tuple[int, str, bytes, str | None]], generator: Generator, sink: bool = True) -> list[str]:
    """Every acknowledged order at its sequence, no message id twice, and (`sink`) every order processed."""
    problems = []
    by_seq = {seq: (subject, data, msg_id) for seq, subject, data, msg_id in stored}
    for i, seq in generator.acked.items():
        if by_seq.get(seq) != ("ORDERS.received", generator.payloads[i], f"order:{i}"):
            problems.append(f"order {i} acknowledged at {seq}, stored there: {by_seq.get(seq)!r}")
    for subject, prefix in (("ORDERS.received", "order:"), ("ORDERS.processed", "processed:"),
                            ("ORDERS.rejected", "processed:")):
        ids = [msg_id for _, s, _, msg_id in stored if s == subject]
        if len(ids) != len(set(ids)):
            problems.append(f"{subject}: {len(ids) - len(set(ids))} message ids stored twice")
    out = {msg_id for _, s, _, msg_id in stored if s in ("ORDERS.processed", "ORDERS.rejected")}
    missing = {f"processed:{i}" for i in generator.acked} - out if sink else set()
    if missing:
        problems.append(f"{len(missing)} orders not in the sink, e.g. {sorted(missing)[:5]}")
    return problems


async def _consumer(url: str, token: str, durable: str) -> tuple[int, int, int, int]:
    """(delivered stream seq, ack floor stream seq, num_pending, num_ack_pending)."""
    nc = await _connect(url, token)
    info = await nc.jetstream().consumer_info("ORDERS", durable)
    await nc.close()
    return info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_pending, info.num_ack_pending


def _check_positions(chaos: Chaos, stored: list[tuple[int, str, bytes, str | None]]) -> None:
    """The consumers where nats-server puts them given the same messages and operations: the stream
    replayed into a nats-server (same subjects at the same sequences), the example's consumers created
    before the first message, NEW drained and acknowledged, DISPATCH reset to the last reset's sequence."""
    got = {d: asyncio.run(_consumer(chaos.url, chaos.token, d)) for d in DURABLES.values()}
    with start_nats_server() as server:
        want = asyncio.run(_replay(server.url, stored, chaos.last_reset))
    assert got == want, f"consumer positions (delivered, ack floor, pending, ack pending): jsbroker {got}, nats-server {want}"


async def _replay(url: str, stored: list[tuple[int, str, bytes, str | None]], reset: int | None) -> dict[str, tuple[int, int, int, int]]:
    from nats.js.api import ConsumerConfig

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["ORDERS.*"])
    example = [doc for doc in yaml.safe_load_all(e2e.EXAMPLE.read_text()) if doc["kind"] == "Consumer"]
    for doc in example:
        spec = doc["spec"]
        await js.add_consumer("ORDERS", ConsumerConfig(
            durable_name=spec["durableName"], filter_subject=spec.get("filterSubject"), ack_policy=spec["ackPolicy"],
            deliver_subject=spec.get("deliverSubject"), deliver_policy=spec.get("deliverPolicy", "all")))
    last = 0
    for seq, subject, data, _ in stored:
        while last + 1 < seq:  # a gap (none expected): keep the sequences aligned
            last = (await js.publish("ORDERS.gap", b"")).seq
            await js.delete_msg("ORDERS", last)
        last = (await js.publish(subject, data)).seq
    subscription = await js.pull_subscribe_bind("NEW", "ORDERS")
    with contextlib.suppress(nats.errors.TimeoutError):
        while True:
            for message in await subscription.fetch(500, timeout=1):
                await message.ack_sync()
    if reset is not None:
        await js.reset_consumer("ORDERS", "DISPATCH", seq=reset)
    out = {}
    for durable in DURABLES.values():
        info = await js.consumer_info("ORDERS", durable)
        out[durable] = (info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_pending, info.num_ack_pending)
    await nc.close()
    return out


def _check_resources(chaos: Chaos) -> None:
    """Every resource Ready (Synced) with the server's numbers in its status (the drift timer refreshes
    them: up to its interval after the last change), DISPATCH with the last applied description."""
    kube, ns = chaos.kube, NAMESPACE

    def differences() -> list[str]:
        infos = asyncio.run(_infos(chaos.url, chaos.token))
        out = []
        for kind, name in e2e.EXAMPLE_OBJECTS:
            obj = kube.resource(ns, kind, name)
            if kube.ready(ns, kind, name) != ("True", "Synced"):
                out.append(f"{kind} {name} Ready={kube.ready(ns, kind, name)}")
                continue
            state = (operator_status.stream_state(infos["ORDERS"]) if kind == "Stream"
                     else operator_status.consumer_state(infos[DURABLES[name]]))
            have = {k: obj["status"].get(k) for k in state}
            if have != state:
                out.append(f"{kind} {name} status {have} != server {state}")
        return out

    poll(lambda: not differences(), timeout=RECOVERY, interval=2,
         what=f"every resource Ready with the server's state (differences: {differences()})")
    if chaos.description is not None:
        config = asyncio.run(_infos(chaos.url, chaos.token))["DISPATCH"]["config"]
        assert config.get("description") == chaos.description, config


async def _infos(url: str, token: str) -> dict[str, dict[str, Any]]:
    """The server's raw StreamInfo of ORDERS and ConsumerInfo of each durable (the JSON the operator reads)."""
    nc = await _connect(url, token)
    subjects = {"ORDERS": "$JS.API.STREAM.INFO.ORDERS",
                **{d: f"$JS.API.CONSUMER.INFO.ORDERS.{d}" for d in DURABLES.values()}}
    out = {name: json.loads((await nc.request(subject, b"", timeout=5)).data) for name, subject in subjects.items()}
    await nc.close()
    return out


def _check_pods(chaos: Chaos) -> None:
    """Every pod Ready, none waiting in CrashLoopBackOff, restarts only those the faults explain."""
    for pod in chaos.kube.pods(NAMESPACE, f"app.kubernetes.io/instance={RELEASE}"):
        for s in pod.status.container_statuses or []:
            waiting = s.state.waiting.reason if s.state.waiting else None
            assert s.ready and waiting is None, f"{pod.metadata.name}/{s.name}: ready={s.ready} waiting={waiting}"
            explained = (chaos.broker_restarts if s.name == "jsbroker"
                         else chaos.operator_restarts.get(pod.metadata.name, 0))
            assert s.restart_count == explained, (
                f"{pod.metadata.name}/{s.name} restarted {s.restart_count} times, the faults explain {explained}: "
                f"last state {s.last_state.terminated}")
    assert all(r.startswith("OOMKilled") for r in chaos.oom_reasons), chaos.oom_reasons
