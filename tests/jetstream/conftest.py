"""Helpers for the stream/publish differential tests: run the same requests against jsbroker and nats-server.

`replay(steps)` sends a list of raw requests (subject, body, headers) in order to one server and returns
every answer as a comparable value: the normalised JSON, `("status", code, description)` for a status
message (503 no-responders, DIRECT.GET statuses), or "no reply". `{S}` in subjects and bodies is replaced
by a name unique to the test, so tests can share the session servers. The `differential` fixture runs
the same steps against both servers and returns both lists for an equality assertion.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

from tests.differential import normalise
from tests.servers import ServerHandle

Step = tuple  # (subject, body[, headers dict])
NO_REPLY = "no reply"


def answer_value(msg: Any) -> Any:
    """A reply message as a comparable value. The text of a 10025 error is Go's JSON decoder message,
    which a Python server cannot reproduce word for word; only its code is compared."""
    status = (msg.headers or {}).get("Status")
    if status:
        return ("status", status, (msg.headers or {}).get("Description", ""))
    try:
        value = normalise(json.loads(msg.data))
        if isinstance(value, dict) and value.get("error", {}).get("err_code") == 10025:
            value["error"]["description"] = "invalid JSON: <decoder message>"
        return value
    except ValueError:
        return ("raw", msg.data, normalise({k: v for k, v in (msg.headers or {}).items()}))


async def request(nc: Any, subject: str, body: bytes | str = b"", headers: dict[str, str] | None = None,
                  timeout: float = 1.0) -> Any:
    data = body.encode() if isinstance(body, str) else body
    try:
        return answer_value(await nc.request(subject, data, timeout=timeout, headers=headers))
    except NoRespondersError:
        return ("status", "503", "")
    except NatsTimeout:
        return NO_REPLY


def _store_race(subject: str, answer: Any) -> bool:
    """nats-server's 10049 on a STREAM.CREATE: it removes an account's streams directory when the last file
    stream goes, and a create racing that removal fails (2.15.1; bench/fuzz/README.md)."""
    return (subject.startswith("$JS.API.STREAM.CREATE.") and isinstance(answer, dict)
            and answer.get("error", {}).get("err_code") == 10049)


async def replay(url: str, steps: Sequence[Step], name: str, timeout: float = 1.0,
                 retry_store_race: bool = False) -> list[Any]:
    """Each step's answer; with `retry_store_race` (nats-server only) a create that lost the race is sent
    again, up to 5 times."""
    nc = await nats.connect(url)
    try:
        out = []
        for step in steps:
            subject, body = step[0].replace("{S}", name), step[1]
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            body = body.replace("{S}", name) if isinstance(body, str) else body
            hdrs = {k: v.replace("{S}", name) for k, v in step[2].items()} if len(step) > 2 and step[2] else None
            answer = await request(nc, subject, body, hdrs, timeout)
            for _ in range(5 if retry_store_race else 0):
                if not _store_race(subject, answer):
                    break
                answer = await request(nc, subject, body, hdrs, timeout)
            out.append(answer)
        return out
    finally:
        await nc.close()


@pytest.fixture
def differential(nats_server: ServerHandle, jsbroker_server: ServerHandle, unique: Callable[[str], str]
                 ) -> Callable[..., Awaitable[tuple[list[Any], list[Any]]]]:
    """`ours, theirs = await differential(steps)`: the same steps against jsbroker and nats-server."""

    async def run(steps: Sequence[Step], timeout: float = 1.0) -> tuple[list[Any], list[Any]]:
        name = unique("S")
        theirs, ours = await asyncio.gather(replay(nats_server.url, steps, name, timeout, retry_store_race=True),
                                            replay(jsbroker_server.url, steps, name, timeout))
        return ours, theirs

    return run



@pytest.fixture
def on_both(nats_server: ServerHandle, jsbroker_server: ServerHandle, unique: Callable[[str], str]
            ) -> Callable[..., Awaitable[tuple[Any, Any]]]:
    """`ours, theirs = await on_both(scenario, "P")`: `await scenario(nc, name)` against jsbroker and
    nats-server at once, each with a client of its own (closed after) and the same name unique to the test;
    a scenario deletes its stream `name` itself."""

    async def one(url: str, scenario: Callable[[Any, str], Awaitable[Any]], name: str) -> Any:
        nc = await nats.connect(url)
        try:
            return await scenario(nc, name)
        finally:
            await nc.close()

    async def run(scenario: Callable[[Any, str], Awaitable[Any]], prefix: str) -> tuple[Any, Any]:
        name = unique(prefix)
        theirs, ours = await asyncio.gather(one(nats_server.url, scenario, name), one(jsbroker_server.url, scenario, name))
        return ours, theirs

    return run


async def stream_with(nc: Any, name: str, n: int, **config: Any) -> Any:
    """A stream `name` on `name.>` holding `n` messages m0, m1, ... on `name.a`; returns the JetStream context."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], **config)
    for i in range(n):
        await js.publish(f"{name}.a", b"m%d" % i)
    return js


async def raw_publishes(port: int, stream: dict[str, Any], publishes: Sequence[tuple[str, bytes]]) -> list[Any]:
    """The acks of header blocks sent as raw HPUBs on `subject` (nats-py strips blanks around header values,
    so values with them need this) to a stream created for them and deleted after; each ack normalised."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.readline()  # INFO
    answers: dict[bytes, bytes] = {}

    async def send(lines: list[bytes], replies: int) -> None:
        writer.write(b"\r\n".join(lines) + b"\r\n")
        while len(answers) < replies:
            head = await asyncio.wait_for(reader.readline(), 5)
            if head.startswith(b"MSG "):
                parts = head.split()
                answers[parts[1]] = (await reader.readexactly(int(parts[-1]) + 2))[:-2]

    name, body = stream["name"].encode(), json.dumps(stream).encode()
    await send([b'CONNECT {"headers":true,"verbose":true,"protocol":1,"no_responders":true}', b"SUB _raw.> 1",
                b"PUB $JS.API.STREAM.CREATE.%s _raw.0 %d" % (name, len(body)), body], 1)
    lines = []
    for i, (subject, hdr) in enumerate(publishes, 1):
        lines += [b"HPUB %s _raw.%d %d %d" % (subject.encode(), i, len(hdr), len(hdr)), hdr]
    await send(lines, len(publishes) + 1)  # nats-server stores on another goroutine than its API's delete
    await send([b"PUB $JS.API.STREAM.DELETE.%s _raw.delete 0" % name, b""], len(publishes) + 2)
    writer.close()
    return [normalise(json.loads(answers[b"_raw.%d" % i])) for i in range(1, len(publishes) + 1)]
