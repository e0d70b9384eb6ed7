"""Where kube-apiserver and etcd for the local control plane are: `$KUBEBUILDER_ASSETS`, else the
per-version cache that tools/envtest/build.sh fills (~/.cache/jetstream-kopf/envtest/<k8s-version>/).

In a source checkout `build()` runs that script (a Go build, 3-25 min once); an installed package can
only find binaries built before.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "envtest" / "build.sh"
CACHE = Path(os.environ.get("JSOPERATOR_ENVTEST_CACHE", Path.home() / ".cache" / "jetstream-kopf" / "envtest"))
NAMES = ("kube-apiserver", "etcd")
_NOT_BUILT = 3  # build.sh --find: binaries not there yet


class BinariesError(RuntimeError):
    """The binaries are missing and could not be found or built; the message says what to do."""


def _complete(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in NAMES)


def find() -> Path | None:
    """The folder holding kube-apiserver and etcd, or None when they have not been built yet."""
    if BUILD_SCRIPT.exists():
        done = subprocess.run(["bash", str(BUILD_SCRIPT), "--find"], capture_output=True, text=True, check=False)
        if done.returncode == _NOT_BUILT:
            return None
        if done.returncode != 0:
            raise BinariesError(done.stderr.strip() or f"{BUILD_SCRIPT} --find failed")
        return Path(done.stdout.strip())
    given = os.environ.get("KUBEBUILDER_ASSETS")
    if given:
        return Path(given) if _complete(Path(given)) else None
    built = sorted((d for d in CACHE.glob("v1.*") if _complete(d)), reverse=True)
    return built[0] if built else None


def build() -> Path:
    """Find the binaries or build them (progress on stderr)."""
    if not BUILD_SCRIPT.exists():
        found = find()
        if found is None:
            raise BinariesError(
                "kube-apiserver and etcd are not built: run `bash tools/envtest/build.sh` in a checkout of "
                "jetstream-kopf (needs Go), or set KUBEBUILDER_ASSETS to a folder holding both")
        return found
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise BinariesError(f"could not find or build kube-apiserver/etcd ({BUILD_SCRIPT} exited "
                            f"{done.returncode}; see its messages above)")
    return Path(done.stdout.strip())
