"""Builds jsbroker's hot path (the parser, the subject index, the router, the stores, snapshots) as C
extensions with mypyc, from the same typed Python source; everything else (and all metadata) is in
pyproject.toml. The repository's root setup.py (jetstream-kopf, all three parts) builds the same modules
with this file's `ext_modules` and `OptionalBuildExt`.

JSBROKER_PURE=1 at install time builds the pure-Python package (no compiler needed); a C compiler that is
missing or fails also leaves the pure modules in place, with a warning. bench/README.md has the numbers
behind the choice of mypyc and of these modules.
"""

from __future__ import annotations

import os
import pathlib
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

# Where the server's CPU goes (bench/README.md, "Compiled hot path"): parsing, matching and framing, and
# the stores' record encoding and index (every module of the store classes' hierarchy: a compiled class
# cannot have an interpreted subclass), the backup archive's encoder and reader. Paths inside broker/.
COMPILED = [
    "jsbroker/protocol.py",
    "jsbroker/sublist.py",
    "jsbroker/router.py",
    "jsbroker/store/base.py",
    "jsbroker/store/record.py",
    "jsbroker/store/subject_index.py",
    "jsbroker/store/indexed.py",
    "jsbroker/store/file.py",
    "jsbroker/store/memory.py",
    "jsbroker/store/index_snapshot.py",
    "jsbroker/store/consumer_store.py",
    "jsbroker/jetstream/snapshot.py",
]


class OptionalBuildExt(build_ext):
    """A machine without a working C compiler gets the pure-Python modules, which behave the same. All or
    nothing: a module's shim without the group's shared library would fail to import."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # distutils' CompileError, LinkError, a missing compiler (PlatformError)
            for ext in self.extensions:
                pathlib.Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            print(f"WARNING: jsbroker's compiled modules were not built ({exc}); the pure-Python ones are used "
                  "(about half the speed; install a C compiler and reinstall to compile them)", file=sys.stderr)


# The commands that only write metadata or pack sources: mypycify type-checks every module before it
# returns, ~30 s of CPU, which a build would otherwise pay in each of them too (an install runs setup.py
# three times, `python -m build` five).
METADATA_ONLY = frozenset({"egg_info", "dist_info", "sdist"})


def ext_modules(broker_dir: str = ".") -> list[object]:
    """The compiled modules; `broker_dir` is this directory as seen from the building project's root."""
    if os.environ.get("JSBROKER_PURE", "") not in ("", "0"):
        return []
    if next((arg for arg in sys.argv[1:] if not arg.startswith("-")), "") in METADATA_ONLY:
        return []
    from mypyc.build import mypycify

    # One shared library inside the package (not a top-level module), so editable installs and wheels
    # both find it next to the modules that use it.
    # The build's isolated environment has no runtime dependencies (h11, cramjam, cryptography...), which
    # the compiled modules reach only through uncompiled ones; the type gate checks them with them installed.
    paths = [os.path.join(broker_dir, path) for path in COMPILED]
    return list(mypycify(["--ignore-missing-imports", *paths], opt_level="3", group_name="jsbroker.compiled"))


if __name__ == "__main__":  # setuptools runs it so; the root setup.py loads it with runpy for the two names above
    setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
