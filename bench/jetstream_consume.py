"""JetStream consume benchmark: jsbroker vs nats-server, alternating, 128-byte messages on loopback.

Each run pre-publishes N messages into a fresh file stream (raw socket, not timed), then a nats-py child
process drains them and is timed: pull `fetch(100)` and `fetch(500)` with an ack per message, `fetch(500)`
on an ack-none consumer, a push consumer (ack none) counted in a callback, and `fetch(500)` + ack on a
`pinned_client` consumer (raw MSG.NEXT requests with the group and the pin id: nats-py has no priority
groups; every delivery carries Nats-Pin-Id). The server's CPU is read
around the drain only. The table shows medians: msgs/s and server CPU µs per message, jsbroker/nats-server;
each run's line also shows the client's own CPU per message: a rate is the client's time plus the server
time it waits for, so the client CPU tells how much of a difference is the server's.

    python3 bench/jetstream_consume.py            # full run (100k messages, 3 repetitions)
    python3 bench/jetstream_consume.py --quick    # 20k messages, one repetition
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing as mp
import queue
import time
from typing import Any, Callable

from common import KINDS, RepFailed, Sample, Workload, cpu_seconds, fill_stream, main, run_async
from tests.servers import ServerHandle, launch

SIZE = 128
PAYLOAD = b"x" * SIZE
_names = itertools.count()
LOST = "lost"  # the child's answer when the server dropped its connection (a slow consumer) mid-drain


def _admin(url: str, make: str | None = None, delete: str | None = None) -> None:
    async def main() -> None:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        if make:
            await js.add_stream(name=make, subjects=[make + ".>"])
        if delete:
            await js.delete_stream(delete)
        await nc.close()

    asyncio.run(main())


def _consumer(url: str, name: str, n: int, mode: str, batch: int, out: "mp.Queue[tuple[float, float] | str]") -> None:
    async def main() -> None:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        lost = asyncio.Event()

        async def disconnected() -> None:
            lost.set()

        async def error(e: Exception) -> None:  # the dropped connection's EOF: `lost` reports it
            pass

        # no reconnect: a dropped connection ends the drain at once instead of waiting out its timeout
        nc = await nats.connect(url, allow_reconnect=False, disconnected_cb=disconnected, error_cb=error)
        js = nc.jetstream()
        ack = AckPolicy.NONE if mode in ("pull-none", "push") else AckPolicy.EXPLICIT
        got = 0
        if mode == "pull-pinned":
            start, cpu, sub = await _pinned(nc, name, n, batch, out)
            await nc.flush()
        elif mode == "push":
            done = asyncio.Event()

            async def cb(msg) -> None:
                nonlocal got
                got += 1
                if got >= n:
                    done.set()

            out.put((0.0, 0.0))  # ready
            start, cpu = time.perf_counter(), time.process_time()
            # the client's own buffer must not be the limit (nats-py drops past 64 MB by default)
            sub = await js.subscribe(name + ".x", stream=name, cb=cb, manual_ack=True, pending_msgs_limit=10_000_000,
                                     pending_bytes_limit=1 << 31,
                                     config=ConsumerConfig(ack_policy=ack, deliver_policy=DeliverPolicy.ALL))
            waits = [asyncio.ensure_future(done.wait()), asyncio.ensure_future(lost.wait())]
            await asyncio.wait(waits, timeout=600, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
            if not done.is_set():
                out.put(LOST if lost.is_set() else f"push drain timed out after 600 s at {got}/{n} messages")
                return
        else:
            sub = await js.pull_subscribe(name + ".x", durable="BENCH", stream=name,
                                          config=ConsumerConfig(ack_policy=ack, max_ack_pending=-1))
            out.put((0.0, 0.0))  # ready
            start, cpu = time.perf_counter(), time.process_time()
            while got < n and not lost.is_set():
                msgs = await sub.fetch(batch, timeout=5)
                if ack is AckPolicy.EXPLICIT:
                    for m in msgs:
                        await m.ack()
                got += len(msgs)
            if lost.is_set():
                out.put(LOST)
                return
            await nc.flush()
        out.put((time.perf_counter() - start, time.process_time() - cpu))
        await sub.unsubscribe()
        await nc.close()

    run_async(main())


async def _pinned(nc: Any, name: str, n: int, batch: int, out: "mp.Queue[tuple[float, float] | str]"
                  ) -> tuple[float, float, Any]:
    """Drain `n` messages from a pinned_client consumer, `batch` per request, acking each; returns the start
    (perf_counter, process_time) once the consumer exists, and the inbox subscription."""
    import json

    config = {"durable_name": "BENCH", "ack_policy": "explicit", "max_ack_pending": -1, "filter_subject": name + ".x",
              "priority_policy": "pinned_client", "priority_groups": ["g"]}
    reply = await nc.request(f"$JS.API.CONSUMER.CREATE.{name}.BENCH",
                             json.dumps({"stream_name": name, "config": config}).encode(), timeout=5)
    assert b'"error"' not in reply.data, reply.data
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, pending_msgs_limit=10_000_000, pending_bytes_limit=1 << 31)
    out.put((0.0, 0.0))  # ready
    start, cpu = time.perf_counter(), time.process_time()
    pin, got = "", 0
    while got < n:
        request = {"batch": batch, "expires": 5_000_000_000, "group": "g", **({"id": pin} if pin else {})}
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{name}.BENCH", json.dumps(request).encode(), reply=inbox)
        msgs = [await sub.next_msg(5) for _ in range(min(batch, n - got))]
        for msg in msgs:  # acked after the batch, as the fetch workloads do
            assert msg.reply, msg.headers  # a status would end the request: none is expected here
            await nc.publish(msg.reply, b"")
        pin = msgs[-1].headers["Nats-Pin-Id"] if msgs[-1].headers else pin
        got += len(msgs)
    return start, cpu, sub


def _answer(proc: mp.Process, out: "mp.Queue[tuple[float, float] | str]", timeout: float) -> tuple[float, float] | str:
    """The child's next answer; a child that died without one (a dropped connection fails its fetch) fails the
    rep at once instead of after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return out.get(timeout=0.5)
        except queue.Empty:
            if not proc.is_alive() and out.empty():
                raise RepFailed(f"the consumer process exited ({proc.exitcode}) without a result: its error is above"
                                ) from None
    raise TimeoutError(f"no answer from the consumer process in {timeout:.0f} s")


def consume(mode: str, batch: int = 0, size: int = SIZE) -> Callable[[ServerHandle, int], Sample]:
    def once(handle: ServerHandle, n: int) -> Sample | None:
        """One drain; None when the server dropped the client (nats-server does so to a slow consumer)."""
        name = f"CBENCH{next(_names)}"
        _admin(handle.url, make=name)
        fill_stream(handle.url, name, n, size)
        out: mp.Queue[tuple[float, float] | str] = mp.Queue()
        proc = mp.Process(target=_consumer, args=(handle.url, name, n, mode, batch, out))
        proc.start()
        try:
            _answer(proc, out, 60)  # ready
            before = cpu_seconds(handle.pid)
            answer = _answer(proc, out, 900)
            cpu = cpu_seconds(handle.pid) - before
        finally:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
            _admin(handle.url, delete=name)
        if answer == LOST:
            return None
        if isinstance(answer, str):
            raise RuntimeError(answer)
        return Sample(n, answer[0], cpu, answer[1])

    def run(handle: ServerHandle, n: int) -> Sample:
        sample = once(handle, n) or once(handle, n)  # a dropped client is retried once
        if sample is None:
            raise RepFailed("dropped the benchmark's client twice (slow consumer: its pending buffer overflowed); "
                            "this rep is left out of the medians")
        return sample

    return run


WORKLOADS: list[Workload] = [
    ("pull fetch(100) + ack each, file", consume("pull-ack", 100), 100_000),
    ("pull fetch(500) + ack each, file", consume("pull-ack", 500), 100_000),
    ("pull fetch(500), ack none, file", consume("pull-none", 500), 100_000),
    ("push (ack none), file", consume("push"), 100_000),
    ("pinned_client fetch(500) + ack each, file", consume("pull-pinned", 500), 100_000),
    ("pull fetch(500) + ack each, file, 1 KB", consume("pull-ack", 500, 1024), 100_000),
    ("pull fetch(500) + ack each, file, 16 KB", consume("pull-ack", 500, 16 * 1024), 10_000),
    ("push (ack none), file, 1 KB", consume("push", 0, 1024), 100_000),
    ("push (ack none), file, 16 KB", consume("push", 0, 16 * 1024), 10_000),
]


if __name__ == "__main__":
    main(__doc__, WORKLOADS, lambda: {kind: launch(kind) for kind in KINDS}, quick_n=lambda n: min(n, 20_000))
