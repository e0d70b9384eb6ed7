"""scheduler.py without Kubernetes: due times, signals (also those arriving during a run), backoff, and
which resources an advisory or a connection wakes."""

from __future__ import annotations

import asyncio

from jsoperator import jsclient, scheduler

A = jsclient.ConnectionSettings(servers=("nats://a:4222",))
B = jsclient.ConnectionSettings(servers=("nats://b:4222",))


def body(resource, **spec):
    return {"metadata": {"name": resource, "namespace": "ns", "uid": resource}, "spec": spec, "status": {}}


async def test_a_signal_during_a_run_runs_it_again_and_backoff_retries():
    sched = scheduler.Scheduler(drift_interval=3600)
    entry = sched.seen("Stream", body("s"))
    runs: list[str] = []

    async def run(e, why):
        runs.append(why)
        if len(runs) == 1:
            sched.signal([e])  # an advisory arrives while the first run is busy
        return len(runs) == 2, A  # the second run asks for a retry

    serving = asyncio.create_task(sched.serve(run))
    sched.signal([entry])
    try:
        async def three() -> None:
            while len(runs) < 3:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(three(), timeout=5)  # signal, signal again, then the 0.5 s backoff retry
    finally:
        serving.cancel()
    assert runs == ["signal", "signal", "timer"] and entry.reached == A and entry.retries == 0


def test_advisories_and_connections_wake_the_resources_they_concern():
    sched = scheduler.Scheduler(drift_interval=3600)
    stream = sched.seen("Stream", body("orders", name="ORDERS"))
    consumer = sched.seen("Consumer", body("c", streamName="ORDERS", durableName="d"))
    other = sched.seen("Stream", body("other", name="OTHER"))
    conflicted = sched.seen("Stream", body("twin", name="ORDERS"))  # never connected (held by a Conflict)
    for entry in (stream, consumer, other):
        sched.done(entry, False, A)
    assert sched.naming(A, "ORDERS") == [stream, consumer, conflicted]
    assert sched.naming(A, "ORDERS", "d") == [stream, consumer, conflicted]
    assert sched.naming(A, "ORDERS", "x") == [stream, conflicted]
    assert sched.naming(B, "ORDERS") == [conflicted]
    assert sched.on_connection(A) == [stream, consumer, other]
    sched.advisory(A, jsclient.Advisory("DELETED", "OTHER", None))
    assert other.signalled and not stream.signalled
    assert jsclient.Advisory.parse("$JS.EVENT.ADVISORY.CONSUMER.CREATED.ORDERS.d") == jsclient.Advisory(
        "CREATED", "ORDERS", "d")
    assert jsclient.Advisory.parse("$JS.EVENT.ADVISORY.API") is None


def test_a_connection_object_wakes_the_resources_naming_it():
    sched = scheduler.Scheduler(drift_interval=3600)
    main = sched.seen("Stream", body("s", connectionRef={"name": "main"}))
    shared = sched.seen("Consumer", body("c", streamName="S", connectionRef={"kind": "ClusterJetStreamConnection",
                                                                            "name": "main"}))
    sched.seen("Stream", body("inline", connection={"servers": ["nats://a:4222"]}))
    assert sched.referencing(("JetStreamConnection", "ns", "main")) == [main]
    assert sched.referencing(("JetStreamConnection", "other", "main")) == []
    assert sched.referencing(("ClusterJetStreamConnection", "", "main")) == [shared]


def test_the_out_of_storage_advisory_marks_the_streams_it_names_on_that_connection():
    sched = scheduler.Scheduler(drift_interval=3600)
    stream = sched.seen("Stream", body("orders", name="ORDERS"))
    consumer = sched.seen("Consumer", body("c", streamName="ORDERS", durableName="d"))
    bucket = sched.seen("KeyValue", body("kv", bucket="cfg"))
    elsewhere = sched.seen("Stream", body("orders-b", name="ORDERS"))
    for entry in (stream, consumer, bucket):
        sched.done(entry, False, A)
    sched.done(elsewhere, False, B)
    data = b'{"type":"io.nats.jetstream.advisory.v1.server_out_of_space","stream":"ORDERS","server":"s1"}'
    advisory = jsclient.Advisory.parse(jsclient.OUT_OF_STORAGE, data)
    assert advisory == jsclient.Advisory("OUT_OF_STORAGE", "ORDERS", None, "s1")
    sched.advisory(A, advisory)
    assert (stream.out_of_storage, stream.signalled) == ("s1", True)
    assert [e.out_of_storage for e in (consumer, bucket, elsewhere)] == [None, None, None]
    other = sched.seen("Stream", body("other", name="OTHER"))
    sched.done(other, False, A)
    sched.advisory(A, jsclient.Advisory.parse(jsclient.OUT_OF_STORAGE, b'{"server":"s1"}'))  # no stream: all of them
    assert other.out_of_storage == "s1" and (consumer.out_of_storage, bucket.out_of_storage) == (None, None)
    assert jsclient.Advisory.parse(jsclient.OUT_OF_STORAGE, b"not json") is None
