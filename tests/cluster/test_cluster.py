"""The one-node cluster itself: pods get volumes from the provisioner, names from CoreDNS, Services
from kube-proxy; stopping it leaves nothing behind, and a start after a crash sweeps what it left."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from tests.cluster import host, images
from tests.cluster.cluster import BRIDGE, WORKDIR, Cluster
from tests.cluster.e2e import STARTUP, Kube
from tests.polling import poll

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("image"), pytest.mark.timeout(600)]


def _pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": images.BUSYBOX, "imagePullPolicy": "Never",
                "command": ["sh", "-c", script], **spec.pop("container", {})}], **spec}}


def _finished(kube: Kube, namespace: str, name: str) -> str:
    """The pod's log once it has succeeded (fails with the log otherwise)."""
    phase = poll(lambda: (lambda p: p if p in ("Succeeded", "Failed") else None)(
        kube.core.read_namespaced_pod(name, namespace).status.phase), timeout=STARTUP, what=f"pod {name} to finish")
    log = kube.core.read_namespaced_pod_log(name, namespace)
    assert phase == "Succeeded", log
    return log


@pytest.fixture
def kube(cluster: Cluster) -> tuple[Kube, str]:
    kube = Kube(cluster.kubeconfig)
    namespace = f"smoke-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    poll(lambda: kube.core.list_namespaced_service_account(namespace).items, timeout=60,
          what="the namespace's default service account")
    return kube, namespace


def test_pods_get_volumes_dns_and_services(kube: tuple[Kube, str]) -> None:
    k, ns = kube
    volume = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
              "container": {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}}
    k.create(ns, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
                  "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}})
    # A web server whose page lives on the claim, behind a Service.
    k.create(ns, _pod("web", "echo page-$(hostname) > /data/index.html && exec httpd -f -p 8080 -h /data",
                      **volume),
             {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
              "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    poll(lambda: k.ready_pod(ns, "app=web"), timeout=STARTUP, what="the web pod Ready")
    claim = k.core.read_namespaced_persistent_volume_claim("data", ns)
    assert claim.status.phase == "Bound"
    assert claim.spec.storage_class_name == "standard"

    # Another pod finds it by its Service's DNS names (CoreDNS) and reaches it (kube-proxy).
    service_ip = k.core.read_namespaced_service("web", ns).spec.cluster_ip
    k.create(ns, _pod("client", f"nslookup web.{ns}.svc.cluster.local && wget -qO- http://web.{ns}.svc/ "
                                "&& wget -qO- http://web/"))
    log = _finished(k, ns, "client")
    assert f"Address: {service_ip}" in log
    assert log.splitlines()[-2:] == ["page-web", "page-web"]

    # The data outlives the pod: a new pod on the same claim reads it.
    k.core.delete_namespaced_pod("web", ns, grace_period_seconds=0)
    poll(lambda: not k.pods(ns, "app=web"), timeout=STARTUP, what="the web pod gone")
    k.create(ns, _pod("reader", "cat /data/index.html", **volume))
    assert _finished(k, ns, "reader").strip() == "page-web"


def _leftovers() -> dict[str, Any]:
    """Every trace the cluster could leave on the host (all empty after a clean stop)."""
    rules = []
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle", "raw"):
            listed = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True).stdout
            rules += [f"{tool} {table} {line}" for line in listed.splitlines()
                      if "KUBE-" in line or host.MARK in line]
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if line.split()[4].startswith(str(WORKDIR))]
    cgroups = [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{host.CGROUP}")] + \
        [str(p) for p in Path("/sys/fs/cgroup").glob(host.CGROUP)]
    bridge = subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0
    return {"iptables": rules, "mounts": mounts, "cgroups": cgroups, "bridge": bridge, "folder": WORKDIR.exists()}


def _tunables() -> dict[str, str]:
    return {name: (Path("/proc/sys") / name).read_text().strip() for name in host.TUNABLES
            if (Path("/proc/sys") / name).exists()}


def test_a_crash_is_swept_by_the_next_start_and_a_stop_leaves_nothing(cluster: Cluster,
                                                                       kube: tuple[Kube, str]) -> None:
    k, ns = kube
    k.create(ns, _pod("sleeper", "exec sleep 3600"))
    poll(lambda: k.ready_pod(ns, "app=sleeper"), timeout=STARTUP, what="the sleeper pod Ready")
    inspected = json.loads(cluster.crictl("inspect", cluster.crictl("ps", "--quiet", "--name", "main",
                                                                      "--label", f"io.kubernetes.pod.namespace={ns}").stdout.strip()).stdout)
    sleeper = inspected["info"]["pid"]
    before = json.loads((WORKDIR / "kernel-tunables.json").read_text())

    cluster.kill()  # a crash: the pod's processes survive it (containerd's shims are daemons)
    assert os.path.exists(f"/proc/{sleeper}")
    cluster.start()
    assert not os.path.exists(f"/proc/{sleeper}")
    assert _leftovers()["bridge"]  # the new cluster's

    cluster.stop()
    try:
        assert _leftovers() == {"iptables": [], "mounts": [], "cgroups": [], "bridge": False, "folder": False}
        assert _tunables() == before
    finally:
        cluster.start()  # for the tests that follow
