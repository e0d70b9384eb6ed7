"""The chaos run, long mode: the ORDERS pipeline on the real one-node cluster under a seeded schedule of
faults for as many minutes as you ask (tests/cluster/chaos.py says what runs, what fails and what is
checked; tests/cluster/test_chaos.py runs one round in CI). Prints the schedule as it happened, recovery
times per fault kind (p50/max) and what was lost (must be nothing); exits 1 when a check fails.

    python3 bench/chaos.py --minutes 60 --seed 7
    python3 bench/chaos.py --minutes 10 --attach     # a cluster another process holds (JSOPERATOR_CLUSTER_DIR)

Needs root, the cluster's binaries (`python3 -m tests.cluster.assets ensure`), Docker for the image, and
the spark extra. The cluster takes minutes to start on a loaded machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import common  # noqa: F401  (puts the repository on sys.path)

# bench/websocket.py would shadow the websocket package the kubernetes client imports.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from tests.chart import go_tools  # noqa: E402
from tests.cluster import assets, chaos  # noqa: E402
from tests.cluster.cluster import NODE_IP, Cluster  # noqa: E402
from tests.cluster.e2e import Target  # noqa: E402
from tests.image import build, docker_engine  # noqa: E402
from tests.kube import assets as envtest_assets  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/chaos.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10, help="faults for this long (default 10)")
    p.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    p.add_argument("--rate", type=float, default=10, help="orders per second (default 10)")
    p.add_argument("--image", help="a local Docker image to deploy (default: build jetstream-kopf:chaos)")
    p.add_argument("--attach", action="store_true", help="use the running one-node cluster instead of starting one")
    p.add_argument("--work", type=Path, help="checkpoints, parquet output, logs (default: a temporary folder)")
    args = p.parse_args(argv)
    reason = assets.unavailable()
    helm = go_tools.HELM.find()
    if reason or helm is None:
        print(f"cannot run: {reason or 'helm is not built (python3 -m tests.chart.go_tools ensure)'}", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    docker_engine.ensure()
    image = args.image or build.build("jetstream-kopf:chaos")
    binaries, envtest_binaries = assets.find(), envtest_assets.find()
    assert binaries is not None and envtest_binaries is not None
    cluster = Cluster(binaries, envtest_binaries)
    if args.attach:
        cluster.kubeconfig = cluster.workdir / "kubeconfig"  # where a started Cluster keeps it
    else:
        cluster.start()
    try:
        target = Target(cluster.kubeconfig, cluster.load_docker_image, NODE_IP)
        report = chaos.run(target, cluster.crictl, image, helm, work, args.seed, minutes=args.minutes, rate=args.rate)
    finally:
        if not args.attach:
            cluster.stop()
    print(report.text())
    print(f"work folder: {work}")
    return 0 if (report.lost, report.twice) == (0, 0) else 1


if __name__ == "__main__":
    sys.exit(main())
