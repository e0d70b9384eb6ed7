"""Sample orders for the pipeline: JSON on ORDERS.received, every tenth one invalid on purpose."""

from __future__ import annotations

import asyncio
import json
import random
import time

import nats
from nats.js.errors import BadRequestError

from .jobs import STREAM

CUSTOMERS = [f"customer-{i}" for i in range(1, 6)]


def order(i: int, rng: random.Random) -> dict[str, object]:
    body: dict[str, object] = {"id": i, "customer": rng.choice(CUSTOMERS), "items": rng.randint(1, 5),
                               "amount": round(rng.uniform(5, 250), 2), "time": time.time()}
    if i % 10 == 0:
        body["amount"] = -body["amount"]  # type: ignore[operator]  # refused by the processing stage
    return body


async def publish_orders(servers: str, count: int, seed: int = 7) -> None:
    """Create stream ORDERS when it is missing, then publish `count` orders (ids 1..count)."""
    nc = await nats.connect(servers)
    js = nc.jetstream()
    try:
        await js.add_stream(name=STREAM, subjects=[f"{STREAM}.*"])
    except BadRequestError as exc:
        if exc.err_code != 10058:  # stream name already in use: an existing ORDERS is fine
            raise
    rng = random.Random(seed)
    acks = [js.publish(f"{STREAM}.received", json.dumps(order(i, rng)).encode(), headers={"Nats-Msg-Id": f"order:{i}"})
            for i in range(1, count + 1)]
    for start in range(0, count, 500):
        await asyncio.gather(*acks[start:start + 500])
    await nc.close()
