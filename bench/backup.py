"""Backup and restore benchmark: $JS.API.STREAM.SNAPSHOT and RESTORE of a file stream of N 128-byte
messages, jsbroker vs nats-server in one run (alternating), through nats-py as natscli drives them.

Backup: the stream is filled (acked raw PUBs, not timed), then timed from the SNAPSHOT request until
the closing empty message, every chunk acked at once (128 KiB chunks, 8 MiB window: the defaults).
Restore: the stream is deleted and the archive that backup received is sent back in 64 KiB chunks, each
a request, as natscli sends them; timed until the closing stream_create_response. The server's CPU is
read around each timed part.

    python3 bench/backup.py --reps 1     # 1,000,000 messages
    python3 bench/backup.py --quick      # 200,000 messages
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

from common import KINDS, Sample, Workload, cpu_seconds, fill_stream, main
from tests.servers import ServerHandle, launch

_names = itertools.count()
_archives: dict[tuple[str, int], tuple[str, dict[str, Any], bytes]] = {}  # what backup received, for restore


async def _request(nc: Any, subject: str, body: Any = None, timeout: float = 30) -> dict[str, Any]:
    data = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
    return json.loads((await nc.request(subject, data, timeout=timeout)).data)  # type: ignore[no-any-return]


async def _snapshot(nc: Any, name: str) -> tuple[dict[str, Any], bytes]:
    inbox, archive = nc.new_inbox(), bytearray()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_chunk(msg: Any) -> None:
        if not msg.data:
            done.set_result(None)
            return
        if msg.reply:
            await nc.publish(msg.reply, b"")
        archive.extend(msg.data)

    sub = await nc.subscribe(inbox, cb=on_chunk, pending_msgs_limit=-1, pending_bytes_limit=-1)
    meta = await _request(nc, f"$JS.API.STREAM.SNAPSHOT.{name}", {"deliver_subject": inbox})
    await asyncio.wait_for(done, 600)
    await sub.unsubscribe()
    return meta, bytes(archive)


def _backup(handle: ServerHandle, n: int) -> Sample:
    import nats

    name = f"B{next(_names)}"

    async def create() -> None:
        nc = await nats.connect(handle.url)
        await _request(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"]})
        await nc.close()

    asyncio.run(create())
    fill_stream(handle.url, name, n)

    async def timed() -> Sample:
        nc = await nats.connect(handle.url)
        cpu, start = cpu_seconds(handle.pid), time.perf_counter()
        meta, archive = await _snapshot(nc, name)
        seconds, cpu = time.perf_counter() - start, cpu_seconds(handle.pid) - cpu
        assert meta["state"]["messages"] == n, meta
        _archives[(handle.kind, n)] = (name, meta, archive)
        await _request(nc, f"$JS.API.STREAM.DELETE.{name}")
        await nc.close()
        print(f"  {handle.kind}: archive {len(archive) / 1e6:.1f} MB, backup {seconds:.1f} s", flush=True)
        return Sample(n, seconds, cpu)

    return asyncio.run(timed())


def _restore(handle: ServerHandle, n: int) -> Sample:
    import nats

    if (handle.kind, n) not in _archives:  # run alone (--only restore): take the archive first
        _backup(handle, n)
    name, meta, archive = _archives.pop((handle.kind, n))

    async def timed() -> Sample:
        nc = await nats.connect(handle.url)
        cpu, start = cpu_seconds(handle.pid), time.perf_counter()
        resp = await _request(nc, f"$JS.API.STREAM.RESTORE.{name}", {"config": meta["config"], "state": meta["state"]})
        for at in range(0, len(archive), 64 * 1024):
            await nc.request(resp["deliver_subject"], archive[at:at + 64 * 1024], timeout=30)
        done = await _request(nc, resp["deliver_subject"], b"", timeout=3600)
        seconds, cpu = time.perf_counter() - start, cpu_seconds(handle.pid) - cpu
        assert done["state"]["messages"] == n, done
        await _request(nc, f"$JS.API.STREAM.DELETE.{name}")
        await nc.close()
        print(f"  {handle.kind}: restore {seconds:.1f} s", flush=True)
        return Sample(n, seconds, cpu)

    return asyncio.run(timed())


WORKLOADS: list[Workload] = [
    ("backup (SNAPSHOT, file stream)", _backup, 1_000_000),
    ("restore (RESTORE, file stream)", _restore, 1_000_000),
]


if __name__ == "__main__":
    main(__doc__, WORKLOADS, lambda: {kind: launch(kind) for kind in KINDS})
