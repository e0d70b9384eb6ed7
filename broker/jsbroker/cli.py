"""The `jsbroker` command: nats-server-style flags over an optional TOML config file, then run.

Flags win over the config file, which wins over defaults. SIGTERM/SIGINT stop the broker (stop
accepting, flush pending output, close clients, stop JetStream) and exit 0. SIGUSR2 enters lame duck
mode (lameduck.py; SIGTERM is then ignored, as by nats-server, SIGINT still stops at once). SIGHUP
reloads the TLS certificate files (see tls.py). `--signal <command>=<pid>` sends one of these to a
running jsbroker (signals.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from . import __version__, logs
from .config import (VERSION, BrokerConfig, ConfigError, JetStreamSettings, TlsSettings, load_file, parse_duration,
                     parse_size)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jsbroker", description="A pure-Python NATS + JetStream server (nats-server compatible flags)."
    )
    p.add_argument("-a", "--addr", "--net", dest="host", help="client listen address (default 0.0.0.0)")
    p.add_argument("-p", "--port", type=int, help="client port (default 4222; 0 = any free port)")
    p.add_argument("-m", "--http_port", type=int, help="monitoring HTTP port (/healthz /varz /connz /jsz /metrics)")
    p.add_argument("-ms", "--https_port", type=int, help="monitoring over HTTPS on this port instead (needs TLS)")
    p.add_argument("-n", "--name", "--server_name", dest="server_name", help="server name")
    p.add_argument("-sd", "--store_dir", type=Path, help="JetStream storage directory (default: a temp dir)")
    p.add_argument("-js", "--jetstream", action="store_true", help="enable JetStream (on by default)")
    p.add_argument("--no_jetstream", action="store_true", help="run the core NATS server only")
    p.add_argument("--user", help="required user name")
    p.add_argument("--pass", dest="password", help="required password")
    p.add_argument("--auth", dest="token", help="required authorization token")
    p.add_argument("--tls", action="store_true", help="enable TLS on the client port (needs --tlscert and --tlskey)")
    p.add_argument("--tlscert", type=Path, help="server certificate (PEM); enables TLS")
    p.add_argument("--tlskey", type=Path, help="server certificate's private key (PEM)")
    p.add_argument("--tlscacert", type=Path, help="CA certificates (PEM) that client certificates are verified against")
    p.add_argument("--tlsverify", action="store_true", help="enable TLS and require verified client certificates")
    p.add_argument("--max_payload", help="maximum message payload (bytes or e.g. 1MB; default 1MB, max 8MB)")
    p.add_argument("-P", "--pid", dest="pid_file", type=Path, help="write the process id to this file")
    p.add_argument("-sl", "--signal", metavar="COMMAND=PID",
                   help="send ldm, quit, term, stop or reload to a running jsbroker (PID: a pid or a pid file)")
    p.add_argument("--lame_duck_duration", help="lame duck mode closes the clients over this long (default 2m, min 30s)")
    p.add_argument("--lame_duck_grace_period", help="lame duck mode waits this long before closing (default 10s)")
    p.add_argument("-c", "--config", type=Path, help="TOML configuration file (see broker/README.md)")
    p.add_argument("-l", "--log", "--log_file", dest="log_file", type=Path, help="log to this file instead of stderr")
    p.add_argument("-D", "--debug", action="store_true", help="debug logging")
    p.add_argument("-V", "--trace", action="store_true", help="trace logging (most verbose)")
    p.add_argument("-v", "--version", action="version", version=f"jsbroker {__version__} (nats-server {VERSION} compatible)")
    return p


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    cfg = load_file(args.config) if args.config else BrokerConfig()
    top: dict[str, Any] = {}
    for name in ("host", "port", "http_port", "https_port", "server_name", "log_file", "pid_file"):
        value = getattr(args, name)
        if value is not None:
            top[name] = value
    for name in ("lame_duck_duration", "lame_duck_grace_period"):
        if getattr(args, name) is not None:
            top[name] = parse_duration(getattr(args, name), f"--{name}")
    if args.max_payload is not None:
        top["max_payload"] = parse_size(args.max_payload, "--max_payload")
    if args.trace:
        top["log_level"] = "trace"
    elif args.debug:
        top["log_level"] = "debug"
    auth: dict[str, Any] = {}
    if args.token is not None:
        auth["token"] = args.token
    if args.user is not None:
        auth["user"] = args.user
    if args.password is not None:
        auth["password"] = args.password
    if auth:
        top["auth"] = replace(cfg.auth, **auth)
    tls = _tls_from_args(args, cfg.tls)
    if tls is not None:
        top["tls"] = tls
    if args.no_jetstream:
        top["jetstream"] = None
    elif args.store_dir is not None or args.jetstream:
        js = cfg.jetstream or JetStreamSettings(store_dir=None)
        top["jetstream"] = replace(js, store_dir=args.store_dir) if args.store_dir is not None else js
    return replace(cfg, **top)


def _tls_from_args(args: argparse.Namespace, base: TlsSettings | None) -> TlsSettings | None:
    """nats-server's rules: --tlscert/--tlskey (or --tls, --tlsverify) turn TLS on, and a certificate and
    its key must then be given (by flags or the config file's [tls])."""
    if not (args.tls or args.tlsverify or args.tlscert or args.tlskey or args.tlscacert):
        return None
    cert = args.tlscert or (base.cert_file if base else None)
    key = args.tlskey or (base.key_file if base else None)
    if cert is None or key is None:
        raise ConfigError("TLS needs a server certificate and its key: give --tlscert and --tlskey")
    settings = base if base is not None else TlsSettings(cert_file=cert, key_file=key)
    return replace(settings, cert_file=cert, key_file=key, ca_file=args.tlscacert or settings.ca_file,
                   verify=settings.verify or args.tlsverify)


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def fix_mmap_threshold(size: int = 128 * 1024) -> bool:
    """Keep glibc's mmap threshold at its initial 128 KiB. By default glibc raises it each time a mapped
    buffer is freed, after which buffers of that size (index arrays, snapshot parts, big payloads) come
    from the heap, which fragments and does not shrink: a 30-minute soak's RSS stepped from 125 to 200 MB;
    with the threshold fixed it stayed within 128-133 MB. Returns whether it applied (glibc only)."""
    import ctypes  # after the start-up: it is on no client's path

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, size))


SETTLE_AFTER = 1.0  # seconds after the start: the first clients (reconnecting ones) are served by then


def settle() -> None:
    """Process-wide tuning, so only in the command and not in an embedded Broker, once the start is over
    (a collection right away would hold up the first clients' INFO by ~10 ms): start-up objects live
    forever, keep them out of every collection, and collect young objects less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    gc.enable()
    fix_mmap_threshold()


async def serve(config: BrokerConfig) -> None:
    from .server import Broker

    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    lame_duck: list[asyncio.Task[None]] = []

    async def lame_duck_then_stop() -> None:
        await broker.lame_duck()
        stop.set()

    def on_term() -> None:
        if not broker.lame_duck_mode:  # nats-server lets a lame duck finish
            stop.set()

    def on_usr2() -> None:
        if not lame_duck:
            lame_duck.append(loop.create_task(lame_duck_then_stop()))

    loop.add_signal_handler(signal.SIGTERM, on_term)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGUSR2, on_usr2)
    loop.add_signal_handler(signal.SIGHUP, broker.reload)
    await broker.start()
    if config.pid_file is not None:
        config.pid_file.write_text(f"{os.getpid()}")
    loop.call_later(SETTLE_AFTER, settle)
    try:
        await stop.wait()
    finally:
        for task in lame_duck:
            task.cancel()
        await broker.stop()
        if config.pid_file is not None:
            config.pid_file.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.signal is not None:
        from .signals import SignalError, send

        try:
            send(args.signal)
        except SignalError as e:
            print(f"jsbroker: {e}", file=sys.stderr)
            return 1
        return 0
    try:
        config = config_from_args(args)
    except ConfigError as e:
        print(f"jsbroker: {e}", file=sys.stderr)
        return 2
    logs.configure(config.log_level, config.log_file)
    run = asyncio.run
    if config.tls is None:  # uvloop hands a new connection's first bytes over before a TLS upgrade can start
        try:
            import uvloop
        except ImportError:
            pass
        else:
            run = uvloop.run
    gc.disable()  # the start (imports, the store's recovery) makes little garbage: no collections until settle()
    try:
        run(serve(config))
    except ConfigError as e:  # found at start: a TLS file that cannot be read or used
        print(f"jsbroker: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"jsbroker: cannot listen on {config.host}:{config.port} (or the monitoring port): {e.strerror or e}; "
              "pick a free port with -p/-m", file=sys.stderr)
        return 1
    finally:
        gc.enable()
    return 0
