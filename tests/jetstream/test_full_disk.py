"""A full volume, jsbroker against nats-server 2.15.1 (issue #35 part 2; broker/README.md, "Durability").

The store lives on a small tmpfs the test mounts, mostly taken by a file written before the server starts.
Publishing 4 KB messages until one is refused: both servers refuse with 503/10023 "insufficient
resources" and log "JetStream file resource limits exceeded for server" (nats-server at 75 % of the free
space it saw at start, jsbroker where the volume is down to its reserve: store/disk_room.py); both keep
serving STREAM.INFO, DIRECT.GET, fetches and acks. Once the file is removed jsbroker stores again at once,
while nats-server (whose limit was fixed at start) refuses until a restart. After a restart every
acknowledged message is there, byte for byte, on both.

(When the disk fills under nats-server below its limit, by someone else's file, its publishes get no
answer at all and its stream stays stuck until a restart; jsbroker's reserve turns that into the same
refusal, see disk_room.py.)
"""

from __future__ import annotations

import json

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nats.js.errors import APIError

from tests.servers import JSBROKER, KINDS, launch
from tests.small_volume import VOLUME, fill, small_volume

FILLER = 24 << 20  # 8 MiB stay free: nats-server takes 6 MiB of it as its limit, jsbroker keeps 1.6 MiB back
SIZE = 4096
BATCH = 8  # 1 MB messages: more than the room either server leaves


async def publish_until_refused(js: nats.js.JetStreamContext) -> tuple[list[int], APIError]:
    acked: list[int] = []
    for i in range(VOLUME // SIZE):
        try:
            acked.append((await js.publish("s", i.to_bytes(4, "big") * (SIZE // 4), timeout=5)).seq)
        except APIError as refused:
            return acked, refused
    raise AssertionError(f"{len(acked)} messages of {SIZE} bytes stored on a volume of {VOLUME}")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_full_volume_refuses_publishes_serves_reads_and_loses_nothing(kind, tmp_path):
    with small_volume(tmp_path / "volume") as volume:
        filler = volume / "filler"
        filler.write_bytes(b"\0" * FILLER)
        server = launch(kind, store_dir=volume / "store")
        try:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            await js.add_stream(StreamConfig(name="S", subjects=["s"], allow_direct=True))
            await js.add_consumer("S", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT))
            acked, refused = await publish_until_refused(js)
            assert (refused.code, refused.err_code, refused.description) == (503, 10023, "insufficient resources")
            assert len(acked) > (4 << 20) // SIZE and acked == list(range(1, len(acked) + 1))
            assert "JetStream file resource limits exceeded for server" in server.log_path.read_text()

            # reads and acks go on
            assert (await js.stream_info("S")).state.messages == len(acked)
            direct = await nc.request("$JS.API.DIRECT.GET.S", json.dumps({"seq": 2}).encode(), timeout=5)
            assert direct.data == (1).to_bytes(4, "big") * (SIZE // 4)
            sub = await js.pull_subscribe_bind("C", "S")
            fetched = await sub.fetch(10, timeout=5)
            assert [m.metadata.sequence.stream for m in fetched] == list(range(1, 11))
            for m in fetched:
                await m.ack_sync(timeout=5)
            assert (await js.consumer_info("S", "C")).ack_floor.stream_seq == 10
            with pytest.raises(APIError) as again:
                await js.publish("s", b"still full", timeout=5)
            assert again.value.err_code == 10023

            filler.unlink()
            if kind == JSBROKER:  # space is back: stored at once
                assert (await js.publish("s", b"x" * SIZE, timeout=5)).seq == len(acked) + 1
                acked.append(len(acked) + 1)
            else:  # nats-server's limit was fixed when it started: refused until a restart
                with pytest.raises(APIError) as still:
                    await js.publish("s", b"x" * SIZE, timeout=5)
                assert still.value.err_code == 10023
            await nc.close()

            server.stop()
            server.restart()
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            info = await js.stream_info("S")
            assert (info.state.messages, info.state.last_seq) == (len(acked), len(acked))
            for seq in acked[:-1] if kind == JSBROKER else acked:
                assert (await js.get_msg("S", seq)).data == (seq - 1).to_bytes(4, "big") * (SIZE // 4), seq
            assert (await js.consumer_info("S", "C")).ack_floor.stream_seq == 10
            assert (await js.publish("s", b"after restart", timeout=5)).seq == len(acked) + 1
            await nc.close()
        finally:
            server.close()


async def commit_batch(nc: nats.NATS, count: int) -> bytes:
    """Send an atomic batch of `count` 1 MB messages to "b"; the commit's answer."""
    for seq in range(1, count + 1):
        commit = {"Nats-Batch-Commit": "1"} if seq == count else {}
        reply = await nc.request("b", b"b" * 1_000_000, headers={"Nats-Batch-Id": "big",
                                 "Nats-Batch-Sequence": str(seq), **commit}, timeout=5)
    return reply.data


@pytest.mark.parametrize("kind", KINDS)
async def test_an_atomic_batch_larger_than_the_room_left_is_refused_whole(kind, tmp_path):
    """jsbroker checks the room for the whole batch before storing any of it: 10023, nothing stored, the
    stream goes on. nats-server 2.15.1 does not check a batch against its limit: it writes until the
    volume is full and the commit gets no answer (its log: "Critical write error")."""
    with small_volume(tmp_path / "volume") as volume:
        (volume / "filler").write_bytes(b"\0" * FILLER)
        server = launch(kind, store_dir=volume / "store")
        try:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            await js.add_stream(name="B", subjects=["b"], allow_atomic=True)
            if kind == JSBROKER:
                error = json.loads(await commit_batch(nc, BATCH))["error"]
                assert (error["code"], error["err_code"]) == (503, 10023)
                assert (await js.publish("b", b"small", timeout=5)).seq == 1
            else:
                with pytest.raises(nats.errors.TimeoutError):
                    await commit_batch(nc, BATCH)
                assert "Critical write error" in server.log_path.read_text()
            assert (await js.stream_info("B")).state.messages == (1 if kind == JSBROKER else 0)
            await nc.close()
        finally:
            server.close()


async def test_a_volume_turning_full_is_announced_once_per_time_by_the_out_of_storage_advisory(tmp_path):
    """jsbroker only: nats-server 2.15.1 sends $JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE when a clustered
    stream's or its raft log's write meets ENOSPC (then it turns JetStream off until a restart), in the
    system account; standalone, it refuses at its storage limit without one. jsbroker refuses before the
    disk is full and stores again once space is back, so it announces each time a stream's volume turns
    full, with nats-server's fields (jetstream/advisories.py)."""
    with small_volume(tmp_path / "volume") as volume:
        server = launch(JSBROKER, store_dir=volume / "store")
        try:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            advisories = await nc.subscribe("$JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE")
            await js.add_stream(StreamConfig(name="S", subjects=["s"]))
            for _ in range(2):
                filler = fill(volume, leave=3 << 20)  # 1.4 MiB above jsbroker's reserve
                await publish_until_refused(js)
                for _ in range(3):  # refused again: no new advisory
                    with pytest.raises(APIError):
                        await js.publish("s", b"x" * SIZE, timeout=5)
                advisory = json.loads((await advisories.next_msg(timeout=5)).data)
                with pytest.raises(nats.errors.TimeoutError):
                    await advisories.next_msg(timeout=0.5)
                assert set(advisory) == {"type", "id", "timestamp", "server", "server_id", "stream", "cluster"}
                assert (advisory["type"], advisory["stream"], advisory["cluster"]) == (
                    "io.nats.jetstream.advisory.v1.server_out_of_space", "S", "")
                assert (advisory["server"], advisory["server_id"]) == (nc._server_info["server_name"],
                                                                        nc._server_info["server_id"])
                filler.unlink()  # space is back: stored at once; filling again announces again
                await js.publish("s", b"x" * SIZE, timeout=5)
            await nc.close()
        finally:
            server.close()
