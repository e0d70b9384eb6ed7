"""A subscriber that stopped reading, beside a reading one: what it costs the publisher (issue 35).

The scenario of tests/broker/test_slow_consumers.py (tests/broker/stalled.py) with nats-server's default
limits (max_pending 64 MB, write_deadline 10 s): a nats-py publisher sends `n` messages to a subject that
a nats-py subscriber reads and a raw socket never reads, flushing every 2 MB; optionally a second
publisher/subscriber pair works on another subject. A fresh server per run, jsbroker and nats-server
alternating. Per server (medians over the runs): the publisher's rate (msgs/s from its first publish to its
last flush), the slowest PING round trip of each publisher, and when the server dropped the stalled client.

    python3 bench/stalled_subscriber.py             # 128 B, 1 KB, 8 KB, 64 KB; 3 runs each
    python3 bench/stalled_subscriber.py --quick     # 1 KB only, one run
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import common  # noqa: F401  (puts the repository on sys.path)
from tests.broker.stalled import MB, StallOutcome, run_stall
from tests.servers import KINDS, NATS_SERVER, launch

TOTAL = 100 * MB  # the 100,000 x 1 KB


def one_run(kind: str, size: int, other: bool) -> StallOutcome:
    n = TOTAL // size
    with launch(kind, jetstream=False, http=True) as handle:
        return asyncio.run(run_stall(handle, size, n, flush_every=max(1, 2 * MB // size),
                                     other_n=n // 4 if other else 0, flush_timeout=60.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 KB only, one run")
    ap.add_argument("--reps", type=int, help="runs per server and case (default 3, quick 1)")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 3)
    sizes = [1024] if args.quick else [128, 1024, 8 * 1024, 64 * 1024]
    print("| case | server | publisher msgs/s | max PING RTT s | other pair's max RTT s | stalled client dropped after s "
          "| slow_consumers | healthy got all |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    rates: dict[tuple[str, str], float] = {}
    for size in sizes:
        for other in (False, True):
            case = f"{size} B" + (", other traffic" if other else "")
            samples: dict[str, list[StallOutcome]] = {k: [] for k in KINDS}
            for rep in range(reps):
                for kind in KINDS if rep % 2 == 0 else KINDS[::-1]:
                    samples[kind].append(one_run(kind, size, other))
            for kind in KINDS:
                runs = samples[kind]
                rate = statistics.median(o.main.published / o.main.seconds for o in runs)
                rates[(case, kind)] = rate
                rtt = statistics.median(o.main.max_rtt for o in runs)
                other_rtt = statistics.median(o.other.max_rtt for o in runs) if other else 0.0
                cut = statistics.median(o.cut_after for o in runs)
                all_got = all(o.main.received == o.main.published and not o.main.flush_error for o in runs)
                print(f"| {case} | {kind} | {rate:,.0f} | {rtt:.3f} | {other_rtt:.3f} | {cut:.1f} "
                      f"| {runs[-1].slow_consumers} | {all_got} |", flush=True)
    print("\nratios jsbroker / nats-server (publisher msgs/s):")
    for (case, kind), rate in rates.items():
        if kind == NATS_SERVER:
            print(f"  {case}: {rates[(case, 'jsbroker')] / rate:.2f}x")



if __name__ == "__main__":
    main()
