"""jsoperator.unpin against real brokers (nats-server and jsbroker): refusals before anything is sent, the
server's refusal, and an unpin that lets the pinned client go."""

from __future__ import annotations

import datetime
import json
from typing import Any

import nats
import pytest

from jsoperator import annotations as ann
from jsoperator import jsclient, models, unpin

pytestmark = pytest.mark.timeout(60)
NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
PINNED = {"priority_groups": ["jobs"], "priority_policy": "pinned_client", "priority_timeout": 120_000_000_000}


@pytest.fixture
async def pool():
    p = jsclient.Pool(timeout=1.0, connect_timeout=1.0)
    yield p
    await p.close()


def request(value: str) -> ann.UnpinRequest:
    parsed = ann.unpin_request({ann.UNPIN: value})
    assert parsed is not None
    return parsed


def spec(**fields: Any) -> models.ConsumerSpec:
    return models.parse_spec(models.ConsumerSpec, {"streamName": "U", "ackPolicy": "explicit", **fields})


async def setup(broker: Any, pool: jsclient.Pool, **config: Any) -> jsclient.JetStreamClient:
    b = await pool.client(jsclient.ConnectionSettings(servers=(broker.url,)))
    await b.create_stream({"name": "U", "subjects": ["u.>"], "storage": "memory"})
    await b.put_consumer("U", {"durable_name": "c", "ack_policy": "explicit", **config}, "create")
    return b


@pytest.mark.parametrize(("fields", "why"), [
    ({}, "unpin=jobs refused: the consumer's priorityPolicy is none, and only a pinnedClient consumer pins a client; "
         "set spec.priorityPolicy: pinnedClient (with spec.priorityGroups) or remove the jsoperator.io/unpin annotation"),
    ({"priorityPolicy": "overflow", "priorityGroups": ["jobs"]}, "unpin=jobs refused: the consumer's priorityPolicy is "
                                                                  "overflow"),
    ({"priorityPolicy": "pinnedClient", "priorityGroups": ["a", "b"]},
     "unpin=jobs refused: 'jobs' is not one of the consumer's priority groups (a, b); name one of "
     "spec.priorityGroups in jsoperator.io/unpin"),
])
def test_refusals_say_what_is_wrong_and_what_to_do(fields: dict[str, Any], why: str) -> None:
    problem = unpin.refusal(spec(**fields), request("jobs"))
    assert problem is not None and problem.startswith(why), problem
    assert unpin.refusal(spec(priorityPolicy="pinnedClient", priorityGroups=["jobs"]), request("jobs@2")) is None


async def test_a_consumer_without_pinned_client_is_refused_and_nothing_is_sent(broker, pool):
    """Both servers: the refusal comes from the spec (nats-server would answer an overflow unpin with success)."""
    b = await setup(broker, pool)
    done = await unpin.execute(b, "U", "c", spec(), request("jobs"), NOW)
    assert done.last_unpin["result"] == "Failed" and done.last_unpin["request"] == "unpin=jobs"
    assert done.last_unpin["time"] == "2026-01-02T03:04:05Z"
    assert "priorityPolicy is none" in done.last_unpin["message"]
    assert (done.event.type, done.event.reason, done.event.message) == (
        "Warning", "UnpinFailed", done.last_unpin["message"])


async def test_the_servers_refusal_is_recorded_with_its_err_code(broker, pool):
    """A spec naming a group the server consumer lacks (e.g. unmanaged, changed by hand): the server's 10160."""
    b = await setup(broker, pool)
    done = await unpin.execute(b, "U", "c", spec(priorityPolicy="pinnedClient", priorityGroups=["jobs"]),
                               request("jobs"), NOW)
    assert done.last_unpin["result"] == "Failed"
    assert done.last_unpin["message"] == ("unpin=jobs failed: Provided priority group does not exist for this "
                                          "consumer (err_code 10160)")


async def test_unpin_lets_the_pinned_client_go(broker, pool):
    b = await setup(broker, pool, **PINNED)
    nc = await nats.connect(broker.url)
    try:
        await nc.jetstream().publish("u.x", b"m")
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.U.c", json.dumps({"batch": 1, "group": "jobs"}).encode(),
                         reply=inbox)
        msg = await sub.next_msg(timeout=5)
        assert msg.headers and msg.headers.get("Nats-Pin-Id")

        async def pinned() -> str:
            info = await b.consumer_info("U", "c")
            assert info is not None
            return str(info["priority_groups"][0].get("pinned_client_id", ""))
        assert await pinned() == msg.headers["Nats-Pin-Id"]

        done = await unpin.execute(b, "U", "c", spec(priorityPolicy="pinnedClient", priorityGroups=["jobs"]),
                                   request("jobs"), NOW)
        assert done.last_unpin == {
            "request": "unpin=jobs", "time": "2026-01-02T03:04:05Z", "result": "Succeeded",
            "message": "unpin=jobs: no client is pinned in group jobs now; the next pull request in that group gets "
                       "pinned"}
        assert (done.event.type, done.event.reason) == ("Normal", "UnpinSucceeded")
        assert await pinned() == ""
    finally:
        await nc.close()
