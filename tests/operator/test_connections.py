"""connections.py: what a connectionRef means, namespace grants, and what an unusable reference says (pure)."""

from __future__ import annotations

import pytest

from jsoperator import connections, models


def body(spec: dict, name: str = "c", namespace: str | None = None) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"metadata": meta, "spec": spec}


def test_ref_of_defaults_to_the_namespaced_kind_in_the_resources_namespace() -> None:
    assert connections.ref_of("team-a", {"connectionRef": {"name": "main"}}) == ("JetStreamConnection", "team-a", "main")
    cluster = {"connectionRef": {"kind": "ClusterJetStreamConnection", "name": "shared"}}
    assert connections.ref_of("team-a", cluster) == ("ClusterJetStreamConnection", "", "shared")
    assert connections.ref_of("team-a", {"connection": {"servers": ["nats://x"]}}) is None
    assert connections.ref_of_body("JetStreamConnection", body({}, "main", "team-a")) == (
        "JetStreamConnection", "team-a", "main")


def test_namespaced_connection_reads_secrets_in_the_resources_namespace() -> None:
    ref = ("JetStreamConnection", "team-a", "main")
    spec, secrets_in = connections.usable(ref, body({"servers": ["nats://x:4222"]}, "main", "team-a"), "team-a")
    assert (spec.servers, secrets_in) == (["nats://x:4222"], "team-a")


@pytest.mark.parametrize(("allowed", "namespace", "ok"), [
    (["team-a"], "team-a", True), (["team-*"], "team-b", True), (["*"], "anything", True),
    (["team-a"], "team-ab", False), (["team-?"], "team-ab", False),
])
def test_grants_are_names_or_globs(allowed: list[str], namespace: str, ok: bool) -> None:
    ref = ("ClusterJetStreamConnection", "", "shared")
    spec = {"servers": ["nats://x:4222"], "tokenSecretRef": {"name": "t", "key": "k"}, "secretNamespace": "nats",
            "allowedNamespaces": allowed}
    if ok:
        conn, secrets_in = connections.usable(ref, body(spec, "shared"), namespace)
        assert (conn.token_secret_ref, secrets_in) == (models.SecretKeyRef(name="t", key="k"), "nats")
        return
    with pytest.raises(connections.Unusable) as refused:
        connections.usable(ref, body(spec, "shared"), namespace)
    assert refused.value.reason == connections.NOT_GRANTED
    assert f"does not grant namespace {namespace}" in str(refused.value)
    assert f"Add {namespace} to its spec.allowedNamespaces" in str(refused.value)


def test_missing_and_invalid_connections_say_what_to_do() -> None:
    with pytest.raises(connections.Unusable) as missing:
        connections.usable(("JetStreamConnection", "team-a", "main"), None, "team-a")
    assert missing.value.reason == connections.NOT_FOUND
    assert "JetStreamConnection team-a/main not found" in str(missing.value) and "Create" in str(missing.value)
    with pytest.raises(connections.Unusable) as invalid:
        connections.usable(("ClusterJetStreamConnection", "", "s"), body({"tokenSecretRef": {"name": "t", "key": "k"},
                                                                          "allowedNamespaces": ["*"]}), "a")
    assert invalid.value.reason == connections.INVALID and "secretNamespace" in str(invalid.value)


@pytest.mark.parametrize(("allowed", "watched", "served"), [
    (["team-a"], (), True), (["team-a"], ("team-*",), True), (["team-*"], ("team-a",), True),
    (["*"], ("jsop-*",), True), (["team-a"], ("other-*",), False), (["jsop-x"], ("jsopdrift-*",), False),
])
def test_an_operator_serves_cluster_connections_granting_a_namespace_it_watches(
    allowed: list[str], watched: tuple[str, ...], served: bool
) -> None:
    assert connections.may_serve(allowed, watched) is served


@pytest.mark.parametrize(("labels", "instance", "served"), [
    ({}, "", True), ({}, "east", False), ({"jsoperator.io/instance": "east"}, "east", True),
    ({"jsoperator.io/instance": "east"}, "", False), ({"jsoperator.io/instance": "east"}, "west", False),
])
def test_exactly_the_instance_its_label_names_serves_a_cluster_connection(
    labels: dict[str, str], instance: str, served: bool
) -> None:
    connection = {"metadata": {"name": "c", "labels": labels}, "spec": {"allowedNamespaces": ["*"]}}
    assert connections.serves(instance, ("team-*",), connection) is served
    assert connections.serves(instance, ("team-*",), {**connection, "spec": {"allowedNamespaces": ["x"]}}) is False


def test_connection_and_connection_ref_are_exclusive() -> None:
    with pytest.raises(models.SpecError, match="set spec.connection or spec.connectionRef, not both"):
        models.parse_spec(models.StreamSpec, {"connection": {}, "connectionRef": {"name": "c"}})
    with pytest.raises(models.SpecError, match="spec.connectionRef.kind"):
        models.parse_spec(models.ConsumerSpec, {"streamName": "s", "connectionRef": {"kind": "Account", "name": "c"}})
    assert models.parse_spec(models.ConsumerSpec, {"streamName": "s", "connectionRef": {"name": "c"}}).connection_ref


def test_the_connections_own_check_needs_no_grant() -> None:
    spec = {"servers": ["nats://x:4222"], "allowedNamespaces": ["team-[ab]"]}
    conn, secrets_in = connections.usable(("ClusterJetStreamConnection", "", "s"), body(spec, "s"), None)
    assert (conn.servers, secrets_in) == (["nats://x:4222"], "")
