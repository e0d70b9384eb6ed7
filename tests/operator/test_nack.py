"""nack.py: NACK's resources -> ours, without a cluster or a server.

The resources are NACK's own examples (deploy/examples, examples/secure of github.com/nats-io/nack) and, in
RESOURCES, one or more resources per NACK kind that between them set every field nack.FIELDS maps (checked
below), as NACK's CRDs store them; test_e2e_nack.py creates the same ones on the envtest apiserver with
their server objects. Bad input is refused as a whole, naming the resource.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from jsoperator import nack

V = f"{nack.GROUP}/{nack.VERSION}"


def res(kind: str, name: str, spec: dict[str, Any], namespace: str = "shop") -> dict[str, Any]:
    return {"apiVersion": V, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def conn(servers: list[str]) -> dict[str, Any]:
    return {"servers": servers}


SERVER = "nats://127.0.0.1:4222"  # test_e2e_nack.py swaps in its broker's URL


def resources(server: str = SERVER) -> list[dict[str, Any]]:
    """The NACK resources of the tests: every mapped field of every kind set at least once."""
    s = [server]
    return [
        res("Account", "a", {"name": "a", "servers": s,  # NACK's examples/secure account, user instead of TLS
                             "user": {"secret": {"name": "nats-user"}, "user": "username", "password": "pass"},
                             "tlsFirst": False}),
        res("Stream", "mystream", {"name": "mystream", "subjects": ["orders.*"], "storage": "file", "maxAge": "1h",
                                   "replicas": 1, "account": "a"}),  # deploy/examples/stream.yml, via the Account
        res("Stream", "full", {
            "name": "FULL", "description": "every field", "subjects": ["full.>"], "retention": "limits",
            "maxConsumers": 10, "maxMsgsPerSubject": 100, "maxMsgs": 10000, "maxBytes": 1048576, "maxAge": "24h",
            "maxMsgSize": 65536, "storage": "file", "discard": "new", "discardPerSubject": True, "replicas": 1,
            "duplicateWindow": "1m", "compression": "s2", "allowDirect": True, "allowRollup": True,
            "denyDelete": True, "firstSequence": 100, "metadata": {"team": "shop"},
            "consumerLimits": {"inactiveThreshold": "1h", "maxAckPending": 500}, "allowMsgTtl": True,
            "subjectDeleteMarkerTtl": "5m", "allowAtomicPublish": True,
            "republish": {"source": "full.>", "destination": "repub.>", "headers_only": True},
            "servers": s, "preventDelete": True}),
        res("Stream", "quiet", {"name": "QUIET", "subjects": ["in.>"], "noAck": True, "denyPurge": True,
                                "subjectTransform": {"source": "in.>", "dest": "quiet.>"}, "persistMode": "async",
                                "storage": "file", "servers": s, "preventUpdate": True}),
        res("Stream", "counter", {"name": "COUNTER", "subjects": ["count.>"], "allowMsgCounter": True,
                                  "storage": "file", "servers": s}),
        res("Stream", "later", {"name": "LATER", "subjects": ["later.>"], "allowMsgSchedules": True,
                                "allowRollup": True, "placement": {"cluster": "c1", "tags": ["NODE_0"]},
                                "servers": s}),
        res("Stream", "archive", {"name": "ARCHIVE", "subjects": ["archive.>"], "sealed": True, "servers": s}),
        res("Stream", "mystream-mirror", {"name": "mystream-mirror", "storage": "file", "mirrorDirect": True,
                                          "mirror": {"name": "mystream", "optStartSeq": 2}, "servers": s}),
        res("Stream", "mystream-sources", {"name": "mystream-sources", "storage": "file", "servers": s, "sources": [
            {"name": "mystream", "filterSubject": "orders.new"},
            {"name": "FULL", "optStartTime": "2025-01-01T00:00:00Z",
             "subjectTransforms": [{"source": "full.>", "dest": "from-full.>"}]},
            {"name": "REMOTE", "externalApiPrefix": "$JS.hub.API", "externalDeliverPrefix": "deliver.hub"}]}),
        res("Consumer", "my-pull-consumer", {  # deploy/examples/consumer_pull.yml
            "streamName": "mystream", "durableName": "my-pull-consumer", "deliverPolicy": "all",
            "filterSubject": "orders.received", "maxDeliver": 20, "ackPolicy": "explicit", "account": "a"}),
        res("Consumer", "my-push-consumer", {  # deploy/examples/consumer_push.yml
            "streamName": "mystream", "durableName": "my-push-consumer", "deliverSubject": "my-push-consumer.orders",
            "deliverPolicy": "last", "ackPolicy": "none", "replayPolicy": "instant",
            "description": "my consumer description", "flowControl": True, "heartbeatInterval": "1s",
            "account": "a"}),
        res("Consumer", "workers", {
            "streamName": "mystream", "durableName": "workers", "description": "pull, every pull option",
            "ackPolicy": "explicit", "ackWait": "45s", "deliverPolicy": "byStartSequence", "optStartSeq": 3,
            "filterSubjects": ["orders.new", "orders.paid"], "maxAckPending": 100, "maxDeliver": 5,
            "backoff": ["1s", "5s"], "maxWaiting": 64, "replayPolicy": "original", "sampleFreq": "50",
            "maxRequestBatch": 10, "maxRequestExpires": "30s", "maxRequestMaxBytes": 1024,
            "inactiveThreshold": "24h", "replicas": 1, "memStorage": True, "metadata": {"owner": "ops"},
            "pauseUntil": "2099-01-01T00:00:00Z", "priorityPolicy": "pinned_client", "pinnedTtl": "1m",
            "priorityGroups": ["jobs"], "account": "a"}),
        res("Consumer", "audit", {
            "streamName": "mystream", "durableName": "audit", "deliverSubject": "audit.deliver",
            "deliverGroup": "auditors", "deliverPolicy": "byStartTime", "optStartTime": "2025-01-01T00:00:00Z",
            "ackPolicy": "all", "rateLimitBps": 1000000, "headersOnly": True, "account": "a"}),
        res("Consumer", "overflow", {
            "streamName": "FULL", "durableName": "overflow", "ackPolicy": "explicit", "priorityPolicy": "overflow",
            "priorityGroups": ["batch"], "optStartSeq": 7, "servers": s}),
        res("Consumer", "pinned-no-ttl", {  # NACK sends no policy without pinnedTtl
            "streamName": "FULL", "durableName": "pinned", "ackPolicy": "explicit", "priorityPolicy": "pinned_client",
            "priorityGroups": ["jobs"], "servers": s}),
        res("KeyValue", "settings", {
            "bucket": "settings", "description": "app settings", "maxValueSize": 1024, "history": 5, "ttl": "1h",
            "maxBytes": 1048576, "storage": "memory", "replicas": 1, "compression": True,
            "republish": {"source": ">", "destination": "kvrepub.>"}, "limitMarkerTtl": 60_000_000_000,
            "placement": {"cluster": "c1"},
            "servers": s}),
        res("KeyValue", "settings-copy", {"bucket": "settings_copy", "mirror": {"name": "settings"}, "servers": s}),
        res("KeyValue", "all-settings", {"bucket": "all_settings", "sources": [{"name": "settings"}], "servers": s}),
        res("ObjectStore", "blobs", {
            "bucket": "blobs", "description": "uploads", "ttl": "24h", "maxBytes": 1048576, "storage": "memory",
            "replicas": 1, "compression": True, "metadata": {"team": "web"}, "placement": {"tags": ["NODE_0"]},
            "servers": s}),
    ]


def with_crd_defaults(resource: dict[str, Any]) -> dict[str, Any]:
    """The resource as the apiserver stores it (NACK's CRD defaults filled in), as `kubectl get` shows it."""
    out = copy.deepcopy(resource)
    out["spec"] = {**nack.NACK_DEFAULTS[resource["kind"]], **out["spec"]}
    return out


POLICIES = {"adoptionPolicy": "adopt", "deletionPolicy": "retain"}
REF = {"connectionRef": {"kind": "JetStreamConnection", "name": "a"}}
STREAM_DEFAULTS = {"retention": "limits", "maxConsumers": -1, "maxMsgs": -1, "maxBytes": -1, "discard": "old",
                   "maxMsgSize": -1, "storage": "memory", "replicas": 1}

# The unmapped fields of resources(): (resource, field, why starts with).
UNMAPPED = [
    ("Account shop/a", "spec.name", "NACK does not read it either"),
    ("Stream shop/quiet", "spec.preventUpdate", "no per-resource equivalent"),
    ("Consumer shop/overflow", "spec.optStartSeq", "NACK sends it only with deliverPolicy byStartSequence"),
    ("Consumer shop/pinned-no-ttl", "spec.priorityPolicy", "NACK sends pinned_client only with pinnedTtl"),
    ("Consumer shop/pinned-no-ttl", "spec.priorityGroups", "NACK sends it only with a priority policy"),
]


def spec_of(migration: nack.Migration, kind: str, name: str) -> dict[str, Any]:
    found = [m for m in migration.manifests if (m["kind"], m["metadata"]["name"]) == (kind, name)]
    assert len(found) == 1, [(m["kind"], m["metadata"]["name"]) for m in migration.manifests]
    return found[0]["spec"]


def _keys(ns: str, name: str) -> set[str] | None:
    return {"username", "pass"} if (ns, name) == ("shop", "nats-user") else None


def test_every_mapped_field_is_exercised() -> None:
    used: dict[str, set[str]] = {kind: set() for kind in nack.FIELDS}
    for resource in resources():
        if resource["kind"] in used:
            used[resource["kind"]] |= set(resource["spec"])
    for kind, table in nack.FIELDS.items():
        assert set(table) - used[kind] == set(), kind


def test_the_examples_and_every_field_translate() -> None:
    migration = nack.migrate([with_crd_defaults(r) for r in resources()], nack.Options(), _keys)
    assert [(row.resource, row.field, row.why[:len(why)]) for row, (_, _, why) in
            zip(migration.unmapped, UNMAPPED)] == UNMAPPED
    assert len(migration.unmapped) == len(UNMAPPED)
    assert [m["kind"] for m in migration.manifests] == (
        ["JetStreamConnection"] + ["Stream"] * 8 + ["KeyValue"] * 3 + ["ObjectStore"] + ["Consumer"] * 6)
    assert migration.manifests[0] == {
        "apiVersion": "jsoperator.io/v1alpha1", "kind": "JetStreamConnection",
        "metadata": {"name": "a", "namespace": "shop"},
        "spec": {"servers": [SERVER], "userSecretRef": {"name": "nats-user", "userKey": "username",
                                                        "passwordKey": "pass"}}}
    assert spec_of(migration, "Stream", "mystream") == {  # jsm.go's one-year maxAge only where NACK has none
        **STREAM_DEFAULTS, "name": "mystream", "subjects": ["orders.*"], "storage": "file", "maxAge": "1h", **REF,
        **POLICIES}
    assert spec_of(migration, "Stream", "archive")["maxAge"] == "8760h"
    full = spec_of(migration, "Stream", "full")
    assert {k: full[k] for k in ("allowRollupHdrs", "discardNewPerSubject", "firstSeq", "republish", "connection",
                                 "deletionPolicy")} == {
        "allowRollupHdrs": True, "discardNewPerSubject": True, "firstSeq": 100,
        "republish": {"src": "full.>", "dest": "repub.>", "headersOnly": True}, "connection": {"servers": [SERVER]},
        "deletionPolicy": "retain"}
    assert spec_of(migration, "Stream", "quiet")["subjectTransform"] == {"src": "in.>", "dest": "quiet.>"}
    assert spec_of(migration, "Stream", "mystream-sources")["sources"] == [
        {"name": "mystream", "filterSubject": "orders.new"},
        {"name": "FULL", "optStartTime": "2025-01-01T00:00:00Z",
         "subjectTransforms": [{"src": "full.>", "dest": "from-full.>"}]},
        {"name": "REMOTE", "external": {"apiPrefix": "$JS.hub.API", "deliverPrefix": "deliver.hub"}}]
    assert spec_of(migration, "Consumer", "my-push-consumer") == {
        "streamName": "mystream", "durableName": "my-push-consumer", "deliverSubject": "my-push-consumer.orders",
        "deliverPolicy": "last", "ackPolicy": "none", "ackWait": "1ns", "replayPolicy": "instant",
        "description": "my consumer description", "flowControl": True, "idleHeartbeat": "1s", **REF, **POLICIES}
    workers = spec_of(migration, "Consumer", "workers")
    assert {k: workers[k] for k in ("sampleFreq", "maxBatch", "maxExpires", "maxBytes", "priorityPolicy",
                                    "priorityTimeout", "priorityGroups")} == {
        "sampleFreq": "50%", "maxBatch": 10, "maxExpires": "30s", "maxBytes": 1024, "priorityPolicy": "pinnedClient",
        "priorityTimeout": "1m", "priorityGroups": ["jobs"]}
    assert "optStartSeq" not in spec_of(migration, "Consumer", "overflow")
    pinned = spec_of(migration, "Consumer", "pinned-no-ttl")
    assert "priorityPolicy" not in pinned and "priorityGroups" not in pinned
    assert spec_of(migration, "KeyValue", "settings")["limitMarkerTtl"] == "1m"
    assert spec_of(migration, "KeyValue", "settings-copy")["mirror"] == {"name": "settings"}


def test_a_file_without_the_crd_defaults_says_the_same() -> None:
    stored = nack.migrate([with_crd_defaults(r) for r in resources()], nack.Options(), None)
    written = nack.migrate(resources(), nack.Options(), None)
    assert written == stored


def test_nack_examples_with_file_paths_and_placement() -> None:
    """deploy/examples/stream_servers.yml and stream_placement.yml, stream_mirror.yml: TLS and creds are files in
    NACK's pod (reported); placement and an external mirror map."""
    migration = nack.migrate([
        res("Stream", "mystream", {"name": "mystream", "servers": ["nats://acme.org:4222"], "tls": {
            "clientCert": "/etc/certs/client/foo/client-cert.pem", "clientKey": "/etc/certs/client/foo/client-key.pem",
            "rootCas": ["/etc/certs/ca/foo/ca-cert.pem"]}, "creds": "/etc/jsc-creds/my.creds"}),
        res("Stream", "mystream-placement", {"name": "mystream-placement", "storage": "file",
                                             "placement": {"tags": ["NODE_0"]}}),
        res("Stream", "mystream-mirror", {"name": "mystream-mirror", "storage": "file", "mirror": {
            "name": "my-publish-subj", "externalApiPrefix": "FOO.JS.API",
            "externalDeliverPrefix": "FOO.DELIVER.SYNC.MIRRORS"}}),
    ], nack.Options(deletion_policy="delete"), None)
    assert [(row.resource, row.field, row.value) for row in migration.unmapped] == [
        ("Stream shop/mystream", "spec.creds", "/etc/jsc-creds/my.creds"),
        ("Stream shop/mystream", "spec.tls", str({"clientCert": "/etc/certs/client/foo/client-cert.pem",
                                                  "clientKey": "/etc/certs/client/foo/client-key.pem",
                                                  "rootCas": ["/etc/certs/ca/foo/ca-cert.pem"]})[:37] + "...")]
    first, mirror, placement = migration.manifests
    assert first["spec"]["connection"] == {"servers": ["nats://acme.org:4222"]}
    assert first["spec"]["deletionPolicy"] == "delete"
    assert placement["spec"]["placement"] == {"tags": ["NODE_0"]}
    assert mirror["spec"]["mirror"] == {"name": "my-publish-subj", "external": {
        "apiPrefix": "FOO.JS.API", "deliverPrefix": "FOO.DELIVER.SYNC.MIRRORS"}}


def test_account_secrets_map_and_the_ones_we_cannot_are_reported() -> None:
    account = res("Account", "a", {  # examples/secure/nack/account-foo.yaml, with every kind of Secret
        "servers": ["nats://nats:4222"],
        "tls": {"secret": {"name": "nack-a-tls"}, "ca": "ca.crt", "cert": "tls.crt", "key": "tls.key"},
        "creds": {"secret": {"name": "a-creds"}, "file": "a.creds"},
        "token": {"secret": {"name": "a-token"}, "token": "tok"},
        "nkey": {"secret": {"name": "a-nkey"}, "seed": "seed.nk"}, "tlsFirst": True})
    keys = {("shop", "nack-a-tls"): {"ca.crt", "tls.crt", "tls.key"}, ("shop", "a-creds"): {"a.creds"},
            ("shop", "a-token"): {"tok"}}
    assert nack.secrets_named([account]) == {("shop", n) for n in ("nack-a-tls", "a-creds", "a-token")}
    migration = nack.migrate([account], nack.Options(), lambda ns, name: keys.get((ns, name)))
    assert migration.manifests[0]["spec"] == {
        "servers": ["nats://nats:4222"], "credentialsSecretRef": {"name": "a-creds", "key": "a.creds"},
        "tlsSecretRef": {"name": "nack-a-tls", "caKey": "ca.crt", "certKey": "tls.crt", "keyKey": "tls.key"}}
    assert [(row.field, row.why.split(":")[0]) for row in migration.unmapped] == [
        ("spec.nkey", "jsoperator authenticates with creds, a token, user/password or TLS, not an nkey seed"),
        ("spec.tlsFirst", "jsoperator starts TLS after INFO (the usual handshake)"),
        ("spec.token", "a connection authenticates one way")]


def test_the_report_table() -> None:
    migration = nack.migrate(resources(), nack.Options(), None)
    lines = nack.report_table(migration.unmapped).splitlines()
    assert lines[0].split() == ["RESOURCE", "FIELD", "VALUE", "WHY", "IT", "IS", "NOT", "MAPPED"]
    assert lines[1].startswith("Account shop/a ") and len(lines) == 1 + len(UNMAPPED)
    assert len({line.index("spec.") for line in lines[1:]}) == 1  # aligned
    assert nack.report_table([]) == "every NACK field mapped\n"


@pytest.mark.parametrize(("change", "message"), [
    (lambda rs: rs.append(res("StreamTemplate", "t", {})),
     "StreamTemplate shop/t: apiVersion jetstream.nats.io/v1beta2 kind StreamTemplate is not a NACK resource"),
    (lambda rs: rs[1].update(apiVersion="jetstream.nats.io/v1beta1"),
     "Stream shop/mystream: apiVersion jetstream.nats.io/v1beta1 kind Stream is not a NACK resource"),
    (lambda rs: rs.append(res("Consumer", "lost", {"streamName": "GONE", "durableName": "lost", "servers": ["x"]})),
     "Consumer shop/lost: its stream 'GONE' is not imported"),
    (lambda rs: rs.pop(0),  # the Account
     "Stream shop/mystream: its Account 'a' is not imported"),
    (lambda rs: rs[0]["spec"]["user"]["secret"].update(name="nobody"),
     "Account shop/a: spec.user: Secret shop/nobody not found; create it or fix the name"),
    (lambda rs: rs[0]["spec"]["user"].update(password="pw"),
     "Account shop/a: spec.user: Secret shop/nats-user has no key pw (keys: ['pass', 'username'])"),
    (lambda rs: rs[1]["spec"].update(maxAge="1 hour"),
     "Stream shop/mystream: its Stream would be invalid: spec.maxAge: invalid duration '1 hour'"),
    (lambda rs: rs[1]["spec"].update(placement={"cluster": "c", "zone": "z"}),
     "Stream shop/mystream: spec.placement: unknown fields ['zone']"),
])
def test_bad_input_is_refused_whole(change: Any, message: str) -> None:
    given = resources()
    change(given)
    with pytest.raises(nack.NackError) as caught:
        nack.migrate(given, nack.Options(), _keys)
    assert str(caught.value).startswith(message), str(caught.value)


def test_unknown_fields_are_reported_not_dropped() -> None:
    given = [res("Stream", "s", {"name": "S", "subjects": ["s"], "storage": "file", "maxAge": "1h",
                                 "futureKnob": 3, "servers": ["x"]})]
    migration = nack.migrate(given, nack.Options(), None)
    assert [(row.field, row.value) for row in migration.unmapped] == [("spec.futureKnob", "3")]
