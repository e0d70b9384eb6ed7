"""A Debian base image with Python made locally, for machines that reach no container registry.

`debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm` from the Debian
mirror this machine's own apt sources name, then `docker import`. Built once per tag (about a minute);
afterwards the engine's image store is the cache.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.image.docker_engine import docker, sbin_env, which

TAG = "jetstream-kopf/base:bookworm-python3"
SUITE = "bookworm"
PACKAGES = "python3,python3-venv,ca-certificates"
SOURCES = (Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*")))


def debian_mirror() -> str:
    """The first Debian mirror in the apt sources (one-line `deb URL SUITE` or deb822 `URIs:`)."""
    for path in SOURCES:
        if not path.is_file() or path.suffix not in ("", ".list", ".sources"):
            continue
        text = path.read_text(errors="replace")
        for url in re.findall(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+" + SUITE + r"\s", text, re.M) + \
                re.findall(r"^URIs:\s*(\S+)", text, re.M):
            if url.rstrip("/").endswith("/debian"):
                return url
    raise RuntimeError(f"no Debian mirror for {SUITE} in the apt sources ({', '.join(map(str, SOURCES))})")


def exists(tag: str) -> bool:
    return docker("image", "inspect", tag, check=False).returncode == 0


def ensure(tag: str = TAG) -> str:
    """The tag of a local Debian + python3 base image, built when missing."""
    if exists(tag):
        return tag
    root = Path(tempfile.mkdtemp(prefix="jetstream-kopf-base-"))
    try:
        done = subprocess.run([which("debootstrap") or "debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(root),
                               debian_mirror()], capture_output=True, text=True, timeout=900, env=sbin_env())
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        docker("import", "-", tag, stdin=tar.stdout)
        tar.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tag
