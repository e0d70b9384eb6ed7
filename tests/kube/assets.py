"""The envtest binaries (kube-apiserver, etcd) for the test suite: found, or built once
(`jsoperator.localcluster.binaries` over tools/envtest/build.sh), and whether CI requires them.

    python3 -m tests.kube.assets ensure   # find or build; what scripts/test.sh runs
    python3 -m tests.kube.assets find     # print the folder, exit 3 when not built yet

When the build is impossible (no Go toolchain) ``ensure`` only warns, so envtest tests skip,
unless ``JSOPERATOR_REQUIRE_ENVTEST`` is set (CI): then it fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jsoperator.localcluster import binaries
from jsoperator.localcluster.binaries import BinariesError as AssetsError

REQUIRE_ENV = "JSOPERATOR_REQUIRE_ENVTEST"
_NOT_BUILT = 3
__all__ = ["AssetsError", "REQUIRE_ENV", "ensure", "find", "required"]


def required() -> bool:
    """True when a missing envtest must fail the run instead of skipping (CI sets the variable)."""
    return os.environ.get(REQUIRE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def find() -> Path | None:
    return binaries.find()


def ensure() -> Path:
    return binaries.build()


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
    raise SystemExit(main(sys.argv[1:]))
