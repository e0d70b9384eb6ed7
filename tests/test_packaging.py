"""The built wheel, installed into a throw-away venv with only its declared dependencies, runs.

This catches what the project's own venv can hide: a runtime import of a test-only package, a package
missing from the wheel, a console script pointing nowhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# One wheel build per run; it compiles the hot path with mypyc (setup.py): ~1.5 min of CPU, far longer on
# a loaded machine than the suite's 300 s default timeout.
pytestmark = [pytest.mark.xdist_group("packaging"), pytest.mark.timeout(900)]


def run(*args: str | Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


# Built from a copy: an in-tree build writes build/ and *.egg-info, which parallel builds would share.
_NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "data",
                                     "*.so")  # an editable install's compiled modules: the wheel compiles its own


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    sources = shutil.copytree(ROOT, out / "src", ignore=_NOT_SOURCES)
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", out, sources, cwd=out)
    [built] = out.glob("jetstream_kopf-*.whl")
    return built


def test_wheel_holds_the_three_packages_and_no_operator_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        top = {name.split("/", 1)[0] for name in zf.namelist() if not name.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"jsbroker", "jsoperator", "jsspark"}


def test_wheel_holds_the_compiled_hot_path(wheel: Path) -> None:
    if os.environ.get("JSBROKER_PURE", "") not in ("", "0"):
        pytest.skip("JSBROKER_PURE=1 builds the pure-Python wheel")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert [n for n in names if n.startswith("jsbroker/router.") and n.endswith(".so")], "setup.py compiled nothing"
    assert "jsbroker/router.py" in names  # the source ships too (tracebacks, and the pure fallback's reference)


def test_wheel_runs_with_only_its_declared_dependencies(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)  # no system site-packages: only what the wheel declares
    bin_dir = env_dir / "bin"
    run(bin_dir / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel, cwd=tmp_path)
    version = wheel.name.split("-")[1]
    assert run(bin_dir / "jsbroker", "--version", cwd=tmp_path).startswith(f"jsbroker {version} ")
    assert run(bin_dir / "jsoperator", "--version", cwd=tmp_path).strip() == f"jsoperator {version}"
    where = run(bin_dir / "python", "-c", "import jsbroker, jsoperator, jsspark; print(jsspark.__file__)", cwd=tmp_path)
    assert where.startswith(str(env_dir))
