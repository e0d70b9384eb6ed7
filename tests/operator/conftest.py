"""Fixtures for jsoperator tests: real brokers, the envtest apiserver with our CRDs, one `jsoperator run`
subprocess per session, and `Kube`, a small client for our custom resources with poll-with-timeout waits.

The operator's default servers point nowhere: every CR names its broker in `spec.connection.servers`,
so one operator serves every test (and both broker kinds) at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests import nats_releases, servers
from tests.kube import assets
from tests.polling import poll  # noqa: F401  (the operator tests import it from here)
from tests.kube.fixtures import envtest, kube_namespace  # noqa: F401  (fixtures, also used by test_crds)

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION = "jsoperator.io", "v1alpha1"
PLURALS = {"Stream": "streams", "Consumer": "consumers", "KeyValue": "keyvalues", "ObjectStore": "objectstores",
           "JetStreamConnection": "jetstreamconnections"}
# The main operator's drift timer is far longer than any test: everything it serves must happen at once,
# never because the timer came round. Drift repair and outage detection are the timer's job: those tests
# use the drift operator (`drift_kube`), which watches its own namespaces with a short interval.
EVENT_DRIVEN_DRIFT_INTERVAL = 3600.0
DRIFT_INTERVAL = 1.5
BROKERS = ["nats-server", "jsbroker"]
NAMESPACE_PREFIX = "jsop-"
DRIFT_NAMESPACE_PREFIX = "jsopdrift-"
NOFINALIZER_NAMESPACE_PREFIX = "jsopnofin-"
READ_ONLY_NAMESPACE_PREFIX = "jsopro-"
PROMPT = 5.0  # seconds within which an event-driven change (spec or annotation) must show


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Brokers -----------------------------------------------------------------------------------------


async def _consumer_api_missing(url: str) -> str | None:
    """Why the broker at `url` cannot serve the consumer tests, or None when it answers CONSUMER.* calls."""
    import nats

    nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False)
    try:
        js = nc.jetstream(timeout=2)
        await js.add_stream(name="PROBE", subjects=["probe.>"])
        await js.add_consumer("PROBE", durable_name="probe", ack_policy="explicit")
        await nc.request("$JS.API.CONSUMER.RESET.PROBE.probe", b"", timeout=2)
        await js.delete_stream("PROBE")
        return None
    except Exception as exc:  # any failure means: not there yet
        return f"{type(exc).__name__}: {exc}"
    finally:
        await nc.close()


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh broker per test, as a tests.servers handle (.url/.kill()/.restart()/.stop())."""
    kind = request.param
    handle = servers.launch(kind)
    try:
        if kind == "jsbroker":
            missing = asyncio.run(_consumer_api_missing(handle.url))
            if missing:
                pytest.skip(f"jsbroker does not answer $JS.API.CONSUMER.* yet ({missing})")
        yield handle
    finally:
        handle.close()


def release_binary(version: str) -> str:
    """nats-server `version`'s executable (tests/nats_releases.py); skips without network (fails in CI)."""
    try:
        return str(nats_releases.binary(version))
    except nats_releases.ReleaseUnavailable as exc:
        if assets.required():
            pytest.fail(f"{exc} ({assets.REQUIRE_ENV} is set)")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def releases() -> Iterator[dict[str, Any]]:
    """One running nats-server per release the operator is tested against (tests/nats_releases.py), by
    version, and jsbroker under "jsbroker"; shared by the session (each test uses its own names)."""
    handles: dict[str, Any] = {}
    try:
        for version in nats_releases.RELEASES:
            handles[version] = servers.launch(servers.NATS_SERVER, binary=release_binary(version))
        handles["jsbroker"] = servers.launch(servers.JSBROKER)
        yield handles
    finally:
        for handle in handles.values():
            handle.close()


# Kubernetes ---------------------------------------------------------------------------------------


def install_crds(client: kubernetes.client.ApiClient, paths: list[Path] | None = None) -> list[str]:
    """Install `paths` (default crds/*.yaml) and wait until they are Established; returns their names."""
    api = kubernetes.client.ApiextensionsV1Api(client)
    names = []
    for path in paths or sorted((REPO / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            with contextlib.suppress(ApiException):
                api.create_custom_resource_definition(doc)
            names.append(doc["metadata"]["name"])

    def established() -> bool:
        for name in names:
            conds = api.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conds):
                return False
        return True

    poll(established, timeout=30, what=f"CRDs {names} Established")
    return names


@pytest.fixture(scope="session")
def crds(envtest: Any) -> list[str]:
    with envtest.api_client() as client:
        return install_crds(client)


class Operator:
    """A `jsoperator run` subprocess with its log file."""

    def __init__(self, envtest: Any, log: Path, drift_interval: float = EVENT_DRIVEN_DRIFT_INTERVAL,
                 namespace_prefix: str | None = NAMESPACE_PREFIX, extra: tuple[str, ...] = ()) -> None:
        """`namespace_prefix`: watch only namespaces starting with it (None: cluster-wide); `extra`: more flags."""
        self.log = log
        self.namespace_prefix = namespace_prefix
        self.metrics_port, self.health_port = free_port(), free_port()
        self._envtest = envtest
        self._env = dict(os.environ, KUBECONFIG=str(envtest.kubeconfig), PYTHONUNBUFFERED="1")
        self._cmd = [
            sys.executable, "-m", "jsoperator", "run",
            "--servers", "nats://127.0.0.1:1",  # unused: every CR names its own broker
            "--drift-interval", str(drift_interval),
            # Only our tests' namespaces: resources other tests leave in the shared apiserver stay untouched.
            *(["--namespace", f"{namespace_prefix}*"] if namespace_prefix else []),
            "--request-timeout", "2",
            "--metrics-port", str(self.metrics_port),
            "--health-port", str(self.health_port),
            "--log-level", "INFO",
            *extra,
        ]
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as out:
            return subprocess.Popen(self._cmd, env=self._env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)

    def start(self) -> None:
        """Start again after stop() (same ports, same log) and wait until it serves new namespaces."""
        self.start_standby()
        self.wait_serving()

    def start_standby(self) -> None:
        """Start again and wait for /healthz only (with --leader-election it may wait to lead)."""
        self.proc = self._spawn()
        poll(self.healthy, timeout=60, what="jsoperator /healthz")

    def wait_serving(self) -> None:
        """Wait for /healthz, then until a namespace created from now on is served.

        kopf (1.45) lists namespaces, then starts a watch that lists them again and skips that second
        listing: a namespace created between the two lists is never served until a restart. A test
        that creates its namespace right after /healthz can fall into that window, so probe namespaces
        (each with an unmanaged Stream) are created until kopf puts its finalizer on one."""
        poll(self.healthy, timeout=60, what="jsoperator /healthz")
        with self._envtest.api_client() as client:
            def probe_served() -> bool:
                kube = Kube(client, f"{self.namespace_prefix or NAMESPACE_PREFIX}probe-{uuid.uuid4().hex[:8]}", self)
                kube.create_namespace()
                spec = {"subjects": ["probe.>"], "connection": {"servers": ["nats://127.0.0.1:1"]}}
                kube.create("Stream", "probe", spec, annotations={"jsoperator.io/managed": "false"})
                try:
                    kube.wait("Stream", "probe", self.serves, timeout=5)
                except AssertionError:
                    return False  # that namespace fell into the window; the next one will not
                kube.release_all()
                return True

            poll(probe_served, timeout=60, what="jsoperator serving a new namespace")

    def serves(self, obj: dict) -> bool:
        """The operator has handled this object (its finalizer, or without finalizers its status)."""
        if "--no-finalizers" in self._cmd:
            return bool((obj.get("status") or {}).get("conditions"))
        return bool(obj["metadata"].get("finalizers"))

    def http(self, port: int, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.read().decode()

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"jsoperator exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            self.http(self.health_port, "/healthz")
            return True
        except OSError:
            return False

    def metrics(self) -> str:
        return self.http(self.metrics_port, "/metrics")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _serving(op: Operator) -> Iterator[Operator]:
    try:
        op.wait_serving()
        yield op
    finally:
        op.stop()


@pytest.fixture(scope="session")
def operator(envtest: Any, crds: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    yield from _serving(Operator(envtest, tmp_path_factory.mktemp("jsoperator") / "operator.log"))


@pytest.fixture(scope="session")
def drift_operator(envtest: Any, crds: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp("jsoperator-drift") / "operator.log"
    # One operator per cluster serves ClusterJetStreamConnections: the main one.
    yield from _serving(Operator(envtest, log, DRIFT_INTERVAL, DRIFT_NAMESPACE_PREFIX, ("--no-cluster-connections",)))


class Kube:
    """Our custom resources in one namespace, through the Kubernetes API only."""

    def __init__(self, client: kubernetes.client.ApiClient, namespace: str, operator: Operator | None) -> None:
        self.api = kubernetes.client.CustomObjectsApi(client)
        self.core = kubernetes.client.CoreV1Api(client)
        self.namespace = namespace
        self.operator = operator

    def create_namespace(self) -> None:
        self.core.create_namespace(kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(
            name=self.namespace)))

    def create(self, kind: str, name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": kind,
            "metadata": {"name": name, "annotations": annotations or {}}, "spec": spec,
        }
        return self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURALS[kind], body)

    def get(self, kind: str, name: str) -> dict | None:
        try:
            return self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURALS[kind], name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, kind: str, name: str, patch: dict[str, Any]) -> dict:
        return self.api.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURALS[kind], name, patch)

    def annotate(self, kind: str, name: str, annotations: dict[str, str | None]) -> dict:
        return self.patch(kind, name, {"metadata": {"annotations": annotations}})

    def delete(self, kind: str, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURALS[kind], name)

    def events(self, name: str) -> list[Any]:
        items = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}").items
        return sorted(items, key=lambda e: (e.last_timestamp or e.event_time or e.metadata.creation_timestamp))

    def wait_events(self, name: str, reason: str, count: int = 1, timeout: float = 10) -> list[Any]:
        """Poll until `name` has at least `count` Events with `reason`; returns them. kopf posts Events
        from a queue of its own, after the status patch that a test usually waits for."""
        def found() -> list[Any]:
            events = [e for e in self.events(name) if e.reason == reason]
            return events if len(events) >= count else []

        return poll(found, timeout=timeout, what=f"{count} Event(s) {reason} for {name}")

    def wait(self, kind: str, name: str, check: Callable[[dict], Any], *, timeout: float = 30, what: str = "") -> dict:
        """Poll the object until `check(obj)` is truthy; on timeout show the object and the operator log."""
        last: list[dict | None] = [None]

        def probe() -> Any:
            last[0] = obj = self.get(kind, name)
            return obj if obj is not None and check(obj) else None

        try:
            return poll(probe, timeout=timeout, what=f"{kind} {name}: {what or check}")
        except AssertionError as exc:
            log = self.operator.tail() if self.operator else ""
            raise AssertionError(f"{exc}\nobject: {yaml.safe_dump(last[0])}\noperator log:\n{log}") from None

    def release_all(self) -> None:
        """Let go of every resource left by a test (its broker is gone by now): unmanage, then delete."""
        for kind, plural in PLURALS.items():
            for item in self.api.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural)["items"]:
                name = item["metadata"]["name"]
                with contextlib.suppress(ApiException):
                    self.annotate(kind, name, {"jsoperator.io/managed": "false"})
                    self.delete(kind, name)
        for kind in PLURALS:
            for name in [i["metadata"]["name"] for i in self.api.list_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURALS[kind])["items"]]:
                self.wait_gone(kind, name)

    def wait_gone(self, kind: str, name: str, timeout: float = 30) -> None:
        poll(lambda: self.get(kind, name) is None, timeout=timeout, what=f"{kind} {name} deleted")

    def wait_condition(self, kind: str, name: str, type_: str, status: str = "True", reason: str | None = None,
                       *, timeout: float = 30) -> dict:
        return self.wait(
            kind, name, lambda obj: has_condition(obj, type_, status, reason), timeout=timeout,
            what=f"condition {type_}={status}" + (f" reason {reason}" if reason else ""),
        )


def condition(obj: dict, type_: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def has_condition(obj: dict, type_: str, status: str = "True", reason: str | None = None) -> bool:
    cond = condition(obj, type_)
    if cond is None or cond.get("status") != status:
        return False
    gen = obj["metadata"].get("generation")
    observed = (obj.get("status") or {}).get("observedGeneration")
    return (reason is None or cond.get("reason") == reason) and (type_ != "Ready" or status != "True" or observed == gen)


def _namespace(envtest: Any, operator: Operator) -> Iterator[Kube]:
    """Our resources in a fresh namespace matching the operator's `--namespace` pattern."""
    namespace = f"{operator.namespace_prefix}{uuid.uuid4().hex[:10]}"
    with envtest.api_client() as client:
        k = Kube(client, namespace, operator)
        k.create_namespace()
        yield k
        k.release_all()


@pytest.fixture
def kube(envtest: Any, operator: Operator) -> Iterator[Kube]:
    """Served by the event-driven operator (drift timer of an hour)."""
    yield from _namespace(envtest, operator)


def _with_flag(envtest: Any, tmp_path_factory: pytest.TempPathFactory, flag: str, prefix: str) -> Iterator[Operator]:
    """An operator run with `flag` (and the short drift interval) serving the namespaces named `prefix*`."""
    log = tmp_path_factory.mktemp(f"jsoperator-{prefix}") / "operator.log"
    yield from _serving(Operator(envtest, log, DRIFT_INTERVAL, prefix, (flag, "--no-cluster-connections")))


@pytest.fixture(scope="session")
def nofinalizer_operator(envtest: Any, crds: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    yield from _with_flag(envtest, tmp_path_factory, "--no-finalizers", NOFINALIZER_NAMESPACE_PREFIX)


@pytest.fixture
def nofinalizer_kube(envtest: Any, nofinalizer_operator: Operator) -> Iterator[Kube]:
    """Served by an operator running with --no-finalizers (and the short drift interval)."""
    yield from _namespace(envtest, nofinalizer_operator)


@pytest.fixture(scope="session")
def read_only_operator(envtest: Any, crds: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    yield from _with_flag(envtest, tmp_path_factory, "--read-only", READ_ONLY_NAMESPACE_PREFIX)


@pytest.fixture
def read_only_kube(envtest: Any, read_only_operator: Operator) -> Iterator[Kube]:
    """Served by an operator running with --read-only (and the short drift interval)."""
    yield from _namespace(envtest, read_only_operator)


@pytest.fixture
def drift_kube(envtest: Any, drift_operator: Operator) -> Iterator[Kube]:
    """Served by the drift operator (drift timer of DRIFT_INTERVAL): drift repair, outages."""
    yield from _namespace(envtest, drift_operator)


# The broker side, seen with a plain nats-py client (independent of the operator's own connection code).


def on_broker(url: str, fn: Callable[[Any], Any]) -> Any:
    """Run `await fn(js)` with a fresh nats-py JetStream context on `url`; returns its result."""
    import nats

    async def main() -> Any:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False)
        try:
            return await fn(nc.jetstream(timeout=3))
        finally:
            await nc.close()

    return asyncio.run(main())


def server_stream(url: str, name: str) -> Any:
    """The stream's StreamInfo on the broker, or None."""
    import nats.js.errors

    async def info(js: Any) -> Any:
        try:
            return await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            return None

    return on_broker(url, info)


def server_consumer(url: str, stream: str, name: str) -> Any:
    import nats.js.errors

    async def info(js: Any) -> Any:
        try:
            return await js.consumer_info(stream, name)
        except nats.js.errors.NotFoundError:
            return None

    return on_broker(url, info)


def publish(url: str, subject: str, count: int) -> list[int]:
    """Publish `count` messages; returns their stream sequences."""

    async def pub(js: Any) -> list[int]:
        return [(await js.publish(subject, f"m{i}".encode())).seq for i in range(count)]

    return on_broker(url, pub)


def fetch(url: str, stream: str, durable: str, count: int = 1, *, ack: bool = True) -> list[tuple[int, int]]:
    """Pull `count` messages from a durable; returns (stream seq, consumer seq) of each."""

    async def pull(js: Any) -> list[tuple[int, int]]:
        sub = await js.pull_subscribe_bind(durable, stream=stream)
        msgs = await sub.fetch(count, timeout=5)
        for msg in msgs:
            if ack:
                await msg.ack_sync()
        return [(m.metadata.sequence.stream, m.metadata.sequence.consumer) for m in msgs]

    return on_broker(url, pull)


def handled(obj: dict, annotation: str) -> bool:
    """True once the operator has handled a version of `obj` carrying `annotation` (kopf's diff base)."""
    import json

    last = obj["metadata"].get("annotations", {}).get("state.jsoperator.io/last-handled-configuration")
    return bool(last) and annotation in (json.loads(last).get("metadata", {}).get("annotations") or {})
