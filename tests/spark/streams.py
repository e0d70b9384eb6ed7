"""Fill and inspect streams with a plain nats-py client, for the Spark tests."""

from __future__ import annotations

import asyncio
from typing import Any

import nats


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _js(url: str) -> tuple[Any, Any]:
    nc = await nats.connect(url)
    return nc, nc.jetstream()


def make_stream(url: str, name: str, count: int, subjects: tuple[str, ...] = ("a", "b"), **config: Any) -> list[int]:
    """Stream `name` on `<name>.*`, `count` messages "m<i>" round-robin over `subjects`, header i=<i>."""
    async def main() -> list[int]:
        nc, js = await _js(url)
        await js.add_stream(name=name, subjects=[f"{name}.*"], **config)
        seqs = [(await js.publish(f"{name}.{subjects[i % len(subjects)]}", f"m{i}".encode(),
                                  headers={"i": str(i)})).seq for i in range(count)]
        await nc.close()
        return seqs
    return run(main())


def publish(url: str, subject: str, payloads: list[bytes]) -> list[int]:
    async def main() -> list[int]:
        nc, js = await _js(url)
        seqs = [(await js.publish(subject, p)).seq for p in payloads]
        await nc.close()
        return seqs
    return run(main())


def delete_msgs(url: str, stream: str, seqs: list[int]) -> None:
    async def main() -> None:
        nc, js = await _js(url)
        for seq in seqs:
            await js.delete_msg(stream, seq)
        await nc.close()
    run(main())


def purge_below(url: str, stream: str, seq: int) -> None:
    async def main() -> None:
        nc, js = await _js(url)
        await js.purge_stream(stream, seq=seq)
        await nc.close()
    run(main())


def stored(url: str, stream: str) -> list[tuple[str, bytes, str | None]]:
    """(subject, data, Nats-Msg-Id) of every stored message, in order."""
    async def main() -> list[tuple[str, bytes, str | None]]:
        nc, js = await _js(url)
        state = (await js.stream_info(stream)).state
        out = []
        for seq in range(max(state.first_seq, 1), state.last_seq + 1):  # an empty stream: first 0, last 0
            try:
                msg = await js.get_msg(stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            out.append((msg.subject, msg.data or b"", (msg.headers or {}).get("Nats-Msg-Id")))  # nats-py: None when empty
        await nc.close()
        return out
    return run(main())
