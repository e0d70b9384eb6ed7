"""nats.py's own test suites judge jsbroker in CI: a fixed subset (CI_SELECTION in bench/natspy_suites.py)
runs on the real nats-server and on jsbroker (as `nats-server` on PATH), and the tests that pass on
nats-server but fail on jsbroker must be exactly the allow-list in tests/natspy_known.json. A fix shows up
as a list to shorten, a regression as a failure. After either, regenerate the list with

    python bench/natspy_suites.py --ci --write-known-failures tests/natspy_known.json

Skips when nats.py's tarball (../shared/vendor/) or Python 3.13 is missing, unless JSOPERATOR_REQUIRE_NATSPY
is set (CI, .ci/run): then it fails. The first run builds the suites' venvs (a few minutes; cached).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
KNOWN = ROOT / "tests" / "natspy_known.json"
REQUIRE_ENV = "JSOPERATOR_REQUIRE_NATSPY"
MISSING_PREREQUISITE = 3  # bench/natspy_suites.py's exit status when the tarball or an interpreter is missing
REGENERATE = "python bench/natspy_suites.py --ci --write-known-failures tests/natspy_known.json"

pytestmark = [pytest.mark.natspy, pytest.mark.xdist_group("natspy")]


def _required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("natspy")
    out = folder / "report.json"
    done = subprocess.run([sys.executable, "bench/natspy_suites.py", "--ci", "--json", str(out),
                           "--logs", str(folder / "logs")], cwd=ROOT,
                          capture_output=True, text=True, timeout=1500, check=False)
    if done.returncode == MISSING_PREREQUISITE:
        if _required():
            pytest.fail(f"{done.stderr.strip()} ({REQUIRE_ENV} is set)")
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return dict(json.loads(out.read_text()))


def _tests_in(report: dict[str, Any], category: str) -> set[str]:
    return {f"{suite}::{test}" for suite, result in report["suites"].items()
            for test, entry in result["tests"].items() if entry["category"] == category}


@pytest.mark.timeout(1600)
def test_the_subset_ran_whole_on_both_servers(report: dict[str, Any]) -> None:
    known = json.loads(KNOWN.read_text())
    assert (known["selection"], known["keyword"]) == (report["selection"], report["keyword"]), \
        f"CI_SELECTION changed since {KNOWN.name} was written: {REGENERATE}"
    for suite, result in report["suites"].items():
        summary = result["summary"]
        assert summary["completed on nats-server"] and summary["completed on jsbroker"], (suite, summary)
        assert summary["tests"] >= 10 and summary["passed on nats-server"] >= 0.9 * summary["tests"], (suite, summary)
        not_run = [t for t, e in result["tests"].items() if "notrun" in (e["nats-server"]["outcome"],
                                                                         e["jsbroker"]["outcome"])]
        assert not_run == [], (suite, not_run)


@pytest.mark.timeout(1600)
def test_jsbroker_fails_exactly_the_known_tests(report: dict[str, Any]) -> None:
    allowed = set(json.loads(KNOWN.read_text())["jsbroker_fails"])
    found = _tests_in(report, "jsbroker fails")
    errors = {f"{s}::{t}": e["jsbroker"]["error"] for s, r in report["suites"].items() for t, e in r["tests"].items()}
    new = "\n".join(f"  {t}: {errors[t]}" for t in sorted(found - allowed))
    fixed = "\n".join(f"  {t}" for t in sorted(allowed - found))
    assert found == allowed, (f"pass on nats-server, fail on jsbroker, not in {KNOWN.name}:\n{new or '  none'}\n"
                              f"in {KNOWN.name} but now pass on jsbroker (or no longer run):\n{fixed or '  none'}\n"
                              f"once understood: {REGENERATE}")
