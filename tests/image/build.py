"""Build the project's image the way the tests (and the real-cluster harness) need it: offline.

Containers here do not trust this machine's TLS certificates, so `pip` inside `docker build` cannot reach
the package index. The wheels are built on the host into docker/wheelhouse/ (git-ignored) with the
interpreter running the tests (CPython 3.11 on glibc, as in the Debian base), and the Dockerfile installs
from there with OFFLINE=1. A user's `docker build .` takes the ordinary path (PyPI).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.image import base_image
from tests.image.docker_engine import docker

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = ROOT / "docker" / "wheelhouse"
TAG = "jetstream-kopf:dev"


def wheelhouse() -> Path:
    """The project's wheel and every dependency's, for this interpreter and platform."""
    for stale in WHEELHOUSE.glob("jetstream_kopf-*"):
        stale.unlink()  # same version, other content: pip would take either
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                           "--wheel-dir", str(WHEELHOUSE), str(ROOT)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"pip wheel failed: {done.stderr.strip()[-2000:]}")
    return WHEELHOUSE


def build(tag: str = TAG) -> str:
    """Build the image from the working tree on the local base image; returns its tag."""
    base = base_image.ensure()
    wheelhouse()
    docker("build", "--quiet", "--build-arg", f"BASE_IMAGE={base}", "--build-arg", "OFFLINE=1",
           "--tag", tag, str(ROOT), timeout=1200)
    return tag


if __name__ == "__main__":
    print(build(*sys.argv[1:2]))
