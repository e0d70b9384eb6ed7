"""The server as the monitoring endpoints read it (monitor.py, metrics.py): what a Prometheus scrape reads
(`ScrapedServer`) and what the JSON endpoints read besides (`MonitoredServer`). server.py's `Broker`
provides both; monitoring only reads it, so the endpoints sit below the server that starts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

    from .account_views import AccountViews
    from .accounts import Account, Accounts
    from .config import BrokerConfig, JetStreamSettings
    from .connection import Connection
    from .logs import Logger
    from .router import Router
    from .tls import TlsContext


class ScrapedServer(Protocol):
    """What a scrape reads of the server (server.py's `Broker`): its names, settings and counters, and the
    JetStream service's own view."""

    @property
    def server_id(self) -> str: ...

    @property
    def server_name(self) -> str: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def router(self) -> Router: ...  # slow consumers

    @property
    def accounts(self) -> Accounts: ...  # subscriptions

    @property
    def clients(self) -> Mapping[int, object]: ...

    @property
    def total_connections(self) -> int: ...

    @property
    def tls(self) -> TlsContext | None: ...

    @property
    def jetstream(self) -> Any: ...  # jetstream/service.py's JetStream, None when off

    def traffic(self) -> dict[str, int]: ...  # in_msgs, in_bytes, out_msgs, out_bytes since the start


class MonitoredServer(ScrapedServer, Protocol):
    """What the monitoring endpoints read of the server (server.py's `Broker`), besides what /metrics reads:
    its state (/healthz), its ports and TLS, its connections (/connz) and JetStream's settings."""

    @property
    def recovering(self) -> bool: ...

    @property
    def serving(self) -> bool: ...

    @property
    def lame_duck_mode(self) -> bool: ...

    @property
    def clients(self) -> Mapping[int, Connection]: ...

    @property
    def port(self) -> int: ...

    @property
    def http_port(self) -> int | None: ...

    @property
    def monitor_tls(self) -> bool: ...

    @property
    def ws_port(self) -> int | None: ...

    @property
    def ws_tls(self) -> TlsContext | None: ...

    @property
    def js_settings(self) -> JetStreamSettings | None: ...

    @property
    def account_views(self) -> AccountViews: ...  # /accountz, /accstatz

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def log(self) -> Logger: ...

    def registered_account(self, name: str) -> Account | None:
        """The account `name`, registered now in operator mode if the resolver has its JWT (None: no such one)."""
