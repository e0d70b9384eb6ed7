"""The JetStream service the core starts: `JetStreamServer`, one `JetStream` per account that has it.

A `JetStream` is one account's streams and consumers (registry.py) answered on that account's `$JS.API.>` by
the API router (api.py) with the handler tables of stream_api.py, consumer_api.py and snapshot_api.py, on
the account's own bus (the core's `AccountBus`). `JetStreamServer` holds them, as nats-server's server-wide
JetStream holds its accounts: the store directory (each account under `<store_dir>/jetstream/<account>/`),
the server's `max_memory` / `max_storage` they share (`ServerStorage`), and the numbers /jsz and /varz report
over all of them. Built above both, so neither the registry nor the handlers import the service they are
part of.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from jsbroker import store as storage
from jsbroker.config import AccountLimits, ConfigError, JetStreamSettings
from jsbroker.internal import InternalBus
from jsbroker.jetstream import api, times
from jsbroker.jetstream.registry import ServerStorage, StreamRegistry
from jsbroker.jetstream.requests import API_LEVEL

_UINT64 = 1 << 64  # Go's uint64 of nats-server's -1 ("unlimited")


@cache
def endpoints() -> list[api.Endpoint]:
    """The API's handler table, imported with the first request: the handlers bring the stream and consumer
    modules, which an empty start does not need (bench/README.md, "Where an empty start's time goes")."""
    from jsbroker.jetstream.consumer_api import CONSUMER_HANDLERS
    from jsbroker.jetstream.snapshot_api import SNAPSHOT_HANDLERS
    from jsbroker.jetstream.stream_api import STREAM_HANDLERS

    return STREAM_HANDLERS + CONSUMER_HANDLERS + SNAPSHOT_HANDLERS


class JetStream(StreamRegistry):
    """One account's registry, and the API router that answers its requests once its streams are restored."""

    def __init__(self, account: str, bus: InternalBus, settings: JetStreamSettings, server: ServerStorage) -> None:
        directory = storage.account_dir(settings.store_dir, account) if settings.store_dir else None
        super().__init__(bus, settings, directory, server)
        self.account = account
        self._router = api.ApiRouter(self, bus, endpoints, self.domain, self.api_counts)

    def hold_requests(self) -> None:
        """Its API subscribed before `start`, its requests answered once its streams are read (an account
        whose JetStream starts while the server runs: a request must not go unanswered meanwhile)."""
        self._router.start(held=True)

    async def start(self) -> None:
        await super().start()
        if self._router.started:
            self._router.release()
        else:
            self._router.start()

    async def stop(self) -> None:
        self._router.stop()
        await super().stop()


class JetStreamServer:
    """Every account's JetStream in one server: started, stopped and reported together."""

    def __init__(self, settings: JetStreamSettings) -> None:
        self.settings = settings
        self.storage = ServerStorage(settings.max_memory, settings.max_storage)
        self.accounts: dict[str, JetStream] = {}

    def add_account(self, account: str, bus: InternalBus, limits: AccountLimits) -> JetStream:
        """JetStream for `account`, with its own limits: started by `start`, or when added later (an operator-mode
        account registered while the server runs) by its own `start`."""
        js = self.accounts[account] = JetStream(account, bus, replace(self.settings, account=limits), self.storage)
        return js

    async def start(self) -> None:
        """Bring every account's streams back; a store written before per-account JetStream (one account's
        streams in `<store_dir>/jetstream/streams/`) moves under its account first (`ConfigError` when it is
        not clear which: then several accounts have JetStream)."""
        store_dir = self.settings.store_dir
        legacy = storage.one_account_layout(store_dir) if store_dir is not None else None
        if legacy is not None and not any(legacy.iterdir()):  # no streams: nothing to move (an empty store's)
            legacy.rmdir()
        elif store_dir is not None and legacy is not None:
            if len(self.accounts) != 1:
                raise ConfigError(
                    f"Can't start JetStream: {legacy} holds one account's streams (written by jsbroker before "
                    f"per-account JetStream) and accounts {', '.join(sorted(self.accounts)) or '(none)'} have "
                    f"JetStream: move it to {store_dir}/jetstream/<account>/streams for the account whose streams "
                    "they are")
            try:
                storage.adopt_one_account_layout(store_dir, next(iter(self.accounts)))
            except (storage.StoreError, OSError) as e:
                raise ConfigError(f"Can't start JetStream: {e}") from None
        for js in self.accounts.values():
            await js.start()

    async def stop(self) -> None:
        await asyncio.gather(*(js.stop() for js in self.accounts.values()))

    def release_waiting_pulls(self, tell: bool) -> None:
        for js in self.accounts.values():
            js.release_waiting_pulls(tell)

    @staticmethod
    def refusal(subject: str) -> bytes | None:
        """What an account without JetStream is answered on this API subject (nats-server's 10039)."""
        return api.refusal(endpoints(), subject)

    # -- reports ----------------------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """For /jsz and /varz: the server's config and the sums over its accounts."""
        totals = [sum(column) for column in zip((0, 0, 0, 0, 0), *(js.usage() for js in self.accounts.values()))]
        memory, file, streams, consumers, msgs = totals
        s = self.settings
        return {
            "config": {"max_memory": s.max_memory, "max_storage": s.max_storage,
                       "store_dir": str(s.store_dir) if s.store_dir else "", "sync_always": s.sync_always,
                       "sync_interval": int(s.sync_interval * 1e9), **({"domain": s.domain} if s.domain else {})},
            "memory": memory, "storage": file, "streams": streams, "consumers": consumers, "messages": msgs,
            "bytes": memory + file, "accounts": len(self.accounts), "total": len(self.accounts),
            "reserved_memory": self.storage.reserved("memory"), "reserved_storage": self.storage.reserved("file"),
            "api": {"level": API_LEVEL, "total": sum(js.api_counts.total for js in self.accounts.values()),
                    "errors": sum(js.api_counts.errors for js in self.accounts.values())},
        }

    def missing(self, account: str, stream: str = "", consumer: str = "") -> str:
        """What /healthz?account=&stream=&consumer= finds missing: "account", "stream", "consumer" or "". As
        nats-server's, which looks for the stream's directory in the store, a memory stream is not found."""
        js = self.accounts.get(account)
        if js is None:
            return "account"
        found = js.streams.get(stream) if stream else None
        if stream and (found is None or found.config.storage != "file"):
            return "stream"
        if consumer and (found is None or consumer not in found.consumers):
            return "consumer"
        return ""

    def account_detail(self, account: str, streams: bool = False, consumers: bool = False,
                       config: bool = False) -> dict[str, Any]:
        """One account's entry of /jsz's `account_details` (and `$SYS.REQ.ACCOUNT.<account>.JSZ`'s data). As
        nats-server's, its reserved_memory / reserved_storage are the account's limits (unlimited: the largest
        uint64) and its API level 0; `streams` adds `stream_detail`, in which `consumers` adds each stream's
        `consumer_detail` and `config` the stream's and consumers' configs."""
        js = self.accounts[account]
        memory, file, *_ = js.usage()
        limits = js.settings.account
        body: dict[str, Any] = {
            "name": account, "id": account, "memory": memory, "storage": file,
            "reserved_memory": limits.max_mem % _UINT64, "reserved_storage": limits.max_file % _UINT64,
            "accounts": 0, "ha_assets": 0,
            "api": {"level": 0, "total": js.api_counts.total, "errors": js.api_counts.errors},
        }
        if streams and js.streams:
            body["stream_detail"] = [self._stream_detail(js, name, consumers, config)
                                     for name in sorted(js.streams)]
        return body

    @staticmethod
    def _stream_detail(js: JetStream, name: str, consumers: bool, config: bool) -> dict[str, Any]:
        """nats-server's StreamDetail: the stored config (with `config`) and the consumers' ConsumerInfo."""
        stream = js.streams[name]
        detail: dict[str, Any] = {"name": name, "created": times.rfc3339(stream.created_ns),
                                  "cluster": js.cluster_info(), "state": stream.info_state()}
        if config:
            detail["config"] = stream.config.to_json(dynamic_metadata=False)
        if consumers and (infos := js.consumer_infos(name)):  # their configs only with `config`, as nats-server's
            detail["consumer_detail"] = infos if config else [{k: v for k, v in i.items() if k != "config"}
                                                              for i in infos]
        return detail

    def store_stats(self) -> dict[str, float]:
        """For /metrics: fsyncs summed over the accounts' stores, the slowest one, the longest recovery."""
        stats = [js.store_stats() for js in self.accounts.values()]
        return {"fsyncs": sum(x["fsyncs"] for x in stats), "fsync_seconds": sum(x["fsync_seconds"] for x in stats),
                "fsync_max_seconds": max((x["fsync_max_seconds"] for x in stats), default=0.0),
                "recovery_seconds": max((x["recovery_seconds"] for x in stats), default=0.0)}

    def stream_details(self) -> list[tuple[str, str, dict[str, Any], list[dict[str, Any]]]]:
        """Each account's streams (account, stream, state, consumers' infos), for /metrics."""
        return [(name, *detail) for name, js in sorted(self.accounts.items()) for detail in js.stream_details()]
