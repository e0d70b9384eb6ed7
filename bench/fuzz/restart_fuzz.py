"""The long mode of the differential restart fuzzer (tests/jetstream/restart_model.py): random JetStream
operation sequences with SIGTERM / kill -9 restarts, against jsbroker and nats-server 2.15.1, compared
after every step. Every difference is shrunk (ddmin over the steps) and printed as a regression case.

    python bench/fuzz/restart_fuzz.py --count 2000            # or --minutes 55; --seed picks the first seed
    python bench/fuzz/restart_fuzz.py --replay 1234           # one seed, its ops and its difference

Run it with the project's venv (its bin/ holds nats-server). Prints a summary line every 50 sequences and
at the end: sequences, steps, restarts (kills), differences.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

from tests.jetstream.restart_model import Pair, generate, regression_source, shrink  # noqa: E402
from tests.servers import JSBROKER, NATS_SERVER, launch  # noqa: E402


def log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


async def workers(args: argparse.Namespace) -> int:
    """Run `--workers` fuzzers (each its own pair of servers, seeds a million apart), print their lines
    prefixed by worker, then the totals of their last summaries."""
    procs = []
    for k in range(args.workers):
        argv = [f"--{name.replace('_', '-')}={getattr(args, name)}"
                for name in ("count", "minutes", "length", "min_restarts", "max_restarts", "shrink_budget")]
        procs.append(await asyncio.create_subprocess_exec(
            sys.executable, __file__, *argv, "--workers", "1", "--seed", str(args.seed + k * 1_000_000),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT))
    last: dict[int, str] = {}

    async def relay(k: int, proc: asyncio.subprocess.Process) -> int:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if " sequences " in line and "all runs" in line:
                last[k] = line
            print(f"[w{k}] {line}", flush=True)
        return await proc.wait()

    codes = await asyncio.gather(*(relay(k, p) for k, p in enumerate(procs)))
    totals: dict[str, int] = {}
    for line in last.values():
        for key, value in re.findall(r"([a-z][a-z -]*?|kill -9) (\d+)", line.split("|")[0].split(" ", 1)[1]):
            totals[key.strip()] = totals.get(key.strip(), 0) + int(value)
    log(f"TOTAL over {args.workers} workers: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    return max(codes)


async def main(args: argparse.Namespace) -> int:
    if args.workers > 1:
        return await workers(args)
    with launch(JSBROKER) as ours, launch(NATS_SERVER) as theirs:
        pair = Pair(ours, theirs)
        await pair.connect()
        if args.replay is not None:
            ops = generate(args.replay, args.length, (args.min_restarts, args.max_restarts))
            print(regression_source(ops, None))
            diff = await pair.run(ops)
            print(diff or "no difference")
            await pair.close()
            return 1 if diff else 0
        found = ran = errors = 0
        seen: dict[object, int] = {}
        top = {"with a restart": 0, "restarts": 0, "kill -9": 0}  # of the generated sequences
        start = time.monotonic()
        seed = args.seed
        end = start + args.minutes * 60 if args.minutes else None
        while (end is None and ran < args.count) or (end is not None and time.monotonic() < end):
            ops = generate(seed, args.length, (args.min_restarts, args.max_restarts))
            restarts, kills = pair.stats.restarts, pair.stats.kills
            try:
                diff = await pair.run(ops)
            except Exception as e:  # noqa: BLE001 - a harness failure (a server that did not come back) is reported, not fatal
                log(f"seed {seed}: ERROR {type(e).__name__}: {e}")
                errors += 1
                seed += 1
                continue
            ran += 1
            top["restarts"] += pair.stats.restarts - restarts
            top["kill -9"] += pair.stats.kills - kills
            top["with a restart"] += pair.stats.restarts > restarts
            if diff is not None:
                found += 1
                kind = diff.known or diff.signature
                seen[kind] = seen.get(kind, 0) + 1
                if diff.known:
                    log(f"seed {seed}: known difference {diff.known} (test_restart_fuzz.XFAIL)")
                elif seen[kind] > 1:
                    log(f"seed {seed}: DIFFERENCE again {kind}: {diff}")
                elif end is not None and time.monotonic() + args.shrink_budget > end:
                    log(f"seed {seed}: DIFFERENCE (new kind, no time left to shrink) {diff}")
                else:  # a new kind: shrink it into a regression case
                    log(f"seed {seed}: DIFFERENCE {diff}")
                    shrunk, sdiff = await shrink(pair, ops, budget=args.shrink_budget, log=log)
                    log(f"seed {seed}: shrunk {len(ops)} -> {len(shrunk)} steps\n{regression_source(shrunk, sdiff)}")
            seed += 1
            if ran % 50 == 0:
                summary(pair, ran, top, found, start)
        summary(pair, ran, top, found, start)
        log(f"harness errors {errors}")
        for kind, n in sorted(seen.items(), key=lambda item: -item[1]):
            log(f"  {n:5d} x {kind}")
        await pair.close()
        return 1 if found else 0


def summary(pair: Pair, ran: int, top: dict[str, int], found: int, start: float) -> None:
    """Generated sequences, then everything run (shrinking reruns included)."""
    s = pair.stats
    log(f"sequences {ran} ({', '.join(f'{k} {v}' for k, v in top.items())}) differences {found} | all runs: sequences {s.sequences} steps {s.steps} "
        f"restarts {s.restarts} (kill -9 {s.kills}) | elapsed {time.monotonic() - start:.0f}s")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=100, help="sequences to run (counted with shrinking runs)")
    p.add_argument("--minutes", type=float, default=0, help="run for this long instead of --count")
    p.add_argument("--seed", type=int, default=1, help="first seed; each sequence uses the next")
    p.add_argument("--length", type=int, default=20, help="steps per sequence")
    p.add_argument("--min-restarts", type=int, default=1)
    p.add_argument("--max-restarts", type=int, default=3)
    p.add_argument("--shrink-budget", type=float, default=240, help="seconds to shrink one difference")
    p.add_argument("--workers", type=int, default=1, help="fuzzers in parallel, each with its own servers")
    p.add_argument("--replay", type=int, help="run only this seed and print its ops")
    sys.exit(asyncio.run(main(p.parse_args())))
