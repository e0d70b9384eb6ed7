"""jsbroker: a pure-Python (asyncio) NATS + JetStream server that unmodified NATS clients can use."""
