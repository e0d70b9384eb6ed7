"""Crash test: every acknowledged publish survives SIGKILL of the broker (file store), with `sync: always`
and with the default interval fsync (a process crash leaves written data in the OS page cache; only a
machine crash can lose the unsynced tail, see broker/jsbroker/jetstream/README.md).

A child process publishes with acks through nats-py (a unique Nats-Msg-Id per message, retried after a
failure so a message stored just before the crash is deduplicated, not doubled) and appends each acked
(seq, payload) to a file. The test waits until the child has made a random amount of progress, SIGKILLs
the broker, restarts it on the same store and checks that every acknowledged message is present and
intact, and that the stream still accepts publishes. Repeated for several rounds.
"""

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest

from tests.servers import JSBROKER, launch


PUBLISHER = r"""
import asyncio, hashlib, sys
import nats

async def main(url, stream, out_path):
    out = open(out_path, "a", buffering=1)
    async def quiet(exc):  # the broker is killed on purpose; reconnecting is the point
        pass
    nc = await nats.connect(url, reconnect_time_wait=0.05, max_reconnect_attempts=-1, connect_timeout=1,
                            error_cb=quiet, disconnected_cb=None)
    js = nc.jetstream()
    i = 0
    while True:
        i += 1
        payload = f"{i}:{hashlib.sha256(str(i).encode()).hexdigest()}" + "x" * (i % 300)
        while True:
            try:
                ack = await js.publish(f"{stream}.data", payload.encode(), timeout=1,
                                       headers={"Nats-Msg-Id": f"m{i}"})
                break
            except Exception:
                await asyncio.sleep(0.02)
        out.write(f"{ack.seq} {payload}\n")

asyncio.run(main(*sys.argv[1:]))
"""


def acked(path: Path) -> dict[int, str]:
    """The publisher's log of acknowledged messages; a last line not yet written whole is left out."""
    text = path.read_text()
    records = {}
    for line in text[: text.rfind("\n") + 1].splitlines():
        seq, _, payload = line.partition(" ")
        if payload:
            records[int(seq)] = payload
    return records


def wait_for_progress(path: Path, count: int, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while len(acked(path)) < count:
        assert time.monotonic() < deadline, f"publisher made no progress (wanted {count} acks)"
        time.sleep(0.01)  # polling the child's output file


async def check_all(url: str, stream: str, records: dict[int, str]) -> int:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        state = (await js.stream_info(stream)).state
        assert state.last_seq >= max(records, default=0)
        for seq, payload in records.items():
            msg = await js.get_msg(stream, seq)
            assert msg.data.decode() == payload, f"seq {seq} corrupted after crash"
        return state.messages
    finally:
        await nc.close()


@pytest.mark.slow
@pytest.mark.parametrize("sync, rounds", [("always", 7), ("2m", 4)], ids=["sync_always", "sync_default"])
async def test_acknowledged_messages_survive_sigkill(tmp_path, sync, rounds):
    config = tmp_path / "broker.toml"
    config.write_text(f'[jetstream]\nsync = "{sync}"\n')
    broker = launch(JSBROKER, store_dir=tmp_path / "store", extra_args=["-c", str(config)])
    stream = "CRASH"
    out_path = tmp_path / "acked.txt"
    out_path.touch()
    child = None
    rng = random.Random(os.getpid())
    try:
        nc = await nats.connect(broker.url)
        await nc.jetstream().add_stream(name=stream, subjects=[stream + ".>"], storage="file")
        await nc.close()
        child = subprocess.Popen([sys.executable, "-c", PUBLISHER, broker.url, stream, str(out_path)])
        checked: set[int] = set()
        for _ in range(rounds):
            await asyncio.to_thread(wait_for_progress, out_path, len(acked(out_path)) + rng.randint(1, 150))
            broker.kill()
            broker.start()
            records = acked(out_path)
            fresh = {seq: p for seq, p in records.items() if seq not in checked}  # the full check is at the end
            try:
                await check_all(broker.url, stream, fresh)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nbroker log:\n{broker.log_tail()}") from None
            checked.update(fresh)
        await asyncio.to_thread(wait_for_progress, out_path, len(acked(out_path)) + 10)
        records = acked(out_path)
        messages = await check_all(broker.url, stream, records)
        assert messages >= len(records) > rounds * 10
    finally:
        if child is not None:
            child.kill()
            child.wait(timeout=10)
        broker.close()
