"""jsoperator: a kopf operator reconciling Stream and Consumer resources against a JetStream server."""

from ._version import __version__ as __version__
