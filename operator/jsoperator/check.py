"""`jsoperator check`: connect as the operator does (the same JSOPERATOR_* settings and flags) and round-trip
a message through core NATS and through a JetStream stream. The chart's `helm test` runs it in the project's
image, so a passing test means the operator's own connection works (servers, token or creds, TLS)."""

from __future__ import annotations

import secrets
from typing import Any

from . import credentials, jsclient
from .settings import Settings

STREAM_PREFIX = "JSOPERATOR_CHECK_"  # a fresh name each run: parallel checks never share a stream


async def check(settings: Settings, out: Any) -> int:
    """0 when both round trips worked, else 1; each step or the failure is printed to `out`."""
    pool = jsclient.Pool(timeout=settings.request_timeout)
    where = ",".join(settings.servers)
    try:
        connection = await credentials.resolve(None, "", settings)
        where = connection.describe()
        client = await pool.client(connection)
        for line in await client.round_trip(STREAM_PREFIX + secrets.token_hex(4).upper()):
            print(f"ok: {line}", file=out)
        server = await client.server()
        print(f"ok: the server is {server.describe()} (operator/README.md, Server releases: what each field needs)",
              file=out)
    except (credentials.CredentialsError, jsclient.BrokerUnavailable, jsclient.ApiError,
            jsclient.RoundTripFailed) as exc:
        print(f"jsoperator check: {where}: {exc}", file=out)
        return 1
    finally:
        await pool.close()
    print(f"jsoperator check: {where} works for the operator", file=out)
    return 0
