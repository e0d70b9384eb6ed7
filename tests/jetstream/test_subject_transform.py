"""Stream subject transforms (ADR-36): the pure transform module against nats-server's mapping rules, and
streams with a `subject_transform` on jsbroker and nats-server side by side (validation errors, stored
subjects, consumers filtered on the transformed subjects, updates, a restart)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest

from jsbroker.jetstream import subject_transform as st
from tests.polling import poll_async

# -- the pure module ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("src", "dest", "subject", "expected"), [
    ("foo.*.*", "bar.{{wildcard(2)}}.{{wildcard(1)}}", "foo.a.b", "bar.b.a"),
    ("foo.*.*", "bar.$2.$1", "foo.a.b", "bar.b.a"),
    ("foo.*", "bar.{{ Wildcard ( 1 ) }}", "foo.a", "bar.a"),
    ("foo.*", "w.{{wildcard(0)}}.$0.$x", "foo.q", "w.foo.foo.$x"),  # index 0: the first token; $x literal
    ("foo.*.>", "w.$1.>", "foo.q.r.s", "w.q.r.s"),
    ("foo.>", ">", "foo.x.y", "x.y"),
    (">", "all.>", "a.b", "all.a.b"),
    (">", ">", "a.b", "a.b"),
    ("foo.a", "bar", "foo.a", "bar"),
    ("foo.*", "p.{{partition(7,1)}}", "foo.hello", "p.2"),  # FNV-1a of the token, as nats-server hashes
    ("foo.*", "p.{{partition(7,1)}}", "foo.xyz123", "p.6"),
    ("foo.>", "p.{{partition(5)}}.>", "foo.a.b", "p.4.a.b"),  # no tokens given: the whole subject
    ("foo", "p.{{partition(5)}}", "foo", "p.3"),
    ("foo.*", "p.{{partition(0,1)}}", "foo.x", "p.0"),
    ("foo.*", "s.{{split(1,-)}}", "foo.a-b--c", "s.a.b.c"),
    ("foo.*", "s.{{split(1,-)}}", "foo.--b", "s..b"),  # nats-server's joining keeps this empty token
    ("foo.*", "s.{{split(1,-)}}", "foo.-a-", "s.a"),
    ("foo.*", "s.{{split(1,-)}}", "foo.---", "s."),
    ("foo.*", "s.{{splitFromLeft(1,2)}}", "foo.abcde", "s.ab.cde"),
    ("foo.*", "s.{{splitfromleft(1,2)}}", "foo.ab", "s.ab"),
    ("foo.*", "s.{{SplitFromRight(1,2)}}", "foo.abcde", "s.abc.de"),
    ("foo.*", "s.{{sliceFromLeft(1,2)}}", "foo.abcde", "s.ab.cd.e"),
    ("foo.*", "s.{{sliceFromLeft(1,2)}}", "foo.abcdef", "s.ab.cd.ef"),
    ("foo.*", "s.{{sliceFromLeft(1,9)}}", "foo.abc", "s.abc"),
    ("foo.*", "s.{{sliceFromRight(1,2)}}", "foo.abcde", "s.a.bc.de"),
    ("foo.*", "s.{{sliceFromRight(1,2)}}", "foo.abcdef", "s.ab.cd.ef"),
    ("foo.*", "s.{{left(1,2)}}.{{right(1,2)}}", "foo.abcde", "s.ab.de"),
    ("foo.*", "s.{{left(1,2)}}.{{right(1,2)}}", "foo.a", "s.a.a"),
    ("foo.*", "r.{{random(1)}}", "foo.x", "r.0"),
])
def test_apply_maps_as_nats_server(src: str, dest: str, subject: str, expected: str) -> None:
    transform = st.parse(src, dest)
    assert transform is not None
    assert transform.apply(subject) == expected


def test_apply_leaves_what_the_source_does_not_match() -> None:
    transform = st.parse("foo.*", "bar.$1")
    assert transform is not None
    assert [transform.apply(s) for s in ("foo.a", "foo", "foo.a.b", "bar.a", "foo.*")] == ["bar.a", None, None, None, None]
    assert st.parse("foo.*.>", "w.$1.>").apply("foo.q") is None  # type: ignore[union-attr]


def test_random_stays_below_its_bound() -> None:
    transform = st.parse("foo.*", "r.{{random(3)}}.$1")
    assert transform is not None
    assert {transform.apply("foo.x") for _ in range(200)} <= {"r.0.x", "r.1.x", "r.2.x"}


def test_empty_destination_is_no_transform_and_empty_source_is_everything() -> None:
    assert st.parse("foo.*", "") is None
    transform = st.parse("", "x.>")
    assert transform is not None and transform.apply("a.b") == "x.a.b"


# nats-server 2.15.1's texts (checked against it by test_invalid_transforms_are_refused_as_nats_server).
_MAP = "invalid mapping destination"
INVALID: list[tuple[str, str, type[ValueError], str]] = [
    ("foo..x", "bar", st.InvalidSource, "invalid subject foo..x"),
    ("foo bar", "x", st.InvalidSource, "invalid subject foo bar"),
    ("foo.*", "bar.{{unknown(1)}}", st.InvalidDestination, f"{_MAP}: unknown function in {{{{unknown(1)}}}}"),
    ("foo.*", "{{ }}", st.InvalidDestination, f"{_MAP}: unknown function in {{{{ }}}}"),
    ("foo.*", "bar.{{wildcard()}}", st.InvalidDestination,
     f"{_MAP}: not enough arguments passed to the function in {{{{wildcard()}}}}"),
    ("foo.*", "bar.{{wildcard(1,2)}}", st.InvalidDestination,
     f"{_MAP}: too many arguments passed to the function in {{{{wildcard(1,2)}}}}"),
    ("foo.*", "bar.{{wildcard(x)}}", st.InvalidDestination,
     f"{_MAP}: function argument is invalid or in the wrong format in {{{{wildcard(x)}}}}"),
    ("foo.*", "bar.{{wildcard(2)}}", st.InvalidDestination,
     f"{_MAP}: wildcard index out of range in {{{{wildcard(2)}}}}: [2]"),
    ("foo.*", "bar.$2", st.InvalidDestination, f"{_MAP}: wildcard index out of range in $2: [2]"),
    ("foo.*", "bar.*", st.InvalidDestination, "invalid subject"),
    ("foo.>", "bar.*", st.InvalidDestination, "invalid subject"),
    ("foo.*", "bar.>", st.InvalidDestination, "invalid subject"),
    ("foo.*", "bar..x", st.InvalidDestination, f"{_MAP}: invalid transform"),
    ("foo.*", "bar.>.x", st.InvalidDestination, f"{_MAP}: invalid transform in x"),
    ("foo.*", "bar. x", st.InvalidDestination, f"{_MAP}: invalid transform"),
    ("foo", "bar.{{split(1,-)}}", st.InvalidDestination, f"{_MAP}: wildcard index out of range in {{{{split(1,-)}}}}"),
    ("foo.*", "bar.{{partition(3,1,2)}}", st.InvalidDestination,
     f"{_MAP}: wildcard index out of range in {{{{partition(3,1,2)}}}}: [2]"),
    ("foo.*", "bar.{{partition(x,1)}}", st.InvalidDestination,
     f"{_MAP}: function argument is invalid or in the wrong format in {{{{partition(x,1)}}}}"),
    ("foo.*", "bar.{{partition()}}", st.InvalidDestination,
     f"{_MAP}: function argument is invalid or in the wrong format in {{{{partition()}}}}"),
    ("foo.*", "bar.{{split(1)}}", st.InvalidDestination,
     f"{_MAP}: not enough arguments passed to the function in {{{{split(1)}}}}"),
    ("foo.*", "bar.{{split(1,-,x)}}", st.InvalidDestination,
     f"{_MAP}: too many arguments passed to the function in {{{{split(1,-,x)}}}}"),
    ("foo.*", "bar.{{split(1,a b)}}", st.InvalidDestination,
     f"{_MAP}: function argument is invalid or in the wrong format in {{{{split(1,a b)}}}}"),
    ("foo.*", "bar.{{splitfromleft(1)}}", st.InvalidDestination,
     f"{_MAP}: not enough arguments passed to the function in {{{{splitfromleft(1)}}}}"),
    ("foo.*", "bar.{{sliceFromRight(1,2,3)}}", st.InvalidDestination,
     f"{_MAP}: too many arguments passed to the function in {{{{sliceFromRight(1,2,3)}}}}"),
    ("foo.*", "bar.{{left(1,99999999999)}}", st.InvalidDestination,
     f"{_MAP}: function argument is invalid or in the wrong format in {{{{left(1,99999999999)}}}}"),
    ("foo.*", "bar.{{random()}}", st.InvalidDestination,
     f"{_MAP}: function argument is invalid or in the wrong format in {{{{random()}}}}"),
    ("foo.*", "bar.{{random(1,2)}}", st.InvalidDestination,  # sic: nats-server says "not enough"
     f"{_MAP}: not enough arguments passed to the function in {{{{random(1,2)}}}}"),
    ("foo.*", "bar.{{wildcard(9)}}.{{nope()}}", st.InvalidDestination,  # the token pass comes first
     f"{_MAP}: unknown function in {{{{nope()}}}}"),
]


@pytest.mark.parametrize(("src", "dest", "kind", "text"), INVALID)
def test_invalid_transforms_raise_nats_server_text(src: str, dest: str, kind: type[ValueError], text: str) -> None:
    with pytest.raises(kind) as caught:
        st.parse(src, dest)
    assert str(caught.value) == text


def test_republish_check_allows_blanks_in_a_destination_token() -> None:
    """nats-server checks a republish with the bare transform, which does not look for whitespace."""
    with pytest.raises(st.InvalidDestination):
        st.parse(">", "a. b.>")
    assert st.parse(">", "a. b.>", check_tokens=False) is not None


# -- against both servers -----------------------------------------------------------------------------
# Subjects start with the test's unique name ({S}): the session servers are shared by every test.


def _scoped(subject: str) -> str:
    return subject if subject in ("", ">") else "{S}." + subject


def _create(src: str, dest: str, subjects: tuple[str, ...] = ("foo.>",)) -> tuple[str, dict]:
    cfg = {"name": "{S}", "subjects": [_scoped(s) for s in subjects], "storage": "memory",
           "subject_transform": {"src": _scoped(src), "dest": _scoped(dest)}}
    return ("$JS.API.STREAM.CREATE.{S}", cfg)


@pytest.mark.parametrize(("src", "dest"), [(src, dest) for src, dest, _, _ in INVALID] + [
    ("foo.*", "bar.{{left(1,2)}}"), ("foo.*", "bar.{{wildcard(0)}}"), ("foo.*", "bar.$x"), ("foo.*", "{{}}"),
    ("foo.*", ""), ("", "bar.>"), (">", ">"), ("foo.*", "bar.{{wildcard(1)}}x"), ("foo.*", "bar.\t"),
])
async def test_invalid_transforms_are_refused_as_nats_server(differential, src: str, dest: str) -> None:
    subjects = ("foo",) if src in ("foo", "foo bar") else ("foo.>",)
    ours, theirs = await differential([_create(src, dest, subjects), ("$JS.API.STREAM.DELETE.{S}", "")])
    assert ours == theirs
    if (src, dest) in {(s, d) for s, d, _, _ in INVALID}:
        assert ours[0]["error"]["err_code"] in (10155, 10156)


async def test_transformed_subjects_are_stored_counted_and_filtered_as_nats_server(differential) -> None:
    """The issue's case: a consumer filtered on the transformed subjects counts what was published."""
    steps: list[tuple] = [_create("foo.*.*", "bar.{{wildcard(2)}}.{{wildcard(1)}}")]
    steps += [(f"{{S}}.foo.{a}.{b}", f"m{i}") for i, (a, b) in enumerate([("x", "1"), ("y", "2"), ("x", "3"), ("z", "1")])]
    steps += [("{S}.foo.only", "untouched")]  # the source does not match: stored as published
    steps += [("$JS.API.CONSUMER.CREATE.{S}.C", {"stream_name": "{S}", "config": {
        "durable_name": "C", "filter_subject": "{S}.bar.1.*", "ack_policy": "explicit"}})]
    steps += [("$JS.API.STREAM.MSG.GET.{S}", {"seq": seq}) for seq in range(1, 6)]
    steps += [("$JS.API.STREAM.INFO.{S}", {"subjects_filter": ">"}), ("$JS.API.STREAM.DELETE.{S}", "")]
    ours, theirs = await differential(steps)
    assert ours == theirs
    assert ours[6]["num_pending"] == 2
    assert [r["message"]["subject"].split(".", 1)[1] for r in ours[7:12]] == [
        "bar.1.x", "bar.2.y", "bar.3.x", "bar.1.z", "foo.only"]


async def test_update_adds_changes_and_removes_the_transform_as_nats_server(differential) -> None:
    base = {"name": "{S}", "subjects": ["{S}.foo.>"], "storage": "memory"}

    def update(dest: str) -> tuple[str, dict]:
        return ("$JS.API.STREAM.UPDATE.{S}", {**base, "subject_transform": {"src": "{S}.foo.*", "dest": dest}})

    steps: list[tuple] = [("$JS.API.STREAM.CREATE.{S}", base), ("{S}.foo.a", "1"), update("{S}.t.$1"),
                          ("{S}.foo.b", "2"), update("{S}.u.$1"), ("{S}.foo.c", "3"), update("{S}.bad.$2"),
                          ("$JS.API.STREAM.UPDATE.{S}", base), ("{S}.foo.d", "4")]
    steps += [("$JS.API.STREAM.MSG.GET.{S}", {"seq": seq}) for seq in range(1, 5)]
    steps += [("$JS.API.STREAM.DELETE.{S}", "")]
    ours, theirs = await differential(steps)
    assert ours == theirs
    assert ours[6]["error"]["err_code"] == 10156
    assert [r["message"]["subject"].split(".", 1)[1] for r in ours[-5:-1]] == ["foo.a", "t.b", "u.c", "foo.d"]


async def test_an_implicit_republish_sends_the_transformed_subjects(nats_server, jsbroker_server, unique) -> None:
    """republish '>' to '>' with a transform of the stream's one subject: nats-server republishes the
    stored (transformed) subjects, as they are."""
    async def run(url: str, s: str) -> list[tuple[str, str]]:
        nc = await nats.connect(url)
        try:
            got: list[Any] = []

            async def keep(m: Any) -> None:
                got.append(m)

            sub = await nc.subscribe(f"{s}.t.>", cb=keep)
            cfg = {"name": s, "subjects": [f"{s}.in.>"], "storage": "memory",
                   "subject_transform": {"src": f"{s}.in.>", "dest": f"{s}.t.>"}, "republish": {"src": ">", "dest": ">"}}
            created = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{s}", json.dumps(cfg).encode())).data)
            for key in ("a", "b.c"):
                await nc.request(f"{s}.in.{key}", b"x")
            await poll_async(lambda: len(got) >= 2, timeout=5, what="the two republished messages")
            await sub.unsubscribe()
            await nc.request(f"$JS.API.STREAM.DELETE.{s}", b"")
            return [(str(created["config"]["republish"]), "")] + [
                (m.subject.replace(s, "{S}"), m.headers["Nats-Subject"].replace(s, "{S}")) for m in got]
        finally:
            await nc.close()

    s = unique("I")
    theirs, ours = await asyncio.gather(run(nats_server.url, s), run(jsbroker_server.url, s))
    assert ours == theirs
    assert ours[1:] == [("{S}.t.a", "{S}.t.a"), ("{S}.t.b.c", "{S}.t.b.c")]


async def _restart_transcript(handle: Any) -> list[Any]:
    nc = await nats.connect(handle.url)
    cfg = {"name": "T", "subjects": ["in.>"], "subject_transform": {"src": "in.*", "dest": "out.{{partition(3,1)}}.$1"}}
    await nc.request("$JS.API.STREAM.CREATE.T", json.dumps(cfg).encode())
    await nc.request("in.a", b"1")
    await nc.close()
    handle.restart()
    nc = await nats.connect(handle.url)
    try:
        js = nc.jetstream()
        ack = await js.publish("in.b", b"2")
        info = await js.stream_info("T", subjects_filter=">")
        return [ack.seq, info.config.subject_transform.dest if info.config.subject_transform else None,
                sorted((info.state.subjects or {}).items())]
    finally:
        await nc.close()


@pytest.mark.slow
async def test_a_transform_keeps_working_after_a_restart(server_factory) -> None:
    theirs = await _restart_transcript(server_factory("nats-server"))
    ours = await _restart_transcript(server_factory("jsbroker"))
    assert ours == theirs
    assert ours[0] == 2 and len(ours[2]) == 2 and all(s.startswith("out.") for s, _ in ours[2])
