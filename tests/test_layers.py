"""Architecture test: the one-way data flow the READMEs promise, checked on the imports of every module.

Every module under broker/jsbroker, operator/jsoperator and spark/jsspark is parsed with `ast`; every
import counts, including those inside functions and `if TYPE_CHECKING:` blocks (a type-only import is
still a dependency a reader has to follow). Relative imports are resolved, and `from pkg import name`
counts as an import of the submodule `pkg.name` when that is a module.

The rules are the tables below; a failure names the module, the import statement and the rule broken.
jsbroker's import graph (the same imports) has no circle either: a reader can start at the bottom.
"""

from __future__ import annotations

import ast
import fnmatch
import operator as stdlib_operator
import pathlib
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE_DIRS = (ROOT / "broker" / "jsbroker", ROOT / "operator" / "jsoperator", ROOT / "spark" / "jsspark")

# The operator's pure modules: CR -> pydantic model -> JetStream config -> plan -> status, no Kubernetes or NATS.
OPERATOR_PURE = (
    "jsoperator.units",
    "jsoperator.models",
    "jsoperator.mapping",
    "jsoperator.plan",
    "jsoperator.status",
    "jsoperator.annotations",
    "jsoperator.events",
    "jsoperator.conflicts",
    "jsoperator.importer",
    "jsoperator.buckets",
    "jsoperator.connections",
    "jsoperator.features",
    "jsoperator.nack",
    "jsoperator.ownership",
)

# jsbroker layers. Patterns are module names; `x.*` is every module below package `x`.
LAYERS: dict[str, tuple[str, ...]] = {
    "protocol": ("jsbroker.protocol", "jsbroker.websocket"),
    "helpers": ("jsbroker.subjects", "jsbroker.natsconf", "jsbroker.config", "jsbroker.logs", "jsbroker.nkeys",
                "jsbroker.slow_consumer", "jsbroker.claims", "jsbroker.creds", "jsbroker.resolvers",
                "jsbroker.operator_auth", "jsbroker.passwords", "jsbroker.monitor_options", "jsbroker.go_time",
                "jsbroker._version"),
    "internal": ("jsbroker.internal",),
    # The core, bottom up: the bus (router.py) knows clients and the server only by Protocols; connections
    # use the bus; monitoring reads the server through monitored.py's Protocols; `core` wires them.
    "core-bus": ("jsbroker.sublist", "jsbroker.permissions", "jsbroker.router", "jsbroker.accounts",
                 "jsbroker.account_bus", "jsbroker.operator_accounts"),
    "core-edges": (  # what the listeners and the command use, no other core module
        "jsbroker.listen",
        "jsbroker.tls",
        "jsbroker.info",
        "jsbroker.lameduck",
        "jsbroker.signals",
        "jsbroker.flags",
        "jsbroker.http_server",
        "jsbroker.http_connection",
        "jsbroker.http_messages",
    ),
    "core-clients": ("jsbroker.auth_callout", "jsbroker.connection", "jsbroker.ws_transport"),
    "core-monitoring": ("jsbroker.monitored", "jsbroker.account_views", "jsbroker.monitor", "jsbroker.metrics"),
    "core": (
        "jsbroker",
        "jsbroker.__main__",
        "jsbroker.server",
        "jsbroker.cli",
        "jsbroker.system_account",
    ),
    "jetstream": ("jsbroker.jetstream", "jsbroker.jetstream.*"),
    "store": ("jsbroker.store", "jsbroker.store.*"),
    # what test suites use: brokers in a test's loop or as processes, and the pytest plugin's fixtures
    "testing": ("jsbroker.testing", "jsbroker.pytest_plugin"),
    # jsoperator: pure model -> I/O edges (NATS, Kubernetes API, metrics) -> reconcile core -> the kopf layer.
    "op-model": ("jsoperator", "jsoperator._version", *OPERATOR_PURE, "jsoperator.settings"),
    "op-io": (
        "jsoperator.jsclient", "jsoperator.kubeapi", "jsoperator.credentials", "jsoperator.metrics", "jsoperator.leader",
    ),
    "op-core": (
        "jsoperator.reconcile", "jsoperator.reset", "jsoperator.unpin", "jsoperator.scheduler", "jsoperator.release",
        "jsoperator.freshness", "jsoperator.check", "jsoperator.nack_import",
    ),
    "op-kopf": (
        "jsoperator.handlers",
        "jsoperator.handlers.*",
        "jsoperator.state_storage",
        "jsoperator.health",
        "jsoperator.cli",
        "jsoperator.__main__",
    ),
    "op-tools": ("jsoperator.crdgen", "jsoperator.demo", "jsoperator.localcluster", "jsoperator.localcluster.*"),
}

# importer layer -> the other layers it may import (its own layer is always allowed).
ALLOWED: dict[str, frozenset[str]] = {
    "protocol": frozenset(),  # sans-IO parser: bytes in, callbacks out
    "helpers": frozenset(),  # leaves every layer may use
    "internal": frozenset(),  # the core <-> JetStream contract, defined by neither side
    "core-bus": frozenset({"helpers", "internal"}),
    "core-edges": frozenset({"helpers"}),
    "core-clients": frozenset({"protocol", "helpers", "internal", "core-bus", "core-edges"}),
    "core-monitoring": frozenset({"helpers", "core-bus", "core-edges", "core-clients"}),
    "core": frozenset({"protocol", "helpers", "internal", "core-bus", "core-edges", "core-clients", "core-monitoring"}),
    "jetstream": frozenset({"helpers", "internal", "store"}),  # the core only through jsbroker.internal
    "store": frozenset({"helpers"}),  # reports upward only through callbacks
    "testing": frozenset({"core", "helpers"}),  # the Broker, from outside
    "op-model": frozenset(),
    "op-io": frozenset({"op-model"}),
    "op-core": frozenset({"op-model", "op-io"}),  # knows nothing of kopf: the handlers apply its Results
    "op-kopf": frozenset({"op-model", "op-io", "op-core", "op-tools"}),  # the command also renders CRDs, runs the demo
    "op-tools": frozenset({"op-model"}),
}

# Libraries only some layers may import: kopf stays in the operator's kopf layer.
LIBRARY_LAYERS: dict[str, frozenset[str]] = {"kopf": frozenset({"op-kopf"})}

# (importer, imported) pairs allowed across layers although the table above forbids them.
EXCEPTIONS: dict[tuple[str, str], str] = {
    # The broker owns the service's lifecycle: Broker.start() creates JetStream on the bus, stop() stops it.
    # monitor.py needs no exception: it reads broker.jetstream (for /jsz, /varz) without importing it.
    ("jsbroker.server", "jsbroker.jetstream.service"): "the broker starts and stops the JetStream service",
}

# jetstream/ opens and reads stores only through the package's factory and the contract (store/README.md).
STORE_ENTRY_POINTS = frozenset({"jsbroker.store", "jsbroker.store.base"})

# Pure modules (no I/O, no bus, no timers) may import only pure modules of the repo.
PURE = frozenset(
    {
        "jsbroker.protocol",
        "jsbroker.websocket",  # the upgrade's checks and the frames: bytes in, bytes out
        "jsbroker.subjects",
        "jsbroker.config",  # settings dataclasses; reads a config file only when load_file() is called
        "jsbroker.natsconf",  # nats-server's config format; included files through a passed-in reader
        "jsbroker.nkeys",  # key decoding and signature checks
        "jsbroker.passwords",  # configured secrets compared (bcrypt or constant time)
        "jsbroker.claims",  # NATS JWTs decoded and verified
        "jsbroker.monitor_options",  # /connz query strings and CONNZ request bodies as options
        "jsbroker.go_time",  # Go's time values in nats-server's JSON
        "jsbroker.creds",  # .creds and decorated JWT files, from their text
        "jsbroker.operator_auth",  # operator mode's CONNECT checks; the resolver is a passed-in fetch
        "jsbroker.slow_consumer",  # nats-server's slow-consumer numbers
        "jsbroker._version",
        "jsbroker.jetstream.ack",
        "jsbroker.jetstream.delivery",
        "jsbroker.jetstream.push",
        "jsbroker.jetstream.rate",
        "jsbroker.jetstream.counters",
        "jsbroker.jetstream.atomic_batch",
        "jsbroker.jetstream.schedule",
        "jsbroker.jetstream.fast_batch",
        "jsbroker.jetstream.cron",
        "jsbroker.jetstream.zones",  # reads the tz database, as zoneinfo does
        "jsbroker.jetstream.pull",
        "jsbroker.jetstream.priority",
        "jsbroker.jetstream.headers",
        "jsbroker.jetstream.times",
        "jsbroker.jetstream.errors",
        "jsbroker.jetstream.consumer_config",
        "jsbroker.jetstream.stream_config",
        "jsbroker.jetstream.subject_transform",
        "jsbroker.jetstream.requests",
        "jsbroker.jetstream.snapshot",  # the archive format: reads and writes only the file objects it is given
        "jsbroker.jetstream.direct_get",  # DIRECT.GET's answer, from the store it is given
        "jsbroker.jetstream.s2",  # s2 / Snappy stream decoding, the same
        "jsbroker.jetstream.publish_checks",  # a publish against the stream's config, store and msg-id window
        "jsbroker.jetstream.dedupe",
        "jsbroker.store.base",
        "jsbroker.store.record",
        "jsbroker.store.index_snapshot",
        *OPERATOR_PURE,
    }
)
# ...and no library that does I/O.
IO_LIBRARIES = ("asyncio", "socket", "selectors", "aiohttp", "nats", "kopf", "kubernetes", "prometheus_client")

# The three parts share nothing but the repository: none imports another.
PARTS = ("jsbroker", "jsoperator", "jsspark")

# Folders that are not packages (README.md, "Layout rule"); `import operator` is the standard library.
FOLDERS = ("broker", "operator", "spark")

# Violations present when this test was written, reported to the owners; each is still checked to exist
# (test_known_violations_are_still_present), so fixing one means deleting its line here.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()

@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module, absolute
    line: int
    statement: str  # as written, one name per statement


def module_name(path: pathlib.Path) -> tuple[str, bool]:
    """(dotted module name, is a package) of a file under one of PACKAGE_DIRS."""
    package_dir = next(d for d in PACKAGE_DIRS if d in path.parents)
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imports_of(
    module: str, source: str, *, is_package: bool = False, known: frozenset[str] = frozenset()
) -> list[Import]:
    """Every import in `source` (module `module`), resolved; `known` holds the repo's module names."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(module, a.name, node.lineno, f"import {a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            written = "." * node.level + (node.module or "")
            for a in node.names:
                sub = f"{base}.{a.name}"
                target = sub if sub in known else base
                found.append(Import(module, target, node.lineno, f"from {written} import {a.name}"))
    return sorted(found, key=lambda i: i.line)


def layer_of(module: str) -> str | None:
    for layer, patterns in LAYERS.items():
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return layer
    return None


def _part(module: str) -> str:
    return module.split(".")[0]


def _in(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def broken_rules(imp: Import) -> list[str]:
    """The rules `imp` breaks, each as a sentence; empty when it is allowed."""
    rules = []
    top = _part(imp.target)
    if top in FOLDERS and not (top == "operator" and _is_stdlib_operator(imp)):
        rules.append(f"`{top}/` is a folder, not a package (README.md layout rule): import `js{top}` instead")
    if top in PARTS and _part(imp.module) in PARTS and top != _part(imp.module):
        rules.append(f"the parts are independent: {_part(imp.module)} never imports {top}")
    src, dst = layer_of(imp.module), layer_of(imp.target)
    if src and dst and src != dst and dst not in ALLOWED[src] and (imp.module, imp.target) not in EXCEPTIONS:
        may = ", ".join(sorted(ALLOWED[src])) or f"nothing else in {_part(imp.module)}"
        rules.append(f"layer {src} may import only {may} (not {dst})")
    for library, layers in LIBRARY_LAYERS.items():
        if _in(imp.target, library) and src is not None and src not in layers:
            rules.append(f"only layers {', '.join(sorted(layers))} import {library} (not {src})")
    if src == "jetstream" and dst == "store" and imp.target not in STORE_ENTRY_POINTS:
        rules.append("jetstream reaches storage only through jsbroker.store and jsbroker.store.base")
    if imp.module in PURE:
        if top in PARTS and imp.target not in PURE:
            rules.append(f"pure module imports only pure modules ({imp.target} is not in PURE)")
        if _in(imp.target, *IO_LIBRARIES):
            rules.append(f"pure module imports no I/O library ({imp.target})")
    return rules


def _is_stdlib_operator(imp: Import) -> bool:
    # `import operator` or `from operator import itemgetter`; `import operator.x` cannot be the stdlib.
    if imp.statement.startswith("import "):
        return imp.target == "operator"
    return hasattr(stdlib_operator, imp.statement.rsplit(" ", 1)[1])


def repo_imports() -> list[Import]:
    files = sorted(f for d in PACKAGE_DIRS for f in d.rglob("*.py"))
    names = {f: module_name(f) for f in files}
    known = frozenset(name for name, _ in names.values())
    found = []
    for f, (name, is_package) in names.items():
        found += imports_of(name, f.read_text(), is_package=is_package, known=known)
    return found


def violations(imports: list[Import]) -> list[tuple[Import, str]]:
    return [(imp, rule) for imp in imports for rule in broken_rules(imp)]


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import circles of `graph` (module -> the modules it imports): its strongly connected components of
    more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = {stack.pop()}
            while module not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(frozenset(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def import_graph(imports: list[Import], part: str) -> dict[str, set[str]]:
    """The imports between one part's own modules (a module importing itself does not count)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if _part(imp.module) == part:
            graph.setdefault(imp.module, set())
            if _part(imp.target) == part and imp.target != imp.module:
                graph[imp.module].add(imp.target)
    return graph


def describe_circle(circle: frozenset[str], graph: dict[str, set[str]]) -> str:
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & circle))}" for m in sorted(circle))


def describe(imp: Import, rule: str) -> str:
    return f"{imp.module} (line {imp.line}): `{imp.statement}` -> {imp.target}: {rule}"


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return repo_imports()


def test_every_module_is_parsed_and_every_jsbroker_and_jsoperator_module_has_a_layer(imports):
    modules = {imp.module for imp in imports}
    assert {"jsbroker.server", "jsbroker.jetstream.consumer", "jsbroker.store.file", "jsoperator.reconcile"} <= modules
    every = {module_name(f)[0] for d in PACKAGE_DIRS for f in d.rglob("*.py")}
    unplaced = sorted(m for m in every if _part(m) in ("jsbroker", "jsoperator") and layer_of(m) is None)
    assert unplaced == [], f"add these modules to LAYERS in tests/test_layers.py: {unplaced}"
    assert sorted(PURE - every) == [], "PURE names modules that do not exist"


def test_imports_follow_the_layer_rules(imports):
    found = [(i, r) for i, r in violations(imports) if (i.module, i.target) not in KNOWN_VIOLATIONS]
    assert found == [], "imports against the architecture rules:\n" + "\n".join(describe(i, r) for i, r in found)


def test_known_violations_are_still_present(imports):
    present = {(i.module, i.target) for i, _ in violations(imports)}
    gone = sorted(KNOWN_VIOLATIONS - present)
    assert gone == [], f"fixed, delete from KNOWN_VIOLATIONS in tests/test_layers.py: {gone}"


def test_jsbroker_has_no_import_circle(imports):
    graph = import_graph(imports, "jsbroker")
    assert "jsbroker.jetstream.service" in graph and graph["jsbroker.jetstream.service"]
    found = [describe_circle(c, graph) for c in circles(graph)]
    assert found == [], "import circles (break them with a Protocol, a module below both, or values passed in):\n" + (
        "\n".join(found))


def test_the_circle_check_finds_circles_through_type_only_and_local_imports():
    source = {
        "jsbroker.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jsbroker.b import B\n",
        "jsbroker.b": "def later():\n    from jsbroker import c\n",
        "jsbroker.c": "import jsbroker.a\nfrom jsbroker import d\n",
        "jsbroker.d": "from jsbroker import subjects\n",
    }
    known = frozenset({*source, "jsbroker.subjects"})
    found = [i for module, text in source.items() for i in imports_of(module, text, known=known)]
    assert circles(import_graph(found, "jsbroker")) == [frozenset({"jsbroker.a", "jsbroker.b", "jsbroker.c"})]
    assert circles({"x": {"y"}, "y": {"z"}, "z": set()}) == []


def test_exceptions_are_still_used(imports):
    pairs = {(i.module, i.target) for i in imports}
    assert sorted(set(EXCEPTIONS) - pairs) == []


def test_imports_are_resolved_including_relative_type_only_and_local_ones():
    source = (
        "from typing import TYPE_CHECKING\n"
        "from .. import store as storage\n"
        "from . import errors\n"
        "from .times import now_ns\n"
        "if TYPE_CHECKING:\n"
        "    from jsbroker.internal import InternalBus\n"
        "def later():\n"
        "    import jsbroker.server\n"
    )
    known = frozenset({"jsbroker", "jsbroker.store", "jsbroker.jetstream", "jsbroker.jetstream.errors",
                       "jsbroker.jetstream.times", "jsbroker.internal", "jsbroker.server"})
    found = imports_of("jsbroker.jetstream.stream", source, known=known)
    assert [(i.target, i.line, i.statement) for i in found] == [
        ("typing", 1, "from typing import TYPE_CHECKING"),
        ("jsbroker.store", 2, "from .. import store"),
        ("jsbroker.jetstream.errors", 3, "from . import errors"),
        ("jsbroker.jetstream.times", 4, "from .times import now_ns"),
        ("jsbroker.internal", 6, "from jsbroker.internal import InternalBus"),
        ("jsbroker.server", 8, "import jsbroker.server"),
    ]
    assert imports_of("jsbroker.store", "from .base import X", is_package=True)[0].target == "jsbroker.store.base"


@pytest.mark.parametrize(
    ("module", "source", "rule"),
    [
        ("jsbroker.protocol", "from .connection import Connection", "layer protocol may import only nothing else"),
        ("jsbroker.router", "def f():\n    from .jetstream import stream", "layer core-bus may import only"),
        ("jsbroker.monitor", "from jsbroker.jetstream.service import JetStream", "layer core-monitoring may import"),
        # the core's back-edges: the server is known below it only by the Protocols of those it wires
        ("jsbroker.router", "from .connection import Connection", "layer core-bus may import only"),
        ("jsbroker.router", "from .server import Broker", "layer core-bus may import only"),
        ("jsbroker.connection", "from .server import Broker", "layer core-clients may import only"),
        ("jsbroker.ws_transport", "from .server import Broker", "layer core-clients may import only"),
        ("jsbroker.monitor", "from .server import Broker", "layer core-monitoring may import only"),
        ("jsbroker.metrics", "from .server import Broker", "layer core-monitoring may import only"),
        ("jsbroker.sublist", "from .monitor import Monitor", "layer core-bus may import only"),
        ("jsbroker.jetstream.stream", "from jsbroker.router import Router", "layer jetstream may import only"),
        ("jsbroker.jetstream.stream", "from jsbroker.store.file import FileStore", "only through jsbroker.store"),
        ("jsbroker.store.file", "from jsbroker.jetstream import errors", "layer store may import only helpers"),
        ("jsbroker.jetstream.pull", "from .consumer import Consumer", "pure module imports only pure modules"),
        ("jsbroker.jetstream.times", "import asyncio", "pure module imports no I/O library"),
        ("jsoperator.models", "import kopf", "pure module imports no I/O library"),
        ("jsoperator.reconcile", "from jsbroker.jetstream import errors", "jsoperator never imports jsbroker"),
        ("jsbroker.server", "import jsoperator.models", "jsbroker never imports jsoperator"),
        ("jsoperator.reconcile", "from .handlers import credentials", "layer op-core may import only op-io, op-model"),
        ("jsoperator.reconcile", "import kopf", "only layers op-kopf import kopf"),
        ("jsoperator.jsclient", "import jsoperator.reconcile", "layer op-io may import only op-model"),
        ("jsoperator.settings", "import kopf", "only layers op-kopf import kopf"),
        ("jsoperator.cli", "from operator.jsoperator import models", "`operator/` is a folder"),
        ("jsoperator.cli", "from operator import jsoperator", "`operator/` is a folder"),
        ("jsbroker.cli", "import broker.jsbroker.config", "`broker/` is a folder"),
    ],
)
def test_the_checker_catches_a_bad_import(module, source, rule):
    known = frozenset({"jsbroker.jetstream", "jsbroker.jetstream.errors", "jsbroker.jetstream.consumer"})
    found = [describe(i, r) for i, r in violations(imports_of(module, source, known=known))]
    assert any(rule in f for f in found), found
    statement = source.splitlines()[-1].strip()
    assert all(f.startswith(f"{module} (line ") and f"`{statement}`" in f for f in found), found


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("jsoperator.plan", "import operator\nfrom operator import itemgetter"),  # the standard library
        ("jsbroker.server", "from .jetstream.service import JetStream"),  # EXCEPTIONS
        ("jsbroker.jetstream.stream", "from jsbroker import store\nfrom jsbroker.store.base import StoredMsg"),
        ("jsbroker.jetstream.consumer", "from jsbroker.internal import InternalBus\nfrom jsbroker import subjects"),
        ("jsbroker.store.indexed", "from jsbroker.subjects import is_literal"),
    ],
)
def test_the_checker_allows_what_the_rules_allow(module, source):
    known = frozenset({"jsbroker.store", "jsbroker.subjects", "jsbroker.jetstream", "jsbroker.jetstream.service"})
    assert violations(imports_of(module, source, known=known)) == []
