"""jsoperator.jsclient against real brokers: JetStream calls, typed errors, reset, outages."""

from __future__ import annotations

import asyncio
import datetime
import json

import nats
import pytest

from jsoperator import features, jsclient

pytestmark = pytest.mark.timeout(60)


def settings_for(url: str, **kw) -> jsclient.ConnectionSettings:
    return jsclient.ConnectionSettings(servers=(url,), **kw)


@pytest.fixture
async def pool():
    p = jsclient.Pool(timeout=1.0, connect_timeout=1.0)
    yield p
    await p.close()


async def _publish(url: str, subject: str, count: int) -> list[int]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        return [(await js.publish(subject, f"m{i}".encode())).seq for i in range(count)]
    finally:
        await nc.close()


async def _fetch_one(url: str, stream: str, durable: str) -> tuple[int, int]:
    """Fetch one message; return (stream seq, consumer seq)."""
    nc = await nats.connect(url)
    try:
        sub = await nc.jetstream().pull_subscribe_bind(durable, stream=stream)
        [msg] = await sub.fetch(1, timeout=3)
        return msg.metadata.sequence.stream, msg.metadata.sequence.consumer
    finally:
        await nc.close()


async def test_stream_lifecycle_and_typed_errors(broker, pool):
    b = await pool.client(settings_for(broker.url))
    assert await b.stream_info("ORDERS") is None
    info = await b.create_stream({"name": "ORDERS", "subjects": ["orders.>"], "storage": "memory"})
    assert info["config"]["subjects"] == ["orders.>"]
    info = await b.update_stream({"name": "ORDERS", "subjects": ["orders.>", "o.>"], "storage": "memory"})
    assert sorted(info["config"]["subjects"]) == ["o.>", "orders.>"]
    assert (await b.stream_info("ORDERS"))["config"]["name"] == "ORDERS"

    with pytest.raises(jsclient.ApiError) as err:  # storage is immutable
        await b.update_stream({"name": "ORDERS", "subjects": ["orders.>"], "storage": "file"})
    assert err.value.err_code == 10052 and "storage" in err.value.description
    with pytest.raises(jsclient.ApiError) as err:  # overlapping subjects
        await b.create_stream({"name": "OTHER", "subjects": ["orders.x"], "storage": "memory"})
    assert err.value.err_code == 10065

    assert await b.delete_stream("ORDERS") is True
    assert await b.delete_stream("ORDERS") is False  # already gone counts as success
    assert await b.stream_info("ORDERS") is None


async def test_consumer_lifecycle(broker, pool):
    b = await pool.client(settings_for(broker.url))
    await b.create_stream({"name": "S", "subjects": ["s.>"], "storage": "memory"})
    assert await b.consumer_info("S", "c") is None
    assert await b.consumer_info("NOPE", "c") is None  # missing stream: also "not there"
    cfg = {"durable_name": "c", "ack_policy": "explicit", "max_deliver": 5}
    info = await b.put_consumer("S", cfg, "create")
    assert info["config"]["max_deliver"] == 5
    info = await b.put_consumer("S", {**cfg, "max_deliver": 7}, "update")
    assert info["config"]["max_deliver"] == 7
    with pytest.raises(jsclient.ApiError) as err:  # ack policy is immutable
        await b.put_consumer("S", {**cfg, "ack_policy": "all"}, "update")
    assert err.value.err_code == 10012
    with pytest.raises(jsclient.ApiError) as err:  # update of a missing consumer
        await b.put_consumer("S", {"durable_name": "ghost"}, "update")
    assert err.value.err_code == 10149
    paused = await b.pause_consumer("S", "c", {"pause_until": "2100-01-01T00:00:00Z"})
    assert paused["paused"] is True
    assert (await b.pause_consumer("S", "c", {}))["paused"] is False
    assert await b.delete_consumer("S", "c") is True
    assert await b.delete_consumer("S", "c") is False


async def test_reset_to_sequence_and_ack_floor(broker, pool):
    b = await pool.client(settings_for(broker.url))
    await b.create_stream({"name": "R", "subjects": ["r.>"], "storage": "memory"})
    await b.put_consumer("R", {"durable_name": "c", "ack_policy": "explicit"}, "create")
    await _publish(broker.url, "r.x", 5)
    assert await _fetch_one(broker.url, "R", "c") == (1, 1)

    reply = await b.reset_consumer("R", "c", 4)
    assert reply["reset_seq"] == 4
    assert await _fetch_one(broker.url, "R", "c") == (4, 1)

    reply = await b.reset_consumer("R", "c", 0)  # back to the ack floor: 3 (set by the reset), seq 4 unacked
    assert reply["reset_seq"] == 4
    assert await _fetch_one(broker.url, "R", "c") == (4, 1)


async def test_reset_policy_error_and_missing_consumer(broker, pool):
    b = await pool.client(settings_for(broker.url))
    await b.create_stream({"name": "P", "subjects": ["p.>"], "storage": "memory"})
    await b.put_consumer("P", {"durable_name": "new", "deliver_policy": "new", "ack_policy": "explicit"}, "create")
    with pytest.raises(jsclient.InvalidReset) as err:
        await b.reset_consumer("P", "new", 2)
    assert err.value.err_code == 10204 and "invalid reset" in err.value.description
    with pytest.raises(jsclient.NotFound) as err:  # checked first: no misleading timeout
        await b.reset_consumer("P", "ghost", 1)
    assert err.value.err_code == 10014


async def test_first_seq_at_time(broker, pool):
    b = await pool.client(settings_for(broker.url))
    await b.create_stream({"name": "T", "subjects": ["t.>"], "storage": "memory"})
    await _publish(broker.url, "t.a", 3)
    middle = datetime.datetime.now(datetime.timezone.utc)
    await asyncio.sleep(0.01)  # message timestamps must be strictly after `middle`
    await _publish(broker.url, "t.a", 2)
    assert await b.first_seq_at("T", middle) == 4
    assert await b.first_seq_at("T", middle - datetime.timedelta(days=1)) == 1
    assert await b.first_seq_at("T", middle + datetime.timedelta(days=1)) is None


async def test_reset_without_server_support_is_reported_clearly(pool):
    """A JetStream API that answers CONSUMER.INFO but ignores CONSUMER.RESET, as nats-server < 2.14 does
    (its API dispatcher takes `$JS.API.>` and drops subjects it does not know)."""
    from tests import servers

    core = servers.launch("nats-server", jetstream=False)
    nc = await nats.connect(core.url)
    try:
        async def api(msg):
            if msg.subject == "$JS.API.CONSUMER.INFO.S.c":
                await msg.respond(json.dumps({"type": "io.nats.jetstream.api.v1.consumer_info_response",
                                              "stream_name": "S", "name": "c", "config": {}}).encode())

        await nc.subscribe("$JS.API.>", cb=api)
        await nc.flush()
        b = await pool.client(settings_for(core.url))
        with pytest.raises(jsclient.ResetUnsupported, match=r"nats-server >= 2.14 needed"):
            await b.reset_consumer("S", "c", 3)
    finally:
        await nc.close()
        core.close()


async def test_no_jetstream_and_no_server_are_broker_unavailable(pool):
    from tests import servers

    core = servers.launch("nats-server", jetstream=False)
    try:
        b = await pool.client(settings_for(core.url))
        with pytest.raises(jsclient.BrokerUnavailable, match="is JetStream enabled"):
            await b.stream_info("S")
    finally:
        core.close()
    with pytest.raises(jsclient.BrokerUnavailable, match="cannot connect"):
        await pool.client(settings_for("nats://127.0.0.1:1"))


async def test_outage_then_recovery_on_the_same_pool(broker, pool):
    settings = settings_for(broker.url)
    b = await pool.client(settings)
    await b.create_stream({"name": "O", "subjects": ["o.>"]})  # file storage survives the restart
    broker.kill()
    with pytest.raises(jsclient.BrokerUnavailable):
        await (await pool.client(settings)).stream_info("O")

    async def reason() -> str:  # once the client noticed the loss, requests say so (not "buffer limit")
        while True:
            try:
                await (await pool.client(settings)).stream_info("O")
            except jsclient.BrokerUnavailable as exc:
                if "reconnecting" in str(exc):
                    return str(exc)
            await asyncio.sleep(0.05)  # poll interval

    assert (await asyncio.wait_for(reason(), timeout=10)).endswith(": connection lost, reconnecting")
    broker.restart()

    async def back() -> dict | None:
        while True:
            try:
                return await (await pool.client(settings)).stream_info("O")
            except jsclient.BrokerUnavailable:
                await asyncio.sleep(0.1)

    info = await asyncio.wait_for(back(), timeout=20)
    assert info is not None and info["config"]["name"] == "O"


async def test_idle_connections_are_closed(broker):
    pool = jsclient.Pool(timeout=1.0, connect_timeout=1.0, idle_close=0.0)
    try:
        first = await pool.client(settings_for(broker.url))
        await pool.client(settings_for(broker.url, js_domain="other"))  # any later use sweeps idle ones
        assert first._nc.is_closed
        again = await pool.client(settings_for(broker.url))
        assert not again._nc.is_closed and await again.stream_info("none") is None
    finally:
        await pool.close()


@pytest.mark.parametrize("version, level", [("2.10.26", 0), ("2.11.11", 1), ("2.12.8", 3), ("2.14.6", 4),
                                            ("2.15.1", 5), ("jsbroker", 5)])
async def test_server_release_per_connection(releases, pool, version, level):
    """INFO's version and $JS.API.INFO's API level, as each release reports them (jsbroker as 2.15.1)."""
    server = await (await pool.client(settings_for(releases[version].url))).server()
    assert server == features.Server("2.15.1" if version == "jsbroker" else version, level)


async def test_server_release_is_asked_again_after_a_reconnect(pool):
    """A reconnect may reach another server: after nats-server 2.10 on a port gives way to 2.15 on the same
    port, the same pooled connection reports 2.15."""
    from tests import servers
    from tests.operator.conftest import release_binary

    old = servers.launch("nats-server", binary=release_binary("2.10.26"))
    settings = settings_for(old.url)
    try:
        assert await (await pool.client(settings)).server() == features.Server("2.10.26", 0)
        old.stop()
        new = servers.launch("nats-server", port=old.port)
    finally:
        old.close()
    try:
        async def upgraded() -> features.Server:
            while True:
                try:
                    found = await (await pool.client(settings)).server()
                except jsclient.BrokerUnavailable:
                    found = None
                if found is not None and found.version != "2.10.26":
                    return found
                await asyncio.sleep(0.1)  # poll interval while the client reconnects

        assert await asyncio.wait_for(upgraded(), timeout=20) == features.Server("2.15.1", 5)
    finally:
        new.close()
