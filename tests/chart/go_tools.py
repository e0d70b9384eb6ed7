"""Go-built tools for the chart and manifest tests, each built once from the Go module proxy:
Helm's own engine (`helm`), `kustomize`, `actionlint` for the GitHub workflows, the Go `nats` CLI
(natscli) that jsbroker's TLS and nkey tests connect with, and `jwtgen` (tests/broker/jwtgen/, this repository's
own Go program on nats-io/jwt v2, the library `nsc` makes JWTs with) that makes and checks operator-mode JWTs.

    python3 -m tests.chart.go_tools ensure    # find or build all five; what scripts/test.sh runs (~1-2 min cold)

Cached in ~/.cache/jetstream-kopf/<tool>/<version>/ (jwtgen's version is a digest of its sources, so an edit
rebuilds it), or $JETSTREAM_KOPF_HELM / _KUSTOMIZE / _ACTIONLINT / _NATS / _JWTGEN: a binary to use. Without a Go
toolchain `ensure` only warns and those tests skip, unless JSOPERATOR_REQUIRE_ENVTEST is set (CI, which builds
kube-apiserver with the same toolchain): then it fails.
"""

from __future__ import annotations

import hashlib
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
        command, directory = self._go_build()
        done = subprocess.run([go, *command], env=env, cwd=directory, capture_output=True, text=True, timeout=3000)
        if done.returncode != 0:
            raise ToolUnavailable(f"go {' '.join(command)} failed: {done.stderr.strip()[-2000:]}")
        return self.binary

    def _go_build(self) -> tuple[list[str], Path | None]:
        """The go command that builds the tool into its cache directory, and where to run it."""
        return ["install", "-trimpath", f"{self.package}@{self.version}"], None


def _sources_digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if path.suffix == ".go" or path.name in ("go.mod", "go.sum"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class RepositoryTool(Tool):
    """A Go program kept in this repository (`package` is its directory, with its own go.mod and go.sum)."""

    def _go_build(self) -> tuple[list[str], Path | None]:
        return ["build", "-trimpath", "-buildvcs=false", "-o", str(self.binary), "."], Path(self.package)


HELM = Tool("helm", "helm.sh/helm/v3/cmd/helm", "v3.22.0")
KUSTOMIZE = Tool("kustomize", "sigs.k8s.io/kustomize/kustomize/v5", "v5.7.1")
ACTIONLINT = Tool("actionlint", "github.com/rhysd/actionlint/cmd/actionlint", "v1.7.12")
NATS_CLI = Tool("nats", "github.com/nats-io/natscli/nats", "v0.5.1")  # the Go client, for jsbroker's TLS and nkeys
_JWTGEN_SOURCE = Path(__file__).resolve().parents[1] / "broker" / "jwtgen"
JWTGEN = RepositoryTool("jwtgen", str(_JWTGEN_SOURCE), _sources_digest(_JWTGEN_SOURCE))  # nats-io/jwt's encoders
TOOLS = (HELM, KUSTOMIZE, ACTIONLINT, NATS_CLI, JWTGEN)


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
