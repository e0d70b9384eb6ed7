"""The one version of the project's four distributions (jsbroker, jsoperator, jsspark, jetstream-kopf).

Every pyproject.toml reads it from here; jsoperator/_version.py and jsspark/_version.py are symbolic links
to this file, so each distribution's sdist carries its own copy. A literal, not importlib.metadata: that
import (and the email package it pulls in) cost every broker start ~25 ms and ~4 MB of RSS.
"""

__version__ = "0.1.0"
