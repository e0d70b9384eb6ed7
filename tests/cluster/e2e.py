"""The end-to-end test body: the Helm chart on a real cluster, from `helm install` to `helm uninstall`.

One piece of code for every cluster: it takes a `Target` (a kubeconfig, a way to put a local image on
the nodes, and the address at which pods reach this machine), so the local one-node cluster
(tests/cluster/cluster.py) and kind (scripts/e2e-kind.sh) run exactly the same steps:

1. `helm install` -> the broker StatefulSet pod and the operator pod pass their real probes;
2. the ORDERS example -> Stream and Consumers Ready; a Job in the cluster publishes and consumes
   through the client Service's DNS name; a reset annotation -> `lastReset` Succeeded and the next
   delivery starts at that sequence; `helm test` (the chart's pod running `jsoperator check` with the
   operator's connection) round-trips a message;
3. the broker restarts (pod deleted, or the external server stopped) -> `BrokerUnavailable`, then
   Ready again by itself, with every message and ack floor kept;
4. `helm upgrade` with a changed setting rolls what it must and keeps the data; a no-op upgrade
   restarts nothing;
5. `helm uninstall` (+ the chart README's cleanup) leaves exactly what the README says; its pre-delete hook
   releases the finalizers, so the resources left behind and their namespace delete without an operator;
6. the leading operator replica is deleted -> the other one leads within seconds and reconciles; a
   namespace deleted while the operator runs goes away with its server objects.
Step 6 of the issue is `with_external_nats`: the same with `broker.enabled=false` and a real
nats-server on this machine behind a selector-less Service. `with_kustomize_overlay` installs
deploy/base through deploy/overlays/other-namespace instead of Helm (issue 24: the base in any namespace).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import kubernetes.dynamic
import kubernetes.utils
import nats
import yaml
from kubernetes.client.rest import ApiException

from tests.polling import poll

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "jetstream-kopf"
EXAMPLE = REPO / "deploy" / "examples" / "orders.yaml"
CLIENT = (Path(__file__).parent / "e2e_client.py").read_text()
GROUP, VERSION = "jsoperator.io", "v1alpha1"
PLURALS = {"Stream": "streams", "Consumer": "consumers", "JetStreamConnection": "jetstreamconnections"}
EXAMPLE_OBJECTS = [("Stream", "orders"), ("Consumer", "new"), ("Consumer", "dispatch"), ("Consumer", "monitor")]
RELEASE = "jk"
STARTUP = 240.0  # a pod from image import to Ready on a busy 2-core machine
CLIENT_SECRET_DIR = "/etc/nats-client"
PROMPT = 60.0  # an operator reaction (status, reset, recovery) with a 2 s drift interval


@dataclass(frozen=True)
class Target:
    """Where the body runs. `load_image(tag)` makes a local Docker image usable by the nodes' runtime;
    `host_address` is an address of this machine that pods can connect to."""

    kubeconfig: Path
    load_image: Callable[[str], None]
    host_address: str


def _missing(call: Callable[[], Any]) -> bool:
    try:
        call()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


class Kube:
    """The API calls the steps need (what `kubectl` would do), on one cluster."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.apps = kubernetes.client.AppsV1Api(self.client)
        self.batch = kubernetes.client.BatchV1Api(self.client)
        self.custom = kubernetes.client.CustomObjectsApi(self.client)
        self._jobs = 0

    def create(self, namespace: str, *objects: dict[str, Any]) -> None:
        for obj in objects:
            if obj["apiVersion"] == f"{GROUP}/{VERSION}":  # create_from_dict knows built-in kinds only
                self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[obj["kind"]], obj)
            else:
                kubernetes.utils.create_from_dict(self.client, obj, namespace=namespace)

    # Our resources ---------------------------------------------------------------------------------

    def resource(self, namespace: str, kind: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[kind], name)
        return obj

    def ready(self, namespace: str, kind: str, name: str) -> tuple[str, str]:
        """(status, reason) of the Ready condition, ("", "") before the first status."""
        for condition in self.resource(namespace, kind, name).get("status", {}).get("conditions", []):
            if condition["type"] == "Ready":
                return condition["status"], condition["reason"]
        return "", ""

    def wait_synced(self, namespace: str, objects: list[tuple[str, str]], timeout: float = PROMPT) -> None:
        for kind, name in objects:
            poll(lambda: self.ready(namespace, kind, name) == ("True", "Synced"), timeout=timeout,
                  what=f"{kind} {name} Ready=True Synced (now {self.ready(namespace, kind, name)})")

    def annotate(self, namespace: str, kind: str, name: str, annotations: dict[str, str]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[kind], name,
                                                   {"metadata": {"annotations": annotations}})

    # Pods and Jobs ---------------------------------------------------------------------------------

    def pods(self, namespace: str, selector: str) -> list[kubernetes.client.V1Pod]:
        return list(self.core.list_namespaced_pod(namespace, label_selector=selector).items)

    def ready_pod(self, namespace: str, selector: str) -> kubernetes.client.V1Pod | None:
        """The oldest pod matching `selector` when every one is Ready and none is being deleted (the
        operator runs 2 replicas, the broker 1)."""
        pods = [p for p in self.pods(namespace, selector) if p.metadata.deletion_timestamp is None]
        if pods and all(any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
                        for p in pods):
            return min(pods, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))
        return None

    def run_client(self, namespace: str, image: str, env: list[dict[str, Any]], *words: str,
                   secret: str | None = None) -> list[dict[str, Any]]:
        """Run tests/cluster/e2e_client.py in a Job (our image, in the cluster) and return its JSON lines;
        `secret` (TLS files) is mounted at CLIENT_SECRET_DIR."""
        self._jobs += 1
        name = f"client-{self._jobs}"
        container: dict[str, Any] = {"name": "client", "image": image, "imagePullPolicy": "IfNotPresent",
                                     "command": ["python", "-c", CLIENT, *words], "env": env}
        pod: dict[str, Any] = {"restartPolicy": "Never", "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                               "containers": [container]}
        if secret is not None:
            container["volumeMounts"] = [{"name": "tls", "mountPath": CLIENT_SECRET_DIR, "readOnly": True}]
            pod["volumes"] = [{"name": "tls", "secret": {"secretName": secret}}]
        self.create(namespace, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                                "spec": {"backoffLimit": 0, "template": {"spec": pod}}})
        job = poll(lambda: (lambda j: j if (j.status.succeeded or j.status.failed) else None)(
            self.batch.read_namespaced_job(name, namespace)), timeout=STARTUP, what=f"Job {name} to finish")
        pod = self.pods(namespace, f"job-name={name}")[0].metadata.name
        log = self.core.read_namespaced_pod_log(pod, namespace, container="client")
        assert job.status.succeeded, f"the client Job {' '.join(words)} failed:\n{log}"
        return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


class Helm:
    """Helm's own engine (the `helm` binary) on the target cluster."""

    def __init__(self, binary: Path, kubeconfig: Path, namespace: str, values: dict[str, Any], workdir: Path) -> None:
        self.binary, self.kubeconfig, self.namespace, self.values = binary, kubeconfig, namespace, values
        self._values_path = workdir / f"values-{namespace}.yaml"

    def __call__(self, *args: str) -> str:
        done = subprocess.run([str(self.binary), "--kubeconfig", str(self.kubeconfig), "--namespace",
                               self.namespace, *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
        return done.stdout

    def install(self) -> None:
        self("install", RELEASE, str(CHART), "--create-namespace", *self._values_file(self.values))

    def upgrade(self, **changes: Any) -> None:
        """helm upgrade with the release's values deep-merged with `changes` ({"broker": {...}})."""
        self.values = _merge(self.values, changes)
        self("upgrade", RELEASE, str(CHART), *self._values_file(self.values))

    def uninstall(self) -> None:
        self("uninstall", RELEASE, "--wait", "--timeout", "3m")

    def _values_file(self, values: dict[str, Any]) -> list[str]:
        self._values_path.write_text(yaml.safe_dump(values))
        return ["--values", str(self._values_path)]


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in changes.items():
        merged[key] = _merge(base.get(key, {}), value) if isinstance(value, dict) else value
    return merged


# What the steps expect ------------------------------------------------------------------------------

BROKER = f"{RELEASE}-jetstream-kopf-broker"
BROKER_PODS = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=broker"
OPERATOR_PODS = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
RESET_TO = 5


def _state(new_floor: int) -> dict[str, Any]:
    """ORDERS after the publishing Job (10 received, 3 processed) and DISPATCH's 2 acks, with NEW acked
    up to `new_floor` (its messages are sequences 1-10)."""
    return {"messages": 13, "last_seq": 13, "consumers": {
        "NEW": {"ack_floor": new_floor, "delivered": new_floor, "num_pending": 10 - new_floor, "num_ack_pending": 0},
        "DISPATCH": {"ack_floor": 12, "delivered": 12, "num_pending": 1, "num_ack_pending": 0},
    }}


INFO = ("info", "ORDERS", "NEW", "DISPATCH")


@dataclass
class Scenario:
    """One release of the chart in its own namespace, and how its Jobs reach the NATS server."""

    kube: Kube
    helm: Helm
    image: str
    client_env: list[dict[str, Any]]
    client_secret: str | None = None

    @property
    def namespace(self) -> str:
        return self.helm.namespace

    def client(self, *words: str) -> list[dict[str, Any]]:
        return self.kube.run_client(self.namespace, self.image, self.client_env, *words, secret=self.client_secret)

    def pod(self, selector: str, *, other_than: str = "") -> kubernetes.client.V1Pod:
        """The Ready pod for `selector` (a new one when `other_than` names the old pod's uid)."""
        return poll(lambda: (lambda p: p if p is not None and p.metadata.uid != other_than else None)(
            self.kube.ready_pod(self.namespace, selector)), timeout=STARTUP,
            what=f"a Ready pod {selector}" + (f" other than {other_than}" if other_than else ""))

    # Step 1 ------------------------------------------------------------------------------------------

    def install(self, *, broker: bool) -> None:
        self.helm.install()
        operator = self.pod(OPERATOR_PODS)
        _assert_started_cleanly(operator)
        if broker:
            _assert_started_cleanly(self.pod(BROKER_PODS))
        else:
            assert self.kube.apps.list_namespaced_stateful_set(self.namespace).items == []

    # Step 2 ------------------------------------------------------------------------------------------

    def helm_test(self) -> None:
        """`helm test`: the chart's pod runs `jsoperator check` with the operator's connection settings (a
        message round-trips over core NATS and through a memory stream, deleted again). A failed pod is kept
        by the chart: its log goes into the failure."""
        try:
            self.helm("test", RELEASE, "--timeout", "3m")
        except AssertionError as exc:
            try:
                log = self.kube.core.read_namespaced_pod_log(f"{RELEASE}-jetstream-kopf-test-connection",
                                                             self.namespace)
            except ApiException as missing:
                log = f"(no test pod log: {missing.status} {missing.reason})"
            raise AssertionError(f"{exc}\n{log}") from None

    def orders(self) -> None:
        self.kube.create(self.namespace, *yaml.safe_load_all(EXAMPLE.read_text()))
        self.kube.wait_synced(self.namespace, EXAMPLE_OBJECTS, timeout=STARTUP)
        assert self.client("publish", "ORDERS.received", "10", "publish", "ORDERS.processed", "3",
                           "consume", "ORDERS", "NEW", "3", "consume", "ORDERS", "DISPATCH", "2", *INFO) == [
            {"published": list(range(1, 11))}, {"published": [11, 12, 13]},
            {"consumed": [1, 2, 3]}, {"consumed": [11, 12]}, _state(new_floor=3)]
        # The operator's drift timer brings the server's numbers into the resources' status.
        poll(lambda: _status(self.kube, self.namespace, "Stream", "orders", "messages", "lastSeq") == (13, 13),
              timeout=PROMPT, what="Stream orders status messages=13 lastSeq=13")
        poll(lambda: _status(self.kube, self.namespace, "Consumer", "new", "ackFloor", "numPending")
              == ({"consumerSeq": 3, "streamSeq": 3}, 7), timeout=PROMPT, what="Consumer new status ackFloor 3, 7 pending")

        self.kube.annotate(self.namespace, "Consumer", "new", {"jsoperator.io/reset-to-sequence": str(RESET_TO)})
        last = poll(lambda: self.kube.resource(self.namespace, "Consumer", "new").get("status", {}).get("lastReset"),
                     timeout=PROMPT, what="Consumer new status.lastReset")
        assert (last["request"], last["result"], last["resetSeq"]) == (
            f"reset-to-sequence={RESET_TO}", "Succeeded", RESET_TO), last
        assert self.client("consume", "ORDERS", "NEW", "1", *INFO) == [
            {"consumed": [RESET_TO]}, _state(new_floor=RESET_TO)]

    # Step 3 ------------------------------------------------------------------------------------------

    def outage(self, stop: Callable[[], None], start: Callable[[], None] | None = None) -> None:
        """`stop` the server: the Stream and a Consumer report BrokerUnavailable; after `start` (or by
        Kubernetes alone) every resource is Synced again and the data is as it was."""
        watched = [("Stream", "orders"), ("Consumer", "new")]
        seen: dict[tuple[str, str], set[str]] = {obj: set() for obj in watched}

        def outage_seen() -> bool:
            for kind, name in watched:
                seen[(kind, name)].add(self.kube.ready(self.namespace, kind, name)[1])
            return all("BrokerUnavailable" in reasons for reasons in seen.values())

        stop()
        poll(outage_seen, timeout=PROMPT, interval=0.2, what=f"BrokerUnavailable on {watched} (seen {seen})")
        if start is not None:
            start()
        self.kube.wait_synced(self.namespace, EXAMPLE_OBJECTS, timeout=STARTUP)
        assert self.client(*INFO) == [_state(new_floor=RESET_TO)]

    # Step 4 ------------------------------------------------------------------------------------------

    def upgrade_changed(self, rolled: str, kept: str | None, **changes: Any) -> None:
        """An upgrade with `changes` replaces the pod of `rolled`, not the one of `kept`; data stays."""
        old = self.pod(rolled)
        other = self.pod(kept) if kept else None
        self.helm.upgrade(**changes)
        self.pod(rolled, other_than=old.metadata.uid)
        if kept and other is not None:
            assert self.pod(kept).metadata.uid == other.metadata.uid, f"{kept} restarted"
        self.kube.wait_synced(self.namespace, EXAMPLE_OBJECTS, timeout=STARTUP)
        assert self.client(*INFO) == [_state(new_floor=RESET_TO)]

    def upgrade_unchanged(self) -> None:
        """The same values again: no workload gets a new template, so no pod restarts."""
        before = self._workloads()
        self.helm.upgrade()
        assert self._workloads() == before

    def _workloads(self) -> dict[str, Any]:
        ns = self.namespace
        return {
            "generations": sorted((w.kind or "", w.metadata.name, w.metadata.generation) for w in [
                *self.kube.apps.list_namespaced_stateful_set(ns).items,
                *self.kube.apps.list_namespaced_deployment(ns).items]),
            "pods": sorted((p.metadata.name, p.metadata.uid, [s.restart_count for s in p.status.container_statuses or []])
                           for p in self.kube.pods(ns, f"app.kubernetes.io/instance={RELEASE}")),
        }

    # Step 6 ------------------------------------------------------------------------------------------

    def failover(self) -> float:
        """Delete the pod holding the operators' Lease: the other replica takes it and reconciles.
        Returns the seconds from the deletion to the new holder."""
        lease = f"{RELEASE}-jetstream-kopf-operator"
        leases = kubernetes.client.CoordinationV1Api(self.kube.client)

        def holder() -> str:
            return leases.read_namespaced_lease(lease, self.namespace).spec.holder_identity or ""

        old = poll(holder, timeout=PROMPT, what=f"a holder of Lease {lease}")
        [leader] = [p for p in self.kube.pods(self.namespace, OPERATOR_PODS) if old.startswith(p.metadata.name + "/")]
        start = time.monotonic()
        self.kube.core.delete_namespaced_pod(leader.metadata.name, self.namespace)
        new = poll(lambda: (lambda h: h if h and h != old else None)(holder()), timeout=PROMPT,
                   what=f"another holder of Lease {lease} than {old}")
        took = time.monotonic() - start
        assert not new.startswith(leader.metadata.name + "/")
        stream = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Stream", "metadata": {"name": "failover"},
                  "spec": {"subjects": ["failover.>"], "storage": "memory"}}
        self.kube.create(self.namespace, stream)
        self.kube.wait_synced(self.namespace, [("Stream", "failover")])
        self.kube.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, "streams", "failover")
        poll(lambda: _missing(lambda: self.kube.resource(self.namespace, "Stream", "failover")), timeout=PROMPT,
             what="Stream failover deleted by the new leader")
        return took

    def namespace_deleted_with_the_operator_running(self, server_url: str) -> None:
        """A namespace with a Stream and a Consumer is deleted: it goes, and so do their server objects."""
        ns = f"{self.namespace}-doomed"
        self.kube.core.create_namespace({"metadata": {"name": ns}})
        self.kube.create(ns, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Stream", "metadata": {"name": "doomed"},
                              "spec": {"subjects": ["doomed.>"], "storage": "memory"}},
                         {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Consumer", "metadata": {"name": "doomed-c"},
                          "spec": {"streamName": "doomed"}})
        self.kube.wait_synced(ns, [("Stream", "doomed"), ("Consumer", "doomed-c")])
        assert "doomed" in asyncio.run(_stream_names(server_url))
        self.kube.core.delete_namespace(ns)
        poll(lambda: _missing(lambda: self.kube.core.read_namespace(ns)), timeout=STARTUP, what=f"namespace {ns} gone")
        assert "doomed" not in asyncio.run(_stream_names(server_url))

    def resources_left_delete_without_the_operator(self) -> None:
        """After helm uninstall (its hook released the finalizers): the resources left behind, then
        their namespace, delete although no operator runs."""
        for plural in ("consumers", "streams"):
            self.kube.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, self.namespace, plural)
        for kind, name in EXAMPLE_OBJECTS:
            poll(lambda: _missing(lambda: self.kube.resource(self.namespace, kind, name)), timeout=PROMPT,
                 what=f"{kind} {name} deleted without an operator")
        self.kube.core.delete_namespace(self.namespace)
        poll(lambda: _missing(lambda: self.kube.core.read_namespace(self.namespace)), timeout=STARTUP,
             what=f"namespace {self.namespace} gone")

    # Step 5 ------------------------------------------------------------------------------------------

    def uninstall(self, kept: set[tuple[str, str]]) -> None:
        """helm uninstall leaves exactly `kept` of the release's labelled objects (what the chart's
        README says), the CRDs and the custom resources; the README's cleanup removes the rest."""
        self.helm.uninstall()
        poll(lambda: _labelled(self.kube, self.namespace) == kept, timeout=PROMPT,
              what=f"only {sorted(kept)} left (now {sorted(_labelled(self.kube, self.namespace))})")
        extensions = kubernetes.client.ApiextensionsV1Api(self.kube.client)
        for crd in ("streams.jsoperator.io", "consumers.jsoperator.io", "keyvalues.jsoperator.io",
                    "objectstores.jsoperator.io"):
            extensions.read_custom_resource_definition(crd)

    def documented_cleanup(self) -> None:
        """`kubectl delete pvc -l app.kubernetes.io/instance=<release>` and `kubectl delete secret
        <release>-jetstream-kopf-broker-auth` (chart README); the provisioner then deletes the volume."""
        ns, selector = self.namespace, f"app.kubernetes.io/instance={RELEASE}"
        volumes = [c.spec.volume_name for c in
                   self.kube.core.list_namespaced_persistent_volume_claim(ns, label_selector=selector).items]
        self.kube.core.delete_collection_namespaced_persistent_volume_claim(ns, label_selector=selector)
        self.kube.core.delete_namespaced_secret(f"{BROKER}-auth", ns)
        poll(lambda: _labelled(self.kube, ns) == set(), timeout=PROMPT, what="no object of the release left")
        for volume in volumes:
            poll(lambda: _missing(lambda: self.kube.core.read_persistent_volume(volume)), timeout=PROMPT,
                  what=f"PersistentVolume {volume} deleted")


def _assert_started_cleanly(pod: kubernetes.client.V1Pod) -> None:
    """Ready through its probes, no restarts."""
    for status in pod.status.container_statuses:
        assert status.ready and status.restart_count == 0, (pod.metadata.name, status)


def _status(kube: Kube, namespace: str, kind: str, name: str, *fields: str) -> tuple[Any, ...]:
    status = kube.resource(namespace, kind, name).get("status", {})
    return tuple(status.get(field) for field in fields)


def _labelled(kube: Kube, namespace: str) -> set[tuple[str, str]]:
    """Every object labelled with the release, namespaced and cluster-wide (what `helm uninstall` and
    garbage collection must remove)."""
    selector = f"app.kubernetes.io/instance={RELEASE}"
    core, apps = kube.core, kube.apps
    rbac = kubernetes.client.RbacAuthorizationV1Api(kube.client)
    policy = kubernetes.client.PolicyV1Api(kube.client)
    discovery = kubernetes.client.DiscoveryV1Api(kube.client)
    listings = {
        "Pod": core.list_namespaced_pod, "Service": core.list_namespaced_service,
        "Endpoints": core.list_namespaced_endpoints, "ConfigMap": core.list_namespaced_config_map,
        "Secret": core.list_namespaced_secret, "ServiceAccount": core.list_namespaced_service_account,
        "PersistentVolumeClaim": core.list_namespaced_persistent_volume_claim,
        "Deployment": apps.list_namespaced_deployment, "StatefulSet": apps.list_namespaced_stateful_set,
        "ReplicaSet": apps.list_namespaced_replica_set, "ControllerRevision": apps.list_namespaced_controller_revision,
        "PodDisruptionBudget": policy.list_namespaced_pod_disruption_budget,
        "Role": rbac.list_namespaced_role, "RoleBinding": rbac.list_namespaced_role_binding,
        "EndpointSlice": discovery.list_namespaced_endpoint_slice,
    }
    found = {(kind, obj.metadata.name) for kind, list_ in listings.items()
             for obj in list_(namespace, label_selector=selector).items}
    found |= {("ClusterRole", obj.metadata.name) for obj in rbac.list_cluster_role(label_selector=selector).items}
    found |= {("ClusterRoleBinding", obj.metadata.name)
              for obj in rbac.list_cluster_role_binding(label_selector=selector).items}
    return found


# The two runs ---------------------------------------------------------------------------------------

BROKER_NAMESPACE, EXTERNAL_NAMESPACE, TLS_NAMESPACE = "jk-broker", "jk-external", "jk-tls"
ACCOUNTS_NAMESPACE = "jk-accounts"
ACCOUNTS_EXAMPLE = REPO / "deploy" / "examples" / "two-accounts"


@contextmanager
def diagnosed(target: Target, namespace: str) -> Iterator[None]:
    """A failure inside carries what `kubectl describe` and `kubectl logs` would show for `namespace`."""
    try:
        yield
    except (AssertionError, ApiException) as exc:
        raise AssertionError(f"{exc}\n\n{describe(Kube(target.kubeconfig), namespace)}") from exc


def describe(kube: Kube, namespace: str, lines: int = 30) -> str:
    """The namespace's pods (phase, container states, restarts), its last events and each container's
    last log lines."""
    out = [f"--- pods in {namespace}"]
    try:
        pods = kube.pods(namespace, "")
        for pod in pods:
            for status in pod.status.container_statuses or []:
                state = {k: v for k, v in status.state.to_dict().items() if v}
                out.append(f"{pod.metadata.name}/{status.name}: {pod.status.phase} ready={status.ready} "
                           f"restarts={status.restart_count} {state}")
        out.append(f"--- last events in {namespace}")
        events = sorted(kube.core.list_namespaced_event(namespace).items,
                        key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp)
        out += [f"{e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}" for e in events[-lines:]]
        for pod in pods:
            for status in pod.status.container_statuses or []:
                log = kube.core.read_namespaced_pod_log(pod.metadata.name, namespace, container=status.name,
                                                        tail_lines=lines)
                out.append(f"--- log of {pod.metadata.name}/{status.name}\n{log}")
    except ApiException as exc:  # the cluster itself may be what failed
        out.append(f"(could not read more: {exc.status} {exc.reason})")
    return "\n".join(out)


def _values(image: str, **more: Any) -> dict[str, Any]:
    repository, tag = image.rsplit(":", 1)
    # A short drift interval: status counters and outages show within seconds.
    return _merge({"image": {"repository": repository, "tag": tag}, "operator": {"driftInterval": 2}}, more)


def with_broker(target: Target, image: str, helm: Path, workdir: Path, namespace: str = BROKER_NAMESPACE) -> None:
    """Steps 1-5 with the chart's own broker StatefulSet."""
    target.load_image(image)
    kube = Kube(target.kubeconfig)
    token = {"name": "NATS_TOKEN", "valueFrom": {"secretKeyRef": {"name": f"{BROKER}-auth", "key": "token"}}}
    run = Scenario(kube, Helm(helm, target.kubeconfig, namespace, _values(image), workdir), image, [
        {"name": "NATS_URL", "value": f"nats://{BROKER}.{namespace}.svc:4222"}, token])
    run.install(broker=True)
    run.orders()
    run.helm_test()

    claim = f"data-{BROKER}-0"
    volume = kube.core.read_namespaced_persistent_volume_claim(claim, namespace).spec.volume_name
    broker = run.pod(BROKER_PODS)
    run.outage(lambda: kube.core.delete_namespaced_pod(broker.metadata.name, namespace))
    assert run.pod(BROKER_PODS).metadata.uid != broker.metadata.uid
    assert kube.core.read_namespaced_persistent_volume_claim(claim, namespace).spec.volume_name == volume

    run.upgrade_changed(BROKER_PODS, OPERATOR_PODS, broker={"config": {"maxPayload": "2MB"}})
    run.upgrade_unchanged()
    print(f"operator failover: the standby held the Lease {run.failover():.1f}s after the leader pod was deleted")
    run.uninstall(kept={("PersistentVolumeClaim", claim)})
    # The token Secret the broker created at its first start: not Helm's, so kept for a re-install.
    assert kube.core.read_namespaced_secret(f"{BROKER}-auth", namespace).data["token"]
    left = kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "consumers")["items"]
    assert {obj["metadata"]["name"] for obj in left} == {"new", "dispatch", "monitor"}
    assert all(not obj["metadata"].get("finalizers") for obj in left)  # released by the pre-delete hook
    run.documented_cleanup()
    run.resources_left_delete_without_the_operator()


def with_two_accounts(target: Target, image: str, helm: Path, workdir: Path,
                      namespace: str = ACCOUNTS_NAMESPACE) -> None:
    """deploy/examples/two-accounts: the chart's broker with the example's accounts (passwords from
    Secrets), the teams' namespaces each with a JetStreamConnection to its own account and a Stream ORDERS
    of its own; nats-py in each namespace sees only its account's stream."""
    target.load_image(image)
    kube = Kube(target.kubeconfig)
    passwords = {"team-a": "pw-a", "team-b": "pw-b", "ops": "pw-ops", "sys": "pw-sys"}
    kube.create("default", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for user, password in passwords.items():
        kube.create(namespace, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{user}-nats"},
                                "stringData": {"password": password}})
    example = yaml.safe_load((ACCOUNTS_EXAMPLE / "values.yaml").read_text())
    run = Scenario(kube, Helm(helm, target.kubeconfig, namespace, _values(image, **example), workdir), image, [])
    run.install(broker=True)
    url = f"nats://{BROKER}.{namespace}.svc:4222"
    teams = yaml.safe_load_all((ACCOUNTS_EXAMPLE / "teams.yaml").read_text()
                               .replace("nats://jk-jetstream-kopf-broker.nats.svc:4222", url)
                               .replace("change-me-a", passwords["team-a"]).replace("change-me-b", passwords["team-b"]))
    for doc in teams:
        kube.create(doc["metadata"].get("namespace", "default"), doc)
    kube.wait_synced("team-a", [("Stream", "orders"), ("Consumer", "shipping")], timeout=STARTUP)
    kube.wait_synced("team-b", [("Stream", "orders")], timeout=STARTUP)

    def client(team: str, *words: str) -> list[dict[str, Any]]:
        login = [{"name": "NATS_URL", "value": url}, {"name": "NATS_USER", "value": team},
                 {"name": "NATS_PASSWORD", "value": passwords[team]}]
        return kube.run_client(team, image, login, *words)

    # Same stream name, two streams: each account's messages in its own, the consumer in team-a's only.
    assert client("team-a", "publish", "orders.new", "3", "info", "ORDERS", "shipping") == [
        {"published": [1, 2, 3]},
        {"messages": 3, "last_seq": 3, "consumers": {"shipping": {"ack_floor": 0, "delivered": 0, "num_pending": 3,
                                                                  "num_ack_pending": 0}}}]
    assert client("team-b", "publish", "refunds.1", "2", "info", "ORDERS") == [
        {"published": [1, 2]}, {"messages": 2, "last_seq": 2, "consumers": {}}]
    assert client("team-b", "streams") == [{"streams": {"ORDERS": {"subjects": ["orders.>", "refunds.>"],
                                                                   "max_msgs": 50, "consumers": 0}}}]
    assert client("team-a", "streams") == [{"streams": {"ORDERS": {"subjects": ["orders.>"], "max_msgs": 1000,
                                                                   "consumers": 1}}}]
    for team in ("team-a", "team-b"):
        kube.core.delete_namespace(team)
    run.helm.uninstall()
    kube.core.delete_namespace(namespace)


def with_external_nats(target: Target, image: str, helm: Path, workdir: Path, server: Any,
                       namespace: str = EXTERNAL_NAMESPACE) -> None:
    """Steps 1-5 with broker.enabled=false against `server` (a tests.servers.ServerHandle of a real
    nats-server listening on target.host_address), reached through a selector-less Service."""
    target.load_image(image)
    kube = Kube(target.kubeconfig)
    url = f"nats://nats.{namespace}.svc:4222"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    kube.create(namespace, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "nats"},
        "spec": {"ports": [{"name": "nats", "port": 4222, "targetPort": server.port}]},
    }, {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "nats-host", "labels": {"kubernetes.io/service-name": "nats"}},
        "addressType": "IPv4", "endpoints": [{"addresses": [target.host_address]}],
        "ports": [{"name": "nats", "port": server.port, "protocol": "TCP"}],
    })
    values = _values(image, broker={"enabled": False}, nats={"url": url})
    run = Scenario(kube, Helm(helm, target.kubeconfig, namespace, values, workdir), image,
                   [{"name": "NATS_URL", "value": url}])
    run.install(broker=False)
    run.orders()
    run.helm_test()
    run.outage(server.stop, server.start)
    run.upgrade_changed(OPERATOR_PODS, None, operator={"logLevel": "DEBUG"})
    run.upgrade_unchanged()

    run.namespace_deleted_with_the_operator_running(server.url)
    # The chart README: delete the resources before uninstalling and the operator deletes the server objects.
    for kind, name in reversed(EXAMPLE_OBJECTS):
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[kind], name)
    for kind, name in EXAMPLE_OBJECTS:
        poll(lambda: _missing(lambda: kube.resource(namespace, kind, name)), timeout=PROMPT,
              what=f"{kind} {name} deleted")
    assert asyncio.run(_stream_names(server.url)) == []
    run.uninstall(kept=set())


async def _stream_names(url: str) -> list[str]:
    nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        return [info.config.name for info in await nc.jetstream().streams_info()]
    finally:
        await nc.close()


def with_broker_tls(target: Target, image: str, helm: Path, workdir: Path, namespace: str = TLS_NAMESPACE) -> None:
    """The chart's broker with mutual TLS (broker.tls) and HTTPS monitoring (the kubelet's probes over
    HTTPS make it Ready): the operator reconciles ORDERS over tls:// with its client certificate, a client
    in the cluster publishes and reads back; a client without a certificate is refused."""
    from tests.broker.certs import Authority

    target.load_image(image)
    kube = Kube(target.kubeconfig)
    authority = Authority(workdir / "pki")
    service = f"{BROKER}.{namespace}.svc"
    pairs = {"broker-tls": authority.issue("broker", server=True, names=(service, f"{service}.cluster.local")),
             "operator-tls": authority.issue("operator", server=False),
             "client-tls": authority.issue("client", server=False)}
    kube.core.create_namespace({"metadata": {"name": namespace}})
    for name, pair in pairs.items():
        kube.core.create_namespaced_secret(namespace, {
            "metadata": {"name": name}, "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": pair.cert.read_text(), "tls.key": pair.key.read_text(),
                           "ca.crt": authority.ca.read_text()}})
    # With the chart's placement and network options on (issue 25): they install, and the scenario works
    # through them (clients in this namespace are the NetworkPolicy's allowed peers).
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}]
    extra_env = [{"name": "E2E_EXTRA_ENV", "value": "set"}]
    values = _values(image, broker={"tls": {"enabled": True, "secretName": "broker-tls", "verify": True,
                                            "operatorSecret": "operator-tls", "monitoring": True},
                                    "networkPolicy": {"enabled": True, "clients": [{"podSelector": {}}],
                                                      "monitoring": [{"namespaceSelector": {}}]},
                                    "topologySpreadConstraints": spread, "extraEnv": extra_env},
                     operator={"topologySpreadConstraints": spread, "extraEnv": extra_env})
    token = {"name": "NATS_TOKEN", "valueFrom": {"secretKeyRef": {"name": f"{BROKER}-auth", "key": "token"}}}
    files = {"NATS_CA": "ca.crt", "NATS_CERT": "tls.crt", "NATS_KEY": "tls.key"}
    client_env = [{"name": "NATS_URL", "value": f"tls://{service}:4222"}, token,
                  *({"name": k, "value": f"{CLIENT_SECRET_DIR}/{v}"} for k, v in files.items())]
    run = Scenario(kube, Helm(helm, target.kubeconfig, namespace, values, workdir), image, client_env, "client-tls")
    run.install(broker=True)
    kube.create(namespace, *yaml.safe_load_all(EXAMPLE.read_text()))
    kube.wait_synced(namespace, EXAMPLE_OBJECTS, timeout=STARTUP)
    assert run.client("publish", "ORDERS.received", "3", "consume", "ORDERS", "NEW", "2", "info", "ORDERS", "NEW") == [
        {"published": [1, 2, 3]}, {"consumed": [1, 2]},
        {"messages": 3, "last_seq": 3, "consumers": {"NEW": {"ack_floor": 2, "delivered": 2, "num_pending": 1,
                                                             "num_ack_pending": 0}}}]
    run.helm_test()  # with the operator's client certificate
    policies = kubernetes.client.NetworkingV1Api(kube.client).list_namespaced_network_policy(namespace).items
    assert [p.spec.pod_selector.match_labels.get("app.kubernetes.io/component") for p in policies] == ["broker"]
    for component in (BROKER_PODS, OPERATOR_PODS):
        spec = run.pod(component).spec
        assert spec.topology_spread_constraints[0].topology_key == "kubernetes.io/hostname", component
        assert {"E2E_EXTRA_ENV": "set"}.items() <= {e.name: e.value for e in spec.containers[0].env}.items(), component
    # The same client without its certificate: the Job fails, refused by the broker.
    no_cert = Scenario(kube, run.helm, image, [e for e in client_env if e["name"] not in ("NATS_CERT", "NATS_KEY")],
                       "client-tls")
    try:
        no_cert.client("info", "ORDERS")
    except AssertionError as refused:
        assert "failed" in str(refused) and '"messages"' not in str(refused), refused
    else:
        raise AssertionError("a client without a certificate was let in")
    run.helm.uninstall()
    # Left behind, these would be the next cluster-wide operator's to reconcile (against its own default
    # server): another install's ORDERS resources would then be Stalled with reason Conflict, rightly.
    run.resources_left_delete_without_the_operator()


# The kustomize base in another namespace ------------------------------------------------------------

OVERLAY = REPO / "deploy" / "overlays" / "other-namespace"
OVERLAY_NAMESPACE = "team-x"  # what deploy/overlays/other-namespace sets
BASE_PODS = "app.kubernetes.io/instance=jetstream-kopf,app.kubernetes.io/component="


def _kustomize(kustomize: Path, workdir: Path, name: str, image: str, namespace: str | None,
               base: Path) -> list[dict[str, Any]]:
    """`kustomize build` of an overlay in `workdir/name` over `base`, with the test image (and `namespace`)."""
    repository, tag = image.rsplit(":", 1)
    folder = workdir / name
    folder.mkdir()
    overlay: dict[str, Any] = {"resources": [os.path.relpath(base, folder)],
                               "images": [{"name": "jetstream-kopf", "newName": repository, "newTag": tag}]}
    if namespace:
        overlay["namespace"] = namespace
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    done = subprocess.run([str(kustomize), "build", str(folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _apply(kube: Kube, docs: list[dict[str, Any]]) -> None:
    """Server-side apply, namespaces first (what `kubectl apply --server-side -k` does)."""
    dyn = kubernetes.dynamic.DynamicClient(kube.client)
    for doc in sorted(docs, key=lambda d: d["kind"] != "Namespace"):
        api = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        api.server_side_apply(body=doc, name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"),
                              field_manager="e2e", force_conflicts=True)


def with_kustomize_overlay(target: Target, image: str, kustomize: Path, workdir: Path) -> None:
    """deploy/base through deploy/overlays/other-namespace in namespace team-x: the broker creates its token
    Secret, the operator is Ready (it can list its resources) and reaches the broker through its pod's
    namespace, ORDERS is Synced and a client publishes. Before it, the issue's mistake: the base with a
    plain `namespace:` (team-y) gives an operator pod that runs but is never Ready, and says why."""
    target.load_image(image)
    kube = Kube(target.kubeconfig)
    _apply(kube, [doc for path in sorted((REPO / "crds").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())])

    # The plain `namespace:` overlay, operator only (its token Secret made by hand).
    plain = [d for d in _kustomize(kustomize, workdir, "plain", image, "team-y", REPO / "deploy" / "base")
             if d["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment")
             and "broker" not in d["metadata"]["name"]]
    _apply(kube, [d for d in plain if d["kind"] == "Namespace"])
    kube.core.create_namespaced_secret("team-y", {"metadata": {"name": "jetstream-kopf-broker-auth"},
                                                  "stringData": {"token": "unused"}})
    _apply(kube, plain)
    operator = poll(lambda: next(iter(kube.pods("team-y", BASE_PODS + "operator")), None), timeout=STARTUP,
                    what="the team-y operator pod")
    message = "not ready: cannot list streams.jsoperator.io at the cluster scope: 403 Forbidden"
    poll(lambda: message in _log(kube, "team-y", operator.metadata.name), timeout=STARTUP,
         what=f"the team-y operator logging {message!r}")
    pod = kube.core.read_namespaced_pod(operator.metadata.name, "team-y")
    assert pod.status.phase == "Running" and not pod.status.container_statuses[0].ready, pod.status

    # deploy/overlays/other-namespace as shipped (only the image changed).
    _apply(kube, _kustomize(kustomize, workdir, "team-x", image, None, OVERLAY))
    ns = OVERLAY_NAMESPACE
    for component in ("broker", "operator"):
        _assert_started_cleanly(poll(lambda: kube.ready_pod(ns, BASE_PODS + component), timeout=STARTUP,
                                     what=f"a Ready {component} pod in {ns}"))
    token = kube.core.read_namespaced_secret("jetstream-kopf-broker-auth", ns)
    assert token.metadata.labels == {"app.kubernetes.io/name": "jetstream-kopf",
                                     "app.kubernetes.io/component": "broker-auth"}
    kube.create(ns, *yaml.safe_load_all(EXAMPLE.read_text()))
    kube.wait_synced(ns, EXAMPLE_OBJECTS, timeout=STARTUP)
    client_env = [{"name": "NATS_URL", "value": f"nats://jetstream-kopf-broker.{ns}.svc:4222"},
                  {"name": "NATS_TOKEN", "valueFrom": {"secretKeyRef": {"name": "jetstream-kopf-broker-auth",
                                                                        "key": "token"}}}]
    assert kube.run_client(ns, image, client_env, "publish", "ORDERS.received", "2", "info", "ORDERS") == [
        {"published": [1, 2]}, {"messages": 2, "last_seq": 2, "consumers": {}}]

    # Clean up: the resources first (the operator releases them), then the namespaces and cluster objects.
    for kind, name in reversed(EXAMPLE_OBJECTS):
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[kind], name)
    for kind, name in EXAMPLE_OBJECTS:
        poll(lambda: _missing(lambda: kube.resource(ns, kind, name)), timeout=PROMPT, what=f"{kind} {name} deleted")
    rbac = kubernetes.client.RbacAuthorizationV1Api(kube.client)
    rbac.delete_cluster_role_binding("jetstream-kopf-operator")
    rbac.delete_cluster_role("jetstream-kopf-operator")
    for namespace in ("team-y", ns):
        kube.core.delete_namespace(namespace)


def _log(kube: Kube, namespace: str, pod: str) -> str:
    try:
        return str(kube.core.read_namespaced_pod_log(pod, namespace))
    except ApiException:  # not started yet
        return ""


# The chart as Argo CD deploys it --------------------------------------------------------------------

ARGO_NAMESPACE, ARGO_RELEASE = "jk-argo", "argo"


def with_helm_template_syncs(target: Target, image: str, helm: Path, workdir: Path) -> None:
    """What Argo CD does with the chart: `helm template`, applied server-side, at every sync. Two renders are
    identical; the second sync changes no workload and keeps the token the broker created at its first
    start; a broker restart keeps it too, and ORDERS stays Synced throughout (the operator's token is the
    broker's)."""
    target.load_image(image)
    kube = Kube(target.kubeconfig)
    ns, pods = ARGO_NAMESPACE, f"app.kubernetes.io/instance={ARGO_RELEASE},app.kubernetes.io/component="
    values = workdir / "argo-values.yaml"
    values.write_text(yaml.safe_dump(_values(image)))
    version = kubernetes.client.VersionApi(kube.client).get_code().git_version  # Argo CD passes the cluster's

    def render() -> str:
        done = subprocess.run([str(helm), "template", ARGO_RELEASE, str(CHART), "--namespace", ns, "--values",
                               str(values), "--kube-version", version], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def sync(text: str) -> None:
        # Argo CD treats objects with a helm.sh/hook annotation as hooks, never as part of the sync: it runs
        # only pre/post-install and -upgrade ones (as PreSync/PostSync). The chart has a pre-delete Job
        # (`jsoperator release --stop` scales the operator to zero) and a test Pod: applied, the first would
        # stop the operator it is meant to release at uninstall.
        docs = [doc for doc in yaml.safe_load_all(text) if doc and "helm.sh/hook" not in doc["metadata"].get(
            "annotations", {})]
        _apply(kube, [{**doc, "metadata": {"namespace": ns, **doc["metadata"]}} if doc["kind"] not in (
            "ClusterRole", "ClusterRoleBinding") else doc for doc in docs])

    def token() -> str:
        return str(kube.core.read_namespaced_secret(f"{ARGO_RELEASE}-jetstream-kopf-broker-auth", ns).data["token"])

    def workloads() -> list[tuple[str, int, list[tuple[str, str, int]]]]:
        return sorted((w.metadata.name, w.metadata.generation, sorted(
            (p.metadata.name, p.metadata.uid, sum(s.restart_count for s in p.status.container_statuses or []))
            for p in kube.pods(ns, pods + ("broker" if "broker" in w.metadata.name else "operator"))))
            for w in [*kube.apps.list_namespaced_stateful_set(ns).items, *kube.apps.list_namespaced_deployment(ns).items])

    _apply(kube, [doc for path in sorted((REPO / "crds").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())])
    _apply(kube, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    first = render()
    assert "kind: Secret" not in first
    sync(first)
    for component in ("broker", "operator"):
        poll(lambda: kube.ready_pod(ns, pods + component), timeout=STARTUP, what=f"a Ready {component} pod in {ns}")
    kube.create(ns, *yaml.safe_load_all(EXAMPLE.read_text()))
    kube.wait_synced(ns, EXAMPLE_OBJECTS, timeout=STARTUP)
    created, before = token(), workloads()

    second = render()
    assert second == first
    sync(second)
    assert (token(), workloads()) == (created, before)

    broker = kube.ready_pod(ns, pods + "broker")
    assert broker is not None
    kube.core.delete_namespaced_pod(broker.metadata.name, ns)
    poll(lambda: (lambda p: p is not None and p.metadata.uid != broker.metadata.uid)(kube.ready_pod(ns, pods + "broker")),
         timeout=STARTUP, what="the broker pod back")
    assert token() == created
    kube.wait_synced(ns, EXAMPLE_OBJECTS, timeout=STARTUP)

    for kind, name in reversed(EXAMPLE_OBJECTS):
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[kind], name)
    for kind, name in EXAMPLE_OBJECTS:
        poll(lambda: _missing(lambda: kube.resource(ns, kind, name)), timeout=PROMPT, what=f"{kind} {name} deleted")
    rbac = kubernetes.client.RbacAuthorizationV1Api(kube.client)
    rbac.delete_cluster_role_binding(f"{ARGO_RELEASE}-jetstream-kopf-operator")
    rbac.delete_cluster_role(f"{ARGO_RELEASE}-jetstream-kopf-operator")
    kube.core.delete_namespace(ns)
