"""A real Kubernetes control plane: etcd + kube-apiserver processes, no kubelet, no Docker.

``EnvTest`` owns both processes and a temp dir (PKI, etcd data, logs, kubeconfig). There is no
controller-manager or scheduler: Pods never run, garbage collection never happens and namespaces
never finish deleting, so tests assert on API objects and use a fresh namespace each.

    with EnvTest() as env:                       # binaries from binaries.find()
        api = kubernetes.client.CoreV1Api(env.api_client())
        ...                                      # or hand env.kubeconfig to kopf / the operator
"""

from __future__ import annotations

import base64
import ctypes
import json
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import kubernetes.client
import kubernetes.config
import yaml

from . import binaries
from .pki import Pki, write_pki

_POLL_INTERVAL = 0.2
_STOP_GRACE = 10.0
_LOG_TAIL_LINES = 40


class EnvTestError(RuntimeError):
    """The control plane could not be started; the message carries the tail of the process logs."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# Resolved up front: the child between fork and exec should only make the call, not load libraries.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: kill it if the test process dies without calling stop().

    SIGKILL, not SIGTERM: terminated together, etcd and kube-apiserver wait on each other's
    connections for many seconds, and their data is disposable anyway.
    """
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} unreadable)"
    return "\n".join(text.splitlines()[-lines:])


class Process:
    """One control-plane process, its output captured in a log file; killed if the Python process dies."""

    def __init__(self, name: str, args: Sequence[str], workdir: Path) -> None:
        self.name = name
        self.log = workdir / f"{name}.log"
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(
                list(args), cwd=workdir, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
            )

    def failure(self, what: str) -> EnvTestError:
        return EnvTestError(f"{self.name} {what}; last lines of {self.log.name}:\n{_tail(self.log)}")

    def wait_until(self, ready: Callable[[], bool], deadline: float) -> None:
        """Poll `ready` until it is true; fail early if the process exits, or at the deadline."""
        while True:
            code = self.popen.poll()
            if code is not None:
                raise self.failure(f"exited with code {code} while starting")
            if ready():
                return
            if time.monotonic() > deadline:
                raise self.failure("did not become ready in time")
            time.sleep(_POLL_INTERVAL)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=_STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def http_ok(url: str, context: ssl.SSLContext | None, expect: Callable[[bytes], bool]) -> bool:
    # Loopback only: never route the probe through an HTTP(S)_PROXY from the environment.
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(url, timeout=2) as response:
            return response.status == 200 and expect(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return False


class EnvTest:
    """etcd + kube-apiserver on free loopback ports; admin access through ``kubeconfig``.

    `assets_dir` is the folder with the binaries (default: ``binaries.find()``);
    `apiserver_flags` are appended to kube-apiserver's command line (e.g. feature gates).
    For a cluster that runs pods (tests/cluster): `address` is where kube-apiserver listens and what it
    advertises as the `kubernetes` Service's endpoint (pods cannot reach loopback), and
    `service_accounts` turns on the ServiceAccount admission plugin, which mounts each pod's token
    but refuses pods until a controller-manager has created their namespace's account.
    """

    def __init__(
        self,
        assets_dir: Path | None = None,
        *,
        start_timeout: float = 90.0,
        apiserver_flags: Sequence[str] = (),
        address: str = "127.0.0.1",
        service_accounts: bool = False,
    ) -> None:
        self._assets_dir = assets_dir
        self._start_timeout = start_timeout
        self._apiserver_flags = list(apiserver_flags)
        self._address = address
        self._service_accounts = service_accounts
        self.workdir: Path | None = None  # temp dir with pki/, etcd-data/ and the *.log files
        self._processes: list[Process] = []
        self.server = ""
        self.kubeconfig = Path()
        self.pki: Pki | None = None  # the PEM files of the last start(), in workdir

    def __enter__(self) -> EnvTest:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        """The etcd and kube-apiserver processes of the last start(), in start order."""
        return [process.popen for process in self._processes]

    def start(self) -> EnvTest:
        folder = self._assets_dir or binaries.find()
        if folder is None:
            raise EnvTestError("kube-apiserver/etcd are not built; run `bash tools/envtest/build.sh` "
                               "or set KUBEBUILDER_ASSETS")
        self._processes = []
        self.workdir = Path(tempfile.mkdtemp(prefix="envtest-"))
        deadline = time.monotonic() + self._start_timeout
        try:
            pki = write_pki(self.workdir / "pki", [self._address])
            self.pki = pki
            etcd_url = self._start_etcd(folder / "etcd", deadline)
            self._start_apiserver(folder / "kube-apiserver", pki, etcd_url, deadline)
            self.kubeconfig = self._write_kubeconfig(pki)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop kube-apiserver then etcd (SIGTERM, SIGKILL after a grace period); remove the temp dir."""
        for process in reversed(self._processes):
            process.stop()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new synchronous client logged in as a cluster admin (group system:masters)."""
        client: kubernetes.client.ApiClient = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig))
        return client

    def _start_etcd(self, binary: Path, deadline: float) -> str:
        assert self.workdir is not None
        client_url = f"http://127.0.0.1:{free_port()}"
        peer_url = f"http://127.0.0.1:{free_port()}"
        etcd = Process("etcd", [
            str(binary),
            "--name=envtest",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=envtest={peer_url}",
            "--unsafe-no-fsync=true",  # test data is disposable; fsync dominates latency otherwise
            "--log-level=warn",
        ], self.workdir)
        self._processes.append(etcd)
        etcd.wait_until(
            lambda: http_ok(f"{client_url}/health", None, lambda body: json.loads(body).get("health") == "true"),
            deadline,
        )
        return client_url

    def _start_apiserver(self, binary: Path, pki: Pki, etcd_url: str, deadline: float) -> None:
        assert self.workdir is not None
        port = free_port()
        self.server = f"https://{self._address}:{port}"
        apiserver = Process("kube-apiserver", [
            str(binary),
            f"--etcd-servers={etcd_url}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.client_ca}",
            f"--secure-port={port}",
            f"--bind-address={self._address}",
            f"--advertise-address={self._address}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--authorization-mode=RBAC",
            *([] if self._service_accounts else ["--disable-admission-plugins=ServiceAccount"]),
            # Logs and exec reach kubelets (if any) as the admin; their serving certs are self-signed.
            f"--kubelet-client-certificate={pki.admin_cert}",
            f"--kubelet-client-key={pki.admin_key}",
            f"--service-account-issuer={self.server}/",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            *self._apiserver_flags,
        ], self.workdir)
        self._processes.append(apiserver)
        context = ssl.create_default_context(cafile=str(pki.serving_ca))
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        apiserver.wait_until(
            lambda: http_ok(f"{self.server}/readyz", context, lambda body: body.strip() == b"ok"),
            deadline,
        )

    def _write_kubeconfig(self, pki: Pki) -> Path:
        assert self.workdir is not None

        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "envtest", "cluster": {
                "server": self.server, "certificate-authority-data": b64(pki.serving_ca),
            }}],
            "users": [{"name": "envtest-admin", "user": {
                "client-certificate-data": b64(pki.admin_cert), "client-key-data": b64(pki.admin_key),
            }}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "envtest-admin"}}],
            "current-context": "envtest",
        }
        path = self.workdir / "kubeconfig"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path
