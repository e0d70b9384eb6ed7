"""Apply N Stream + N Consumer resources and measure how fast jsoperator makes them Ready, then annotate
consumers with `jsoperator.io/reset-to-sequence` and measure annotate -> `status.lastReset`.

Everything is real: the envtest kube-apiserver + etcd (tests/kube), one `jsoperator run` process (the
same launcher the e2e tests use), and the broker (nats-server, then jsbroker) from tests/servers.py.
Resources are created back to back as (Stream i, Consumer i) pairs, as `kubectl apply -f dir/` would;
a watch records when each one first reports Ready=True for its generation. Latency is create-call
return -> Ready seen by the watch, on one clock; likewise annotate-call return -> the reset recorded.
The operator's drift interval is an hour, so every latency is event-driven.

    python3 bench/operator_apply.py            # 200 + 200 against each broker
    python3 bench/operator_apply.py --quick    # 50 + 50
    python3 bench/operator_apply.py --only nats-server

Targets from the issue: p50 < 1 s, all 400 Ready < 60 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import kubernetes.client  # noqa: E402
import kubernetes.watch  # noqa: E402

from tests import servers  # noqa: E402
from tests.kube import assets  # noqa: E402
from jsoperator.localcluster.envtest import EnvTest  # noqa: E402
from tests.operator import conftest as e2e  # noqa: E402

KINDS = ("nats-server", "jsbroker")


RESET = "jsoperator.io/reset-to-sequence"
RESET_REQUEST = "reset-to-sequence=0"  # back to the ack floor: valid on an empty stream too


def _ready(obj: dict) -> bool:
    return e2e.has_condition(obj, "Ready")


def _reset_recorded(obj: dict) -> bool:
    return ((obj.get("status") or {}).get("lastReset") or {}).get("request") == RESET_REQUEST


class FirstSeenWatch:
    """Records the first time each object of one plural in a namespace satisfies `check`."""

    def __init__(self, client: kubernetes.client.ApiClient, namespace: str, plural: str,
                 check: Callable[[dict], bool] = _ready) -> None:
        self.seen: dict[str, float] = {}
        self._check = check
        self._api = kubernetes.client.CustomObjectsApi(client)
        self._namespace, self._plural = namespace, plural
        self._watch = kubernetes.watch.Watch()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # A watch can end early (apiserver timeouts under load): start another, which re-lists first.
        while not self._stopped:
            stream = self._watch.stream(self._api.list_namespaced_custom_object, e2e.GROUP, e2e.VERSION,
                                        self._namespace, self._plural, timeout_seconds=600)
            try:
                for event in stream:
                    obj = event["object"]
                    name = obj["metadata"]["name"]
                    if name not in self.seen and self._check(obj):
                        self.seen[name] = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - restarted; shown so a flaky run is visible
                if not self._stopped:
                    print(f"watch {self._plural} restarted: {type(exc).__name__}", file=sys.stderr)

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process `pid` (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_for(watch: FirstSeenWatch, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(watch.seen) < count and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the watch thread's progress, not synchronisation


def measure_resets(client: kubernetes.client.ApiClient, kube: e2e.Kube, count: int, timeout: float) -> list[float]:
    """Annotate consumers c0..c{count-1} one after another; latencies until each lastReset is recorded."""
    watch = FirstSeenWatch(client, kube.namespace, "consumers", _reset_recorded)
    annotated: dict[str, float] = {}
    for i in range(count):
        kube.annotate("Consumer", f"c{i}", {RESET: "0"})
        annotated[f"c{i}"] = time.monotonic()
    _wait_for(watch, count, timeout)
    watch.stop()
    return [watch.seen[name] - t for name, t in annotated.items() if name in watch.seen]


def run_one(env: EnvTest, operator: e2e.Operator, broker_kind: str, count: int, resets: int,
            timeout: float) -> dict[str, object]:
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    with servers.launch(broker_kind) as broker, env.api_client() as client:
        kubernetes.client.CoreV1Api(client).create_namespace(
            kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=namespace)))
        kube = e2e.Kube(client, namespace, None)
        watches = {kind: FirstSeenWatch(client, namespace, plural) for kind, plural in e2e.PLURALS.items()}
        conn = {"servers": [broker.url]}
        created: dict[tuple[str, str], float] = {}
        start, cpu = time.monotonic(), cpu_seconds(operator.proc.pid)
        for i in range(count):
            kube.create("Stream", f"s{i}", {"subjects": [f"s{i}.>"], "storage": "memory", "connection": conn})
            created["Stream", f"s{i}"] = time.monotonic()
            kube.create("Consumer", f"c{i}", {"streamName": f"s{i}", "ackPolicy": "explicit", "connection": conn})
            created["Consumer", f"c{i}"] = time.monotonic()
        applied = time.monotonic() - start
        deadline = time.monotonic() + timeout
        while sum(len(w.seen) for w in watches.values()) < 2 * count and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the watch threads' progress, not synchronisation
        operator_cpu = cpu_seconds(operator.proc.pid) - cpu
        if sum(len(w.seen) for w in watches.values()) < 2 * count:
            print(f"not all Ready; operator log tail:\n{operator.tail(20)}", file=sys.stderr)
        for w in watches.values():
            w.stop()
        latencies = {kind: [watches[kind].seen[name] - t for (k, name), t in created.items()
                            if k == kind and name in watches[kind].seen] for kind in e2e.PLURALS}
        every = [x for values in latencies.values() for x in values]
        last_ready = max((t for w in watches.values() for t in w.seen.values()), default=float("nan"))
        reset_latencies = measure_resets(client, kube, min(resets, count), timeout)
        kube.release_all()  # let go (unmanaged) so the operator stops its timers for them
        return {
            "broker": broker_kind, "count": count, "apply_s": applied,
            "ready": len(every), "all_ready_s": last_ready - start if len(every) == 2 * count else float("nan"),
            **{f"{kind}_p50": _pct(latencies[kind], 50) for kind in e2e.PLURALS},
            **{f"{kind}_p95": _pct(latencies[kind], 95) for kind in e2e.PLURALS},
            "p50": _pct(every, 50), "p95": _pct(every, 95), "operator_cpu_s": operator_cpu,
            "resets": len(reset_latencies), "reset_p50": _pct(reset_latencies, 50),
            "reset_p95": _pct(reset_latencies, 95),
        }


def _pct(values: list[float], p: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=200, help="Streams (and as many Consumers) to apply")
    parser.add_argument("--quick", action="store_true", help="50 + 50")
    parser.add_argument("--only", choices=KINDS, help="one broker only")
    parser.add_argument("--resets", type=int, default=100, help="consumers annotated with a reset afterwards")
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait for all Ready")
    args = parser.parse_args()
    count = 50 if args.quick else args.count
    folder = assets.find()
    if folder is None:
        print("envtest binaries missing: python3 -m tests.kube.assets ensure", file=sys.stderr)
        return 2
    rows = []
    with EnvTest(folder) as env, tempfile.TemporaryDirectory() as tmp:
        with env.api_client() as client:
            e2e.install_crds(client)
        # Cluster-wide, as deployed by default (a namespace glob adds namespace discovery to the latency).
        operator = e2e.Operator(env, Path(tmp) / "operator.log", namespace_prefix=None)
        try:
            e2e.poll(operator.healthy, timeout=60, what="operator /healthz")
            for kind in [args.only] if args.only else KINDS:
                rows.append(run_one(env, operator, kind, count, args.resets, args.timeout))
        finally:
            operator.stop()
    print(f"\n{count} Streams + {count} Consumers, one jsoperator, envtest apiserver\n")
    print("| broker | Ready/total | apply calls (s) | p50 (s) | p95 (s) | Stream p50/p95 | Consumer p50/p95 "
          "| all Ready (s) | operator CPU (s) | annotate -> lastReset p50/p95 (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['broker']} | {r['ready']}/{2 * count} | {r['apply_s']:.1f} | {r['p50']:.2f} | {r['p95']:.2f} | "
              f"{r['Stream_p50']:.2f}/{r['Stream_p95']:.2f} | {r['Consumer_p50']:.2f}/{r['Consumer_p95']:.2f} | "
              f"{r['all_ready_s']:.1f} | {r['operator_cpu_s']:.1f} | "
              f"{r['reset_p50']:.2f}/{r['reset_p95']:.2f} ({r['resets']} consumers) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
