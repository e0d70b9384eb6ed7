"""The Grafana dashboard (charts/jetstream-kopf/files/dashboards/jetstream-kopf.json) queries only metrics the
broker and the operator export, so it cannot drift from them: every metric name in a panel or variable query
is looked up in a real jsbroker's /metrics (with a stream and a consumer) and in the operator's registry.
It also has the panels people look for first."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from jsoperator import metrics as operator_metrics
from tests import servers

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "jetstream-kopf" / "files" / "dashboards" / "jetstream-kopf.json"
OURS = re.compile(r"\b(?:gnatsd|jetstream|jsbroker|jsoperator)_[a-zA-Z0-9_:]+")
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "summary": ("", "_sum", "_count", "_created")}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queried(board: dict[str, Any]) -> dict[str, set[str]]:
    """Metric name -> titles of the panels (or variables) querying it."""
    found: dict[str, set[str]] = {}
    queries = [(p["title"], t["expr"]) for p in panels(board) for t in p.get("targets", [])]
    queries += [(f"variable {v['name']}", v["definition"]) for v in board["templating"]["list"] if "definition" in v]
    for title, expr in queries:
        for name in OURS.findall(expr):
            found.setdefault(name, set()).add(title)
    return found


def series_names(families: Iterable[Metric]) -> set[str]:
    """The series names a family exposes: its samples', or by its type when it has none yet (a labelled
    metric no label set was used with)."""
    names: set[str] = set()
    for family in families:
        names |= {s.name for s in family.samples} or {family.name + s for s in SUFFIXES[family.type]}
    return names


def broker_series() -> set[str]:
    server = servers.launch("jsbroker", http=True)
    try:
        async def populate() -> None:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            await js.add_stream(name="D", subjects=["d.>"])
            await js.add_consumer("D", durable_name="c", ack_policy="explicit")
            await js.publish("d.x", b"m")
            await nc.close()
        asyncio.run(populate())
        with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    finally:
        server.close()
    return series_names(text_string_to_metric_families(text))


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return broker_series() | series_names(operator_metrics.REGISTRY.collect())


def test_every_queried_metric_is_exported(exported):
    missing = {name: sorted(titles) for name, titles in queried(dashboard()).items() if name not in exported}
    assert missing == {}


def test_the_panels_people_expect_are_there():
    used = queried(dashboard())
    for name in ("gnatsd_varz_in_msgs", "gnatsd_varz_out_msgs", "jetstream_stream_total_bytes",
                 "jetstream_consumer_num_pending", "jetstream_consumer_num_ack_pending",
                 "jsoperator_reconciliations_failed_total", "jsoperator_reconcile_duration_seconds_bucket"):
        assert name in used, name


def test_the_check_would_catch_a_renamed_metric(exported):
    board = dashboard()
    target = next(p for p in panels(board) if p["title"] == "Consumer ack pending")["targets"][0]
    target["expr"] = target["expr"].replace("num_ack_pending", "ack_pending")
    assert {n for n in queried(board) if n not in exported} == {"jetstream_consumer_ack_pending"}


def test_panels_have_unique_ids_and_use_the_datasource_variable():
    board = dashboard()
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels(board) if p["type"] != "row")
