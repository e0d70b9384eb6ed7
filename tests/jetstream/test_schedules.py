"""Message schedules (ADR-51) against nats-server: configs, every publish refusal, what a schedule stores,
what fires (`@at`, `@every`, with Nats-Schedule-Source/-TTL/-Rollup) and that schedules fire after SIGTERM
and kill -9 restarts. Firing is polled with timeouts; fire times are normalised (the compared shape is the
subjects, bodies and headers; `Nats-Schedule-Next` of a repeating schedule is checked to be a whole second)."""

from __future__ import annotations

import asyncio
import json
import re
import struct
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import nats
import pytest

from jsbroker.jetstream import cron, errors, schedule, times, zones
from tests.jetstream.test_stream_api import C, D, G, I, P, U, cfg, on_storage, pub
from tests.polling import poll_async

FAR = "@at 2099-01-01T00:00:00Z"  # stored, never due during a test


# Nats-Schedule-Time-Zone values as Go's time.LoadLocation takes them: valid (also Local, a name the file
# system resolves, a directory's file), or not (case, a directory, not a TZif file, `..`, absolute, empty)
ZONE_NAMES = ("Europe/Berlin", "UTC", "Local", "Etc/GMT+5", "Europe//Berlin", "./UTC", "posix/Asia/Tokyo",
              "utc", "Europe", "Europe/Berlin/", "zone.tab", "../zoneinfo/UTC", "/etc/localtime", "", " ")


def sched(subject: str, pattern: str, target: str, body: str = "x", **headers: str) -> tuple[Any, ...]:
    return pub(subject, body, Nats_Schedule=pattern, Nats_Schedule_Target=target, **headers)  # type: ignore[no-any-return]


def scheduled(**kw: Any) -> dict[str, Any]:
    return cfg(allow_msg_schedules=True, **kw)


CASES = {
    "configs": [(C, scheduled()), (I, ""), (U, cfg()), (U, scheduled(max_msgs=5)), (D, ""),
                (C, scheduled(discard="new")), (C, scheduled(deny_purge=True)), (I, ""), (D, ""),
                (C, scheduled(allow_rollup_hdrs=False, pedantic=True)),
                (C, scheduled(allow_msg_counter=True)),
                (C, {"name": "{S}", "mirror": {"name": "{S}o"}, "allow_msg_schedules": True}),
                (C, {"name": "{S}", "sources": [{"name": "{S}o"}], "allow_msg_schedules": True}),
                (C, cfg()), (U, scheduled()), (I, ""), (D, "")],
    "stored_schedules": [(C, scheduled(allow_msg_ttl=True)), sched("{S}.a", FAR, "{S}.t", Foo="bar"),
                         sched("{S}.b", "@every 1h", "{S}.t", Nats_Schedule_TTL="5s", Nats_Schedule_Rollup="sub"),
                         sched("{S}.a", FAR, "{S}.u", Nats_Rollup="sub"),
                         sched("{S}.c", FAR, "{S}.t", Nats_Schedule_Source="{S}.src"),
                         pub("{S}.d", "y", Nats_Schedule=""),
                         sched("{S}.e", "0 0 * * * *", "{S}.t"), sched("{S}.f", "@hourly", "{S}.t"),
                         sched("{S}.g", "@yearly", "{S}.t"), sched("{S}.h", "*/5,7 1-3 ? 1,15 JAN-mar Mon", "{S}.t"),
                         sched("{S}.i", "0 0 12 ? * sun,sat", "{S}.t"), sched("{S}.j", "+5 0 0 * * *", "{S}.t"),
                         (G, {"last_by_subj": "{S}.a"}), (G, {"last_by_subj": "{S}.b"}),
                         (G, {"last_by_subj": "{S}.c"}), (G, {"last_by_subj": "{S}.d"}), (I, ""), (D, "")],
    "bad_schedules": [(C, scheduled()), sched("{S}.a", "@every 500ms", "{S}.t"), sched("{S}.a", "bogus", "{S}.t"),
                      sched("{S}.a", "0 * * * *", "{S}.t"), sched("{S}.a", "@at tomorrow", "{S}.t"),
                      sched("{S}.a", "0 0 0 30 2 *", "{S}.t"), sched("{S}.a", "60 * * * * *", "{S}.t"),
                      sched("{S}.a", "*/0 * * * * *", "{S}.t"), sched("{S}.a", "* * * * * 7", "{S}.t"),
                      sched("{S}.a", "1-2-3 * * * * *", "{S}.t"), sched("{S}.a", "5-1 * * * * *", "{S}.t"),
                      sched("{S}.a", "1/2/3 * * * * *", "{S}.t"), sched("{S}.a", "x * * * * *", "{S}.t"),
                      sched("{S}.a", "* * * * foo *", "{S}.t"), sched("{S}.a", "@minutely", "{S}.t"),
                      sched("{S}.a", "0 0 * * * *", "{S}.t", Nats_Schedule_Time_Zone="Nowhere/Else"),
                      sched("{S}.a", "@every", "{S}.t"), sched("{S}.a", "@every x", "{S}.t"),
                      sched("{S}.a", FAR, "other.t"), sched("{S}.a", FAR, "{S}.a"), sched("{S}.a", FAR, "{S}.*"),
                      pub("{S}.a", "x", Nats_Schedule=FAR),
                      sched("{S}.a", FAR, "{S}.t", Nats_Schedule_TTL="5s"),
                      sched("{S}.a", FAR, "{S}.t", Nats_Schedule_TTL="bad"),
                      sched("{S}.a", FAR, "{S}.t", Nats_Schedule_Rollup="all"),
                      sched("{S}.a", FAR, "{S}.t", Nats_Rollup="all"),
                      sched("{S}.a", FAR, "{S}.t", Nats_Schedule_Source="{S}.t"),
                      sched("{S}.a", FAR, "{S}.t", Nats_Schedule_Source="{S}.a"),
                      sched("{S}.a", FAR, "{S}.t", Nats_Schedule_Source="other.s"),
                      sched("{S}.a", FAR, "{S}.t", Nats_Schedule_Time_Zone="Europe/Berlin"),
                      sched("{S}.a", FAR, "{S}.t", Nats_Schedule_Time_Zone="Nowhere/Else"),
                      sched("{S}.a", "@every 1h", "{S}.t", Nats_Schedule_Time_Zone="UTC"),
                      *(sched("{S}.z", "0 0 0 1 1 *", "{S}.t", Nats_Schedule_Time_Zone=zone) for zone in ZONE_NAMES),
                      (G, {"last_by_subj": "{S}.z"}),
                      pub("{S}.a", "x", Nats_Scheduler="{S}.b"),
                      pub("{S}.a", "x", Nats_Schedule_Next="soon", Nats_Scheduler="{S}.b"),
                      pub("{S}.a", "x", Nats_Schedule_Next="purge", Nats_Scheduler="{S}.a"),
                      pub("{S}.a", "x", Nats_Schedule_Next="purge"),
                      pub("{S}.p", "plain"), pub("{S}.a", "x", Nats_Schedule_Next="purge", Nats_Scheduler="{S}.p"),
                      (I, ""), (D, "")],
    "not_a_schedule_stream": [(C, cfg()), sched("{S}.a", FAR, "{S}.t"), sched("{S}.a", "bogus", "{S}.t"),
                              pub("{S}.a", "x", Nats_Schedule_Next="purge", Nats_Scheduler="{S}.b"),
                              pub("{S}.a", "x", Nats_Scheduler="{S}.b"), pub("{S}.a", "x", Nats_Schedule=""),
                              (I, ""), (D, "")],
    "a_purge_removes_the_schedule": [(C, scheduled()), sched("{S}.a", FAR, "{S}.t"),
                                     pub("{S}.b", "x", Nats_Schedule_Next="purge", Nats_Scheduler="{S}.a"),
                                     (G, {"last_by_subj": "{S}.a"}), (I, ""), (P, {"filter": "{S}.b"}), (I, ""),
                                     (D, "")],
}


@pytest.mark.parametrize("storage", ["memory", "file"])
@pytest.mark.parametrize("name", sorted(CASES))
async def test_schedules_match_nats_server(differential, name, storage):
    ours, theirs = await differential(on_storage(CASES[name], storage))
    assert ours == theirs


@pytest.mark.parametrize(("pattern", "after", "expected"), [
    ("0 0 * * * *", "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"),
    ("* * * * * *", "2026-01-01T10:00:00.7Z", "2026-01-01T10:00:01Z"),
    ("30 15 10 * * *", "2026-01-01T10:15:30Z", "2026-01-02T10:15:30Z"),
    ("0 0 0 29 2 *", "2026-03-01T00:00:00Z", "2028-02-29T00:00:00Z"),
    ("0 0 0 1 * mon", "2026-01-01T00:00:00Z", "2026-01-05T00:00:00Z"),  # day 1 OR a Monday
    ("0 0 0 * * mon", "2026-01-01T00:00:00Z", "2026-01-05T00:00:00Z"),  # * and Monday: AND
    ("0 0 0 13 * fri", "2026-02-01T00:00:00Z", "2026-02-06T00:00:00Z"),
    ("0 */20 * * * *", "2026-01-01T10:41:00Z", "2026-01-01T11:00:00Z"),
    ("0 5/20 * * * *", "2026-01-01T10:06:00Z", "2026-01-01T10:25:00Z"),
    ("@weekly", "2026-01-01T00:00:00Z", "2026-01-04T00:00:00Z"),
    ("@monthly", "2026-12-31T23:59:59Z", "2027-01-01T00:00:00Z"),
])
def test_cron_next_fire_times(pattern, after, expected):
    expression = cron.parse(pattern)
    assert expression is not None
    assert expression.next_after(times.parse_rfc3339(after)) == times.parse_rfc3339(expected)


# In a zone, as nats-server's search finds them (each checked against its cron.go); around DST changes hours move by
# elapsed time and dates by wall clock: a skipped hour does not fire, a repeated one fires twice.
@pytest.mark.parametrize(("pattern", "zone", "after", "expected"), [
    ("0 0 9 * * *", "Asia/Kolkata", "2026-01-01T00:00:00Z", "2026-01-01T03:30:00Z"),
    ("0 0 0 * * *", "America/New_York", "2026-07-01T12:00:00Z", "2026-07-02T04:00:00Z"),
    ("0 0 0 * * *", "America/New_York", "2026-01-01T12:00:00Z", "2026-01-02T05:00:00Z"),
    ("0 30 2 * * *", "America/New_York", "2024-03-10T00:00:00Z", "2024-03-11T06:30:00Z"),  # 02:30 skipped
    ("0 30 1 * * *", "America/New_York", "2024-11-03T05:30:00Z", "2024-11-03T06:30:00Z"),  # 01:30 twice
    ("0 30 2 * * *", "Europe/Berlin", "2024-10-27T00:30:00Z", "2024-10-27T01:30:00Z"),
    ("0 0 * * * *", "Europe/Berlin", "2024-03-31T00:30:00Z", "2024-03-31T01:00:00Z"),  # 03:00 CEST
    ("0 0 0 * 9 *", "America/Santiago", "2024-09-07T00:00:00Z", "2024-09-07T04:00:00Z"),
    ("0 0 0 8 9 *", "America/Santiago", "2024-09-01T00:00:00Z", None),  # a skipped midnight: never found
    ("0 0 12 * * *", "Pacific/Chatham", "2026-06-01T00:00:00Z", "2026-06-01T23:15:00Z"),
    ("0 0 0 1 1 *", "Local", "2026-06-01T00:00:00Z", "2027-01-01T00:00:00Z"),  # the test machine runs in UTC
])
def test_cron_next_fire_times_in_a_zone(pattern, zone, after, expected):
    expression = cron.parse(pattern)
    assert expression is not None
    in_zone = zones.load(zone)
    assert in_zone is not None
    want = None if expected is None else times.parse_rfc3339(expected)
    assert expression.next_after(times.parse_rfc3339(after), in_zone) == want


def test_next_fire_time_of_a_zone_schedule_shows_the_zone_offset():
    hdr = (b"NATS/1.0\r\nNats-Schedule: 0 0 9 * * *\r\nNats-Schedule-Target: t\r\n"
           b"Nats-Schedule-Time-Zone: Asia/Kolkata\r\n\r\n")
    due = times.parse_rfc3339("2026-01-01T03:30:00Z")
    produced = schedule.produce("s", hdr, b"", None, due)[1]
    assert b"Nats-Schedule-Next: 2026-01-01T09:00:00+05:30\r\n" in produced
    with pytest.raises(errors.ApiError) as refused:
        schedule.next_fire(hdr.replace(b"Asia/Kolkata", b"Asia/Nowhere"), 0, 0)
    assert refused.value.err_code == 10223


def test_every_counts_whole_seconds_from_the_store_time():
    hdr = b"NATS/1.0\r\nNats-Schedule: @every 2s\r\n\r\n"
    assert schedule.next_fire(hdr, 10_600_000_000, 10_600_000_000) == (13_000_000_000, True)
    assert schedule.next_fire(hdr, 10_400_000_000, 20_000_000_000) == (22_000_000_000, True)  # overdue: from now


# -- firing -----------------------------------------------------------------------------------------


def _at(seconds: float) -> str:
    return "@at " + times.rfc3339((time.time_ns() // 1_000_000_000 + int(seconds) + 1) * 1_000_000_000)


def _shape(msg: Any, name: str) -> tuple[Any, ...]:
    hdrs = dict(msg.headers or {})
    nxt = hdrs.get("Nats-Schedule-Next")
    if nxt and nxt != "purge":
        match = re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)", nxt)
        assert match, nxt
        hdrs["Nats-Schedule-Next"] = "<time>" + match[1]  # the zone's offset is compared
    return (msg.subject.replace(name, "S"), msg.data.replace(name.encode(), b"S"),
            {k: v.replace(name, "S") for k, v in hdrs.items()})


async def _fire(nc: Any, name: str) -> list[Any]:
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], allow_msg_schedules=True, allow_msg_ttl=True)
    await js.publish(f"{name}.src", b"from-source", headers={"A": "src"})
    plan = [(f"{name}.once", {"Nats-Schedule": _at(0), "Nats-Schedule-Target": f"{name}.t.once", "Foo": "bar",
                              "Nats-Msg-Id": "m1", "Nats-Expected-Stream": name, "Nats-TTL": "1h"}),
            (f"{name}.past", {"Nats-Schedule": "@at 2020-01-01T00:00:00Z", "Nats-Schedule-Target": f"{name}.t.past",
                              "Nats-Schedule-TTL": "30s"}),
            (f"{name}.src.copy", {"Nats-Schedule": _at(0), "Nats-Schedule-Target": f"{name}.t.src",
                                  "Nats-Schedule-Source": f"{name}.src"}),
            (f"{name}.every", {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": f"{name}.t.every",
                               "Nats-Schedule-Rollup": "sub"}),
            (f"{name}.cron", {"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": f"{name}.t.cron",
                              "Nats-Schedule-Rollup": "sub"}),
            (f"{name}.zone", {"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": f"{name}.t.zone",
                              "Nats-Schedule-Time-Zone": "Asia/Kolkata", "Nats-Schedule-Rollup": "sub"})]
    for subject, hdrs in plan:
        await js.publish(subject, subject.encode(), headers=hdrs)

    async def fired() -> bool:
        counts = (await js.stream_info(name, subjects_filter=f"{name}.t.>")).state.subjects or {}
        return len(counts) == 6

    await poll_async(fired, timeout=10, what="every schedule fired")
    every = await js.get_last_msg(name, f"{name}.t.every")

    async def repeated() -> bool:
        return (await js.get_last_msg(name, f"{name}.t.every")).seq > every.seq

    await poll_async(repeated, timeout=10, what="@every fired again")
    out = [_shape(await js.get_last_msg(name, f"{name}.t.{t}"), name)
           for t in ("once", "past", "src", "every", "cron", "zone")]
    info = await js.stream_info(name, subjects_filter=">")
    out.append(sorted(s.replace(name, "S") for s in info.state.subjects or {}))  # one-shot schedules purged
    await js.delete_stream(name)
    return out


async def test_schedules_fire_like_nats_server(on_both):
    ours, theirs = await on_both(_fire, "F")
    assert ours == theirs
    assert ours[0] == ("S.t.once", b"S.once", {"Foo": "bar", "Nats-Scheduler": "S.once",
                                                "Nats-Schedule-Next": "purge"})
    assert ours[-1] == ["S.cron", "S.every", "S.src", "S.t.cron", "S.t.every", "S.t.once", "S.t.past", "S.t.src",
                        "S.t.zone", "S.zone"]
    assert ours[5][2]["Nats-Schedule-Next"] == "<time>+05:30"


async def _local_offset(url: str) -> str:
    """The offset a `Local` cron schedule's product names in Nats-Schedule-Next."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="LOC", subjects=["loc.>"], allow_msg_schedules=True)
    await js.publish("loc.s", b"", headers={"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": "loc.t",
                                            "Nats-Schedule-Time-Zone": "Local"})

    async def fired() -> bool:
        return "loc.t" in ((await js.stream_info("LOC", subjects_filter="loc.t")).state.subjects or {})

    await poll_async(fired, timeout=10, what="the Local schedule fired")
    nxt = (await js.get_last_msg("LOC", "loc.t")).headers["Nats-Schedule-Next"]
    await nc.close()
    return nxt[19:]


@pytest.mark.parametrize(("tz", "zone"), [("Asia/Kolkata", "Asia/Kolkata"),
                                          (":America/St_Johns", "America/St_Johns"),
                                          ("Nowhere/Else", None), ("", None)])
async def test_local_is_the_servers_tz_like_nats_server(server_factory, monkeypatch, tz, zone):
    monkeypatch.setenv("TZ", tz)  # both servers inherit it
    theirs = await _local_offset(server_factory("nats-server").url)
    ours = await _local_offset(server_factory("jsbroker").url)
    assert ours == theirs
    now = datetime.now(ZoneInfo(zone)).strftime("%z") if zone else ""
    assert ours == (f"{now[:3]}:{now[3:]}" if now else "Z")


def _tzif(t0: int, before_s: int) -> bytes:
    """A TZif v2 zone (RFC 8536) `before_s` seconds ahead of UTC until `t0`, then at UTC (a DST fall-back of
    a few seconds, so a repeated wall time comes within a test's time)."""
    def header(times: int, kinds: int, chars: int) -> bytes:
        return b"TZif2" + bytes(15) + struct.pack(">6l", 0, 0, 0, times, kinds, chars)

    v1 = header(0, 1, 4) + struct.pack(">lBB", 0, 0, 0) + b"UTC\0"  # readers of v2 skip it
    v2 = header(2, 2, 8) + struct.pack(">qqBB", t0 - 86400, t0, 0, 1)
    v2 += struct.pack(">lBBlBB", before_s, 1, 0, 0, 0, 4) + b"AHD\0STD\0"
    return v1 + v2 + b"\n\n"  # no rule after the last change


async def _fall_back(url: str, t0: int, second: int) -> list[str]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="FB", subjects=["fb.>"], allow_msg_schedules=True)
    await js.publish("fb.s", b"", headers={"Nats-Schedule": f"{second} * * * * *", "Nats-Schedule-Target": "fb.t",
                                           "Nats-Schedule-Time-Zone": "Test/Back"})

    async def twice() -> bool:
        return ((await js.stream_info("FB", subjects_filter="fb.t")).state.subjects or {}).get("fb.t", 0) >= 2

    await poll_async(twice, timeout=t0 - time.time() + 15, what="the schedule fired at both wall times")
    out = [(await js.get_msg("FB", seq)).headers["Nats-Schedule-Next"] for seq in (2, 3)]
    await nc.close()
    return out


@pytest.mark.slow
async def test_a_wall_time_repeated_by_a_dst_change_fires_twice_like_nats_server(server_factory, monkeypatch,
                                                                                 tmp_path):
    """A zone written for the test (found through $ZONEINFO) falls back 10 s: a cron second in the repeated span fires at both of its
    wall times (5 s before and after the change) on both servers, with the same next fire times."""
    t0 = int(time.time()) + 12
    (tmp_path / "Test").mkdir()
    (tmp_path / "Test" / "Back").write_bytes(_tzif(t0, 10))
    monkeypatch.setenv("ZONEINFO", str(tmp_path))  # Go's time.LoadLocation looks there first, and so jsbroker
    servers = server_factory("nats-server"), server_factory("jsbroker")
    second = (t0 + 5) % 60
    theirs, ours = await asyncio.gather(*(_fall_back(handle.url, t0, second) for handle in servers))
    assert ours == theirs
    assert ours == [times.rfc3339((t0 + 5) * 1_000_000_000), times.rfc3339((t0 + 65) * 1_000_000_000)]


# -- restarts ---------------------------------------------------------------------------------------


async def _restart_transcript(handle: Any) -> list[Any]:
    nc = await nats.connect(handle.url)
    js = nc.jetstream()
    await js.add_stream(name="SCH", subjects=["sch.>"], allow_msg_schedules=True)
    await js.publish("sch.a", b"A", headers={"Nats-Schedule": _at(2), "Nats-Schedule-Target": "sch.t.a"})
    await js.publish("sch.e", b"E", headers={"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "sch.t.e",
                                             "Nats-Schedule-Rollup": "sub"})
    await js.publish("sch.z", b"Z", headers={"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": "sch.t.z",
                                             "Nats-Schedule-Time-Zone": "America/New_York",
                                             "Nats-Schedule-Rollup": "sub"})
    await nc.close()
    handle.kill()  # kill -9 before anything fired (the @at one is 2-3 s ahead)
    handle.start()
    out: list[Any] = []
    for restart in (handle.restart, handle.kill):  # SIGTERM, then kill -9 again (start below)
        nc = await nats.connect(handle.url)
        js = nc.jetstream()

        async def both_fired() -> bool:
            subjects = (await js.stream_info("SCH", subjects_filter="sch.t.>")).state.subjects or {}
            return {"sch.t.a", "sch.t.e", "sch.t.z"} <= set(subjects)

        await poll_async(both_fired, timeout=10, what="the schedules fired after the restart")
        last_e = (await js.get_last_msg("SCH", "sch.t.e")).seq
        await js.purge_stream("SCH", subject="sch.t.e")
        await js.purge_stream("SCH", subject="sch.t.z")
        info = await js.stream_info("SCH", subjects_filter=">")
        out.append(sorted(s for s in info.state.subjects or {} if s != "sch.t.z"))  # fires every second
        out.append(_shape(await js.get_last_msg("SCH", "sch.t.a"), "sch"))
        assert last_e > 0
        await nc.close()
        restart()
    handle.start()
    nc = await nats.connect(handle.url)
    js = nc.jetstream()

    async def fired_again() -> bool:
        subjects = (await js.stream_info("SCH", subjects_filter="sch.t.>")).state.subjects or {}
        return {"sch.t.e", "sch.t.z"} <= set(subjects)

    await poll_async(fired_again, timeout=10, what="@every and the zone's cron fired after kill -9")
    await nc.close()
    return out


@pytest.mark.slow
async def test_schedules_fire_after_sigterm_and_kill_like_nats_server(server_factory):
    theirs = await _restart_transcript(server_factory("nats-server"))
    ours = await _restart_transcript(server_factory("jsbroker"))
    assert ours == theirs
    assert ours[0] == ["sch.e", "sch.t.a", "sch.z"]  # the one-shot schedule purged, its product kept


async def _copied_products(nc: Any, name: str, how: str) -> list[Any]:
    """A plain stream sourcing (or mirroring) a schedule stream copies the schedule and its product as plain
    messages: the product's `Nats-Schedule-Next: purge` purges nothing there."""
    js = nc.jetstream()
    copy = f"{name}C"
    await js.add_stream(name=name, subjects=[f"{name}.>"], allow_msg_schedules=True)
    body = {"name": copy, "subjects": [f"{copy}.>"], "sources": [{"name": name}]} if how == "sources" \
        else {"name": copy, "mirror": {"name": name}}
    await nc.request(f"$JS.API.STREAM.CREATE.{copy}", json.dumps(body).encode(), timeout=5)
    await js.publish(f"{name}.s", b"S", headers={"Nats-Schedule": "@at 2020-01-01T00:00:00Z",
                                                  "Nats-Schedule-Target": f"{name}.t"})

    async def copied() -> bool:
        return (await js.stream_info(copy)).state.last_seq >= 2

    await poll_async(copied, timeout=10, what="the product copied")
    out = []
    for stream in (name, copy):
        info = await js.stream_info(stream, subjects_filter=">")
        out.append((info.state.messages, info.state.last_seq, sorted(s.replace(name, "S") for s in info.state.subjects or {})))
        await js.delete_stream(stream)
    return out


@pytest.mark.parametrize("how", ["sources", "mirror"])
async def test_copies_of_products_purge_nothing_like_nats_server(on_both, how):
    ours, theirs = await on_both(lambda nc, name: _copied_products(nc, name, how), "SP")
    assert ours == theirs
    assert ours[1][:2] == (2, 2)
