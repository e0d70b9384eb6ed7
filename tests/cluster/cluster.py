"""A real one-node Kubernetes cluster from local processes, the way hack/local-up-cluster.sh runs one.

    with Cluster(binaries, envtest_binaries) as cluster:
        cluster.load_docker_image("jetstream-kopf:dev")   # `docker save` | `ctr images import`
        ... cluster.kubeconfig ...                        # admin kubeconfig; pods reach the host at NODE_IP

Processes: etcd + kube-apiserver (jsoperator.localcluster.EnvTest, listening on the node address
with ServiceAccount admission), containerd (Debian's, its own root/state/socket, CRI with
`restrict_oom_score_adj`: this machine lacks CAP_SYS_RESOURCE), kubelet, kube-controller-manager,
kube-scheduler, kube-proxy (iptables), CoreDNS (on the host, behind the kube-dns Service) and
local-path-provisioner (the default StorageClass `standard`, as on kind). Pods sit on a bridge
(CNI bridge + host-local from Debian's containernetworking-plugins).

One cluster per machine: fixed names (bridge, cgroup, iptables marks) let `host.sweep` clean up
after a crashed run, and a lock file keeps a second session out while one runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import kubernetes.client
import kubernetes.config
import kubernetes.utils
import yaml
from kubernetes.client.rest import ApiException

from jsoperator.localcluster.envtest import EnvTest, Process, free_port, http_ok
from tests.cluster import host, images

WORKDIR = Path(os.environ.get("JSOPERATOR_CLUSTER_DIR", "/tmp/jetstream-kopf-cluster"))
LOCK = Path("/tmp/jetstream-kopf-cluster.lock")
NODE_NAME = "jetstream-kopf-node"
BRIDGE = "jskopf0"
POD_CIDR = "10.244.0.0/24"
NODE_IP = "10.244.0.1"  # the bridge's address: the node's InternalIP, where pods reach host processes
DNS_IP = "10.0.0.10"  # in envtest's service range 10.0.0.0/24
CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
STORAGE_NAMESPACE = "local-path-storage"
STORAGE_CLASS = "standard"  # kind's name for its default class, so charts behave the same on both


class ClusterError(RuntimeError):
    """The cluster could not start; the message names the part and carries its log."""


class Cluster:
    """Start with `start()` (or `with`); everything is stopped and put back by `stop()`."""

    def __init__(self, binaries: Path, envtest_binaries: Path, *, workdir: Path = WORKDIR,
                 start_timeout: float = 180) -> None:
        self.binaries = binaries
        self.workdir = workdir
        self.kubeconfig = Path()
        self._start_timeout = start_timeout
        self._envtest = EnvTest(envtest_binaries, address=NODE_IP, service_accounts=True,
                                start_timeout=start_timeout,
                                apiserver_flags=["--kubelet-preferred-address-types=InternalIP"])
        self._processes: dict[str, Process] = {}
        self._lock: int | None = None
        self.socket = workdir / "containerd" / "state" / "containerd.sock"
        self._tunables = workdir / "kernel-tunables.json"

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # Life cycle ------------------------------------------------------------------------------------

    def start(self) -> Cluster:
        self._take_lock()
        try:
            self._sweep()
            deadline = time.monotonic() + self._start_timeout
            self.workdir.mkdir(parents=True)
            host.save_tunables(self._tunables)
            host.create_bridge(BRIDGE, f"{NODE_IP}/24")
            host.allow_forwarding(BRIDGE)
            host.create_cgroup()
            self._envtest.start()
            # A fixed path, so a restarted cluster is found where the last one was.
            self.kubeconfig = self.workdir / "kubeconfig"
            shutil.copyfile(self._envtest.kubeconfig, self.kubeconfig)
            self._start_containerd(deadline)
            self._import_own_images()
            self._bootstrap_objects()
            self._start_control_plane()
            self._start_node()
            self._start_addons()
            self._wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the kubelet, remove every pod sandbox through the CRI (network and mounts go with it),
        stop the other processes, then sweep the host."""
        kubelet = self._processes.pop("kubelet", None)
        if kubelet is not None:
            kubelet.stop()
        if "containerd" in self._processes:
            self.crictl("rmp", "--all", "--force", check=False, timeout=120)
        for process in reversed(list(self._processes.values())):
            process.stop()
        self._processes.clear()
        self._envtest.stop()
        self._sweep()
        self._release_lock()

    def kill(self) -> None:
        """SIGKILL every process, as a crash would: pods keep running and nothing is cleaned up until
        the next start() (tests use this to check that it does)."""
        for popen in [*(p.popen for p in self._processes.values()), *self._envtest.processes]:
            popen.kill()
            popen.wait()
        self._processes.clear()
        self._envtest.stop()
        self._release_lock()

    def _take_lock(self, timeout: float = 900) -> None:
        """One cluster per machine; a second session waits for the first to finish."""
        fd = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock = fd
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise ClusterError(f"another test session holds {LOCK} (a cluster is running); "
                                       "wait for it or stop it") from None
                time.sleep(1)  # the other session's cluster stops when its tests end

    def _release_lock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def _sweep(self) -> None:
        host.sweep(self.workdir, BRIDGE, self.socket, self._tunables)

    # Access ----------------------------------------------------------------------------------------

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new synchronous client logged in as a cluster admin."""
        return self._envtest.api_client()

    def crictl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        endpoint = f"unix://{self.socket}"
        return self._run(str(self.binaries / "crictl"), "--runtime-endpoint", endpoint, "--image-endpoint",
                         endpoint, *args, check=check, timeout=timeout)

    def load_image(self, archive: Path) -> None:
        """Import a `docker save` archive into the node's containerd (pods use it without pulling)."""
        self._run("ctr", "--address", str(self.socket), "--namespace", "k8s.io", "images", "import",
                  "--no-unpack", str(archive), timeout=300)

    def load_docker_image(self, tag: str) -> None:
        """Stream an image from the local Docker engine into the node (what `kind load docker-image` does)."""
        archive = self.workdir / "images" / (tag.replace("/", "_").replace(":", "_") + ".tar")
        archive.parent.mkdir(exist_ok=True)
        self._run("docker", "save", "--output", str(archive), tag, timeout=300)
        try:
            self.load_image(archive)
        finally:
            archive.unlink()

    def log(self, name: str) -> Path:
        """The log file of one cluster process (kubelet, containerd, kube-proxy, ...)."""
        return self.workdir / f"{name}.log"

    @staticmethod
    def _run(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise ClusterError(f"{cmd[0]} {' '.join(cmd[1:3])}... exited {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}")
        return done

    # Processes -------------------------------------------------------------------------------------

    def _spawn(self, name: str, *args: str) -> Process:
        # From this (the main) thread only: the parent-death signal follows the thread that forked.
        process = Process(name, [str(a) for a in args], self.workdir)
        self._processes[name] = process
        return process

    def _write(self, name: str, content: object) -> Path:
        path = self.workdir / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
        return path

    def _start_containerd(self, deadline: float) -> None:
        state = self.workdir / "containerd"
        cni = self.workdir / "cni"
        cni.mkdir()
        (cni / "10-jetstream-kopf.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0",
            "name": "jetstream-kopf",
            "plugins": [{
                "type": "bridge", "bridge": BRIDGE, "isGateway": True, "hairpinMode": True, "ipMasq": False,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                         "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.workdir / "cni-ipam")},
            }],
        }))
        config = self._write("containerd.toml", f"""\
version = 2
root = "{state}/root"
state = "{state}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{self.socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{state}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE}"
  restrict_oom_score_adj = true      # no CAP_SYS_RESOURCE here: runc fails lowering oom_score_adj
  netns_mounts_under_state_dir = true
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{state}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni}"
""")
        containerd = self._spawn("containerd", shutil.which("containerd") or "containerd", "--config", config)
        containerd.wait_until(lambda: self._run("ctr", "--address", str(self.socket), "version",
                                                check=False).returncode == 0, deadline)

    def _import_own_images(self) -> None:
        folder = self.workdir / "images"
        folder.mkdir()
        busybox = Path(shutil.which("busybox") or "/bin/busybox")
        applets = self._run(str(busybox), "--list").stdout.split()
        for archive in (images.pause(self.binaries / "pause", folder / "pause.tar"),
                        images.busybox(busybox, applets, folder / "busybox.tar")):
            self.load_image(archive)
            archive.unlink()

    def _bootstrap_objects(self) -> None:
        """Objects a cluster's add-on manifests would create: DNS Service, storage class and config."""
        coredns_port = self._coredns_port = free_port()
        local_path = self.workdir / "volumes"
        local_path.mkdir()
        objects: list[dict] = [
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
             "spec": {"clusterIP": DNS_IP, "ports": [
                 {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": coredns_port},
                 {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": coredns_port}]}},
            # No selector: CoreDNS runs on the host, so its endpoint is the node address.
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {"name": "kube-dns-host", "namespace": "kube-system",
                          "labels": {"kubernetes.io/service-name": "kube-dns"}},
             "addressType": "IPv4",
             "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}],
             "ports": [{"name": "dns", "port": coredns_port, "protocol": "UDP"},
                       {"name": "dns-tcp", "port": coredns_port, "protocol": "TCP"}]},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": STORAGE_NAMESPACE}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "local-path-provisioner", "namespace": STORAGE_NAMESPACE}},
            # The provisioner's helper pods run these scripts (mounted from the ConfigMap) on the node.
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "local-path-config", "namespace": STORAGE_NAMESPACE},
             "data": {"setup": 'set -eu\nmkdir -p "$VOL_DIR"\nchmod 0777 "$VOL_DIR"\n',
                      "teardown": 'set -eu\nrm -rf "$VOL_DIR"\n'}},
            {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": STORAGE_CLASS,
                          "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
             "provisioner": "rancher.io/local-path", "reclaimPolicy": "Delete",
             "volumeBindingMode": "WaitForFirstConsumer"},
        ]
        self._write("local-path.json", json.dumps(
            {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(local_path)]}]}))
        self._write("helper-pod.yaml", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-pod"},
            "spec": {"containers": [{"name": "helper", "image": images.BUSYBOX, "imagePullPolicy": "Never"}]},
        })
        with self.api_client() as client:
            for obj in objects:
                kubernetes.utils.create_from_dict(client, obj)

    def _start_control_plane(self) -> None:
        pki = self._envtest.pki
        assert pki is not None
        common = (f"--kubeconfig={self.kubeconfig}", "--leader-elect=false", "--secure-port=0")
        self._spawn("kube-controller-manager", self.binaries / "kube-controller-manager", *common,
                    f"--service-account-private-key-file={pki.service_account_key}",
                    f"--root-ca-file={pki.serving_ca}",  # published to every namespace as kube-root-ca.crt
                    "--use-service-account-credentials=false")
        self._spawn("kube-scheduler", self.binaries / "kube-scheduler", *common)

    def _start_node(self) -> None:
        pki = self._envtest.pki
        assert pki is not None
        self._kubelet_health = free_port()
        config = self._write("kubelet.yaml", {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self._kubelet_health,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(pki.client_ca)}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{host.CGROUP}",
            "failSwapOn": False,
            "failCgroupV1": False,
            "enforceNodeAllocatable": [],
            "localStorageCapacityIsolation": False,
            "clusterDNS": [DNS_IP],
            "clusterDomain": "cluster.local",
            "podLogsDir": str(self.workdir / "pod-logs"),
            # Imported images cannot be pulled again: never collect them, never evict for a busy disk.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "volumePluginDir": str(self.workdir / "volume-plugins"),
        })
        self._spawn("kubelet", self.binaries / "kubelet", f"--config={config}",
                    f"--kubeconfig={self.kubeconfig}", f"--root-dir={self.workdir / 'kubelet'}",
                    f"--cert-dir={self.workdir / 'kubelet-certs'}", f"--hostname-override={NODE_NAME}",
                    f"--node-ip={NODE_IP}")
        self._proxy_health = free_port()
        config = self._write("kube-proxy.yaml", {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "hostnameOverride": NODE_NAME,
            "bindAddress": NODE_IP,
            "clusterCIDR": POD_CIDR,
            "healthzBindAddress": f"127.0.0.1:{self._proxy_health}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            # Leave the host's conntrack and localnet settings alone.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            "iptables": {"localhostNodePorts": False},
        })
        self._spawn("kube-proxy", self.binaries / "kube-proxy", f"--config={config}")

    def _start_addons(self) -> None:
        self._dns_ready = free_port()
        corefile = self._write("Corefile", f"""\
.:{self._coredns_port} {{
    bind {NODE_IP}
    errors
    ready 127.0.0.1:{self._dns_ready}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig} envtest
        pods insecure
    }}
    cache 5
    loadbalance
}}
""")
        self._spawn("coredns", self.binaries / "coredns", "-conf", corefile)
        self._spawn("local-path-provisioner", self.binaries / "local-path-provisioner", "start",
                    f"--kubeconfig={self.kubeconfig}", f"--config={self.workdir / 'local-path.json'}",
                    f"--namespace={STORAGE_NAMESPACE}", f"--helper-image={images.BUSYBOX}",
                    f"--helper-pod-file={self.workdir / 'helper-pod.yaml'}",
                    "--service-account-name=local-path-provisioner", "--configmap-name=local-path-config")

    # Readiness -------------------------------------------------------------------------------------

    def _wait_ready(self, deadline: float) -> None:
        p = self._processes
        p["coredns"].wait_until(lambda: http_ok(f"http://127.0.0.1:{self._dns_ready}/ready", None, bool), deadline)
        p["kube-proxy"].wait_until(
            lambda: http_ok(f"http://127.0.0.1:{self._proxy_health}/healthz", None, bool), deadline)
        with self.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            p["kubelet"].wait_until(lambda: self._node_ready(core), deadline)
            # The controller-manager creates every namespace's default account; pods wait for it.
            p["kube-controller-manager"].wait_until(lambda: self._exists(
                lambda: core.read_namespaced_service_account("default", "default")), deadline)
        for name in ("kube-scheduler", "local-path-provisioner", "containerd"):
            p[name].wait_until(lambda: True, deadline)  # still running

    @staticmethod
    def _node_ready(core: kubernetes.client.CoreV1Api) -> bool:
        try:
            node = core.read_node(NODE_NAME)
        except ApiException:
            return False
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    @staticmethod
    def _exists(read: object) -> bool:
        try:
            read()  # type: ignore[operator]
            return True
        except ApiException:
            return False
