"""The four distributions, built with `python -m build` (an sdist, then the wheel from it) and installed
each alone into a throw-away venv with only its declared dependencies, run.

This catches what the project's own venv can hide: a runtime import of a package the distribution does not
declare, a package missing from the wheel or the sdist, a console script or entry point pointing nowhere.
jsbroker, jsoperator and jsspark are built from broker/, operator/ and spark/; jetstream-kopf, all three
in one (the README's commands), from the root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from jsbroker import __version__

ROOT = Path(__file__).resolve().parents[1]
# One build of each per run, shared; jsbroker's compiles the hot path with mypyc (broker/setup.py): ~1.5 min
# of CPU, far longer on a loaded machine than the suite's 300 s default timeout.
pytestmark = [pytest.mark.xdist_group("packaging"), pytest.mark.timeout(2400)]
PURE = os.environ.get("JSBROKER_PURE", "") not in ("", "0")  # the pure-Python venv builds jsbroker pure too

SOURCES = {"jsbroker": "broker", "jsoperator": "operator", "jsspark": "spark", "jetstream-kopf": "."}
# What a part must not bring: the broker is embedded in test suites and services that want no Kubernetes
# client or Spark; the operator and the Spark connector talk to any NATS server and need no broker.
FOREIGN = {
    "jsbroker": ("kopf", "kubernetes", "pydantic", "yaml", "pyspark", "pyarrow", "nats", "jsoperator", "jsspark"),
    "jsoperator": ("jsbroker", "jsspark", "pyspark", "pyarrow", "cramjam"),
    "jsspark": ("jsbroker", "jsoperator", "kopf", "kubernetes"),
}


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    done = subprocess.run([str(a) for a in args], cwd=cwd, env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


# Built from a copy: an in-tree build writes build/ and *.egg-info, which parallel builds would share.
_NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "data",
                                      "wheelhouse", "*.so")  # an editable install's compiled modules


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """name -> (sdist, wheel). jetstream-kopf's is built pure (JSBROKER_PURE=1): its compiled modules come
    from the same broker/setup.py as jsbroker's, whose wheel is checked for them; one mypyc build is enough."""
    out = tmp_path_factory.mktemp("dists")
    sources = shutil.copytree(ROOT, out / "src", ignore=_NOT_SOURCES, symlinks=True)  # the version links stay links
    found = {}
    for name, folder in SOURCES.items():
        dist = out / name
        pure = PURE or name == "jetstream-kopf"
        run(sys.executable, "-m", "build", "--outdir", dist, sources / folder, cwd=out, env={"JSBROKER_PURE": str(int(pure))})
        [sdist], [wheel] = dist.glob("*.tar.gz"), dist.glob("*.whl")
        found[name] = (sdist, wheel)
    return found


def fresh_venv(where: Path, wheel: Path) -> Path:
    """A venv holding `wheel` and what it declares, nothing else; returns its bin directory."""
    venv.create(where, with_pip=True)  # no system site-packages
    run(where / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel, cwd=where)
    return where / "bin"


def top_level(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {name.split("/", 1)[0] for name in zf.namelist() if not name.split("/", 1)[0].endswith(".dist-info")}


def absent(bin_dir: Path, modules: tuple[str, ...]) -> list[str]:
    """Which of `modules` the venv can import (should be none)."""
    code = f"import importlib.util as u; print(' '.join(m for m in {modules!r} if u.find_spec(m)))"
    return run(bin_dir / "python", "-c", code, cwd=bin_dir).split()


def test_each_distribution_holds_its_own_package_and_the_one_version(built: dict[str, tuple[Path, Path]]) -> None:
    assert {name: top_level(wheel) for name, (_, wheel) in built.items()} == {
        "jsbroker": {"jsbroker"}, "jsoperator": {"jsoperator"}, "jsspark": {"jsspark"},
        "jetstream-kopf": {"jsbroker", "jsoperator", "jsspark"},  # and never an `operator` package
    }
    assert {wheel.name.split("-")[1] for _, wheel in built.values()} == {__version__}
    for name, (sdist, _) in built.items():
        with tarfile.open(sdist) as tf:  # the version links arrive as files: an sdist builds on its own
            versions = [m for m in tf.getmembers() if m.name.endswith("/_version.py")]
            assert versions and all(m.isfile() for m in versions), name


def test_jsbroker_wheel_holds_the_compiled_hot_path(built: dict[str, tuple[Path, Path]]) -> None:
    if PURE:
        pytest.skip("JSBROKER_PURE=1 builds the pure-Python wheel")
    with zipfile.ZipFile(built["jsbroker"][1]) as zf:
        names = zf.namelist()
    assert [n for n in names if n.startswith("jsbroker/router.") and n.endswith(".so")], "setup.py compiled nothing"
    assert "jsbroker/router.py" in names  # the source ships too (tracebacks, and the pure fallback's reference)


def test_jsbroker_alone(built: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    bin_dir = fresh_venv(tmp_path / "venv", built["jsbroker"][1])
    assert absent(bin_dir, FOREIGN["jsbroker"]) == []
    assert run(bin_dir / "jsbroker", "--version", cwd=tmp_path).startswith(f"jsbroker {__version__} ")
    # An embedded start with JetStream serves INFO, and the pytest plugin's entry point is there.
    smoke = ("import asyncio, importlib.metadata as m\n"
             "from jsbroker.server import Broker\n"
             "async def main():\n"
             "    async with Broker(port=0, store_dir='js') as b:\n"
             "        r, w = await asyncio.open_connection('127.0.0.1', b.port)\n"
             "        print((await r.readline())[:5].decode())\n"
             "        w.close()\n"
             "asyncio.run(main())\n"
             "print(*[e.value for e in m.entry_points(group='pytest11')])\n")
    assert run(bin_dir / "python", "-c", smoke, cwd=tmp_path).split() == ["INFO", "jsbroker.pytest_plugin"]


def test_jsoperator_alone(built: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    bin_dir = fresh_venv(tmp_path / "venv", built["jsoperator"][1])
    assert absent(bin_dir, FOREIGN["jsoperator"]) == []
    assert run(bin_dir / "jsoperator", "--version", cwd=tmp_path).strip() == f"jsoperator {__version__}"
    crds = run(bin_dir / "jsoperator", "crds", cwd=tmp_path)  # the models, pydantic and PyYAML load
    assert "kind: CustomResourceDefinition" in crds


def test_jsspark_alone(built: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    bin_dir = fresh_venv(tmp_path / "venv", built["jsspark"][1])
    assert absent(bin_dir, FOREIGN["jsspark"]) == []
    code = "import jsspark, pyspark, pyarrow; print(jsspark.__version__, jsspark.JetStreamDataSource.name())"
    assert run(bin_dir / "python", "-c", code, cwd=tmp_path).split() == [__version__, "jetstream"]


def test_jetstream_kopf_holds_all_three(built: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    bin_dir = fresh_venv(tmp_path / "venv", built["jetstream-kopf"][1])
    assert run(bin_dir / "jsbroker", "--version", cwd=tmp_path).startswith(f"jsbroker {__version__} ")
    assert run(bin_dir / "jsoperator", "--version", cwd=tmp_path).strip() == f"jsoperator {__version__}"
    where = run(bin_dir / "python", "-c", "import jsbroker, jsoperator, jsspark; print(jsspark.__file__)", cwd=tmp_path)
    assert where.startswith(str(tmp_path / "venv"))


def project(folder: str) -> dict:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]


def names(requirements: list[str]) -> dict[str, str]:
    return {Requirement(r).name.lower(): r for r in requirements}


def test_jetstream_kopf_declares_the_union_of_the_parts_dependencies() -> None:
    """The root's lists are written out (setuptools reads no other project's); this keeps them the parts'."""
    root = project(".")
    parts = {**names(project("broker")["dependencies"]), **names(project("operator")["dependencies"]),
             **names(project("spark")["dependencies"])}
    spark_extra = names(root["optional-dependencies"]["spark"])
    assert {**names(root["dependencies"]), **spark_extra} == parts
    assert all(project(folder)["dynamic"] == ["version"] for folder in SOURCES.values())  # all from _version.py
