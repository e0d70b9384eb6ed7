"""What the one-node cluster needs on the host: found, or built and installed once.

- binaries: kube-apiserver + etcd (tools/envtest/build.sh) and kubelet, kube-controller-manager,
  kube-scheduler, kube-proxy, CoreDNS, crictl, local-path-provisioner, pause (tools/cluster/build.sh),
  Go builds cached under ~/.cache/jetstream-kopf/;
- Debian packages: containerd, runc, the CNI plugins, iptables, busybox-static (installed with apt).

    python3 -m tests.cluster.assets ensure   # what scripts/test.sh runs
    python3 -m tests.cluster.assets find     # print the binaries' folder, exit 3 when not built

Without root, Linux or a Go toolchain `ensure` only warns and the cluster tests skip, unless
JSOPERATOR_REQUIRE_CLUSTER is set (CI): then it fails, and so do the tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.kube import assets as envtest_assets

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "cluster" / "build.sh"
REQUIRE_ENV = "JSOPERATOR_REQUIRE_CLUSTER"
# Debian package -> a file it installs.
PACKAGES = {
    "containerd": "/usr/bin/containerd",
    "runc": "/usr/sbin/runc",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "iptables": "/usr/sbin/iptables",
    "busybox-static": "/bin/busybox",
}
_NOT_BUILT = 3


class AssetsError(RuntimeError):
    """A prerequisite is missing and could not be built or installed; the message says what to do."""


def required() -> bool:
    """True when missing prerequisites must fail the run instead of skipping (CI sets the variable)."""
    return os.environ.get(REQUIRE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def find() -> Path | None:
    """The folder holding the cluster's binaries, or None when they have not been built yet."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT), "--find"], capture_output=True, text=True, check=False)
    if done.returncode == _NOT_BUILT:
        return None
    if done.returncode != 0:
        raise AssetsError(done.stderr.strip() or f"{BUILD_SCRIPT} --find failed")
    return Path(done.stdout.strip())


def missing_packages() -> list[str]:
    return [package for package, path in PACKAGES.items() if not Path(path).exists()]


def unavailable() -> str | None:
    """Why the cluster cannot start here, or None when everything is in place."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "the one-node cluster needs Linux and root (bridges, iptables, mounts, cgroups)"
    if missing_packages():
        return (f"Debian packages {', '.join(missing_packages())} are missing: run "
                "`python3 -m tests.cluster.assets ensure`")
    if envtest_assets.find() is None or find() is None:
        return "the cluster's binaries are not built: run `python3 -m tests.cluster.assets ensure` (needs Go)"
    return None


def _install_packages() -> None:
    missing = missing_packages()
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise AssetsError(f"install {', '.join(missing)} (Debian/Ubuntu package names) with your package manager")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
        if done.returncode != 0:
            raise AssetsError(f"{' '.join(cmd)} failed: {done.stderr.strip()[-1000:]}")


def ensure() -> Path:
    """Install the packages and build the binaries when missing (progress on stderr)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        raise AssetsError("the one-node cluster needs Linux and root")
    _install_packages()
    envtest_assets.ensure()
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise AssetsError(f"could not build the cluster's binaries ({BUILD_SCRIPT} exited {done.returncode}; "
                          "see its messages above)")
    return Path(done.stdout.strip())


def main(argv: list[str]) -> int:
    return envtest_assets.run_command(argv, "tests.cluster.assets", find, lambda: envtest_assets.report_ensure(
        "cluster", ensure, (AssetsError, envtest_assets.AssetsError), required(), "binaries ready in",
        "the tests on a real cluster will be skipped"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
