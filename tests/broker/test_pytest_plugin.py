"""jsbroker's pytest plugin, as a user's test suite sees it: a throw-away project run by pytester in a
subprocess (its own pytest, the plugin loaded from the installed entry point, pytest-asyncio in its
default strict mode, nothing configured)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.xdist_group("pytest-plugin")

USER_SUITE = '''
import asyncio
import socket

import nats
from pathlib import Path

import pytest
from nats.js.api import StreamConfig


@pytest.mark.asyncio
async def test_round_trip(jsbroker, nats_client, jsbroker_url, tmp_path):
    assert jsbroker_url == jsbroker.client_url == f"nats://127.0.0.1:{jsbroker.port}"
    assert jsbroker.store_dir == tmp_path / "jetstream"
    js = nats_client.jetstream()
    await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"]))
    assert (await js.publish("orders.1", b"one")).seq == 1


@pytest.mark.asyncio
async def test_restart_keeps_the_store_and_down_refuses(jsbroker, nats_client):
    js = nats_client.jetstream()
    await js.add_stream(StreamConfig(name="S", subjects=["s"]))
    await js.publish("s", b"kept")
    port = jsbroker.port
    await jsbroker.restart()
    assert jsbroker.port == port
    async with jsbroker.down():
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
    nc = await nats.connect(jsbroker.client_url)
    assert (await nc.jetstream().get_msg("S", 1)).data == b"kept"
    await nc.close()


@pytest.mark.jsbroker(token="s3cret")
@pytest.mark.asyncio
async def test_token_marker(jsbroker, nats_client):
    assert nats_client.is_connected
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(jsbroker.client_url, allow_reconnect=False, max_reconnect_attempts=0)


@pytest.mark.jsbroker(tls=True, max_payload=4096)
@pytest.mark.asyncio
async def test_tls_and_config_marker(jsbroker, nats_client):
    assert jsbroker.client_url.startswith("tls://")
    assert nats_client.max_payload == 4096


def test_process_kill_restart_and_freeze(jsbroker_process):
    async def publish():
        nc = await nats.connect(jsbroker_process.client_url)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="P", subjects=["p"]))
        await js.publish("p", b"acked")
        await nc.close()

    async def read():
        nc = await nats.connect(jsbroker_process.client_url)
        data = (await nc.jetstream().get_msg("P", 1)).data
        await nc.close()
        return data

    asyncio.run(publish())
    jsbroker_process.restart(crash=True)  # kill -9: what was acknowledged survives
    assert asyncio.run(read()) == b"acked"
    with jsbroker_process.frozen():
        with socket.create_connection(("127.0.0.1", jsbroker_process.port), timeout=2) as s:
            s.settimeout(0.2)
            with pytest.raises(TimeoutError):  # connected by the kernel, no INFO from the stopped process
                s.recv(1)


@pytest.mark.jsbroker(user="u", password="p")
def test_process_auth_marker(jsbroker_process):
    async def attempt(**kw):
        nc = await nats.connect(jsbroker_process.client_url, allow_reconnect=False, max_reconnect_attempts=0, **kw)
        await nc.close()

    asyncio.run(attempt(user="u", password="p"))
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        asyncio.run(attempt(user="u", password="wrong"))


PIDS = []


def test_session_broker_first(jsbroker_session):
    PIDS.append(jsbroker_session.pid)


def test_session_broker_second(jsbroker_session):
    PIDS.append(jsbroker_session.pid)
    assert len(PIDS) == 2 and PIDS[0] == PIDS[1]
'''


def test_a_user_suite_runs_on_the_plugin_with_nothing_configured(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-q")
    result.assert_outcomes(passed=8)


def test_bad_marker_use_is_a_usage_error_naming_the_fix(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad='''
from pathlib import Path

import pytest

@pytest.mark.jsbroker(max_payload=10)
def test_flags_given_as_config(jsbroker_process):
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-q")
    result.assert_outcomes(errors=1)
    result.stdout.re_match_lines([r".*UsageError: jsbroker_process takes command-line flags \(args=\[\.\.\.\]\), "
                                  r"not \['max_payload'\]"])


def test_the_process_fixtures_run_the_reference_server_with_a_command_option(pytester: pytest.Pytester) -> None:
    """`--jsbroker-command` swaps the server the process fixtures run: the same suite on nats-server."""
    from tests.servers import nats_server_binary

    pytester.makepyfile(test_ref='''
import socket

def test_info_names_the_server(jsbroker_process):
    with socket.create_connection(("127.0.0.1", jsbroker_process.port)) as s:
        assert b'"jetstream":true' in s.recv(4096)
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                                           f"--jsbroker-command={nats_server_binary()} -js")
    result.assert_outcomes(passed=1)


def test_the_readme_example_passes(pytester: pytest.Pytester) -> None:
    """broker/README.md's "In a test suite" example, as written there."""
    readme = (Path(__file__).resolve().parents[2] / "broker" / "README.md").read_text()
    section = readme.split("## In a test suite", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    pytester.makepyfile(test_readme=example)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-q")
    result.assert_outcomes(passed=3)
