"""End to end: reset annotations on a Consumer resource, executed exactly once per distinct value and
within PROMPT seconds of an annotation-only merge patch (the operator's drift timer is an hour away);
the next fetch must start at the reset target with consumer sequence 1."""

from __future__ import annotations

import datetime
import json

import pytest

from tests.operator.conftest import PROMPT, fetch, handled, poll, publish

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]

SEQ, TIME = "jsoperator.io/reset-to-sequence", "jsoperator.io/reset-to-time"


def setup_consumer(kube, broker, stream, consumer, count, **consumer_spec):
    conn = {"servers": [broker.url]}
    kube.create("Stream", stream.lower(), {"name": stream, "subjects": [f"{stream}.>"], "storage": "memory",
                                            "connection": conn})
    kube.wait_condition("Stream", stream.lower(), "Ready")
    spec = {"streamName": stream, "ackPolicy": "explicit", "connection": conn, **consumer_spec}
    kube.create("Consumer", consumer, spec)
    kube.wait_condition("Consumer", consumer, "Ready")
    return publish(broker.url, f"{stream}.x", count) if count else []


def wait_reset(kube, consumer, request, result="Succeeded"):
    obj = kube.wait("Consumer", consumer, lambda o: (o.get("status", {}).get("lastReset") or {}).get("request")
                    == request, timeout=PROMPT, what=f"lastReset {request}")
    last = obj["status"]["lastReset"]
    assert last["result"] == result, last
    return last


def touch(kube, consumer, value):
    """Change an unrelated annotation and wait until the operator handled that version."""
    kube.annotate("Consumer", consumer, {"example.com/touch": value})
    kube.wait("Consumer", consumer, lambda o: handled(o, "example.com/touch"), timeout=PROMPT, what="touch handled")


def test_reset_to_sequence_runs_once_per_value(kube, broker):
    setup_consumer(kube, broker, "RS", "rs", 6)
    assert fetch(broker.url, "RS", "rs", 2) == [(1, 1), (2, 2)]

    kube.annotate("Consumer", "rs", {SEQ: "4"})
    last = wait_reset(kube, "rs", "reset-to-sequence=4")
    assert last["resetSeq"] == 4 and "consumer sequence 1" in last["message"]
    assert fetch(broker.url, "RS", "rs") == [(4, 1)]

    # Git re-applies the same value (with another change): the reset does not run again.
    touch(kube, "rs", "1")
    assert kube.get("Consumer", "rs")["status"]["lastReset"] == last
    assert fetch(broker.url, "RS", "rs") == [(5, 2)]

    # The same target again, made distinct by a token.
    kube.annotate("Consumer", "rs", {SEQ: "4@again"})
    assert wait_reset(kube, "rs", "reset-to-sequence=4@again")["resetSeq"] == 4
    assert fetch(broker.url, "RS", "rs") == [(4, 1)]

    # "0": back to the ack floor (4 acked above, so 5), delivery restarts at consumer sequence 1.
    kube.annotate("Consumer", "rs", {SEQ: "0"})
    assert wait_reset(kube, "rs", "reset-to-sequence=0")["resetSeq"] == 5
    assert fetch(broker.url, "RS", "rs") == [(5, 1)]
    kube.wait_events("rs", "ResetSucceeded", count=3)
    assert [e.reason for e in kube.events("rs")].count("ResetSucceeded") == 3


def test_reset_to_time(kube, broker):
    setup_consumer(kube, broker, "RT", "rt", 3)
    assert fetch(broker.url, "RT", "rt", 3) == [(1, 1), (2, 2), (3, 3)]
    boundary = datetime.datetime.now(datetime.timezone.utc)
    poll(lambda: datetime.datetime.now(datetime.timezone.utc) > boundary, timeout=1, interval=0.001,
         what="clock past the boundary")
    assert publish(broker.url, "RT.x", 2) == [4, 5]
    stamp = boundary.isoformat().replace("+00:00", "Z")

    kube.annotate("Consumer", "rt", {TIME: stamp})
    assert wait_reset(kube, "rt", f"reset-to-time={stamp}")["resetSeq"] == 4
    assert fetch(broker.url, "RT", "rt") == [(4, 1)]

    # A time before everything: the first message.
    kube.annotate("Consumer", "rt", {TIME: "2000-01-01T00:00:00Z"})
    assert wait_reset(kube, "rt", "reset-to-time=2000-01-01T00:00:00Z")["resetSeq"] == 1
    assert fetch(broker.url, "RT", "rt") == [(1, 1)]


def test_policy_error_fails_once_with_a_warning(kube, broker):
    setup_consumer(kube, broker, "RP", "rp", 3, deliverPolicy="new")
    kube.annotate("Consumer", "rp", {SEQ: "2"})
    last = wait_reset(kube, "rp", "reset-to-sequence=2", result="Failed")
    assert "10204" in last["message"] and "resetSeq" not in last
    obj = kube.wait_condition("Consumer", "rp", "Ready")  # the consumer itself is fine
    assert obj["status"]["lastReset"] == last

    touch(kube, "rp", "1")  # another reconciliation: no retry of the failed reset
    warnings = kube.wait_events("rp", "ResetFailed")
    assert len(warnings) == 1 and warnings[0].type == "Warning" and "10204" in warnings[0].message
    assert kube.get("Consumer", "rp")["status"]["lastReset"] == last


def test_malformed_reset_annotation_is_reported(kube, broker):
    setup_consumer(kube, broker, "RM", "rm", 0)
    kube.annotate("Consumer", "rm", {SEQ: "soon"})
    obj = kube.wait_condition("Consumer", "rm", "Stalled", "True", "InvalidAnnotation", timeout=PROMPT)
    assert "reset-to-sequence must be a stream sequence number" in obj["status"]["conditions"][0]["message"]


def test_objects_with_the_old_kopf_state_annotations_migrate_without_rerunning(kube, broker, operator):
    """Upgrade from the version that kept kopf's state under jsoperator.io/: the operator restarts onto
    objects carrying it. Nothing is created or reset again, the old keys go, and annotations work at once."""
    setup_consumer(kube, broker, "RG", "rgc", 6)
    kube.annotate("Consumer", "rgc", {SEQ: "4"})
    executed = wait_reset(kube, "rgc", "reset-to-sequence=4")
    assert fetch(broker.url, "RG", "rgc") == [(4, 1)]

    operator.stop()
    try:  # rewrite the state as the old version kept it (its diff-base left out all jsoperator.io/ keys)
        annotations = kube.get("Consumer", "rgc")["metadata"]["annotations"]
        diffbase = json.loads(annotations["state.jsoperator.io/last-handled-configuration"])
        diffbase["metadata"]["annotations"] = {k: v for k, v in diffbase["metadata"]["annotations"].items()
                                               if not k.startswith("jsoperator.io/")}
        kube.annotate("Consumer", "rgc", {
            "state.jsoperator.io/last-handled-configuration": None, "state.jsoperator.io/kopf-managed": None,
            "jsoperator.io/last-handled-configuration": json.dumps(diffbase), "jsoperator.io/kopf-managed": "yes",
        })
    finally:
        operator.start()

    def migrated(obj: dict) -> bool:
        keys = obj["metadata"]["annotations"]
        return "jsoperator.io/kopf-managed" not in keys and "jsoperator.io/last-handled-configuration" not in keys
    obj = kube.wait("Consumer", "rgc", migrated, timeout=PROMPT, what="old state annotations removed")
    assert obj["status"]["lastReset"] == executed
    assert fetch(broker.url, "RG", "rgc") == [(5, 2)]  # not reset again
    assert [e.reason for e in kube.events("rgc")].count("Created") == 1
    assert [e.reason for e in kube.events("rgc")].count("ResetSucceeded") == 1

    kube.annotate("Consumer", "rgc", {SEQ: "2"})
    assert wait_reset(kube, "rgc", "reset-to-sequence=2")["resetSeq"] == 2
    assert fetch(broker.url, "RG", "rgc") == [(2, 1)]
