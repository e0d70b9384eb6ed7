"""Log lines as nats-server writes them: both servers run the same scenario and their lines are compared after
normalising pids, times, ids, ports, paths and the values only one of them has; lines only one server has (its
Git commit, JetStream's ASCII art; jsbroker's version and sync setting) are named here and dropped."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.broker.certs import Authority
from tests.broker.raw import CONNECT, Raw, exchange
from tests.polling import poll
from tests.servers import JSBROKER, KINDS, NATS_SERVER, ServerHandle, free_port, launch, nats_server_binary, read_info

pytestmark = pytest.mark.xdist_group("broker-log-lines")

LINE = re.compile(r"^\[(\d+)\] (\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} )?\[(INF|WRN|ERR|FTL|DBG|TRC)\] (.*)$")
ONLY_NATS_SERVER = re.compile(r"^  (Git|Node|Strict):|^Took .* to start JetStream$"
                              r"|^(?!-+$)[^A-Za-z]*$|^\s*https://docs\.nats\.io/jetstream$")  # the last two: its art
EXITING = "[INF] Server Exiting.."  # nats-server's last line races its exit: sometimes it is not written
ONLY_JSBROKER = re.compile(r"^  (jsbroker|Sync):")


def _normalised(text: str, port: int, http_port: int | None, store: Path | None) -> list[str]:
    lines = []
    for raw in text.splitlines():
        m = LINE.match(raw)
        assert m, raw  # every line has nats-server's shape
        body = m.group(4)
        if ONLY_NATS_SERVER.search(body) or ONLY_JSBROKER.search(body):
            continue
        body = re.sub(r"\bN[A-Z2-7]{55}\b", "<id>", body)
        body = body.replace(f":{port}", ":<port>").replace(f":{http_port}", ":<http>")
        body = re.sub(re.escape(str(store)) + "(/jetstream)?", "<store>", body) if store else body
        body = re.sub(r"^Starting (nats-server|jsbroker)$", "Starting <server>", body)
        body = re.sub(r"(Max Memory|Max Storage): +.*", r"\1: <size>", body)
        body = re.sub(r"^Temporary storage directory used.*", "Temporary storage directory used", body)
        body = re.sub(r"127\.0\.0\.1:\d+ - cid:\d+ - (\"[^\"]*\" - )?", "<client> - ", body)
        body = re.sub(r"(Client parser ERROR|TLS handshake error).*", r"\1", body)
        lines.append(f"[{m.group(3)}] {body}")
    return lines


def _start(kind: str, extra: list[str], store: Path) -> ServerHandle:
    """Ready at its "Server is ready" line, without launch()'s readiness probe: on a loaded machine that can
    connect more than once (each try times out after a second), and with TLS each probe is a logged error."""
    handle = ServerHandle(kind=kind, port=free_port(), store_dir=store / kind, http_port=free_port(),
                          extra_args=tuple(extra))
    proc = handle.spawn()
    try:
        poll(lambda: "Server is ready" in handle.log_path.read_text() or proc.poll() is not None, timeout=60,
             what=f"{kind} ready")
        assert proc.poll() is None, handle.log_tail()
    except BaseException:
        handle.close()
        raise
    return handle


def _scenario(kind: str, extra: list[str], clients: list[bytes], stop: signal.Signals, store: Path) -> list[str]:
    """Start with JetStream and monitoring, run the clients, stop with `stop`. Lame duck mode (SIGUSR2) is entered
    with a client connected (the servers differ in how they count one closing, and nats-server's 10 s grace
    period is not a flag), then ended with SIGINT once JetStream is down."""
    with _start(kind, extra, store) as handle:
        holder = Raw(handle.port, timeout=30) if stop == signal.SIGUSR2 else None
        if "--tlscert" in extra:  # a client that reads INFO and closes without a handshake: both log it, in their time
            read_info(handle.port, timeout=30)
            poll(lambda: "TLS handshake error" in handle.log_path.read_text(), timeout=60, what="the probe's error")
        for data in clients:
            exchange(handle.port, data)
        assert handle.proc is not None
        handle.proc.send_signal(stop)
        if stop == signal.SIGUSR2:
            # the line itself, not "Initiating JetStream Shutdown..." before it: SIGINT then would race the stop
            poll(lambda: re.search(r"\[INF\] JetStream Shutdown$", handle.log_path.read_text(), re.MULTILINE),
                 timeout=60, what="JetStream stopped")
            handle.proc.send_signal(signal.SIGINT)
        assert handle.proc.wait(timeout=60) == 0
        if holder is not None:
            holder.close()
        lines = _normalised(handle.log_path.read_text(), handle.port, handle.http_port, handle.store_dir)
    if kind == JSBROKER:
        assert lines[-1] == EXITING
    return [line for line in lines if line != EXITING]


def test_start_errors_and_shutdown_lines(tmp_path):
    """JetStream with its store, monitoring, a client's protocol error, SIGTERM."""
    out = {kind: _scenario(kind, [], [CONNECT + b"FOO\r\n"], signal.SIGTERM, tmp_path) for kind in KINDS}
    assert out[JSBROKER] == out[NATS_SERVER]
    assert out[JSBROKER] == [
        "[INF] Starting <server>", "[INF]   Version:  2.15.1", "[INF]   Name:     <id>", "[INF]   ID:       <id>",
        "[INF] Starting http monitor on 127.0.0.1:<http>", "[INF] Starting JetStream",
        "[INF] ---------------- JETSTREAM ----------------", "[INF]   Max Memory: <size>", "[INF]   Max Storage: <size>",
        '[INF]   Store Directory: "<store>"', "[INF]   API Level:       5",
        "[INF] -------------------------------------------",
        "[INF] Listening for client connections on 127.0.0.1:<port>", "[INF] Server is ready",
        "[ERR] <client> - Client parser ERROR", '[INF] Trapped "terminated" signal', "[INF] Initiating Shutdown...",
        "[INF] Initiating JetStream Shutdown...", "[INF] JetStream Shutdown"]


@pytest.mark.parametrize("case", ["tls", "lame duck"])
def test_tls_and_lame_duck_lines(tmp_path, case):
    """TLS and a user with a plain-text password (both warn) stopped by SIGTERM; lame duck mode."""
    ca = Authority(tmp_path)
    server = ca.issue("server", server=True)
    extra = ["--tlscert", str(server.cert), "--tlskey", str(server.key), "--user", "u", "--pass", "p"]
    stop = signal.SIGTERM if case == "tls" else signal.SIGUSR2
    out = {kind: _scenario(kind, extra if case == "tls" else [], [], stop, tmp_path) for kind in KINDS}
    assert out[JSBROKER] == out[NATS_SERVER]
    if case == "tls":
        assert out[JSBROKER][-7:-4] == ["[INF] TLS required for client connections", "[INF] Server is ready",
                                        "[ERR] <client> - TLS handshake error"]
    else:
        assert out[JSBROKER][-6:] == [
            '[INF] Trapped "user defined signal 2" signal', "[INF] Entering lame duck mode, stop accepting new clients",
            "[INF] Initiating JetStream Shutdown...", "[INF] JetStream Shutdown", '[INF] Trapped "interrupt" signal',
            "[INF] Initiating Shutdown..."]


def test_no_time_and_the_auth_error(tmp_path):
    """-T=false drops the time; an authentication error is an [ERR] line naming the user."""
    def run(kind: str) -> list[str]:
        with launch(kind, jetstream=False, extra_args=["-T=false", "--user", "u", "--pass", "p"]) as handle:
            with Raw(handle.port) as raw:
                raw.send(b'CONNECT {"verbose":false,"user":"u","pass":"wrong"}\r\nPING\r\n')
                raw.read_to_close()
            handle.stop()
            text = handle.log_path.read_text()
        assert all(LINE.match(line) and LINE.match(line).group(2) is None for line in text.splitlines()), text
        return [line for line in _normalised(text, handle.port, None, None) if "authentication error" in line]

    assert run(JSBROKER) == run(NATS_SERVER) == ['[ERR] <client> - authentication error - User "u"']


def test_nats_py_server_helper_starts_jsbroker_as_nats_server(tmp_path):
    """nats.py's helper (nats-server/src/nats/server in the vendored tarball) runs `nats-server --port -1
    --jetstream --store_dir D` and waits for the Listening and ready lines: it starts jsbroker through the link."""
    vendored = Path("/work/shared/vendor/natspy-06b6778.tar.gz")
    if not vendored.exists():
        pytest.skip(f"{vendored} is not here")
    subprocess.run(["tar", "xzf", str(vendored), "-C", str(tmp_path), "nats-server/src"], check=True, timeout=60)
    folder = tmp_path / "bin"
    jsbroker = Path(sys.executable).parent / "jsbroker"
    subprocess.run([str(jsbroker), "--nats_server_link", str(folder)], check=True, capture_output=True, timeout=30)
    script = (
        "import asyncio, socket, sys\n"
        "from nats.server import run\n"
        "async def main():\n"
        "    server = await run(port=0, jetstream=True, store_dir=sys.argv[1])\n"
        "    with socket.create_connection((server.host, server.port), timeout=5) as s:\n"
        "        print(s.recv(4096).split(b' ', 1)[0].decode(), server.port > 0)\n"
        "    await server.shutdown()\n"
        "asyncio.run(main())\n")
    env = {"PATH": f"{folder}:/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "nats-server" / "src")}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.stdout.split() == ["INFO", "True"], done.stderr[-3000:]


def test_a_start_failure_is_a_fatal_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = {kind: subprocess.run([nats_server_binary() if kind == NATS_SERVER else sys.executable,
                                     *([] if kind == NATS_SERVER else ["-m", "jsbroker"]),
                                     "-a", "127.0.0.1", "-p", str(port)], capture_output=True, text=True, timeout=30)
               for kind in KINDS}
    for done in out.values():
        assert done.returncode == 1
        assert f"[FTL] Error listening on port: 127.0.0.1:{port}, " in done.stderr.splitlines()[-1]
