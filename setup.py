"""Builds jsbroker's hot path (the parser, the subject index, the router, the stores, snapshots) as C
extensions with mypyc, from the same typed Python source; everything else (and all metadata) is in
pyproject.toml.

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
# cannot have an interpreted subclass), the backup archive's encoder and reader.
COMPILED = [
    "broker/jsbroker/protocol.py",
    "broker/jsbroker/sublist.py",
    "broker/jsbroker/router.py",
    "broker/jsbroker/store/base.py",
    "broker/jsbroker/store/record.py",
    "broker/jsbroker/store/subject_index.py",
    "broker/jsbroker/store/indexed.py",
    "broker/jsbroker/store/file.py",
    "broker/jsbroker/store/memory.py",
    "broker/jsbroker/store/index_snapshot.py",
    "broker/jsbroker/store/consumer_store.py",
    "broker/jsbroker/jetstream/snapshot.py",
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


def ext_modules() -> list[object]:
    if os.environ.get("JSBROKER_PURE", "") not in ("", "0"):
        return []
    from mypyc.build import mypycify

    # One shared library inside the package (not a top-level module), so editable installs and wheels
    # both find it next to the modules that use it.
    # The build's isolated environment has no runtime dependencies (h11, cramjam, cryptography...), which
    # the compiled modules reach only through uncompiled ones; the type gate checks them with them installed.
    return list(mypycify(["--ignore-missing-imports", *COMPILED], opt_level="3", group_name="jsbroker.compiled"))


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
