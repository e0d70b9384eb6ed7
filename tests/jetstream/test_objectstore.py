"""nats-py object store against jsbroker and nats-server: put (chunks, meta rollup, replacing an object,
purge of old chunks), info, get, delete and seal give the same results."""

import nats
from nats.js.api import StorageType


async def obj_transcript(url: str, bucket: str) -> list:
    nc = await nats.connect(url)
    out: list = []
    try:
        js = nc.jetstream()
        obs = await js.create_object_store(bucket=bucket, storage=StorageType.MEMORY)
        big = bytes(range(256)) * 1000  # 256 kB: two chunks of nats-py's 128 kB
        info = await obs.put("blob", big)
        out.append(("put", info.name, info.size, info.chunks, info.digest))
        info = await obs.put("blob", b"small")  # replaces; the old chunks are purged
        out.append(("replace", info.size, info.chunks))
        await obs.put("other", b"x" * 10)
        out.append(("info", (await obs.get_info("blob")).size))
        result = await obs.get("blob")
        out.append(("get", result.data, result.info.size))
        state = (await js.stream_info("OBJ_" + bucket)).state
        out.append(("state", state.messages, state.last_seq))
        await obs.delete("other")
        try:
            await obs.get("other")
            out.append(("get_deleted", "found"))
        except Exception as exc:  # the exception class is part of the behaviour under test
            out.append(("get_deleted", type(exc).__name__))
        await obs.seal()
        out.append(("sealed", (await js.stream_info("OBJ_" + bucket)).config.sealed))
        await js.delete_object_store(bucket)
    finally:
        await nc.close()
    return out


async def test_object_store_matches_nats_server(nats_server, jsbroker_server, unique):
    bucket = unique("OB")
    theirs = await obj_transcript(nats_server.url, bucket)
    ours = await obj_transcript(jsbroker_server.url, bucket)
    assert ours == theirs
    assert ours[0][2] == 256_000 and ours[3][1] == b"small" and ours[-1] == ("sealed", True)
