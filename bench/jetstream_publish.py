"""JetStream publish benchmark: jsbroker vs nats-server, alternating, 128-byte messages on loopback.

Client-bound workloads use nats-py in a child process: synchronous publish (await every ack) and
asynchronous publish (`publish_async`, nats-py's default window of in-flight acks), each into a file and
a memory stream. The server-bound workload uses a raw socket that costs almost nothing: pre-built
`PUB <subject> <reply> 128` frames with up to 10k acks outstanding, acks counted as they arrive.
For each run: msgs/s and the server's CPU µs per message; the table shows medians and ratios.

    python3 bench/jetstream_publish.py            # full run (a few minutes)
    python3 bench/jetstream_publish.py --quick    # short run, one repetition
"""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing as mp
import threading
import time
from typing import Callable

from common import KINDS, Workload, main, raw_session, run_async, timed
from tests.servers import launch

SIZE = 128
PAYLOAD = b"x" * SIZE
INFLIGHT = 10_000
_names = itertools.count()


def _stream(url: str, storage: str, delete: str | None = None, features: str = "") -> str:
    """Create a fresh stream (or delete `delete`) from a short-lived client; returns its name.
    `features`: "transform" maps `<name>.*` to `<name>.t.*`; "republish" also republishes each stored
    message to `out.<name>.>` (nobody listens, as a cache nobody reads yet)."""
    name = f"BENCH{next(_names)}"
    extra: dict[str, object] = {}
    if "transform" in features:
        extra["subject_transform"] = {"src": name + ".*", "dest": name + ".t.{{wildcard(1)}}"}
    if "republish" in features:
        extra["republish"] = {"src": ">", "dest": f"out.{name}.>"}

    async def main() -> None:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        if delete:
            await js.delete_stream(delete)
        else:
            cfg = {"name": name, "subjects": [name + ".>"], "storage": storage, **extra}
            await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(cfg).encode())
        await nc.close()

    asyncio.run(main())
    return name


def _publisher(url: str, subject: str, n: int, use_async: bool, out: "mp.Queue[float]", size: int = SIZE) -> None:
    async def main() -> None:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        payload = b"x" * size
        start = time.perf_counter()
        if use_async:
            for _ in range(n):
                await js.publish_async(subject, payload)
            await js.publish_async_completed()
        else:
            for _ in range(n):
                await js.publish(subject, payload)
        out.put(time.perf_counter() - start)
        await nc.close()

    run_async(main())


def nats_py(storage: str, use_async: bool, size: int = SIZE) -> Callable[[str, int], tuple[int, float]]:
    def run(url: str, n: int) -> tuple[int, float]:
        name = _stream(url, storage)
        out: mp.Queue[float] = mp.Queue()
        proc = mp.Process(target=_publisher, args=(url, name + ".x", n, use_async, out, size))
        proc.start()
        seconds = out.get(timeout=600)
        proc.join()
        _stream(url, storage, delete=name)
        return n, seconds

    return run


def raw_acked(storage: str, features: str = "") -> Callable[[str, int], tuple[int, float]]:
    """Server-bound: one raw socket publishes with a reply subject, keeping <= INFLIGHT acks outstanding."""

    def run(url: str, n: int) -> tuple[int, float]:
        name = _stream(url, storage, features=features)
        s = raw_session(url, "bench.acks.*")
        frame = b"PUB %s.x bench.acks.1 %d\r\n%s\r\n" % (name.encode(), SIZE, PAYLOAD)
        acked = 0
        cond = threading.Condition()

        def reader() -> None:
            nonlocal acked
            tail = b""
            while acked < n:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data = tail + chunk  # an ack split across reads is counted once, when complete
                count = data.count(b'"seq":') - tail.count(b'"seq":')
                tail = data[-8:]
                with cond:
                    acked += count
                    cond.notify()
            with cond:
                cond.notify()

        thread = threading.Thread(target=reader, daemon=True)
        start = time.perf_counter()
        thread.start()
        sent, batch = 0, 500
        while sent < n:
            with cond:
                cond.wait_for(lambda: sent - acked < INFLIGHT - batch, timeout=60)
            k = min(batch, n - sent)
            s.sendall(frame * k)
            sent += k
        with cond:
            cond.wait_for(lambda: acked >= n, timeout=120)
        elapsed = time.perf_counter() - start
        got = acked
        s.close()
        _stream(url, storage, delete=name)
        if got < n:
            raise RuntimeError(f"only {got} of {n} acks arrived")
        return n, elapsed

    return run


WORKLOADS: list[Workload] = [
    ("nats-py sync publish, file", timed(nats_py("file", False)), 3_000),
    ("nats-py sync publish, memory", timed(nats_py("memory", False)), 3_000),
    ("nats-py async publish, file", timed(nats_py("file", True)), 30_000),
    ("nats-py async publish, memory", timed(nats_py("memory", True)), 30_000),
    ("nats-py async publish, file, 1 KB", timed(nats_py("file", True, 1024)), 30_000),
    ("nats-py async publish, file, 16 KB", timed(nats_py("file", True, 16 * 1024)), 10_000),
    ("raw acked publish 10k in flight, file", timed(raw_acked("file")), 300_000),
    ("raw acked publish 10k in flight, memory", timed(raw_acked("memory")), 300_000),
    ("raw acked publish 10k in flight, file, subject transform", timed(raw_acked("file", "transform")), 300_000),
    ("raw acked publish 10k in flight, file, transform + republish", timed(raw_acked("file", "transform republish")),
     300_000),
]


if __name__ == "__main__":
    main(__doc__, WORKLOADS, lambda: {kind: launch(kind) for kind in KINDS})
