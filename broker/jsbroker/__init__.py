"""jsbroker: a pure-Python (asyncio) NATS + JetStream server that unmodified NATS clients can use."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jetstream-kopf")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+source"
