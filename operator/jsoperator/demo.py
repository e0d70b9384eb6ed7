"""`jsoperator demo`: the product on one machine, from a checkout of the repository.

It starts a jsbroker (or uses `--servers`), a local kube-apiserver + etcd (or uses `--kubeconfig`),
installs the CRDs, runs the operator against both, applies the ORDERS example of deploy/examples/,
publishes sample orders, resets consumer NEW with an annotation, and shows a status table until Ctrl-C
(`--once`: print it when everything is Ready and exit). Everything it started is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import kubernetes.client
import kubernetes.config
import yaml

from . import crdgen

GROUP, VERSION = "jsoperator.io", "v1alpha1"
PLURALS = {"Stream": "streams", "Consumer": "consumers"}
EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "orders.yaml"
NAMESPACE = "jsoperator-demo"
RESET = ("jsoperator.io/reset-to-sequence", "3")
# What the status shows once it has caught up with the 14 published orders and the reset of NEW.
SETTLED = {"orders": ("messages", 14), "new": ("numPending", 8), "dispatch": ("numPending", 4)}


class DemoError(RuntimeError):
    """A step failed; the message says which and what to look at."""


def say(text: str) -> None:
    print(f"==> {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if result := check():
                return result
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)  # polling the thing being waited for


def _connects(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


@contextlib.contextmanager
def process(args: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A child process, stopped (SIGTERM, then SIGKILL) by its process id when the block ends."""
    with log.open("ab") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def broker(servers: str | None, workdir: Path) -> Iterator[str]:
    if servers:
        yield servers
        return
    port = free_port()
    say(f"starting jsbroker on 127.0.0.1:{port} (log {workdir / 'jsbroker.log'})")
    args = [sys.executable, "-m", "jsbroker", "-a", "127.0.0.1", "-p", str(port), "--store_dir", str(workdir / "store")]
    with process(args, workdir / "jsbroker.log"):
        wait_for(lambda: _connects(port), "jsbroker to accept connections")
        yield f"nats://127.0.0.1:{port}"


@contextlib.contextmanager
def control_plane(kubeconfig: str | None) -> Iterator[str]:
    if kubeconfig:
        yield kubeconfig
        return
    from .localcluster import binaries
    from .localcluster.envtest import EnvTest

    say("preparing kube-apiserver and etcd (the first time this is a Go build of several minutes)")
    folder = binaries.build()
    say("starting a local kube-apiserver and etcd")
    with EnvTest(folder) as env:
        yield str(env.kubeconfig)


def install_crds(client: kubernetes.client.ApiClient) -> None:
    api = kubernetes.client.ApiextensionsV1Api(client)
    for doc in yaml.safe_load_all(crdgen.render()):
        try:
            api.create_custom_resource_definition(doc)
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise
            api.patch_custom_resource_definition(doc["metadata"]["name"], doc)

    def established() -> bool:
        for doc in yaml.safe_load_all(crdgen.render()):
            crd = api.read_custom_resource_definition(doc["metadata"]["name"])
            conditions = crd.status.conditions if crd.status is not None else None
            if not any(c.type == "Established" and c.status == "True" for c in conditions or []):
                return False
        return True

    wait_for(established, "the CRDs to be established")


class Resources:
    """The ORDERS resources in the demo namespace."""

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.api = kubernetes.client.CustomObjectsApi(client)
        self.docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]

    def apply(self, core: kubernetes.client.CoreV1Api) -> None:
        with contextlib.suppress(kubernetes.client.ApiException):
            core.create_namespace(kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=NAMESPACE)))
        for doc in self.docs:
            try:
                self.api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURALS[doc["kind"]], doc)
            except kubernetes.client.ApiException as exc:
                if exc.status != 409:
                    raise

    def objects(self) -> list[dict[str, Any]]:
        return [cast(dict[str, Any], self.api.get_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURALS[d["kind"]], d["metadata"]["name"])) for d in self.docs]

    def annotate(self, kind: str, name: str, annotations: dict[str, str]) -> None:
        self.api.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURALS[kind], name,
                                                {"metadata": {"annotations": annotations}})


def ready(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    return status.get("observedGeneration") == obj["metadata"].get("generation") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def counted(obj: dict[str, Any]) -> bool:
    field, value = SETTLED.get(obj["metadata"]["name"], ("", None))
    return not field or (obj.get("status") or {}).get(field) == value


def table(objects: list[dict[str, Any]]) -> str:
    rows = [("KIND", "NAME", "READY", "MESSAGES/PENDING", "ACK PENDING", "LAST RESET")]
    for obj in objects:
        status = obj.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        last = status.get("lastReset") or {}
        count = status.get("messages", status.get("numPending", ""))
        rows.append((obj["kind"], obj["metadata"]["name"], conditions.get("Ready", {}).get("status", "-"),
                     str(count), str(status.get("numAckPending", "")),
                     f"{last['request']} {last['result']}" if last else ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


async def publish_orders(url: str) -> None:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    for i in range(1, 11):
        order = {"id": i, "customer": f"customer-{i % 3}", "items": i % 4 + 1, "amount": 10.0 * i,
                 "time": time.time()}
        await js.publish("ORDERS.received", json.dumps(order).encode())
    for i in range(1, 5):
        await js.publish("ORDERS.processed", json.dumps({"id": i}).encode())
    await nc.close()


def run(args: argparse.Namespace) -> int:
    if not EXAMPLE.exists():
        raise DemoError(f"{EXAMPLE} is missing: run the demo from a checkout of the jetstream-kopf repository")
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        raise DemoError(f"--kubeconfig {args.kubeconfig} is not a file")
    if args.servers:
        first = urllib.parse.urlsplit(args.servers.split(",")[0].strip())
        try:
            socket.create_connection((first.hostname or "127.0.0.1", first.port or 4222), timeout=5).close()
        except OSError as exc:
            raise DemoError(f"--servers {args.servers}: cannot connect ({exc}); start that server or leave "
                            "--servers out to run a jsbroker") from None
    workdir = Path(tempfile.mkdtemp(prefix="jsoperator-demo-"))
    try:
        return _run(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(args: argparse.Namespace, workdir: Path) -> int:
    with broker(args.servers, workdir) as url, control_plane(args.kubeconfig) as kubeconfig:
        client = kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        say("installing the CRDs")
        install_crds(client)
        health = free_port()
        say(f"starting the operator (log {workdir / 'jsoperator.log'})")
        # A short drift interval, so the table's counters follow the publishes (they refresh with it).
        operator = [sys.executable, "-m", "jsoperator", "run", "--servers", url, "--namespace", NAMESPACE,
                    "--drift-interval", "2", "--health-port", str(health), "--metrics-port", "0",
                    "--log-format", "plain"]
        with process(operator, workdir / "jsoperator.log", dict(os.environ, KUBECONFIG=kubeconfig)):
            wait_for(lambda: _connects(health), "the operator's health port")
            resources = Resources(client)
            say(f"applying {EXAMPLE.name} in namespace {NAMESPACE}")
            resources.apply(kubernetes.client.CoreV1Api(client))
            wait_for(lambda: all(ready(o) for o in resources.objects()), "the ORDERS resources to be Ready", 120)
            say("publishing 10 orders to ORDERS.received and 4 to ORDERS.processed")
            asyncio.run(publish_orders(url))
            say(f"annotating consumer new with {RESET[0]}={RESET[1]}")
            resources.annotate("Consumer", "new", dict([RESET]))
            wait_for(lambda: any((o.get("status") or {}).get("lastReset") for o in resources.objects()),
                     "the reset to be recorded")
            if args.once:
                wait_for(lambda: all(ready(o) and counted(o) for o in resources.objects()),
                         "everything Ready and the status counting the orders (refreshed by the drift check)")
                print(table(resources.objects()), flush=True)
                return 0
            say("status every 2 s; Ctrl-C stops everything this demo started")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    print(f"\n{time.strftime('%H:%M:%S')}\n{table(resources.objects())}", flush=True)
                    time.sleep(2)  # the refresh interval of the live table
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the whole product locally: broker, kube-apiserver, operator, ORDERS")
    p.add_argument("--once", action="store_true", help="print the status table once everything is Ready, then exit")
    p.add_argument("--kubeconfig", help="use this cluster instead of starting a local kube-apiserver")
    p.add_argument("--servers", help="use this NATS server instead of starting a jsbroker")


def main(args: argparse.Namespace) -> int:
    try:
        return run(args)
    except DemoError as exc:
        print(f"jsoperator demo: {exc}", file=sys.stderr)
        return 1
