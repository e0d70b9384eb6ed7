"""Consumer API handlers ($JS.API.CONSUMER.*); owned by the consumers work (issue 4)."""

CONSUMER_HANDLERS: list = []
