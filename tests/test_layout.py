"""The repository layout rule: `operator/` is a plain folder, never a package shadowing the stdlib."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_operator_folder_is_not_a_package():
    assert (ROOT / "operator").is_dir()
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_stdlib_operator_still_imports_from_the_repo_root():
    # Run a fresh interpreter with the repo root first on sys.path, as `python -m pytest` from the root does.
    code = "import operator; f = operator.itemgetter(1); print(f('ab'), operator.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    letter, path = out.stdout.split()
    assert letter == "b"
    assert not path.startswith(str(ROOT))


def test_packages_import_one_level_down():
    import jsbroker
    import jsoperator
    import jsspark

    for pkg, folder in ((jsbroker, "broker"), (jsoperator, "operator"), (jsspark, "spark")):
        assert pathlib.Path(pkg.__file__).resolve().parent.parent == ROOT / folder
