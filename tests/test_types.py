"""The type gate: mypy over the broker and the Spark connector, and in strict mode over the operator, run
as tests so every suite run (and CI) checks them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [["broker/jsbroker"], ["--strict", "operator/jsoperator"], ["spark/jsspark"]],
                         ids=["jsbroker", "jsoperator-strict", "jsspark"])
def test_mypy(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
