"""Prometheus metrics on the monitoring port (`/metrics`), computed at scrape time from the counters the
broker keeps anyway, so the message path pays nothing for them.

Names and labels are those prometheus-nats-exporter publishes for nats-server (`gnatsd_varz_*`, and with
`-jsz=all` `jetstream_server_*`, `jetstream_stream_*`, `jetstream_consumer_*`), so dashboards built for
nats-server work unchanged; nats-server needs that exporter beside it, jsbroker serves them itself.
Metrics of our own are prefixed `jsbroker_`. Cluster labels have single-server values (this server leads).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .monitored import ScrapedServer

SERVER_LABELS = ["server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader"]
STREAM_LABELS = [*SERVER_LABELS, "account", "account_id", "stream_name", "stream_leader", "is_stream_leader"]
CONSUMER_LABELS = [*STREAM_LABELS, "consumer_name", "consumer_leader", "is_consumer_leader", "consumer_desc",
                   "consumer_created"]

# (varz field, help)
VARZ_GAUGES = [
    ("connections", "Current client connections"),
    ("total_connections", "Client connections accepted since start"),
    ("subscriptions", "Current subscriptions"),
    ("slow_consumers", "Clients dropped as slow consumers since start"),
    ("in_msgs", "Messages received from clients"),
    ("out_msgs", "Messages delivered to clients"),
    ("in_bytes", "Header and payload bytes received from clients"),
    ("out_bytes", "Header and payload bytes delivered to clients"),
    ("mem", "Peak resident memory of the process (bytes)"),
    ("max_payload", "Largest message payload accepted"),
    ("max_pending", "Per-client output limit before a slow-consumer close"),
    ("max_connections", "Most client connections allowed"),
    ("start_time", "Server start, Unix seconds"),
]
STREAM_GAUGES = [
    ("total_messages", "messages", "Total number of messages from a stream"),
    ("total_bytes", "bytes", "Total stored bytes from a stream"),
    ("first_seq", "first_seq", "First sequence from a stream"),
    ("last_seq", "last_seq", "Last sequence from a stream"),
    ("consumer_count", "consumer_count", "Total number of consumers from a stream"),
]
CONSUMER_GAUGES = [
    ("delivered_consumer_seq", ("delivered", "consumer_seq"), "Latest consumer sequence delivered"),
    ("delivered_stream_seq", ("delivered", "stream_seq"), "Stream sequence of the latest delivery"),
    ("num_ack_pending", ("num_ack_pending",), "Messages delivered and not yet acknowledged"),
    ("num_redelivered", ("num_redelivered",), "Messages delivered more than once and not yet acknowledged"),
    ("num_waiting", ("num_waiting",), "Pull requests waiting"),
    ("num_pending", ("num_pending",), "Messages not yet delivered"),
    ("ack_floor_stream_seq", ("ack_floor", "stream_seq"), "Stream sequence of the ack floor"),
    ("ack_floor_consumer_seq", ("ack_floor", "consumer_seq"), "Consumer sequence of the ack floor"),
]


def _dig(info: dict[str, Any], path: Sequence[str]) -> float:
    value: Any = info
    for key in path:
        value = value.get(key, 0) if isinstance(value, dict) else 0
    return float(value or 0)


class BrokerCollector(Collector):
    """Reads one broker's state when Prometheus scrapes."""

    def __init__(self, broker: ScrapedServer) -> None:
        self.broker = broker
        self.started = time.time()

    def collect(self) -> Iterator[Metric]:
        yield from self._varz()
        if self.broker.jetstream is not None:
            yield from self._jetstream()

    def _varz(self) -> Iterator[Metric]:
        b, r, cfg = self.broker, self.broker.router, self.broker.config
        values = {
            "connections": len(b.clients), "total_connections": b.total_connections,
            "subscriptions": b.accounts.subscriptions(), "slow_consumers": r.slow_consumers,
            **b.traffic(),
            "mem": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "max_payload": cfg.max_payload, "max_pending": cfg.max_pending,
            "max_connections": cfg.max_connections, "start_time": self.started,
        }
        for field, help_text in VARZ_GAUGES:
            family = GaugeMetricFamily(f"gnatsd_varz_{field}", help_text, labels=["server_id"])
            family.add_metric([b.server_id], float(values[field]))
            yield family
        if b.tls is not None and b.tls.not_after is not None:  # alert before the client certificate expires
            yield GaugeMetricFamily("jsbroker_tls_cert_not_after_seconds", "expiry of the served TLS certificate "
                                    "(Unix time)", value=b.tls.not_after.timestamp())

    def _jetstream(self) -> Iterator[Metric]:
        b = self.broker
        js = b.jetstream
        info = js.info()
        domain = info["config"].get("domain", "")
        server = [b.server_id, b.server_name, "", domain, b.server_name, "true"]
        for name, value, help_text in (
            ("jetstream_disabled", 0, "JetStream disabled or not"),
            ("total_streams", info["streams"], "Total number of streams in JetStream"),
            ("total_consumers", info["consumers"], "Total number of consumers in JetStream"),
            ("total_messages", info["messages"], "Total number of stored messages in JetStream"),
            ("total_message_bytes", info["bytes"], "Total number of bytes stored in JetStream"),
            ("max_memory", info["config"]["max_memory"], "JetStream Max Memory"),
            ("max_storage", info["config"]["max_storage"], "JetStream Max Storage"),
        ):
            family = GaugeMetricFamily(f"jetstream_server_{name}", help_text, labels=SERVER_LABELS)
            family.add_metric(server, float(value))
            yield family
        api = info["api"]
        yield CounterMetricFamily("jsbroker_jetstream_api_requests", "JetStream API requests served",
                                  value=api["total"])
        yield CounterMetricFamily("jsbroker_jetstream_api_errors", "JetStream API requests answered with an error",
                                  value=api["errors"])
        stores = js.store_stats()
        yield CounterMetricFamily("jsbroker_store_fsyncs", "fsyncs of the file stores", value=stores["fsyncs"])
        yield CounterMetricFamily("jsbroker_store_fsync_seconds", "time spent in the file stores' fsyncs",
                                  value=stores["fsync_seconds"])
        yield GaugeMetricFamily("jsbroker_store_fsync_max_seconds", "the longest fsync since the start",
                                value=stores["fsync_max_seconds"])
        yield GaugeMetricFamily("jsbroker_jetstream_recovery_seconds", "time the last start spent recovering the store",
                                value=stores["recovery_seconds"])
        streams = {f: GaugeMetricFamily(f"jetstream_stream_{f}", h, labels=STREAM_LABELS) for f, _, h in STREAM_GAUGES}
        consumers = {f: GaugeMetricFamily(f"jetstream_consumer_{f}", h, labels=CONSUMER_LABELS)
                     for f, _, h in CONSUMER_GAUGES}
        for account, stream_name, state, infos in js.stream_details():
            stream_labels = [*server, account, account, stream_name, b.server_name, "true"]
            state = {**state, "consumer_count": len(infos)}
            for field, key, _ in STREAM_GAUGES:
                streams[field].add_metric(stream_labels, float(state.get(key, 0)))
            for ci in infos:
                labels = [*stream_labels, ci["name"], b.server_name, "true",
                          ci.get("config", {}).get("description", ""), _created(ci.get("created", ""))]
                for field, path, _ in CONSUMER_GAUGES:
                    consumers[field].add_metric(labels, _dig(ci, path))
        yield from streams.values()
        yield from consumers.values()


def _created(rfc3339: str) -> str:
    """The exporter's label format (RFC 3339 to the second)."""
    try:
        return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")[:19] + "+00:00").strftime("%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return rfc3339


def registry(broker: ScrapedServer) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BrokerCollector(broker))
    return reg
