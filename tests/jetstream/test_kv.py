"""nats-py key-value buckets against jsbroker and nats-server: same results.

The scenario records what each call returned (values, revisions, operations, exception class names), so
the two transcripts can be compared as a whole.
"""

import nats
import pytest
from nats.js.api import StorageType


async def kv_transcript(url: str, bucket: str, direct: bool) -> list:
    nc = await nats.connect(url)
    out: list = []

    async def record(label, coro):
        try:
            value = await coro
        except Exception as exc:  # the exception class is part of the behaviour under test
            out.append((label, type(exc).__name__))
            return None
        out.append((label, value))
        return value

    try:
        js = nc.jetstream()
        kv = await js.create_key_value(bucket=bucket, history=3, storage=StorageType.MEMORY, direct=direct)
        await record("put1", kv.put("k1", b"v1"))
        await record("put2", kv.put("k1", b"v2"))
        entry = await kv.get("k1")
        out.append(("get", entry.key, entry.value, entry.revision, entry.operation))
        await record("create_existing", kv.create("k1", b"x"))
        await record("create_new", kv.create("k2", b"n"))
        await record("update_ok", kv.update("k2", b"n2", last=3))
        await record("update_wrong", kv.update("k2", b"n3", last=1))
        await record("delete", kv.delete("k1"))
        await record("get_deleted", kv.get("k1"))
        await record("create_after_delete", kv.create("k1", b"again"))
        await record("purge", kv.purge("k2"))
        await record("get_purged", kv.get("k2"))
        await record("get_missing", kv.get("nope"))
        await record("get_revision", kv.get("k1", revision=1))
        for i in range(5):
            await kv.put("hist", str(i).encode())
        history = await settled_history(kv, "hist")
        out.append(("history", [(e.revision, e.value) for e in history]))
        out.append(("keys", sorted(await kv.keys())))
        info = await js.stream_info("KV_" + bucket)
        out.append(("state", info.state.messages, info.state.first_seq, info.state.last_seq,
                    info.config.max_msgs_per_subject, info.config.allow_direct, info.config.deny_delete))
        status = await kv.status()
        out.append(("status", status.bucket, status.values, status.history))
        reopened = await js.key_value(bucket)
        out.append(("reopen", (await reopened.get("hist")).value))
        await record("missing_bucket", js.key_value(bucket + "nope"))
        await js.delete_key_value(bucket)
        await record("deleted_bucket", js.key_value(bucket))
    finally:
        await nc.close()
    return out


async def settled_history(kv, key, attempts=5):
    """kv.history() through nats-py races its own consumer_info against delivery: on a loaded machine the
    watcher can signal "done" before the first entry and raise NoKeysError, against either server. Ask again."""
    for _ in range(attempts - 1):
        try:
            return await kv.history(key)
        except nats.js.errors.NoKeysError:
            continue
    return await kv.history(key)


@pytest.mark.parametrize("direct", [False, True], ids=["msg_get", "direct_get"])
async def test_kv_matches_nats_server(nats_server, jsbroker_server, unique, direct):
    bucket = unique("B")
    theirs = await kv_transcript(nats_server.url, bucket, direct)
    ours = await kv_transcript(jsbroker_server.url, bucket, direct)
    assert ours == theirs
    assert ("get", "k1", b"v2", 2, None) in ours  # the transcript is about real values


async def test_kv_ttl_bucket_config(nats_server, jsbroker_server, unique):
    """A bucket with a TTL gets max_age and a duplicate window capped by it, as nats-py asks for."""
    results = []
    for url in (nats_server.url, jsbroker_server.url):
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            bucket = unique("T")
            kv = await js.create_key_value(bucket=bucket, ttl=30, storage=StorageType.MEMORY)
            await kv.put("a", b"1")
            cfg = (await js.stream_info("KV_" + bucket)).config
            results.append((cfg.max_age, cfg.duplicate_window, cfg.discard, cfg.allow_rollup_hdrs))
            await js.delete_key_value(bucket)
        finally:
            await nc.close()
    assert results[0] == results[1]
    assert results[0][0] == 30
