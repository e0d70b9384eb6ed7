"""A broker as a test needs it: in the test's event loop (`EmbeddedBroker`) or as a process a test can
kill -9 (`BrokerProcess`); either can be restarted on its port with its store, or taken down for a while
so that clients are refused; a process can also be frozen (it accepts nothing and answers nothing).

The pytest plugin (jsbroker.pytest_plugin) builds its fixtures from these; they work without pytest too.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from .config import BrokerConfig, TlsSettings
from .server import Broker

READY_TIMEOUT = 20.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (someone may take it before it is bound: retry on a clash)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_info(port: int, timeout: float = 1.0, address: str = "127.0.0.1") -> bytes:
    """Connect to a NATS port and return its INFO line (raises OSError / TimeoutError)."""
    with socket.create_connection((address, port), timeout=timeout) as s:
        s.settimeout(timeout)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                raise ConnectionError("closed before INFO")
            data += chunk
        return data.split(b"\r\n", 1)[0]


def self_signed_tls(folder: Path) -> TlsSettings:
    """A throw-away certificate for 127.0.0.1 and localhost, valid for a day; clients trust its own file
    (the settings' `cert_file`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jsbroker test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    alt_names = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)).add_extension(alt_names, critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "server.pem", folder / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return TlsSettings(cert_file=cert_file, key_file=key_file)


class EmbeddedBroker:
    """A `Broker` in the running event loop. `restart()` and `down()` start a new one on the same port
    with the same store, as a restarted server: what was acknowledged is there, clients reconnect."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.server: Broker | None = None  # the running broker (None while down)

    async def start(self) -> "EmbeddedBroker":
        self.server = Broker(self.config)
        await self.server.start()
        self.config = replace(self.config, port=self.server.port)  # a restart comes back where clients look
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    @asynccontextmanager
    async def down(self) -> AsyncIterator[None]:
        """Stopped inside the block (connections are refused), started again after it."""
        await self.stop()
        try:
            yield
        finally:
            await self.start()

    @property
    def running(self) -> Broker:
        if self.server is None:
            raise RuntimeError("the broker is down (inside `down()`, or stopped)")
        return self.server

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def client_url(self) -> str:
        scheme = "tls" if self.config.tls is not None else "nats"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def store_dir(self) -> Path | None:
        return self.config.jetstream.store_dir if self.config.jetstream is not None else None

    async def __aenter__(self) -> "EmbeddedBroker":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class ServerProcess:
    """A NATS server process (jsbroker, or nats-server for a comparison): its output in `log_path`, ready
    once its port sends INFO, stopped with SIGTERM or killed with kill -9 by its process id. Subclasses set
    `port`, `log_path` and `proc` (and `address`, `name` if not jsbroker on 127.0.0.1)."""

    name = "jsbroker"
    address = "127.0.0.1"
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"the {self.name} process was never started")
        return self.proc.pid

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise RuntimeError(f"{self.name} exited with {code}:\n{self.log_tail()}")
            try:
                read_info(self.port, address=self.address)
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise TimeoutError(f"{self.name} not ready on port {self.port}:\n{self.log_tail()}") from None
            time.sleep(delay)  # the interval between readiness probes
            delay = min(delay * 2, 0.1)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """kill -9 (a crash: nothing flushed that was not written), and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a frozen process dies as well, but reaps sooner awake
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait for the graceful exit; its exit code (kill -9 after `timeout`)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


class BrokerProcess(ServerProcess):
    """`python -m jsbroker` (or `command`) on a free 127.0.0.1 port with JetStream in `store_dir`, started when it reads
    INFO. `kill()` is kill -9; `restart()` starts it again on its port with its store; `frozen()` stops it
    with SIGSTOP (connects hang, nothing is answered) until the block ends. Its output goes to `log_path`."""

    def __init__(self, store_dir: Path, args: Sequence[str] = (), *, command: Sequence[str] = ()) -> None:
        self.store_dir = store_dir
        self.args = tuple(args)
        self.program = tuple(command) or (sys.executable, "-m", "jsbroker")  # or nats-server's, with "-js"
        self.port = free_port()
        self.log_path = store_dir.parent / f"{store_dir.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [*self.program, "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store_dir), *self.args]

    def start(self, timeout: float = READY_TIMEOUT) -> "BrokerProcess":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_ready(timeout)
        return self

    def restart(self, *, crash: bool = False) -> None:
        """Stop (kill -9 with `crash`), then start again on the same port with the same store."""
        if crash:
            self.kill()
        else:
            self.stop()
        self.start()

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP inside the block: a connect completes in the kernel but gets no INFO, requests time out."""
        os.kill(self.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.pid, signal.SIGCONT)

    @contextmanager
    def down(self) -> Iterator[None]:
        """Stopped inside the block (connections are refused), started again after it with its store."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def config_for_test(store_dir: Path, **kw: Any) -> BrokerConfig:
    """The in-process broker's config: 127.0.0.1, a free port, JetStream in `store_dir`; `kw` as
    `Broker(**kw)` takes them (BrokerConfig fields, `token`, `user`/`password`, `sync_always`...)."""
    kw.setdefault("port", 0)
    kw.setdefault("store_dir", store_dir)
    return BrokerConfig.build(**kw)


__all__ = ["BrokerProcess", "EmbeddedBroker", "ServerProcess", "config_for_test", "free_port", "read_info", "self_signed_tls"]
