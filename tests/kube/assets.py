"""Where the envtest binaries (kube-apiserver, etcd) come from: found, or built once.

The rules live in tools/envtest/build.sh (``$KUBEBUILDER_ASSETS`` first, else the per-version
cache under ``~/.cache/jetstream-kopf/envtest/``, else a Go build); this module is its Python face.

    python3 -m tests.kube.assets ensure   # find or build; what scripts/test.sh runs
    python3 -m tests.kube.assets find     # print the folder, exit 3 when not built yet

When the build is impossible (no Go toolchain) ``ensure`` only warns, so envtest tests skip,
unless ``JSOPERATOR_REQUIRE_ENVTEST`` is set (CI): then it fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "envtest" / "build.sh"
BINARIES = ("kube-apiserver", "etcd")
REQUIRE_ENV = "JSOPERATOR_REQUIRE_ENVTEST"
_NOT_BUILT = 3  # build.sh --find: binaries not there yet


class AssetsError(RuntimeError):
    """The binaries are missing and could not be built."""


def required() -> bool:
    """True when a missing envtest must fail the run instead of skipping (CI sets the variable)."""
    return os.environ.get(REQUIRE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def find() -> Path | None:
    """The folder holding kube-apiserver and etcd, or None when they have not been built yet."""
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--find"], capture_output=True, text=True, check=False
    )
    if done.returncode == _NOT_BUILT:
        return None
    if done.returncode != 0:
        raise AssetsError(done.stderr.strip() or f"{BUILD_SCRIPT} --find failed")
    return Path(done.stdout.strip())


def ensure() -> Path:
    """Find the binaries or build them (progress goes to stderr); raise AssetsError on failure."""
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
    )
    if done.returncode != 0:
        raise AssetsError(
            f"could not find or build kube-apiserver/etcd ({BUILD_SCRIPT} exited {done.returncode}; "
            "see its messages above)"
        )
    return Path(done.stdout.strip())


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "ensure"
    if command == "find":
        folder = find()
        if folder is None:
            return _NOT_BUILT
    elif command == "ensure":
        try:
            folder = ensure()
        except AssetsError as exc:
            if required():
                print(f"envtest: {exc}", file=sys.stderr)
                return 1
            print(f"envtest: {exc}; tests that need a kube-apiserver will be skipped", file=sys.stderr)
            return 0
        print(f"envtest: kube-apiserver and etcd ready in {folder}", file=sys.stderr)
        return 0
    else:
        print(f"usage: python3 -m tests.kube.assets [ensure|find] (got {command!r})", file=sys.stderr)
        return 2
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
