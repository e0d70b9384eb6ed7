"""The image, built once per test session on a real Docker engine (installed and started when missing).

Used by tests/image and by the end-to-end test on a real cluster (tests/cluster); tests/conftest.py
imports these fixtures so each xdist worker builds the image at most once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.image import build, docker_engine


@pytest.fixture(scope="session")
def engine() -> Iterator[None]:
    try:
        docker_engine.ensure()
    except docker_engine.EngineUnavailable as exc:
        if docker_engine.required():
            pytest.fail(f"Docker engine required ({docker_engine.REQUIRE_ENV} is set) but unavailable: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    yield
    docker_engine.stop()


@pytest.fixture(scope="session")
def image(engine: None) -> str:
    return build.build()
