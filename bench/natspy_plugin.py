"""pytest plugin that bench/natspy_suites.py loads into nats.py's own test suites (in their venvs, with
`-p natspy_plugin`): it leaves out the tests that need a cluster and writes every test's outcome as a JSON
line the moment pytest reports it, so a suite killed at its time limit still tells which tests ran.

Only the standard library and pytest: it runs in the suites' Python 3.11 and 3.13 venvs, not the project's.
"""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

import pytest

OUTPUT_ENV = "NATSPY_OUTCOMES"  # the JSON-lines file the runner reads
_ON_XDIST_WORKER = False  # with -n, the controller writes the reports, the workers only their collection


def clustering_reason(item: pytest.Item) -> str | None:
    """Why `item` needs several servers, or None. The new packages start clusters with nats.server's
    `run_cluster`; the legacy suite's cluster tests derive from tests/utils.py's `Clustering*TestCase`."""
    cls = getattr(item, "cls", None)
    bases = [base.__name__ for base in inspect.getmro(cls)] if cls is not None else []
    if any(name.startswith("Clustering") for name in bases):
        return f"class derives from {next(n for n in bases if n.startswith('Clustering'))} (--routes)"
    function = getattr(item, "function", None)
    try:
        source = inspect.getsource(function) if function is not None else ""
    except (OSError, TypeError):
        source = ""
    return "calls nats.server.run_cluster" if "run_cluster(" in source else None


def _write(record: dict[str, Any]) -> None:
    path = os.environ.get(OUTPUT_ENV)
    if path:
        # One short append per line: xdist workers and the controller write to the same file.
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    global _ON_XDIST_WORKER
    _ON_XDIST_WORKER = hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, excluded = [], []
    for item in items:
        reason = clustering_reason(item)
        if reason is None:
            kept.append(item)
        else:
            excluded.append(item)
            _write({"id": item.nodeid, "event": "excluded", "reason": reason})
    if excluded:
        config.hook.pytest_deselected(items=excluded)
        items[:] = kept
    for item in kept:
        _write({"id": item.nodeid, "event": "collected"})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed and not _ON_XDIST_WORKER:
        _write({"id": report.nodeid, "event": "collect", "outcome": "failed", "error": _first_line(report)})


def _first_line(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        return str(longrepr[2]).splitlines()[0] if longrepr[2] else ""
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()] or [""]
    # nats.server's ServerError puts the server's own words last ("Server exited with code 2 ... Errors: ...").
    shown = lines[0] if len(lines) == 1 or "assert" in lines[0] else f"{lines[0]} | {lines[-1]}"
    return shown[:300]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _ON_XDIST_WORKER and (report.when == "call" or report.outcome != "passed"):
        _write({"id": report.nodeid, "event": report.when, "outcome": report.outcome,
                "error": "" if report.passed else _first_line(report),
                "duration": round(report.duration, 3)})
