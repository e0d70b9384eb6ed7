"""jsbroker's pytest plugin: a NATS + JetStream server per test or per session, nothing to configure.

Loaded by pytest through jsbroker's `pytest11` entry point. The fixtures (broker/README.md, "In a test
suite", has a complete example):

- `jsbroker`: an `EmbeddedBroker` in the test's event loop (pytest-asyncio), JetStream in `tmp_path`;
  `.client_url`, `.server` (the `Broker`), `await .restart()` (same port, same store), `async with .down():`
- `jsbroker_url`: its client URL
- `nats_client`: a nats-py client connected to it (skipped when nats-py is not installed)
- `jsbroker_process`: a `BrokerProcess` (`python -m jsbroker`) for kill -9 tests: `.kill()`,
  `.restart(crash=True)`, `with .frozen():` (SIGSTOP: nothing answered), `with .down():` (refused)
- `jsbroker_session`: one `BrokerProcess` for the whole session (tests share it: use distinct names)

`@pytest.mark.jsbroker(...)` configures a test's broker: `tls=True` (a throw-away certificate, which
`nats_client` trusts), `token=...` or `user=...`/`password=...` (which `nats_client` sends), and for
`jsbroker` any keyword `Broker(...)` takes, for `jsbroker_process` command-line flags as `args=[...]`.
`--jsbroker-command="nats-server -js"` runs the process fixtures' server from that command instead (its
flags are nats-server's), to check a suite against the reference server.
"""

from __future__ import annotations

import shlex
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .testing import BrokerProcess, EmbeddedBroker

MARKER = "jsbroker"
_AUTH = {"token": "--auth", "user": "--user", "password": "--pass"}  # nats-server's flags for the marker's auth


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("jsbroker").addoption(
        "--jsbroker-command", default=None, metavar="COMMAND",
        help="the process fixtures' server command (nats-server's flags; default: python -m jsbroker)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(tls=False, token=None, user=None, password=None, args=(), "
                                       "**broker_config): the jsbroker fixtures' server for this test")


def _settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The marker's keywords, the closest marker's winning (a test's over its module's)."""
    found: dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers(MARKER))):
        if marker.args:
            raise pytest.UsageError(f"@pytest.mark.{MARKER} takes keywords only, got {marker.args!r}")
        found.update(marker.kwargs)
    return found


def _tls_file(settings: dict[str, Any], folder: Path) -> Path | None:
    """With `tls=True`: a throw-away certificate, put into `settings` as the config's `tls`."""
    if not settings.pop("tls", False):
        return None
    from .testing import self_signed_tls

    tls = self_signed_tls(folder)
    settings["tls"] = tls
    return tls.cert_file


def _command(config: pytest.Config) -> list[str]:
    command = config.getoption("--jsbroker-command")
    return shlex.split(command) if command else [sys.executable, "-m", "jsbroker"]


def _process(request: pytest.FixtureRequest, folder: Path, settings: dict[str, Any]) -> "BrokerProcess":
    from .testing import BrokerProcess

    args = list(settings.pop("args", ()))
    cert = _tls_file(settings, folder / "tls")
    if cert is not None:
        tls = settings.pop("tls")
        args += ["--tls", "--tlscert", str(tls.cert_file), "--tlskey", str(tls.key_file)]
    for key, flag in _AUTH.items():
        if key in settings:
            args += [flag, str(settings.pop(key))]
    if settings:
        raise pytest.UsageError(f"jsbroker_process takes command-line flags (args=[...]), not {sorted(settings)}")
    return BrokerProcess(folder / "jetstream", args, command=_command(request.config))


@pytest.fixture
def jsbroker_process(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator["BrokerProcess"]:
    """A broker process per test, JetStream in `tmp_path` (stopped at the end; its log in `.log_path`)."""
    with _process(request, tmp_path, _settings(request)) as process:
        yield process


@pytest.fixture(scope="session")
def jsbroker_session(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator["BrokerProcess"]:
    """One broker process for the session (per xdist worker), JetStream on; tests share its streams."""
    with _process(request, tmp_path_factory.mktemp("jsbroker"), {}) as process:
        yield process


def _async_fixture(fn: Callable[..., Any]) -> Any:
    """An async fixture run in the test's loop by pytest-asyncio; without it the fixture says what to install."""
    try:
        import pytest_asyncio
    except ImportError:
        def needs_pytest_asyncio() -> None:
            pytest.fail(f"the {fn.__name__} fixture runs in the test's event loop: pip install pytest-asyncio "
                        "(or use jsbroker_process, which needs none)")
        return pytest.fixture(name=fn.__name__)(needs_pytest_asyncio)
    return pytest_asyncio.fixture(fn)


@_async_fixture
async def jsbroker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator["EmbeddedBroker"]:
    """A broker in the test's event loop, JetStream in `tmp_path`, on a free 127.0.0.1 port."""
    from .testing import EmbeddedBroker, config_for_test

    settings = _settings(request)
    settings.pop("args", None)  # the process fixtures' flags
    _tls_file(settings, tmp_path / "tls")
    async with EmbeddedBroker(config_for_test(tmp_path / "jetstream", **settings)) as broker:
        yield broker


@pytest.fixture
def jsbroker_url(jsbroker: "EmbeddedBroker") -> str:
    return jsbroker.client_url


@_async_fixture
async def nats_client(jsbroker: "EmbeddedBroker", request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """nats-py connected to `jsbroker` with the marker's credentials (and trusting its TLS certificate)."""
    nats = pytest.importorskip("nats", reason="the nats_client fixture needs nats-py: pip install 'jsbroker[client]'")
    settings = _settings(request)
    options: dict[str, Any] = {k: settings[k] for k in ("token", "user", "password") if k in settings}
    if jsbroker.config.tls is not None:
        options["tls"] = ssl.create_default_context(cafile=str(jsbroker.config.tls.cert_file))
    client = await nats.connect(jsbroker.client_url, **options)
    yield client
    await client.close()
