"""Core NATS behaviour through nats-py, the same body against jsbroker and nats-server."""

from __future__ import annotations

import asyncio
from collections import Counter

import nats
import pytest
from nats.errors import MaxPayloadError, NoRespondersError, TimeoutError as NatsTimeout

pytestmark = pytest.mark.xdist_group("broker-core")


@pytest.fixture
async def nc(server):
    client = await nats.connect(server.url)
    yield client
    await client.close()


async def collect(sub, n: int, timeout: float = 2.0) -> list:
    return [await sub.next_msg(timeout=timeout) for _ in range(n)]


async def test_pub_sub_roundtrip(nc, unique):
    subject = unique("core.ps")
    sub = await nc.subscribe(subject)
    for i in range(5):
        await nc.publish(subject, f"m{i}".encode())
    msgs = await collect(sub, 5)
    assert [m.data for m in msgs] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert {m.subject for m in msgs} == {subject}


async def test_wildcards(nc, unique):
    base = unique("core.wc")
    star = await nc.subscribe(f"{base}.*")
    full = await nc.subscribe(f"{base}.>")
    mid = await nc.subscribe(f"{base}.*.z")
    for s in (f"{base}.a", f"{base}.a.z", f"{base}.b.c.d", base):
        await nc.publish(s, b"x")
    await nc.flush()
    assert [m.subject for m in await collect(star, 1)] == [f"{base}.a"]
    assert [m.subject for m in await collect(full, 3)] == [f"{base}.a", f"{base}.a.z", f"{base}.b.c.d"]
    assert [m.subject for m in await collect(mid, 1)] == [f"{base}.a.z"]
    for sub in (star, full, mid):
        with pytest.raises(NatsTimeout):
            await sub.next_msg(timeout=0.2)


async def test_queue_group_delivers_each_message_once_per_group(server, nc, unique):
    subject = unique("core.q")
    other = await nats.connect(server.url)
    try:
        got: Counter[str] = Counter()
        done = asyncio.Event()
        total = 200

        def handler(tag):
            async def cb(msg):
                got[tag] += 1
                if sum(v for k, v in got.items() if k.startswith("g")) == total and got["plain"] == total:
                    done.set()
            return cb

        await nc.subscribe(subject, queue="workers", cb=handler("g1"))
        await other.subscribe(subject, queue="workers", cb=handler("g2"))
        await other.subscribe(subject, cb=handler("plain"))
        await nc.flush()
        await other.flush()
        for _ in range(total):
            await nc.publish(subject, b"w")
        await asyncio.wait_for(done.wait(), 5)
        assert got["g1"] + got["g2"] == total
        assert got["g1"] > 0 and got["g2"] > 0  # random choice spreads the load
        assert got["plain"] == total
    finally:
        await other.close()


async def test_request_reply_and_no_responders(nc, unique):
    subject = unique("core.rr")

    async def echo(msg):
        await msg.respond(b"re:" + msg.data)

    await nc.subscribe(subject, cb=echo)
    reply = await nc.request(subject, b"ping", timeout=2)
    assert reply.data == b"re:ping"
    with pytest.raises(NoRespondersError):
        await nc.request(unique("core.nobody"), b"x", timeout=2)


async def test_headers_roundtrip(nc, unique):
    subject = unique("core.hdr")
    sub = await nc.subscribe(subject)
    await nc.publish(subject, b"body", headers={"A": "1", "Nats-Msg-Id": "x y"})
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"body"
    assert msg.headers == {"A": "1", "Nats-Msg-Id": "x y"}


async def test_echo_false(server, unique):
    subject = unique("core.echo")
    quiet = await nats.connect(server.url, no_echo=True)
    loud = await nats.connect(server.url)
    try:
        own = await quiet.subscribe(subject)
        seen = await loud.subscribe(subject)
        await quiet.flush()
        await loud.flush()
        await quiet.publish(subject, b"from-quiet")
        await quiet.flush()
        await loud.publish(subject, b"from-loud")
        assert {m.data for m in await collect(seen, 2)} == {b"from-quiet", b"from-loud"}
        assert (await own.next_msg(timeout=2)).data == b"from-loud"
        with pytest.raises(NatsTimeout):
            await own.next_msg(timeout=0.3)
    finally:
        await quiet.close()
        await loud.close()


async def test_auto_unsubscribe_after_max(nc, unique):
    subject = unique("core.max")
    sub = await nc.subscribe(subject, max_msgs=2)
    for i in range(4):
        await nc.publish(subject, b"%d" % i)
    await nc.flush()
    assert [m.data for m in await collect(sub, 2)] == [b"0", b"1"]


async def test_unsubscribe_stops_delivery(nc, unique):
    subject = unique("core.unsub")
    sub = await nc.subscribe(subject)
    await nc.publish(subject, b"1")
    await nc.flush()
    assert (await sub.next_msg(timeout=2)).data == b"1"
    await sub.unsubscribe()
    with pytest.raises(NoRespondersError):
        await nc.request(subject, b"x", timeout=1)


async def test_max_payload_from_info_is_enforced_by_client(server, nc, unique):
    assert nc.max_payload == 1024 * 1024
    with pytest.raises(MaxPayloadError):
        await nc.publish(unique("core.big"), b"x" * (1024 * 1024 + 1))
    sub = await nc.subscribe(unique("core.fit"))
    await nc.publish(sub.subject, b"y" * (1024 * 1024))
    assert len((await sub.next_msg(timeout=5)).data) == 1024 * 1024


async def test_many_subscribers_fan_out(server, unique):
    subject = unique("core.fan")
    clients = [await nats.connect(server.url) for _ in range(5)]
    try:
        subs = [await c.subscribe(subject) for c in clients]
        for c in clients:
            await c.flush()
        for i in range(100):
            await clients[0].publish(subject, b"%d" % i)
        for sub in subs:
            assert [m.data for m in await collect(sub, 100)] == [b"%d" % i for i in range(100)]
    finally:
        for c in clients:
            await c.close()


async def test_subject_with_an_empty_token_reaches_nobody(server, nc, unique):
    """nats-server delivers a publish to `p..x`, `p.` or `.p` to nobody, even `>`-style subscribers, and
    a request to such a subject gets no responders (e.g. `$JS.API.STREAM.CREATE.` with no name)."""
    prefix = unique("empty")
    sub = await nc.subscribe(prefix + ".>")
    star = await nc.subscribe(prefix + ".*.x")
    for subject in (prefix + "..x", prefix + ".", prefix + ".a..x", prefix + ".a."):
        await nc.publish(subject, b"bad")
    await nc.publish(prefix + ".ok.x", b"good")
    assert (await sub.next_msg(timeout=2)).subject == prefix + ".ok.x"
    assert (await star.next_msg(timeout=2)).subject == prefix + ".ok.x"
    with pytest.raises(NoRespondersError):
        await nc.request("$JS.API.STREAM.CREATE.", b"{}", timeout=2)


async def test_empty_messages_in_one_write(server, unique):
    """PUBs without payload or reply arrive in runs (as plain acks do) and take the batched path; each
    still reaches plain, wildcard, queue-group and auto-unsubscribing subscribers, in order, and echo
    is honoured."""
    prefix = unique("core.empty")
    pub = await nats.connect(server.url, no_echo=True)
    subs = await nats.connect(server.url)
    try:
        own = await pub.subscribe(prefix + ".>")
        every = await subs.subscribe(prefix + ".>")
        first_two = await subs.subscribe(prefix + ".*")
        await first_two.unsubscribe(2)
        members = [await subs.subscribe(prefix + ".>", queue="q") for _ in range(2)]
        await subs.flush()
        await pub.flush()
        sent = [(f"{prefix}.{i}", b"x" if i == 3 else b"") for i in range(1, 7)]
        for subject, data in sent:
            await pub.publish(subject, data)
        await pub.flush()
        assert [(m.subject, m.data) for m in await collect(every, 6)] == sent
        assert [m.subject for m in await collect(first_two, 2)] == [s for s, _ in sent[:2]]
        grouped: list = []
        deadline = asyncio.get_running_loop().time() + 5
        while len(grouped) < 6 and asyncio.get_running_loop().time() < deadline:
            for member in members:
                try:
                    grouped.append((await member.next_msg(timeout=0.05)).subject)
                except NatsTimeout:
                    pass
        assert sorted(grouped) == sorted(s for s, _ in sent)
        with pytest.raises(NatsTimeout):
            await own.next_msg(timeout=0.2)
    finally:
        await pub.close()
        await subs.close()
