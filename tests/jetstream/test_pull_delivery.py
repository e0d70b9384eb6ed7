"""Pull consumers, differential: the same scenario against jsbroker and nats-server must give the same
transcript (messages with their ack-subject tokens, and every status with its headers) and the same
ConsumerInfo counters."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.jetstream.test_consumer_support import api, info_view, pull, scenario_pair, until_waiting, without_pending


@pytest.fixture
def urls(nats_server, jsbroker_server) -> dict[str, str]:
    return {"jsbroker": jsbroker_server.url, "nats-server": nats_server.url}


async def setup(nc: Any, s: str, n: int = 0, subjects: tuple[str, ...] = ("a",), **stream: Any) -> None:
    await api(nc, f"$JS.API.STREAM.CREATE.{s}", {"name": s, "subjects": [f"{s}.>"], **stream})
    for i in range(n):
        await nc.request(f"{s}.{subjects[i % len(subjects)]}", f"m{i}".encode(), timeout=2)


async def consumer(nc: Any, s: str, name: str, **cfg: Any) -> dict[str, Any]:
    return await api(nc, f"$JS.API.CONSUMER.CREATE.{s}.{name}",
                     {"stream_name": s, "config": {"durable_name": name, **cfg}})


async def info(nc: Any, s: str, name: str) -> dict[str, Any]:
    return info_view(await api(nc, f"$JS.API.CONSUMER.INFO.{s}.{name}"))


async def same(urls: dict[str, str], unique: Any, fn: Any) -> Any:
    out = await scenario_pair(urls, fn, unique("P"))
    assert out["jsbroker"] == out["nats-server"]
    return out["nats-server"]


async def test_batches_no_wait_and_pending_tokens(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 5, subjects=("a", "b"))
        await consumer(nc, s, "C", ack_policy="explicit")
        t = [await pull(nc, s, "C", {"batch": 2}, wait=0.3, count=2)]
        t.append(await pull(nc, s, "C", {"batch": 10, "no_wait": True}, wait=1))
        t.append(await pull(nc, s, "C", {"batch": 3, "no_wait": True}, wait=1))
        t.append(await info(nc, s, "C"))
        return t

    t = await same(urls, unique, fn)
    assert t[1][-1][:3] == ("status", "404", "No Messages") and len(t[1]) == 4


async def test_expires_and_heartbeat_statuses(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 1)
        await consumer(nc, s, "C", ack_policy="explicit")
        t = [await pull(nc, s, "C", {"batch": 3, "expires": 300_000_000}, wait=2)]
        t.append(await pull(nc, s, "C", {"batch": 2, "expires": 700_000_000, "idle_heartbeat": 200_000_000},
                            wait=2))
        t.append(await pull(nc, s, "C", {"batch": 2, "expires": 200_000_000, "no_wait": True}, wait=2))
        return t

    t = await same(urls, unique, fn)
    assert t[0][-1] == ("status", "408", "Request Timeout",
                        (("Nats-Pending-Bytes", "0"), ("Nats-Pending-Messages", "2")))
    assert [e[1] for e in t[1] if e[0] == "status"].count("100") >= 2


async def test_max_bytes_statuses(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 4)
        await consumer(nc, s, "C", ack_policy="none")
        t = [await pull(nc, s, "C", {"batch": 10, "max_bytes": 150, "expires": 500_000_000}, wait=2)]
        t.append(await pull(nc, s, "C", {"batch": 1, "max_bytes": 1000, "expires": 500_000_000}, wait=2))
        t.append(await pull(nc, s, "C", {"batch": 5, "max_bytes": 10, "expires": 500_000_000}, wait=2))
        return t

    t = await same(urls, unique, fn)
    assert any(e[:3] == ("status", "409", "Batch Completed") for e in t[1])
    assert t[2][-1][:3] == ("status", "409", "Message Size Exceeds MaxBytes")


async def test_max_ack_pending_and_requests_pending(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 5)
        await consumer(nc, s, "C", ack_policy="explicit", max_ack_pending=2)
        t = [await pull(nc, s, "C", {"batch": 5, "expires": 300_000_000}, wait=2)]
        t.append(await pull(nc, s, "C", {"batch": 5, "no_wait": True}, wait=1))
        t.append(await info(nc, s, "C"))
        return t

    await same(urls, unique, fn)


async def test_acks_naks_term_and_redelivery(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 4)
        await consumer(nc, s, "C", ack_policy="explicit", ack_wait=800_000_000)
        first = await pull(nc, s, "C", {"batch": 4, "expires": 200_000_000}, wait=1, count=4)
        replies = [await _reply_of(nc, s, e) for e in first]
        await nc.request(replies[0], b"", timeout=1)  # ack_sync
        await nc.publish(replies[1], b"-NAK")
        await nc.publish(replies[2], b"+TERM bad")
        await nc.flush()
        # The nak'ed seq 2 goes out with the next pull, so its ack-wait starts ~0.3 s after seq 4's: seq 4
        # times out (t+0.8 s) after this pull ends (t+0.55 s) and well before seq 2 does (t+1.1 s). The
        # pause also lets nats-server apply the acks it queued before it answers the info.
        await asyncio.sleep(0.3)
        t = [first, await info(nc, s, "C")]
        t.append(await pull(nc, s, "C", {"batch": 4, "expires": 250_000_000}, wait=1))
        t.append(await pull(nc, s, "C", {"batch": 4, "expires": 1_500_000_000}, wait=3, count=2))
        t.append(await info(nc, s, "C"))
        return t

    t = await same(urls, unique, fn)
    redelivered = [e for e in t[3] if e[0] == "msg"]
    assert [e[2][0] for e in redelivered] == ["2", "3"]  # seq 4 timed out once, nak'ed seq 2 a second time


async def _reply_of(nc: Any, s: str, e: tuple[Any, ...]) -> str:
    dc, sseq, dseq, pending = e[2]
    return f"$JS.ACK.{s}.C.{dc}.{sseq}.{dseq}.0.{pending}"


async def test_ack_all_and_ack_replies(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 5)
        await consumer(nc, s, "C", ack_policy="all")
        got = await pull(nc, s, "C", {"batch": 5, "expires": 200_000_000}, wait=1, count=5)
        replies = [await _reply_of(nc, s, e) for e in got]
        answers = []
        for r in (replies[2], replies[1], replies[4]):
            try:
                answers.append((await nc.request(r, b"", timeout=0.5)).data)
            except Exception as e:  # noqa: BLE001 - the transcript records which acks get no answer
                answers.append(type(e).__name__)
        beyond = f"$JS.ACK.{s}.C.1.99.99.0.0"
        try:
            answers.append((await nc.request(beyond, b"", timeout=0.3)).data)
        except Exception as e:  # noqa: BLE001
            answers.append(type(e).__name__)
        return [got, answers, await info(nc, s, "C")]

    t = await same(urls, unique, fn)
    assert t[1] == [b"", b"", b"", "TimeoutError"]


async def test_round_robin_between_requests(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s)
        await consumer(nc, s, "C", ack_policy="none")

        a = asyncio.create_task(pull(nc, s, "C", {"batch": 3, "expires": 600_000_000}, wait=2, count=3))
        b = asyncio.create_task(pull(nc, s, "C", {"batch": 3, "expires": 600_000_000}, wait=2, count=3))
        await until_waiting(nc, s, "C", 2)
        for i in range(4):
            await nc.request(f"{s}.a", f"x{i}".encode(), timeout=2)
        return [without_pending(await r) for r in (a, b)]

    t = await same(urls, unique, fn)
    assert [e[3] for e in t[0] if e[0] == "msg"] == [b"x0", b"x2"]


async def test_delete_releases_waiting_pulls(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:

        await setup(nc, s)
        await consumer(nc, s, "C")
        waiting = asyncio.create_task(pull(nc, s, "C", {"batch": 1, "expires": 3_000_000_000}, wait=3))
        await until_waiting(nc, s, "C", 1)
        await api(nc, f"$JS.API.CONSUMER.DELETE.{s}.C")
        return await waiting

    t = await same(urls, unique, fn)
    assert t == [("status", "409", "Consumer Deleted", ())]


@pytest.mark.parametrize("body", [b"5", b"", b"   ", b"-3", b"abc", b'{"batch": 0}', b'{"batch": 99999999999}',
                                  b'{"batch": 1, "expires": 9223372036854775807}'])
async def test_odd_request_bodies(urls, unique, body: bytes) -> None:
    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, 3)
        await consumer(nc, s, "C", ack_policy="none")
        return [await pull(nc, s, "C", body, wait=0.5, stop_on_status=True), await info(nc, s, "C")]

    await same(urls, unique, fn)


async def test_max_waiting_and_push_heartbeat_free_pull(urls, unique) -> None:
    async def fn(nc: Any, s: str) -> Any:

        await setup(nc, s)
        await consumer(nc, s, "C", max_waiting=1)
        first = asyncio.create_task(pull(nc, s, "C", {"batch": 1, "expires": 500_000_000}, wait=1))
        await until_waiting(nc, s, "C", 1)
        second = await pull(nc, s, "C", {"batch": 1, "expires": 500_000_000}, wait=1)
        silent = await pull(nc, s, "C", {"batch": 1, "expires": 500_000_000, "idle_heartbeat": 100_000_000},
                            wait=0.3)
        return [await first, second, silent]

    t = await same(urls, unique, fn)
    assert t[1] == [("status", "409", "Exceeded MaxWaiting", ())] and t[2] == []


@pytest.mark.parametrize("ack_policy", ["explicit", "none"])
@pytest.mark.parametrize("retention", ["limits", "interest"])
async def test_long_fetches(urls, unique, ack_policy, retention) -> None:
    """Batches long enough for jsbroker's run delivery (messages in a row to the only waiting request):
    a filter that skips every other message, max_ack_pending cutting a batch short, a heartbeat request,
    interest retention removing what an ack-none consumer got. Same transcript, counters and stream."""

    async def fn(nc: Any, s: str) -> Any:
        await setup(nc, s, retention=retention)
        limit = {"max_ack_pending": 25} if ack_policy == "explicit" else {}
        await consumer(nc, s, "C", ack_policy=ack_policy, filter_subject=f"{s}.a", **limit)
        for i in range(120):  # after the consumer: an interest stream keeps only what someone wants
            await nc.request(f"{s}.{'ab'[i % 2]}", f"m{i}".encode(), timeout=2)
        t = [without_pending(await pull(nc, s, "C", {"batch": 40, "expires": 400_000_000}, wait=2))]
        t.append(await info(nc, s, "C"))
        second = await pull(nc, s, "C", {"batch": 10, "expires": 600_000_000, "idle_heartbeat": 200_000_000},
                            wait=2, count=10)
        beats = [e for e in second if e[0] == "status" and e[1] == "100"]  # how many depends on timing
        t.append((without_pending([e for e in second if e not in beats]), bool(beats) or len(second) == 10))
        t.append(await info(nc, s, "C"))
        t.append((await api(nc, f"$JS.API.STREAM.INFO.{s}"))["state"]["messages"])
        return t

    t = await same(urls, unique, fn)
    first = [e for e in t[0] if e[0] == "msg"]
    assert len(first) == (25 if ack_policy == "explicit" else 40)
    assert [e[3] for e in first[:3]] == [b"m0", b"m2", b"m4"]
