"""Helm's own engine for the chart tests: a `helm` binary built once from the Go module proxy.

    python3 -m tests.chart.helm ensure    # find or build; what scripts/test.sh runs (about a minute)

Cached in ~/.cache/jetstream-kopf/helm/<version>/ (or $JETSTREAM_KOPF_HELM: a helm binary to use).
Without a Go toolchain `ensure` only warns and the chart tests skip, unless JSOPERATOR_REQUIRE_ENVTEST
is set (CI, which builds kube-apiserver with the same toolchain): then it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.kube import assets

VERSION = "v3.22.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jetstream-kopf" / "helm" / VERSION
KUBE_VERSION = "1.34.10"  # what `helm template` assumes (the envtest apiserver's version)


class HelmUnavailable(RuntimeError):
    pass


def find() -> Path | None:
    given = os.environ.get("JETSTREAM_KOPF_HELM")
    if given:
        return Path(given)
    binary = CACHE / "helm"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def ensure() -> Path:
    found = find()
    if found is not None:
        return found
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise HelmUnavailable(f"no Go toolchain to build helm {VERSION}; install Go or set JETSTREAM_KOPF_HELM")
    print(f"helm: building helm {VERSION} from the Go module proxy into {CACHE}", file=sys.stderr)
    env = dict(os.environ, GOBIN=str(CACHE), CGO_ENABLED="0", GOFLAGS=os.environ.get("GOFLAGS", "-p=2"))
    done = subprocess.run([go, "install", "-trimpath", f"helm.sh/helm/v3/cmd/helm@{VERSION}"], env=env,
                          capture_output=True, text=True, timeout=3000)
    if done.returncode != 0:
        raise HelmUnavailable(f"go install helm {VERSION} failed: {done.stderr.strip()[-2000:]}")
    return CACHE / "helm"


def main(argv: list[str]) -> int:
    try:
        print(f"helm: {ensure()}", file=sys.stderr)
    except HelmUnavailable as exc:
        if assets.required():
            print(f"helm: {exc}", file=sys.stderr)
            return 1
        print(f"helm: {exc}; the chart tests will be skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
