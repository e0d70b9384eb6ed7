"""jetstream-kopf, all three parts in one distribution (the README's commands, the image): jsbroker's hot
path compiled with mypyc exactly as jsbroker's own build does it (broker/setup.py: the module list, the
pure fallback with JSBROKER_PURE=1 or without a C compiler); everything else is in pyproject.toml.
"""

from __future__ import annotations

import runpy

from setuptools import setup

broker_build = runpy.run_path("broker/setup.py")  # its `setup()` runs only as __main__
setup(ext_modules=broker_build["ext_modules"]("broker"), cmdclass={"build_ext": broker_build["OptionalBuildExt"]})
