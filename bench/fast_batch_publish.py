"""Fast batch publish benchmark (`allow_batched`, ADR-50 fast ingest): jsbroker vs nats-server, alternating.

A raw socket publishes one fast batch of n 128-byte messages the way nats.go's fast publisher does: the
first message (op 0) waits for the server's first flow ack, then messages go out while at most two flow
windows (2 x the server's current `msgs`) are unacknowledged, and the last one commits (op 2) and waits for
the closing pub ack. The client costs almost nothing, so this measures the server's fast ingest. File and
memory streams, client flow 500 (the server's cap) and 50; the table shows medians and ratios.

    python3 bench/fast_batch_publish.py            # full run
    python3 bench/fast_batch_publish.py --quick    # short run, one repetition
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
from typing import Callable

from common import KINDS, Workload, main, raw_session, timed
from tests.servers import launch

SIZE = 128
PAYLOAD = b"x" * SIZE
_names = itertools.count()
WINDOWS = 2  # flow windows the publisher keeps in flight (nats.go keeps two)
_FLOW = re.compile(rb'"type":"ack","seq":(\d+),"msgs":(\d+)')


def _stream(url: str, storage: str, delete: str | None = None) -> str:
    name = f"FBENCH{next(_names)}"

    async def main() -> None:
        import nats

        nc = await nats.connect(url)
        if delete:
            await nc.request(f"$JS.API.STREAM.DELETE.{delete}", b"")
        else:
            cfg = {"name": name, "subjects": [name + ".>"], "storage": storage, "allow_batched": True}
            await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(cfg).encode())
        await nc.close()

    asyncio.run(main())
    return name


def fast_batch(storage: str, flow: int) -> Callable[[str, int], tuple[int, float]]:
    def run(url: str, n: int) -> tuple[int, float]:
        name = _stream(url, storage)
        s = raw_session(url, "fb.>")
        state = {"acked": -1, "msgs": 1, "done": False}
        cond = threading.Condition()

        def reader() -> None:
            tail = b""
            while not state["done"]:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data = tail + chunk
                flows = _FLOW.findall(data)
                with cond:
                    for seq, msgs in flows:
                        state["acked"] = max(state["acked"], int(seq))
                        state["msgs"] = int(msgs)
                    if b'"count":' in data:
                        state["done"] = True
                    elif b'"error"' in data:
                        raise RuntimeError(data.decode(errors="replace"))
                    cond.notify()
                tail = data[-64:]

        def frame(seq: int, op: int) -> bytes:
            return b"PUB %s.x fb.b.%d.fail.%d.%d.$FI %d\r\n%s\r\n" % (name.encode(), flow, seq, op, SIZE, PAYLOAD)

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        start = time.perf_counter()
        s.sendall(frame(1, 0))
        with cond:
            cond.wait_for(lambda: state["acked"] >= 0, timeout=30)
        seq = 1
        while seq < n - 1:
            with cond:
                cond.wait_for(lambda: seq - state["acked"] < WINDOWS * state["msgs"], timeout=60)
                room = WINDOWS * state["msgs"] - (seq - state["acked"])
            k = min(room, n - 1 - seq)
            s.sendall(b"".join(frame(seq + i, 1) for i in range(1, k + 1)))
            seq += k
        s.sendall(frame(n, 2))
        with cond:
            cond.wait_for(lambda: state["done"], timeout=120)
        elapsed = time.perf_counter() - start
        done = state["done"]
        s.close()
        _stream(url, storage, delete=name)
        if not done:
            raise RuntimeError("the closing pub ack did not arrive")
        return n, elapsed

    return run


WORKLOADS: list[Workload] = [
    ("fast batch 10k x 128 B, flow 500, file", timed(fast_batch("file", 500)), 10_000),
    ("fast batch 10k x 128 B, flow 500, memory", timed(fast_batch("memory", 500)), 10_000),
    ("fast batch 10k x 128 B, flow 50, file", timed(fast_batch("file", 50)), 10_000),
    ("fast batch 100k x 128 B, flow 500, file", timed(fast_batch("file", 500)), 100_000),
]


if __name__ == "__main__":
    main(__doc__, WORKLOADS, lambda: {kind: launch(kind) for kind in KINDS})
