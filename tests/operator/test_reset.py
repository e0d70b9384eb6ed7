"""jsoperator.reset against real brokers: target resolution and the lastReset record for each outcome."""

from __future__ import annotations

import datetime
import json

import nats
import pytest

from jsoperator import annotations, jsclient, reset
from tests import servers

pytestmark = pytest.mark.timeout(60)
NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


@pytest.fixture
async def pool():
    p = jsclient.Pool(timeout=1.0, connect_timeout=1.0)
    yield p
    await p.close()


def request(name: str, value: str) -> annotations.ResetRequest:
    parsed = annotations.reset_request({name: value})
    assert parsed is not None
    return parsed


async def test_time_after_the_last_message_targets_the_next_sequence(broker, pool):
    b = await pool.client(jsclient.ConnectionSettings(servers=(broker.url,)))
    await b.create_stream({"name": "T", "subjects": ["t.>"], "storage": "memory"})
    await b.put_consumer("T", {"durable_name": "c", "ack_policy": "explicit"}, "create")
    nc = await nats.connect(broker.url)
    for _ in range(3):
        await nc.jetstream().publish("t.x", b"m")
    await nc.close()
    future = request(annotations.RESET_TO_TIME, "2100-01-01T00:00:00Z")
    assert await reset.target_sequence(b, "T", future) == 4

    done = await reset.execute(b, "T", "c", future, NOW)
    assert done.last_reset == {
        "request": "reset-to-time=2100-01-01T00:00:00Z", "resetSeq": 4, "time": "2026-01-02T03:04:05Z",
        "result": "Succeeded",
        "message": "reset-to-time=2100-01-01T00:00:00Z: the next delivery is stream sequence >= 4, consumer sequence 1",
    }
    assert (done.event.type, done.event.reason) == ("Normal", "ResetSucceeded")
    assert done.info is not None and done.info["num_pending"] == 0


async def test_policy_error_is_a_failed_record(broker, pool):
    b = await pool.client(jsclient.ConnectionSettings(servers=(broker.url,)))
    await b.create_stream({"name": "P", "subjects": ["p.>"], "storage": "memory"})
    await b.put_consumer("P", {"durable_name": "c", "deliver_policy": "last"}, "create")
    done = await reset.execute(b, "P", "c", request(annotations.RESET_TO_SEQUENCE, "5@x"), NOW)
    assert done.last_reset["result"] == "Failed" and "resetSeq" not in done.last_reset
    assert done.last_reset["request"] == "reset-to-sequence=5@x"
    assert "10204" in done.last_reset["message"] and "deliverPolicy" in done.last_reset["message"]
    assert (done.event.type, done.event.reason) == ("Warning", "ResetFailed")


async def test_server_without_reset_api_is_a_failed_record(pool):
    with servers.launch("nats-server", jetstream=False) as core:
        nc = await nats.connect(core.url)

        async def api(msg):  # an old JetStream: knows CONSUMER.INFO, drops CONSUMER.RESET
            if msg.subject == "$JS.API.CONSUMER.INFO.S.c":
                await msg.respond(json.dumps({"stream_name": "S", "name": "c", "config": {}}).encode())

        await nc.subscribe("$JS.API.>", cb=api)
        await nc.flush()
        try:
            b = await pool.client(jsclient.ConnectionSettings(servers=(core.url,)))
            done = await reset.execute(b, "S", "c", request(annotations.RESET_TO_SEQUENCE, "0"), NOW)
        finally:
            await nc.close()
    assert done.last_reset["result"] == "Failed"
    assert "does not support $JS.API.CONSUMER.RESET (nats-server >= 2.14 needed)" in done.last_reset["message"]
