"""The in-process Broker and the InternalBus contract that JetStream builds on."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.errors import NoRespondersError

from jsbroker.internal import Origin
from jsbroker.server import Broker

pytestmark = pytest.mark.xdist_group("broker-embedded")


@pytest.fixture
def broker(jsbroker):
    """The `Broker` that jsbroker's pytest plugin runs in the test's loop (JetStream in tmp_path)."""
    return jsbroker.running


@pytest.fixture
def nc(nats_client):
    return nats_client


async def test_embedded_broker_serves_nats_py(broker, nc):
    assert broker.client_url == f"nats://127.0.0.1:{broker.port}"
    sub = await nc.subscribe("emb.x")
    await nc.publish("emb.x", b"hello")
    assert (await sub.next_msg(timeout=2)).data == b"hello"


async def test_internal_handler_sees_client_publish_and_replies(broker, nc):
    seen = []

    def handler(subject, reply, hdr, payload, origin):
        seen.append((subject, hdr, payload, origin))
        broker.publish(reply, None, b"", b"answer:" + payload)

    broker.subscribe_internal("svc.*", handler)
    reply = await nc.request("svc.a", b"q", timeout=2, headers={"K": "v"})
    assert reply.data == b"answer:q"
    subject, hdr, payload, origin = seen[0]
    assert (subject, payload) == ("svc.a", b"q")
    assert hdr == b"NATS/1.0\r\nK: v\r\n\r\n"
    assert isinstance(origin, Origin) and origin.headers is True and origin.client_id > 0


async def test_internal_subscription_counts_as_responder_and_unsubscribes(broker, nc):
    sub = broker.subscribe_internal("svc.silent", lambda *a: None)
    with pytest.raises(nats.errors.TimeoutError):  # no 503: someone is listening, it just does not answer
        await nc.request("svc.silent", b"x", timeout=0.3)
    broker.unsubscribe_internal(sub)
    with pytest.raises(NoRespondersError):
        await nc.request("svc.silent", b"x", timeout=2)


async def test_batched_subscription_gets_runs_in_order_before_anything_else(broker, nc):
    """A batched handler gets consecutive messages as one list, in order, and before any other
    subscriber (client or internal) is routed a message from the same read."""
    events: list[object] = []
    broker.subscribe_batched("acks.*", lambda msgs: events.append([m[0] for m in msgs]))
    broker.subscribe_internal("probe", lambda subject, *a: events.append(subject))
    for name in ("acks.1", "acks.2", "probe", "acks.3"):
        await nc.publish(name, b"")  # buffered by nats-py: one write, one read on the broker
    await nc.flush()
    assert events == [["acks.1", "acks.2"], "probe", ["acks.3"]]


async def test_batched_subscription_gets_internal_publishes_outside_reads(broker):
    got = asyncio.Event()
    broker.subscribe_batched("acks.*", lambda msgs: got.set())
    broker.loop.call_soon(broker.publish, "acks.t", None, b"", b"")  # from a callback, not a read
    await asyncio.wait_for(got.wait(), 2)


async def test_bus_publish_reaches_clients_with_headers(broker, nc):
    sub = await nc.subscribe("bus.out")
    await nc.flush()
    assert broker.publish("bus.out", "r.1", b"NATS/1.0\r\nA: 1\r\n\r\n", b"data") is True
    msg = await sub.next_msg(timeout=2)
    assert (msg.data, msg.reply, msg.headers) == (b"data", "r.1", {"A": "1"})
    assert broker.publish("bus.nobody", None, b"", b"x") is False


async def test_bus_publish_from_timer_is_flushed(broker, nc):
    sub = await nc.subscribe("bus.timer")
    await nc.flush()
    broker.loop.call_later(0.01, broker.publish, "bus.timer", None, b"", b"tick")
    assert (await sub.next_msg(timeout=2)).data == b"tick"


async def test_has_interest_and_queue(broker, nc):
    assert not broker.has_interest("int.a")
    await nc.subscribe("int.*", queue="grp")
    await nc.flush()
    assert broker.has_interest("int.a")
    assert broker.has_interest("int.a", queue="grp")
    assert not broker.has_interest("int.a", queue="other")


async def test_watch_interest_reports_transitions(broker, nc):
    changes: list[bool] = []
    watch = broker.watch_interest("deliver.x", changes.append)
    s1 = await nc.subscribe("deliver.x")
    s2 = await nc.subscribe("deliver.>")
    await nc.flush()
    await s1.unsubscribe()
    await nc.flush()
    assert changes == [True]
    await s2.unsubscribe()
    await nc.flush()
    assert changes == [True, False]
    watch.cancel()
    await nc.subscribe("deliver.x")
    await nc.flush()
    assert changes == [True, False]


async def test_internal_queue_subscribers_share_messages(broker, nc):
    got = {"a": 0, "b": 0}
    broker.subscribe_internal("work", lambda *a: got.__setitem__("a", got["a"] + 1), queue="q")
    broker.subscribe_internal("work", lambda *a: got.__setitem__("b", got["b"] + 1), queue="q")
    for _ in range(100):
        await nc.publish("work", b"")
    await nc.flush()
    assert got["a"] + got["b"] == 100 and got["a"] and got["b"]


async def test_stop_flushes_and_closes_clients(tmp_path):
    b = Broker(port=0, host="127.0.0.1", jetstream=False)
    await b.start()
    closed = asyncio.Event()

    async def on_closed():
        closed.set()

    nc = await nats.connect(b.client_url, allow_reconnect=False, closed_cb=on_closed)
    await b.stop()
    await asyncio.wait_for(closed.wait(), 5)
    assert nc.is_closed


async def test_before_output_runs_once_before_the_reads_output(broker, nc):
    """A handler defers its reply to a before_output callback: it runs once per read, before anything
    of that read is written, and what it publishes goes out with the same flush."""
    runs: list[int] = []
    held: list[tuple[str, bytes]] = []

    def release():
        runs.append(len(held))
        for reply, payload in held:
            broker.publish(reply, None, b"", b"late:" + payload)
        held.clear()

    def handler(subject, reply, hdr, payload, origin):
        if not held:
            broker.before_output(release)
        held.append((reply, payload))

    broker.subscribe_internal("defer.*", handler)
    answers = await asyncio.gather(*(nc.request("defer.x", b"%d" % i, timeout=2) for i in range(5)))
    assert [a.data for a in answers] == [b"late:%d" % i for i in range(5)]
    assert sum(runs) == 5 and held == []
    sub = await nc.subscribe("_INBOX.timer")
    await nc.flush()
    broker.loop.call_soon(lambda: handler("defer.x", "_INBOX.timer", b"", b"t", None))  # outside a read
    assert (await sub.next_msg(timeout=2)).data == b"late:t"


class _RecordingTransport:
    """Forwards to the real transport and records what each write carried."""

    def __init__(self, real) -> None:
        self._real = real
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self._real.write(data)

    def __getattr__(self, name):
        return getattr(self._real, name)


async def test_a_delivery_pass_is_written_while_it_runs(broker, nc):
    """A pull for 100 stored messages is delivered in one pass, written in growing batches (8, 16, ...)
    as it goes, so the client can start on the first messages before the pass ends."""
    js = nc.jetstream()
    await js.add_stream(name="EAGER", subjects=["eager.>"])
    for i in range(100):
        await nc.publish("eager.x", b"%d" % i)
    await js.add_consumer("EAGER", durable_name="C")
    (conn,) = broker.clients.values()
    recorder = _RecordingTransport(conn.transport)
    conn.transport = recorder
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.EAGER.C", b'{"batch":100}', reply=inbox)
    got = [await sub.next_msg(timeout=2) for _ in range(100)]
    assert [int(m.data) for m in got] == list(range(100))
    sizes = [n for n in (w.count(b"MSG eager.x ") for w in recorder.writes) if n]
    assert sizes[0] == 8 and sum(sizes) == 100 and len(sizes) >= 3, sizes
