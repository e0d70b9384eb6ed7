"""Slow disks: what clients see while fsyncs are slow, jsbroker (and optionally an older jsbroker) beside
nats-server, all with `sync: always` (every ack waits for its fsync).

Two disks:
- `slow`: tests/slowdisk.py's ext4 on a loop device whose flushes wait `--flush-delay` (0.25 s: an fsync
  takes 0.5 s or more). Needs root, FUSE, losetup (the test suite's `slowdisk.available()` says what is
  missing).
- `pressure`: the store in a directory of the machine's own disk while another process writes and
  fsyncs 1 MiB at a time in a loop beside it (a disk-pressure generator on the same file system).

On each, tests/stall_probe.py runs `--seconds`: PINGs, a core pub/sub pair and a JetStream publish + fetch +
ack on a memory stream (the *other* clients: they need no fsync), and the *waiting* clients: a publisher to
a file stream and a loop creating a file stream, a durable consumer on it, and deleting it. The table gives
p99 / max in ms of each, and how many round trips each made.

    python bench/slow_disk.py                               # both disks, jsbroker and nats-server
    python bench/slow_disk.py --before /tmp/before/broker   # adds a jsbroker run from another source tree
    (e.g. `git archive <commit> broker | tar -x -C /tmp/before`)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from common import JSBROKER, NATS_SERVER, launch

from tests import slowdisk
from tests.stall_probe import Observed, observe, percentile

COLUMNS = ("ping", "core", "fetch", "publish", "create", "consumer")
_PRESSURE = """
import os, sys
block = os.urandom(1 << 20)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
n = 0
while True:
    os.write(fd, block)
    os.fsync(fd)
    n += 1
    if n % 64 == 0:
        os.ftruncate(fd, 0)
"""


@contextlib.contextmanager
def pressure(directory: Path) -> Iterator[None]:
    """A process writing and fsyncing 1 MiB at a time in `directory` for as long as the context lasts."""
    proc = subprocess.Popen([sys.executable, "-c", _PRESSURE, str(directory / "pressure.bin")])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()
        (directory / "pressure.bin").unlink(missing_ok=True)


def run(kind: str, store: Path, seconds: float, before: str | None = None) -> Observed:
    conf = store.parent / f"{store.name}.conf"
    conf.write_text("jetstream { sync_interval: always }\n" if kind == NATS_SERVER else '[jetstream]\nsync = "always"\n')
    saved = os.environ.get("PYTHONPATH")
    if before:
        os.environ["PYTHONPATH"] = before
    try:
        server = launch(kind, store_dir=store, extra_args=["-c", str(conf)])
    finally:
        if before:
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved
    with server:
        return asyncio.run(observe(server.url, seconds))


def row(disk: str, name: str, seen: Observed) -> str:
    cells = []
    for column in COLUMNS:
        values = getattr(seen, column)
        cells.append(f"{percentile(values, 99) * 1000:.0f} / {max(values, default=0) * 1000:.0f} ({len(values)})")
    return f"| {disk} | {name} | " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--flush-delay", type=float, default=0.25)
    parser.add_argument("--before", help="a broker/ source tree to run as 'jsbroker (before)' too")
    parser.add_argument("--disks", default="slow,pressure")
    args = parser.parse_args()
    servers: list[tuple[str, str, str | None]] = [("nats-server", NATS_SERVER, None), ("jsbroker", JSBROKER, None)]
    if args.before:
        servers.append(("jsbroker (before)", JSBROKER, args.before))
    print("| disk | server | " + " | ".join(f"{c} p99 / max ms (n)" for c in COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    work = Path(tempfile.mkdtemp(prefix="slow-disk-"))
    try:
        for disk in args.disks.split(","):
            if disk == "slow":
                slowdisk.install()
                why = slowdisk.available()
                if why is not None:
                    print(f"(slow disk skipped: {why})")
                    continue
                with slowdisk.mounted(work / "slow", args.flush_delay) as mountpoint:
                    for name, kind, before in servers:
                        print(row(disk, name, run(kind, mountpoint / name.replace(" ", ""), args.seconds, before)), flush=True)
            else:
                directory = work / "pressure"
                directory.mkdir()
                with pressure(directory):
                    for name, kind, before in servers:
                        print(row(disk, name, run(kind, directory / name.replace(" ", ""), args.seconds, before)), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
