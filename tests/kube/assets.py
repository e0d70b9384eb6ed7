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
from collections.abc import Callable
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


def report_ensure(label: str, build: Callable[[], Path], failures: tuple[type[Exception], ...], strict: bool,
                  ready: str, skipped: str) -> int:
    """The `ensure` command of an assets module: build, say so on stderr. A failure is exit 1 when `strict`
    (CI requires the tests), otherwise a warning that the tests needing it are skipped."""
    try:
        folder = build()
    except failures as exc:
        if strict:
            print(f"{label}: {exc}", file=sys.stderr)
            return 1
        print(f"{label}: {exc}; {skipped}", file=sys.stderr)
        return 0
    print(f"{label}: {ready} {folder}", file=sys.stderr)
    return 0


def run_command(argv: list[str], module: str, find: Callable[[], Path | None], ensure: Callable[[], int]) -> int:
    """`python3 -m <module> [ensure|find]`: find prints the folder (exit 3 when not built), ensure builds."""
    command = argv[0] if argv else "ensure"
    if command == "find":
        folder = find()
        if folder is None:
            return _NOT_BUILT
        print(folder)
        return 0
    if command == "ensure":
        return ensure()
    print(f"usage: python3 -m {module} [ensure|find] (got {command!r})", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    return run_command(argv, "tests.kube.assets", find, lambda: report_ensure(
        "envtest", ensure, (AssetsError,), required(), "kube-apiserver and etcd ready in",
        "tests that need a kube-apiserver will be skipped"))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
