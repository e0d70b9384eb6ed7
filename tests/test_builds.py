"""Both builds of jsbroker (broker/setup.py): the suite runs on the compiled hot path, and a fixed subset of the
differential suites (core protocol, routing, JetStream publish and pull delivery, store records) runs again
here on the pure-Python modules: their sources copied without the compiled files, first on PYTHONPATH, so
the test process and every jsbroker it starts import them. CI thus tests the build a machine without a C
compiler (or JSBROKER_PURE=1) installs, for about a minute."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

from tests.builds import ROOT, compiled_modules, pure_copy

PURE_SUBSET = (
    "tests/broker/test_protocol.py",
    "tests/broker/test_sublist.py",
    "tests/broker/test_core.py",
    "tests/broker/test_wire.py",
    "tests/jetstream/test_publish.py",
    "tests/jetstream/test_pull_delivery.py",
    "tests/store/test_record.py",
)


def setup_compiled() -> list[str]:
    """The modules broker/setup.py compiles (its COMPILED list), as module names."""
    tree = ast.parse((ROOT / "broker" / "setup.py").read_text())
    [paths] = [ast.literal_eval(node.value) for node in tree.body
               if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED"]
    return sorted(".".join(pathlib.Path(p).relative_to("jsbroker").with_suffix("").parts) for p in paths)


def test_the_suite_runs_on_the_compiled_hot_path() -> None:
    if os.environ.get("JSBROKER_PURE", "") not in ("", "0"):
        pytest.skip("JSBROKER_PURE=1: this venv holds the pure-Python build")
    assert sorted(compiled_modules()) == setup_compiled(), "rebuild: .venv/bin/pip install -e ."


def test_the_pure_build_passes_the_subset(tmp_path: pathlib.Path) -> None:
    pure = pure_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env["PYTHONPATH"] = str(pure)
    where = subprocess.run([sys.executable, "-c", "import jsbroker.protocol as m, jsbroker.router as r; "
                            "print(m.__file__); print(r.__file__)"],
                           cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert where == [str(pure / "jsbroker" / "protocol.py"), str(pure / "jsbroker" / "router.py")]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *PURE_SUBSET],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
