"""jsbroker: a pure-Python (asyncio) NATS + JetStream server that unmodified NATS clients can use."""

# The distribution's version (pyproject.toml reads it from here). A literal, not importlib.metadata: that
# import (and the email package it pulls in) cost every broker start ~25 ms and ~4 MB of RSS.
__version__ = "0.1.0"
