"""`jsoperator demo --once`: the whole product locally (jsbroker, a local kube-apiserver, the operator, the
ORDERS example, published orders, a reset), as a newcomer runs it; and its bad-input errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.kube import assets

pytestmark = [pytest.mark.kube, pytest.mark.xdist_group("demo"), pytest.mark.timeout(300)]


def demo(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jsoperator", "demo", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_demo_once_shows_everything_ready_with_the_orders_and_the_reset():
    if assets.find() is None and not assets.required():
        pytest.skip("kube-apiserver/etcd not built (python3 -m tests.kube.assets ensure)")
    done = demo("--once")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in done.stdout.splitlines()[1:]}
    assert rows[("Stream", "orders")] == ["True", "14"]
    assert rows[("Consumer", "new")] == ["True", "8", "0", "reset-to-sequence=3", "Succeeded"]
    assert rows[("Consumer", "dispatch")] == ["True", "4", "0"]
    assert rows[("Consumer", "monitor")][0] == "True"
    assert "==> installing the CRDs" in done.stderr and "==> annotating consumer new" in done.stderr


@pytest.mark.parametrize("args,message", [
    (["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig /nonexistent/kubeconfig is not a file"),
    (["--servers", "nats://127.0.0.1:1"], "--servers nats://127.0.0.1:1: cannot connect"),
])
def test_demo_bad_input_is_a_clear_error(args, message):
    done = demo(*args, timeout=60)
    assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
