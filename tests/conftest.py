"""Shared fixtures: the real nats-server and jsbroker as processes, and the differential `server` fixture.

`server` is parametrized with ids "jsbroker" and "nats-server": a test written once against nats-py runs
against both, and nats-server's behaviour is the expected one. The session servers (JetStream on, a
fresh store dir each) are shared by all tests of one xdist worker, so tests must use unique subjects and
stream names (`unique` helps). Tests that need special flags or restarts use `server_factory`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import pytest

from tests.builds import stale_compiled_modules
from tests.image.fixtures import engine, image  # noqa: F401  (tests/image and tests/cluster share one build)
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, launch


def pytest_sessionstart(session: pytest.Session) -> None:
    """An edited source whose compiled module (broker/setup.py) is older would not be what runs: stop at once."""
    stale = stale_compiled_modules()
    if stale:
        pytest.exit(f"compiled modules older than their source: {', '.join(stale)}; rebuild them with "
                    "`.venv/bin/pip install -e .` (or `bash -c 'source scripts/venv.sh'`), or delete the "
                    "broker/jsbroker/*.so files to test the pure-Python build", returncode=4)


@pytest.fixture(scope="session")
def nats_server() -> Iterator[ServerHandle]:
    with launch(NATS_SERVER, http=True) as handle:
        yield handle


@pytest.fixture(scope="session")
def jsbroker_server() -> Iterator[ServerHandle]:
    with launch(JSBROKER, http=True) as handle:
        yield handle


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest) -> ServerHandle:
    """The same test body against jsbroker and against nats-server (the reference)."""
    return request.getfixturevalue("jsbroker_server" if request.param == JSBROKER else "nats_server")


@pytest.fixture(params=KINDS)
def server_kind(request: pytest.FixtureRequest) -> str:
    """Parametrize a test that starts its own servers with `server_factory(server_kind, ...)`."""
    return request.param


@pytest.fixture
def server_factory() -> Iterator[Callable[..., ServerHandle]]:
    """Start extra servers (`launch` arguments) that are stopped when the test ends."""
    started: list[ServerHandle] = []

    def start(kind: str, **kw: object) -> ServerHandle:
        handle = launch(kind, **kw)  # type: ignore[arg-type]
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.close()


_counter = itertools.count()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Names that never collide across tests sharing a session server: unique("S") -> "S_4711_3"."""

    def make(prefix: str) -> str:
        return f"{prefix}_{os.getpid()}_{next(_counter)}"

    return make
