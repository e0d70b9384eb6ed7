"""An OOM kill loses nothing acknowledged (issue #35 part 3; broker/README.md, "Memory").

jsbroker runs in a cgroup v1 memory group whose limit (memory.limit_in_bytes) it hits on purpose: core
subscribers that never read, sent 1 MB messages, so each one's output buffer grows toward its slow-consumer
cut-off (max_pending, 64 MiB, as nats-server's), together past the limit. Meanwhile a nats-py publisher
publishes to a file stream and records every pub ack. The kernel kills the broker (SIGKILL); it restarts
on the same store and every acknowledged message is there, byte for byte.

The rule asserted, with `sync: always` and with the default `sync_interval`: an OOM kill is the death of
the process, not of the machine. A pub ack is sent only after its write() returned, so the message is in
the page cache, which the kernel writes back whatever killed the process; the sync interval only bounds
what a machine crash or power loss can lose (jsbroker/store/README.md, "Durability contract").
Skipped where no memory cgroup can be made (not root, no /sys/fs/cgroup/memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from tests.polling import poll
from tests.servers import JSBROKER, launch

pytestmark = pytest.mark.slow

CGROUPS = Path("/sys/fs/cgroup/memory")
LIMIT = 96 << 20  # what the broker may allocate once in the group (what it had before stays charged outside)
LARGE = 1000 * 1000  # below the 1 MiB max_payload
SUBSCRIBERS = 4  # each may hold up to 64 MiB: 256 MiB in all


@contextlib.contextmanager
def memory_group(limit: int) -> Iterator[Path]:
    """A child memory cgroup (v1) limited to `limit` bytes, swap included; removed at the end."""
    if os.geteuid() != 0 or not (CGROUPS / "memory.limit_in_bytes").exists():
        pytest.skip("needs root and a cgroup v1 memory hierarchy at /sys/fs/cgroup/memory")
    group = CGROUPS / f"jsbroker-oom-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a memory cgroup: {e}")
    try:
        (group / "memory.limit_in_bytes").write_text(str(limit))
        with contextlib.suppress(OSError):  # no swap accounting on this kernel: nothing to limit
            (group / "memory.memsw.limit_in_bytes").write_text(str(limit))
        yield group
    finally:
        poll(lambda: not (group / "cgroup.procs").read_text().strip(), timeout=10)
        group.rmdir()


def stalled_subscriber(port: int) -> socket.socket:
    """A raw connection subscribed to "fan" that never reads."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.recv(4096)
    sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB fan 1\r\nPING\r\n')
    return sock


def flood(port: int) -> None:
    """Publish LARGE messages to "fan" until the server goes away."""
    frame = b"PUB fan %d\r\n%s\r\n" % (LARGE, b"x" * LARGE)
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)) as sock:
        sock.recv(4096)
        sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
        for _ in range(10_000):
            sock.sendall(frame)


async def publish_until_dead(url: str, acked: dict[int, bytes]) -> None:
    """Publish numbered messages until the server goes away; `acked` gets every acknowledged one."""
    nc = await nats.connect(url, allow_reconnect=False)
    js = nc.jetstream(timeout=5)
    with contextlib.suppress(Exception):  # the kill: a closed connection, a timeout
        for i in range(1_000_000):
            body = b"%d" % i * 100
            acked[(await js.publish("p", body)).seq] = body
    with contextlib.suppress(Exception):
        await nc.close()


@pytest.mark.parametrize("sync", ["always", "default"])
async def test_an_oom_kill_loses_nothing_acknowledged(sync, tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text('[jetstream]\nsync = "always"\n' if sync == "always" else "")
    broker = launch(JSBROKER, store_dir=tmp_path / "store", extra_args=["-c", str(config)])
    try:
        nc = await nats.connect(broker.url)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="S", subjects=["p"]))
        await nc.close()
        subscribers = [stalled_subscriber(broker.port) for _ in range(SUBSCRIBERS)]
        acked: dict[int, bytes] = {}
        with memory_group(LIMIT) as group:
            (group / "cgroup.procs").write_text(str(broker.pid))
            publisher = asyncio.create_task(publish_until_dead(broker.url, acked))
            await asyncio.to_thread(poll, lambda: len(acked) >= 200, timeout=30)
            flooding = asyncio.create_task(asyncio.to_thread(flood, broker.port))
            assert broker.proc is not None
            await asyncio.to_thread(poll, lambda: broker.proc.poll() is not None, timeout=60)
            assert broker.proc.returncode == -9, broker.log_tail()
            assert "oom_kill 1" in (group / "memory.oom_control").read_text()
            await publisher
            await flooding
            for sock in subscribers:
                sock.close()
        assert len(acked) >= 200
        broker.restart()
        nc = await nats.connect(broker.url)
        js = nc.jetstream()
        info = await js.stream_info("S")
        assert info.state.last_seq >= max(acked)
        for seq, body in acked.items():
            assert (await js.get_msg("S", seq)).data == body, seq
        await nc.close()
    finally:
        broker.close()
