"""jsbroker: a pure-Python (asyncio) NATS + JetStream server that unmodified NATS clients can use."""

from ._version import __version__ as __version__
