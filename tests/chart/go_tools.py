"""Go-built tools for the chart and manifest tests, each built once from the Go module proxy:
Helm's own engine (`helm`), `kustomize`, `actionlint` for the GitHub workflows, and the Go `nats` CLI
(natscli) that jsbroker's TLS and nkey tests connect with.

    python3 -m tests.chart.go_tools ensure    # find or build all four; what scripts/test.sh runs (~1-2 min cold)

Cached in ~/.cache/jetstream-kopf/<tool>/<version>/ (or $JETSTREAM_KOPF_HELM / _KUSTOMIZE / _ACTIONLINT / _NATS:
a binary to use). Without a Go toolchain `ensure` only warns and those tests skip, unless
JSOPERATOR_REQUIRE_ENVTEST is set (CI, which builds kube-apiserver with the same toolchain): then it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.kube import assets

KUBE_VERSION = "1.34.10"  # what `helm template` assumes (the envtest apiserver's version)
_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jetstream-kopf"


class ToolUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class Tool:
    name: str
    package: str
    version: str

    @property
    def binary(self) -> Path:
        given = os.environ.get(f"JETSTREAM_KOPF_{self.name.upper()}")
        return Path(given) if given else _CACHE / self.name / self.version / self.name

    def find(self) -> Path | None:
        return self.binary if self.binary.is_file() and os.access(self.binary, os.X_OK) else None

    def for_test(self) -> Path:
        """The built tool for a test; not built, the test fails where the environment is required (CI)
        and is skipped elsewhere."""
        import pytest

        found = self.find()
        if found is None:
            reason = f"{self.name} is not built: run `python3 -m tests.chart.go_tools ensure`"
            if assets.required():
                pytest.fail(reason)
            pytest.skip(reason)
        return found

    def ensure(self) -> Path:
        found = self.find()
        if found is not None:
            return found
        go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
        if go is None:
            raise ToolUnavailable(f"no Go toolchain to build {self.name} {self.version}; install Go "
                                  f"or set JETSTREAM_KOPF_{self.name.upper()}")
        print(f"{self.name}: building {self.version} from the Go module proxy into {self.binary.parent}",
              file=sys.stderr)
        env = dict(os.environ, GOBIN=str(self.binary.parent), CGO_ENABLED="0",
                   GOFLAGS=os.environ.get("GOFLAGS", "-p=2"))
        done = subprocess.run([go, "install", "-trimpath", f"{self.package}@{self.version}"], env=env,
                              capture_output=True, text=True, timeout=3000)
        if done.returncode != 0:
            raise ToolUnavailable(f"go install {self.package}@{self.version} failed: {done.stderr.strip()[-2000:]}")
        return self.binary


HELM = Tool("helm", "helm.sh/helm/v3/cmd/helm", "v3.22.0")
KUSTOMIZE = Tool("kustomize", "sigs.k8s.io/kustomize/kustomize/v5", "v5.7.1")
ACTIONLINT = Tool("actionlint", "github.com/rhysd/actionlint/cmd/actionlint", "v1.7.12")
NATS_CLI = Tool("nats", "github.com/nats-io/natscli/nats", "v0.5.1")  # the Go client, for jsbroker's TLS and nkeys
TOOLS = (HELM, KUSTOMIZE, ACTIONLINT, NATS_CLI)


def main(argv: list[str]) -> int:
    for tool in TOOLS:
        try:
            print(f"{tool.name}: {tool.ensure()}", file=sys.stderr)
        except ToolUnavailable as exc:
            if assets.required():
                print(f"{tool.name}: {exc}", file=sys.stderr)
                return 1
            print(f"{tool.name}: {exc}; the tests that need it will be skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
