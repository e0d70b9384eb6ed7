"""End to end: the unpin annotation on a Consumer resource, executed once per distinct value within PROMPT
seconds of an annotation-only patch, recorded in status.lastUnpin; refused clearly where nothing is pinned.
Both brokers pin and unpin for real."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from tests.operator.conftest import PROMPT, handled, publish
from tests.operator.test_e2e_reset import setup_consumer

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]

UNPIN = "jsoperator.io/unpin"
PINNED = {"priorityPolicy": "pinnedClient", "priorityGroups": ["jobs"]}


def pin(url: str, stream: str, durable: str) -> str:
    """One pull request in group `jobs`: the server pins this client and says so in Nats-Pin-Id."""

    async def main() -> str:
        nc = await nats.connect(url)
        try:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}",
                             json.dumps({"batch": 1, "group": "jobs", "expires": 2_000_000_000}).encode(), reply=inbox)
            msg = await sub.next_msg(timeout=5)
            assert msg.headers, msg
            return msg.headers["Nats-Pin-Id"]
        finally:
            await nc.close()

    return asyncio.run(main())


def pinned(url: str, stream: str, durable: str) -> str:
    async def main() -> str:
        nc = await nats.connect(url)
        try:
            reply = await nc.request(f"$JS.API.CONSUMER.INFO.{stream}.{durable}", b"", timeout=3)
            [group] = json.loads(reply.data)["priority_groups"]
            return str(group.get("pinned_client_id", ""))
        finally:
            await nc.close()

    return asyncio.run(main())


def wait_unpin(kube, consumer, request, result):
    obj = kube.wait("Consumer", consumer, lambda o: (o.get("status", {}).get("lastUnpin") or {}).get("request")
                    == request, timeout=PROMPT, what=f"lastUnpin {request}")
    last = obj["status"]["lastUnpin"]
    assert last["result"] == result, last
    return last


def touch(kube, consumer, value):
    kube.annotate("Consumer", consumer, {"example.com/touch": value})
    kube.wait("Consumer", consumer, lambda o: handled(o, "example.com/touch"), timeout=PROMPT, what="touch handled")


def test_unpin_lets_the_pinned_client_go_once_per_value(kube, broker):
    setup_consumer(kube, broker, "UP", "up", 0, **PINNED)
    publish(broker.url, "UP.x", 2)
    first = pin(broker.url, "UP", "up")
    assert pinned(broker.url, "UP", "up") == first

    kube.annotate("Consumer", "up", {UNPIN: "jobs"})
    last = wait_unpin(kube, "up", "unpin=jobs", "Succeeded")
    assert "no client is pinned in group jobs now" in last["message"]
    assert pinned(broker.url, "UP", "up") == ""

    # Pinned again; Git re-applying the same value does not unpin again.
    second = pin(broker.url, "UP", "up")
    assert second and second != first
    touch(kube, "up", "1")
    assert kube.get("Consumer", "up")["status"]["lastUnpin"] == last
    assert pinned(broker.url, "UP", "up") == second

    kube.annotate("Consumer", "up", {UNPIN: "jobs@2"})
    wait_unpin(kube, "up", "unpin=jobs@2", "Succeeded")
    assert pinned(broker.url, "UP", "up") == ""
    kube.wait_events("up", "UnpinSucceeded", count=2)
    assert [e.reason for e in kube.events("up")].count("UnpinSucceeded") == 2

    # A group the consumer does not have: refused, nothing sent, the consumer stays Ready.
    kube.annotate("Consumer", "up", {UNPIN: "batch"})
    last = wait_unpin(kube, "up", "unpin=batch", "Failed")
    assert "'batch' is not one of the consumer's priority groups (jobs)" in last["message"]
    kube.wait_condition("Consumer", "up", "Ready")


def test_unpin_of_a_consumer_without_pinned_client_is_refused_once(kube, broker):
    setup_consumer(kube, broker, "UN", "un", 0)
    kube.annotate("Consumer", "un", {UNPIN: "jobs"})
    last = wait_unpin(kube, "un", "unpin=jobs", "Failed")
    assert last["message"].startswith("unpin=jobs refused: the consumer's priorityPolicy is none, and only a "
                                      "pinnedClient consumer pins a client; set spec.priorityPolicy: pinnedClient")
    kube.wait_condition("Consumer", "un", "Ready")  # the consumer itself is fine

    touch(kube, "un", "1")  # another reconciliation: no retry
    warnings = kube.wait_events("un", "UnpinFailed")
    assert len(warnings) == 1 and warnings[0].type == "Warning" and warnings[0].message == last["message"]
    assert kube.get("Consumer", "un")["status"]["lastUnpin"] == last


def test_malformed_unpin_annotation_is_reported(kube, broker):
    setup_consumer(kube, broker, "UM", "um", 0)
    kube.annotate("Consumer", "um", {UNPIN: "@again"})
    obj = kube.wait_condition("Consumer", "um", "Stalled", "True", "InvalidAnnotation", timeout=PROMPT)
    assert "jsoperator.io/unpin must name one of the consumer's priority groups" in obj["status"]["conditions"][0][
        "message"]
