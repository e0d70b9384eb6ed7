"""Batch publish benchmark: jsbroker vs nats-server, alternating, 128-byte messages on loopback.

Atomic batches (ADR-50, a stream with `allow_atomic`): a raw socket sends batches of 100 or 1000 messages
(`HPUB` frames with `Nats-Batch-Id` / `Nats-Batch-Sequence`, the last with `Nats-Batch-Commit: 1` and the
only reply subject), up to 10 batches in flight, and counts the commit acks as they arrive. msgs/s counts
the messages of the committed batches. Each workload name starts with its mode ("atomic"); `--only atomic`
runs those alone, and another mode (fast batches, `allow_batched`) adds its workloads beside them.

    python3 bench/batch_publish.py            # full run
    python3 bench/batch_publish.py --quick    # short run, one repetition
    python3 bench/batch_publish.py --only "atomic 1000"
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from typing import Callable

from common import KINDS, Workload, main, raw_session, timed
from tests.servers import launch

SIZE = 128
PAYLOAD = b"x" * SIZE
IN_FLIGHT_BATCHES = 10  # nats-server allows 50 open batches per stream
_names = itertools.count()


def _stream(url: str, storage: str, delete: str | None = None) -> str:
    """Create a fresh stream allowing atomic batches (or delete `delete`); returns its name."""
    name = f"BATCH{next(_names)}"

    async def run() -> None:
        import nats

        nc = await nats.connect(url)
        if delete:
            await nc.jetstream().delete_stream(delete)
        else:
            cfg = {"name": name, "subjects": [name + ".>"], "storage": storage, "allow_atomic": True}
            answer = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(cfg).encode())).data)
            if "error" in answer:
                raise RuntimeError(f"stream create failed: {answer['error']}")
        await nc.close()

    asyncio.run(run())
    return name


def _batch_frames(subject: str, batch_id: str, size: int) -> bytes:
    """One batch as HPUB frames: only the commit carries a reply subject."""
    frames = []
    for seq in range(1, size + 1):
        commit = seq == size
        hdr = b"NATS/1.0\r\nNats-Batch-Id: %s\r\nNats-Batch-Sequence: %d\r\n%s\r\n" % (
            batch_id.encode(), seq, b"Nats-Batch-Commit: 1\r\n" if commit else b"")
        reply = b" bench.acks.1" if commit else b""
        frames.append(b"HPUB %s%s %d %d\r\n%s%s\r\n" % (subject.encode(), reply, len(hdr), len(hdr) + SIZE, hdr, PAYLOAD))
    return b"".join(frames)


def atomic(storage: str, batch_size: int) -> Callable[[str, int], tuple[int, float]]:
    """Server-bound: atomic batches of `batch_size` from one raw socket, IN_FLIGHT_BATCHES at a time."""

    def run(url: str, n: int) -> tuple[int, float]:
        name = _stream(url, storage)
        batches = max(n // batch_size, 1)
        blocks = [_batch_frames(name + ".x", f"b{i}", batch_size) for i in range(IN_FLIGHT_BATCHES)]
        s = raw_session(url, "bench.acks.*")
        acked = failed = 0
        cond = threading.Condition()

        def reader() -> None:
            nonlocal acked, failed
            tail = b""
            while acked + failed < batches:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data = tail + chunk  # an ack split across reads is counted once, when complete
                ok = data.count(b'"count":') - tail.count(b'"count":')
                bad = data.count(b'"error":') - tail.count(b'"error":')
                tail = data[-10:]
                with cond:
                    acked += ok
                    failed += bad
                    cond.notify()
            with cond:
                cond.notify()

        thread = threading.Thread(target=reader, daemon=True)
        start = time.perf_counter()
        thread.start()
        for i in range(batches):  # batch id i % IN_FLIGHT_BATCHES is free again once its commit was acked
            with cond:
                cond.wait_for(lambda: i - acked - failed < IN_FLIGHT_BATCHES, timeout=60)
            s.sendall(blocks[i % IN_FLIGHT_BATCHES])
        with cond:
            cond.wait_for(lambda: acked + failed >= batches, timeout=120)
        elapsed = time.perf_counter() - start
        s.close()
        _stream(url, storage, delete=name)
        if acked < batches:
            raise RuntimeError(f"only {acked} of {batches} commits acknowledged ({failed} refused)")
        return batches * batch_size, elapsed

    return run


WORKLOADS: list[Workload] = [
    ("atomic 100 x 128 B, file", timed(atomic("file", 100)), 200_000),
    ("atomic 100 x 128 B, memory", timed(atomic("memory", 100)), 200_000),
    ("atomic 1000 x 128 B, file", timed(atomic("file", 1000)), 200_000),
    ("atomic 1000 x 128 B, memory", timed(atomic("memory", 1000)), 200_000),
]


if __name__ == "__main__":
    main(__doc__, WORKLOADS, lambda: {kind: launch(kind) for kind in KINDS}, quick_n=lambda n: n // 10)
