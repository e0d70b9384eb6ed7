"""End to end, spec.terminalPolicy against nats-server and jsbroker: an error no retry is expected to fix (the
server refuses the stream: its subjects overlap another stream's) holds the resource Stalled by default, and
is retried with backoff under terminalPolicy: retry; the Terminal condition says so in both cases."""

from __future__ import annotations

import pytest

from tests.operator.conftest import condition, on_broker, server_stream

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]


def test_terminal_policy_hold_and_retry(kube, broker):
    conn = {"connection": {"servers": [broker.url]}}

    async def squatters(js):
        await js.add_stream(name="SQUAT_RETRY", subjects=["retry.>"])
        await js.add_stream(name="SQUAT_HOLD", subjects=["hold.>"])

    on_broker(broker.url, squatters)
    kube.create("Stream", "retried", {"name": "RETRIED", "subjects": ["retry.>"], "terminalPolicy": "retry", **conn})
    kube.create("Stream", "held", {"name": "HELD", "subjects": ["hold.>"], **conn})

    held = kube.wait_condition("Stream", "held", "Stalled", reason="JetStreamError")
    assert condition(held, "Terminal")["status"] == "True" and condition(held, "Reconciling")["status"] == "False"
    retried = kube.wait_condition("Stream", "retried", "Terminal", reason="JetStreamError")
    assert condition(retried, "Stalled")["status"] == "False" and condition(retried, "Reconciling")["status"] == "True"
    assert "10065" in condition(retried, "Ready")["message"] and "terminalPolicy: retry" in condition(
        retried, "Ready")["message"]

    async def leave(js):
        await js.delete_stream("SQUAT_RETRY")
        await js.delete_stream("SQUAT_HOLD")

    on_broker(broker.url, leave)
    retried = kube.wait_condition("Stream", "retried", "Ready", reason="Synced")
    assert condition(retried, "Terminal")["status"] == "False"
    assert server_stream(broker.url, "RETRIED") is not None
    # Held: nothing retried it, although the server would take it now; a spec change (or an edit) does.
    held = kube.get("Stream", "held")
    assert condition(held, "Stalled")["status"] == "True" and server_stream(broker.url, "HELD") is None
    kube.patch("Stream", "held", {"spec": {"description": "retry now"}})
    kube.wait_condition("Stream", "held", "Ready", reason="Synced")
