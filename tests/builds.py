"""The two builds of jsbroker (broker/setup.py): its hot path compiled by mypyc, or the same modules as Python."""

from __future__ import annotations

import pathlib
import shutil

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "broker" / "jsbroker"


def compiled_modules(package: pathlib.Path = PACKAGE) -> dict[str, pathlib.Path]:
    """Module name below the package ("router", "store.file") -> compiled file, for the modules built next
    to their sources (editable installs)."""
    found = {}
    for so in package.rglob("*.so"):
        source = so.with_name(so.name.split(".", 1)[0] + ".py")
        if source.exists():
            found[".".join(source.relative_to(package).with_suffix("").parts)] = so
    return found


def stale_compiled_modules() -> list[str]:
    """Sources edited after their module was compiled (the compiled one is what Python imports). The code
    is in the group's shared library (the modules' own files are shims that a rebuild leaves as they were),
    so the newest compiled file is the build's time."""
    compiled = compiled_modules()
    if not compiled:
        return []
    built = max(so.stat().st_mtime for so in PACKAGE.rglob("*.so"))
    return sorted(f"jsbroker.{name}" for name in compiled
                  if (PACKAGE / (name.replace(".", "/") + ".py")).stat().st_mtime > built)


def pure_copy(dest: pathlib.Path) -> pathlib.Path:
    """The pure-Python build: a copy of the package's sources without compiled modules. Put `dest` first
    on PYTHONPATH and it is imported instead of the installed package (servers started from there too)."""
    shutil.copytree(PACKAGE, dest / "jsbroker", ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    return dest
