"""Acks and their consequences, differential: interest and workqueue retention, max_deliver with its
advisory, backoff and NAK-delay timing (within a tolerance), +WPI, +NXT, and bad input (garbage bodies,
unknown sequences, malformed ack subjects) that must change nothing and crash nothing."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats
import pytest

from jsbroker.jetstream.times import parse_rfc3339
from tests.differential import normalise
from tests.jetstream.test_consumer_support import api, info_view, pull, scenario_pair, until_info, without_pending


@pytest.fixture
def urls(nats_server, jsbroker_server) -> dict[str, str]:
    return {"jsbroker": jsbroker_server.url, "nats-server": nats_server.url}


async def same(urls: dict[str, str], unique: Any, fn: Any) -> Any:
    out = await scenario_pair(urls, fn, unique("A"))
    assert out["jsbroker"] == out["nats-server"]
    return out["nats-server"]


async def stream(nc: Any, s: str, **cfg: Any) -> None:
    await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"], **cfg})


async def consumer(nc: Any, s: str, name: str, **cfg: Any) -> None:
    r = await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.{name}", {"stream_name": s, "config": {"durable_name": name, **cfg}})
    assert "error" not in r, r


async def publish(nc: Any, s: str, n: int, subject: str = "x") -> None:
    for i in range(n):
        await nc.request(f"{s}.{subject}", str(i).encode(), timeout=2)


async def state(nc: Any, s: str) -> tuple[int, int, int]:
    st = (await api(nc, f"$JS.API.STREAM.INFO.{s}"))["state"]
    return st["messages"], st["first_seq"], st["last_seq"]


async def ack_all_of(nc: Any, entries: list[Any], s: str, c: str) -> None:
    for e in entries:
        if e[0] == "msg":
            dc, sseq, dseq, pending = e[2]
            await nc.request(f"$JS.ACK.{s}.{c}.{dc}.{sseq}.{dseq}.0.{pending}", b"", timeout=1)


async def test_interest_retention(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await stream(nc, s, retention="interest")
        await publish(nc, s, 2)  # nobody interested: not stored, but sequenced
        t = [await state(nc, s)]
        await consumer(nc, s, "A", ack_policy="explicit")
        await consumer(nc, s, "B", ack_policy="explicit", filter_subject=f"{s}.x")
        await publish(nc, s, 3)
        await ack_all_of(nc, await pull(nc, s, "A", {"batch": 3, "expires": 300_000_000}, wait=1, count=3), s, "A")
        t.append(await state(nc, s))
        await ack_all_of(nc, await pull(nc, s, "B", {"batch": 2, "expires": 300_000_000}, wait=1, count=2), s, "B")
        t.append(await state(nc, s))
        await api(nc, f"$JS.API.CONSUMER.DELETE.{s}.B")
        t.append(await state(nc, s))
        return t

    assert await same(urls, unique, fn) == [(0, 3, 2), (3, 3, 5), (1, 5, 5), (0, 6, 5)]


async def test_workqueue_removes_on_ack(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await stream(nc, s, retention="workqueue")
        await consumer(nc, s, "W", ack_policy="explicit")
        await publish(nc, s, 4)
        got = await pull(nc, s, "W", {"batch": 2, "expires": 300_000_000}, wait=1, count=2)
        await ack_all_of(nc, got, s, "W")
        return [await state(nc, s), info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.W"))]

    assert (await same(urls, unique, fn))[0] == (2, 3, 4)


async def test_max_deliver_advisory(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await stream(nc, s)
        await consumer(nc, s, "C", ack_policy="explicit", ack_wait=300_000_000, max_deliver=2)
        adv = await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{s}.C")
        await publish(nc, s, 1)
        t = [await pull(nc, s, "C", {"batch": 1, "expires": 200_000_000}, wait=1, count=1)]
        t.append(await pull(nc, s, "C", {"batch": 1, "expires": 800_000_000}, wait=2, count=1))
        # the pending message hits max_deliver when a request would get its third delivery
        t.append(await pull(nc, s, "C", {"batch": 1, "expires": 600_000_000}, wait=2))
        try:
            t.append(normalise(json.loads((await adv.next_msg(timeout=2)).data)))
        except Exception as e:  # noqa: BLE001 - a missing advisory shows up in the comparison
            t.append(repr(e))
        t.append(info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C")))
        return t

    t = await same(urls, unique, fn)
    assert t[3]["type"] == "io.nats.jetstream.advisory.v1.max_deliver" and t[3]["deliveries"] == 2
    assert t[4]["num_ack_pending"] == 0 and t[4]["ack_floor"]["stream_seq"] == 0


async def redelivery_gaps(nc: Any, s: str, n: int, action: Any = None, **cfg: Any) -> list[float]:
    await stream(nc, s)
    await consumer(nc, s, "C", ack_policy="explicit", deliver_subject=f"{s}-d", **cfg)
    stamps: list[float] = []
    done = asyncio.Event()

    async def cb(msg: Any) -> None:
        stamps.append(time.monotonic())
        if action is not None:
            await nc.publish(msg.reply, action)
        if len(stamps) >= n:
            done.set()

    sub = await nc.subscribe(f"{s}-d", cb=cb)
    await publish(nc, s, 1)
    try:
        await asyncio.wait_for(done.wait(), 6)
    finally:
        await sub.unsubscribe()
    return [b - a for a, b in zip(stamps, stamps[1:])]


def close_to(gaps: list[float], want: list[float], tolerance: float = 0.15) -> bool:
    return len(gaps) == len(want) and all(abs(g - w) <= tolerance for g, w in zip(gaps, want))


async def test_backoff_timing(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        gaps = await redelivery_gaps(nc, s, 4, backoff=[200_000_000, 500_000_000, 300_000_000], max_deliver=5)
        return close_to(gaps, [0.2, 0.5, 0.3])

    assert await same(urls, unique, fn) is True


async def test_nak_delay_and_progress(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        nak = await redelivery_gaps(nc, s, 3, action=b'-NAK {"delay": 400000000}', ack_wait=5_000_000_000)
        return close_to(nak, [0.4, 0.4])

    assert await same(urls, unique, fn) is True


async def test_progress_extends_ack_wait(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await stream(nc, s)
        await consumer(nc, s, "C", ack_policy="explicit", ack_wait=500_000_000)
        await publish(nc, s, 1)
        first = await pull(nc, s, "C", {"batch": 1, "expires": 200_000_000}, wait=1, count=1)
        dc, sseq, dseq, pending = first[0][2]
        reply = f"$JS.ACK.{s}.C.{dc}.{sseq}.{dseq}.0.{pending}"
        for _ in range(3):
            await asyncio.sleep(0.3)  # keep the message in progress for longer than ack_wait
            await nc.publish(reply, b"+WPI")
        early = await pull(nc, s, "C", {"batch": 1, "expires": 250_000_000}, wait=1)
        late = await pull(nc, s, "C", {"batch": 1, "expires": 900_000_000}, wait=2, count=1)
        return [early, late]

    t = await same(urls, unique, fn)
    assert t[0][-1][1] == "408" and t[1][0][2][0] == "2"


async def test_progress_is_activity(urls, unique) -> None:
    """+WPI moves delivered.last_active (the fuzzer saw it reported after a restart by nats-server only)."""
    async def fn(nc: Any, s: str) -> Any:
        await stream(nc, s)
        await consumer(nc, s, "C", ack_policy="explicit")
        await publish(nc, s, 1)
        # a waiting pull, not no_wait: on a loaded machine nats-server may answer a no_wait pull 404 right after
        # the publish was acked (its consumer counts the new message asynchronously)
        dc, sseq, dseq, pending = (await pull(nc, s, "C", {"batch": 1, "expires": 5 * 10**9}, wait=5, count=1))[0][2]
        before = (await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C"))["delivered"]["last_active"]
        await asyncio.sleep(0.05)  # a later time for the progress ack
        await nc.request(f"$JS.ACK.{s}.C.{dc}.{sseq}.{dseq}.0.{pending}", b"+WPI", timeout=1)
        after = (await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C"))["delivered"]["last_active"]
        return parse_rfc3339(after) > parse_rfc3339(before)

    assert await same(urls, unique, fn) is True


async def test_ack_next(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await stream(nc, s)
        await consumer(nc, s, "C", ack_policy="explicit")
        await publish(nc, s, 4)
        first = await pull(nc, s, "C", {"batch": 1, "expires": 200_000_000}, wait=1, count=1)
        dc, sseq, dseq, pending = first[0][2]
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(f"$JS.ACK.{s}.C.{dc}.{sseq}.{dseq}.0.{pending}", b"+NXT 2", reply=inbox)
        nxt = [(await sub.next_msg(timeout=1)).data for _ in range(2)]
        await sub.unsubscribe()
        return [nxt, info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C"))]

    assert (await same(urls, unique, fn))[0] == [b"1", b"2"]


BAD_ACKS = [
    ("{S}.C.1.1.1.0.0", b"\xff\xfe garbage"), ("{S}.C.1.1.1.0.0", b"-NAK {not json"), ("{S}.C.1.1.1.0.0", b"-NAK 5x"),
    ("{S}.C.1.1.1.0.0", b"+NXT {bad"), ("{S}.C.1.1.1.0.0", b"+WPIX"), ("{S}.C.1.999.999.0.0", b""),
    ("{S}.C.1.999.999.0.0", b"-NAK"), ("{S}.C.1.999.999.0.0", b"+TERM"), ("{S}.C.x.y.z.0.0", b""),
    ("{S}.C.1.1", b""), ("{S}.C.1.-1.-1.0.0", b""), ("{S}.C.99999999999999999999.1.1.0.0", b""),
    ("{S}.nosuch.1.1.1.0.0", b""),
]


async def test_bad_acks_change_nothing(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await stream(nc, s)
        await consumer(nc, s, "C", ack_policy="explicit", ack_wait=30_000_000_000)
        await publish(nc, s, 2)
        await pull(nc, s, "C", {"batch": 1, "expires": 200_000_000}, wait=1, count=1)
        before = info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C"))
        async def answer(subject: str, body: bytes) -> Any:
            try:
                return (await nc.request("$JS.ACK." + subject.replace("{S}", s), body, timeout=1.5)).data
            except Exception as e:  # noqa: BLE001 - which bad acks get an answer is part of the transcript
                return type(e).__name__

        # sent together (one connection keeps their order), so the unanswered ones cost one timeout, long
        # enough that an answer on a loaded machine is not mistaken for none
        answers = await asyncio.gather(*(answer(subject, body) for subject, body in BAD_ACKS))
        after = info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C"))
        return [before, answers, after]

    t = await same(urls, unique, fn)
    assert t[0]["num_ack_pending"] == 1


async def test_huge_batch_and_expires(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await stream(nc, s)
        await consumer(nc, s, "C", ack_policy="none")
        await publish(nc, s, 3)
        got = await pull(nc, s, "C", {"batch": 2**31, "expires": 2**62}, wait=0.5)
        return [len(got), info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.C"))]

    t = await same(urls, unique, fn)
    assert t[0] == 3 and t[1]["num_pending"] == 0


@pytest.mark.parametrize("storage", ["memory", "file"])
@pytest.mark.parametrize("retention", ["limits", "interest", "workqueue"])
async def test_acks_sent_in_one_write(urls, unique, storage, retention) -> None:
    """A fetch's acks go out in one write (as nats-py sends them): plain acks, a NAK among them, an ack
    of an unknown sequence, a repeated ack. Same consumer state, redeliveries and stream contents as
    nats-server; the acks free max_ack_pending, so the next pull gets the NAK'd message and new ones."""

    async def fn(nc: Any, s: str) -> Any:
        await stream(nc, s, storage=storage, retention=retention)
        await consumer(nc, s, "C", ack_policy="explicit", max_ack_pending=4)
        await publish(nc, s, 10)
        first = await pull(nc, s, "C", {"batch": 4, "expires": 1_000_000_000}, wait=2, count=4)
        acks = [f"$JS.ACK.{s}.C.{dc}.{sseq}.{dseq}.0.{p}" for _, _, (dc, sseq, dseq, p), _ in first]
        for i, subject in enumerate(acks):
            await nc.publish(subject, b"-NAK" if i == 2 else b"")
        await nc.publish(acks[0], b"")
        await nc.publish(f"$JS.ACK.{s}.C.1.999.999.0.0", b"")
        await nc.flush()
        info = await until_info(nc, s, "C", lambda i: i["num_ack_pending"] == 1, "acks applied", timeout=5)
        second = await pull(nc, s, "C", {"batch": 4, "expires": 1_000_000_000}, wait=2, count=4)
        return [without_pending(first), info_view(info), without_pending(second), await state(nc, s)]

    t = await same(urls, unique, fn)
    assert [e[2][:2] for e in t[2]] == [("2", "3"), ("1", "5"), ("1", "6"), ("1", "7")]


async def _raw_session(url: str, frames: bytes, answers: int, deliveries: int) -> tuple[list[Any], list[bytes]]:
    """Send `frames` in one write on a raw connection subscribed to `_INBOX.api` (JSON answers) and
    `_INBOX.pull` (deliveries); return both once that many of each arrived."""
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    await reader.readline()  # INFO
    writer.write(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.api 1\r\nSUB _INBOX.pull 2\r\n' + frames)
    api_replies: list[Any] = []
    delivered: list[bytes] = []
    while len(api_replies) < answers or len(delivered) < deliveries:
        line = await asyncio.wait_for(reader.readline(), 5)
        if line.startswith(b"MSG "):
            subject, size = line.split()[1], int(line.split()[-1])
            body = (await reader.readexactly(size + 2))[:-2]
            if subject == b"_INBOX.api":
                api_replies.append(json.loads(body))
            else:
                delivered.append(body)
    writer.close()
    return api_replies, delivered


def _fetch_frame(s: str, batch: int) -> bytes:
    body = b'{"batch":%d}' % batch
    return b"PUB $JS.API.CONSUMER.MSG.NEXT.%s.C _INBOX.pull %d\r\n%s\r\n" % (s.encode(), len(body), body)


def _api_frame(verb: str, s: str) -> bytes:
    return b"PUB $JS.API.CONSUMER.%s.%s.C _INBOX.api 0\r\n\r\n" % (verb.encode(), s.encode())


async def _fetched(url: str, s: str, published: int, fetched: int) -> list[Any]:
    """Stream `s` with `published` messages and an explicit consumer C that fetched the first `fetched`."""
    nc = await nats.connect(url)
    try:
        await stream(nc, s)
        await consumer(nc, s, "C", ack_policy="explicit")
        await publish(nc, s, published)
        return await (await nc.jetstream().pull_subscribe_bind("C", s)).fetch(fetched, timeout=2)
    finally:
        await nc.close()


async def test_acks_and_requests_in_one_read(jsbroker_server, unique) -> None:
    """Acks and API requests arriving in the same read are applied in order: jsbroker hands a consumer
    its acks in batches, yet an INFO after three acks sees exactly those three. Our promise, not a
    comparison: nats-server queues acks to the consumer's goroutine, so its INFO may not see them yet."""
    s = unique("A")
    msgs = await _fetched(jsbroker_server.url, s, 6, 6)
    acks = [b"PUB %s 0\r\n\r\n" % m.reply.encode() for m in msgs]
    info = _api_frame("INFO", s)
    frames = b"".join(acks[:3]) + info + b"".join(acks[3:]) + info
    (first, second), _ = await _raw_session(jsbroker_server.url, frames, 2, 0)
    assert [(i["num_ack_pending"], i["ack_floor"]["stream_seq"]) for i in (first, second)] == [(3, 3), (0, 6)]


async def test_acks_waiting_for_a_pass_are_seen_by_every_request(jsbroker_server, unique) -> None:
    """Plain acks followed by a fetch may be applied after that fetch's delivery pass (nats-server is
    looser still: its acks race everything), but every request behind them sees them: INFO right
    after the fetch and RESET to the ack floor (the fetch, served after the read, then starts there)."""
    s = unique("A")
    msgs = await _fetched(jsbroker_server.url, s, 8, 4)
    acks = b"".join(b"PUB %s  0\r\n\r\n" % m.reply.encode() for m in msgs[:3])  # nats-py's spelling
    frames = acks + _fetch_frame(s, 2) + _api_frame("INFO", s) + _api_frame("RESET", s)
    (info, reset), delivered = await _raw_session(jsbroker_server.url, frames, 2, 2)
    assert (info["num_ack_pending"], info["ack_floor"]["stream_seq"]) == (1, 3)  # the fetch's pass comes later
    assert [m.data for m in msgs] == [b"0", b"1", b"2", b"3"] and delivered == [b"3", b"4"]  # seqs 4, 5
    assert reset["reset_seq"] == 4 and reset["num_ack_pending"] == 0


async def test_an_ack_ahead_of_delivery_stays_ignored(jsbroker_server, unique) -> None:
    """An ack for a message not yet delivered when it arrived changes nothing, even if it waits for a
    pass that then delivers that message."""
    s = unique("A")
    msgs = await _fetched(jsbroker_server.url, s, 8, 3)
    acks = b"".join(b"PUB %s  0\r\n\r\n" % m.reply.encode() for m in msgs)
    early = b"PUB $JS.ACK.%s.C.1.5.5.0.0  0\r\n\r\n" % s.encode()  # seq 5: not delivered yet
    _, delivered = await _raw_session(jsbroker_server.url, acks + early + _fetch_frame(s, 2), 0, 2)
    (info,), _ = await _raw_session(jsbroker_server.url, _api_frame("INFO", s), 1, 0)
    assert delivered == [b"3", b"4"]  # seqs 4, 5
    assert (info["num_ack_pending"], info["ack_floor"]["stream_seq"]) == (2, 3)
