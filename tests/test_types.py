"""The type gate: mypy over the broker and the Spark connector, and in strict mode over the operator, run
as tests so every suite run (and CI) checks them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name,args", [pytest.param(name, args, id=name) for name, args in (
    ("jsbroker", ["broker/jsbroker"]), ("jsoperator-strict", ["--strict", "operator/jsoperator"]),
    ("jsspark", ["spark/jsspark"]))])
def test_mypy(name: str, args: list[str]) -> None:
    # Each run its own cache: xdist workers running two at once on one cache made mypy crash (a CI run).
    cache = ROOT / ".mypy_cache" / name
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
