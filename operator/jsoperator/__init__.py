"""jsoperator: a kopf operator reconciling Stream and Consumer resources against a JetStream server."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jetstream-kopf")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+source"
