"""The Argo CD health checks (Lua) for every jsoperator.io kind, run in a real Lua interpreter (lupa) over
their health_test.yaml cases, as Argo CD's own test harness does; argocd-cm.yaml carries the same Lua;
the Argo CD and Flux examples point at folders that exist."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ARGOCD = ROOT / "deploy" / "argocd"
CHECKS = ARGOCD / "resource_customizations" / "jsoperator.io"


def lua_value(runtime: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return runtime.table_from({k: lua_value(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([lua_value(runtime, v) for v in value])
    return value


def health(script: str, obj: dict[str, Any]) -> dict[str, Any]:
    runtime = lupa.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = lua_value(runtime, obj)
    return dict(runtime.execute(script))


def cases() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for kind in sorted(p.name for p in CHECKS.iterdir()):
        for case in yaml.safe_load((CHECKS / kind / "health_test.yaml").read_text())["tests"]:
            found.append((kind, case))
    return found


@pytest.mark.parametrize("kind,case", cases(), ids=lambda v: v if isinstance(v, str) else v["inputPath"])
def test_health_check_cases(kind, case):
    folder = CHECKS / kind
    obj = yaml.safe_load((folder / case["inputPath"]).read_text())
    assert health((folder / "health.lua").read_text(), obj) == case["healthStatus"]


def test_every_kind_has_checks_and_argocd_cm_carries_the_same_lua():
    kinds = ["ClusterJetStreamConnection", "Consumer", "JetStreamConnection", "KeyValue", "ObjectStore", "Stream"]
    assert sorted(p.name for p in CHECKS.iterdir()) == kinds
    script = (CHECKS / "Stream" / "health.lua").read_text()
    data = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())["data"]
    assert data == {f"resource.customizations.health.jsoperator.io_{kind}": script for kind in kinds}


def test_gitops_examples_point_at_folders_of_this_repository():
    paths = [d["spec"]["source"]["path"] for app in sorted(ARGOCD.glob("application*.yaml"))
             for d in yaml.safe_load_all(app.read_text())]
    paths += [d["spec"]["path"] for d in yaml.safe_load_all((ROOT / "deploy" / "flux" / "jetstream-kopf.yaml").read_text())
              if d["kind"] == "Kustomization"]
    assert paths and all((ROOT / p).is_dir() for p in paths), paths
