"""The JetStream service the core starts with `JetStream(bus, settings)`: the account's streams and
consumers (registry.py) answered on `$JS.API.>` by the API router (api.py) with the handler tables of
stream_api.py, consumer_api.py and snapshot_api.py. Built above both, so neither the registry nor the
handlers import the service they are part of.
"""

from __future__ import annotations

from jsbroker.config import JetStreamSettings
from jsbroker.internal import InternalBus
from jsbroker.jetstream.api import ApiRouter
from jsbroker.jetstream.consumer_api import CONSUMER_HANDLERS
from jsbroker.jetstream.registry import StreamRegistry
from jsbroker.jetstream.snapshot_api import SNAPSHOT_HANDLERS
from jsbroker.jetstream.stream_api import STREAM_HANDLERS


class JetStream(StreamRegistry):
    """The registry, and the API router that answers requests with it once its streams are restored."""

    def __init__(self, bus: InternalBus, settings: JetStreamSettings) -> None:
        super().__init__(bus, settings)
        self._router = ApiRouter(self, bus, STREAM_HANDLERS + CONSUMER_HANDLERS + SNAPSHOT_HANDLERS, self.domain,
                                 self.api_counts)

    async def start(self) -> None:
        await super().start()
        self._router.start()

    def refusal(self, subject: str) -> bytes | None:
        """What an account without JetStream is answered on this API subject (nats-server's 10039)."""
        return self._router.refusal(subject)

    async def stop(self) -> None:
        self._router.stop()
        await super().stop()
