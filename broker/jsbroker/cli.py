"""The `jsbroker` command: nats-server 2.15.1's command line (flags.py) over an optional config file, then run.

Invoked as `nats-server` (argv[0]'s name, e.g. a link made by `jsbroker --nats_server_link DIR` first on PATH)
it behaves as nats-server: JetStream only with -js. As `jsbroker` it keeps its documented default, JetStream on
(-js=false or --no_jetstream turn it off). Flags win over the config file, which wins over defaults.

SIGTERM/SIGINT stop the broker (stop accepting, flush pending output, close clients, stop JetStream) and exit
0. SIGUSR2 enters lame duck mode (lameduck.py; SIGTERM is then ignored, as by nats-server, SIGINT still stops
at once). SIGHUP reloads the TLS certificate files (see tls.py). `--signal <command>=<pid>` sends one of these
to a running jsbroker (signals.py).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from . import __version__, flags, logs
from .config import (VERSION, BrokerConfig, ConfigError, JetStreamSettings, TlsSettings, load_file, parse_duration,
                     parse_size)
from .flags import FlagError, Value
from .listen import advertised

NATS_SERVER = "nats-server"
PROGRAM = "jsbroker"
RANDOM_PORT = -1  # nats-server's port value for "any free port"; 0 means the default (or, for monitoring, off)


def program_name(argv0: str) -> str:
    """nats-server when invoked under that name (a link), else jsbroker (`python -m jsbroker` too)."""
    return NATS_SERVER if Path(argv0).name == NATS_SERVER else PROGRAM


def version_text(program: str) -> str:
    """As nats-server: its `nats-server: v2.15.1` line (tools read the version from it), then what runs it."""
    ours = f"jsbroker {__version__} (a Python NATS server following nats-server v{VERSION})\n"
    return f"{NATS_SERVER}: v{VERSION}\n{ours}" if program == NATS_SERVER else ours


def _port(values: dict[str, Value], dest: str, flag: str) -> int | None:
    """nats-server's port flags: -1 any free port (jsbroker's 0), 0 not given, else a TCP port."""
    value = values.get(dest)
    if value is None or value == 0:
        return None
    assert isinstance(value, int)
    if value == RANDOM_PORT:
        return 0
    if not 0 < value <= 65535:
        raise ConfigError(f"{flag} {value} is not a TCP port: give 1-65535, or -1 for a random one")
    return value


def config_from_flags(values: dict[str, Value], program: str = PROGRAM) -> BrokerConfig:
    base = BrokerConfig() if program == PROGRAM else replace(BrokerConfig(), jetstream=None)
    cfg = load_file(Path(str(values["config"])), base) if values.get("config") else base
    top: dict[str, Any] = {}
    for dest in ("host", "server_name", "client_advertise"):
        if dest in values:
            top[dest] = values[dest]
    if values.get("client_advertise"):
        try:
            advertised(str(values["client_advertise"]), 0)
        except ValueError as e:
            raise ConfigError(f"--client_advertise: {e}") from None
    for dest in ("log_file", "pid_file", "ports_file_dir"):
        if dest in values:
            top[dest] = Path(str(values[dest])) if values[dest] else None
    port = _port(values, "port", "-p")
    if port is not None:
        top["port"] = port
    for dest, flag in (("http_port", "-m"), ("https_port", "-ms")):
        if dest in values:  # given: it wins over the file's, and 0 turns monitoring off as in nats-server
            top[dest] = _port(values, dest, flag)
    for dest in ("lame_duck_duration", "lame_duck_grace_period"):
        if dest in values:
            top[dest] = parse_duration(values[dest], f"--{dest}")
    if "max_payload" in values:
        top["max_payload"] = parse_size(values["max_payload"], "--max_payload")
    top.update(_log_settings(values))
    auth: dict[str, Any] = {k: str(values[k]) for k in ("token", "user", "password") if k in values}
    if auth:
        top["auth"] = replace(cfg.auth, **auth)
    if values.get("tls") is False:  # -tls=false: TLS off, even if the config file has it (nats-server)
        top["tls"] = None
    else:
        tls = _tls_from_flags(values, cfg.tls)
        if tls is not None:
            top["tls"] = tls
    if values.get("no_jetstream") or values.get("jetstream") is False:
        top["jetstream"] = None
    elif values.get("jetstream") or (cfg.jetstream is not None and "store_dir" in values):
        js = cfg.jetstream or JetStreamSettings(store_dir=None)
        top["jetstream"] = replace(js, store_dir=Path(str(values["store_dir"]))) if values.get("store_dir") else js
    return replace(cfg, **top)


def _log_settings(values: dict[str, Value]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if values.get("trace") or values.get("trace_verbose") or values.get("debug_trace") or values.get("debug_trace_verbose"):
        out["log_level"] = "trace"
    elif values.get("debug"):
        out["log_level"] = "debug"
    for dest in ("logtime", "logtime_utc"):
        if dest in values:
            out[dest] = values[dest]
    if "log_format" in values:
        if values["log_format"] not in logs.FORMATS:
            raise ConfigError(f"--log_format {values['log_format']!r}: use one of {', '.join(logs.FORMATS)}")
        out["log_format"] = values["log_format"]
    return out


def _tls_from_flags(values: dict[str, Value], base: TlsSettings | None) -> TlsSettings | None:
    """nats-server's rules: --tlscert/--tlskey (or --tls, --tlsverify) turn TLS on, and a certificate and
    its key must then be given (by flags or the config file's tls)."""
    if not any(values.get(k) for k in ("tls", "tlsverify", "tlscert", "tlskey", "tlscacert")):
        return None
    cert = Path(str(values["tlscert"])) if values.get("tlscert") else (base.cert_file if base else None)
    key = Path(str(values["tlskey"])) if values.get("tlskey") else (base.key_file if base else None)
    if cert is None or key is None:
        raise ConfigError("TLS Server certificate must be present and valid: give --tlscert and --tlskey")
    settings = base if base is not None else TlsSettings(cert_file=cert, key_file=key)
    ca = Path(str(values["tlscacert"])) if values.get("tlscacert") else settings.ca_file
    return replace(settings, cert_file=cert, key_file=key, ca_file=ca,
                   verify=settings.verify or bool(values.get("tlsverify")))


def refused(values: dict[str, Value]) -> str | None:
    """The first refused flag given with a value other than its default, in words for the user."""
    for dest, value in values.items():
        flag = next(f for f in flags.FLAGS if f.dest == dest)
        if flag.status == "refused" and value not in (False, 0, ""):
            return f"{flag.spelled} is not supported: {flag.note}"
    return None


def install_link(folder: str) -> Path:
    """DIR/nats-server -> this program: first on PATH, tools that start `nats-server` start jsbroker."""
    target = Path(folder) / NATS_SERVER
    program = Path(sys.argv[0]).resolve()
    if program.name in ("__main__.py", "-c"):  # python -m jsbroker: link the installed console script
        found = Path(sys.executable).parent / PROGRAM
        program = found if found.exists() else program
    if target.exists() and not target.is_symlink():  # the real nats-server, say: never replaced
        raise ConfigError(f"{target} exists and is not a link: choose another folder or remove it")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    target.symlink_to(program)
    return target


_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt parameters
_HEAP_TOP = 1 << 20  # free space kept at the heap's top (see fix_mmap_threshold)


def fix_mmap_threshold(size: int = 128 * 1024) -> bool:
    """Keep glibc's mmap threshold at its initial 128 KiB. By default glibc raises it each time a mapped
    buffer is freed, after which buffers of that size (index arrays, snapshot parts, big payloads) come
    from the heap, which fragments and does not shrink: a 30-minute soak's RSS stepped from 125 to 200 MB;
    with the threshold fixed it stayed within 128-133 MB. Fixing it also fixes the heap's trim threshold
    and top pad at 128 KiB: the heap's top then never holds a read's or a write's buffer of 128-256 KiB,
    each of which was mapped, page-faulted in and unmapped again (a raw fan-out to 5 subscribers: ~54k
    page faults per 500k messages, half its CPU). The heap grows and keeps 1 MiB free at its top instead
    (~100 faults). Returns whether it applied (glibc only)."""
    import ctypes  # after the start-up: it is on no client's path

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return all([mallopt(_M_MMAP_THRESHOLD, size), mallopt(_M_TOP_PAD, _HEAP_TOP), mallopt(_M_TRIM_THRESHOLD, _HEAP_TOP)])


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


async def serve(config: BrokerConfig, program: str = PROGRAM) -> None:
    from .server import Broker

    broker = Broker(config)
    broker.program = program
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    lame_duck: list[asyncio.Task[None]] = []

    async def lame_duck_then_stop() -> None:
        await broker.lame_duck()
        stop.set()

    def trapped(name: str) -> None:
        broker.log.info(f'Trapped "{name}" signal', signal=name)

    def on_term() -> None:
        trapped("terminated")
        if not broker.lame_duck_mode:  # nats-server lets a lame duck finish
            stop.set()

    def on_int() -> None:
        trapped("interrupt")
        stop.set()

    def on_usr2() -> None:
        trapped("user defined signal 2")
        if not lame_duck:
            lame_duck.append(loop.create_task(lame_duck_then_stop()))

    loop.add_signal_handler(signal.SIGTERM, on_term)
    loop.add_signal_handler(signal.SIGINT, on_int)
    loop.add_signal_handler(signal.SIGUSR2, on_usr2)
    loop.add_signal_handler(signal.SIGHUP, broker.reload)
    if config.pid_file is not None:
        try:
            config.pid_file.write_text(f"{os.getpid()}")
        except OSError as e:
            raise ConfigError(f"Could not write pidfile: {e}") from None
    try:
        await broker.start()
    except BaseException:
        if config.pid_file is not None:
            config.pid_file.unlink(missing_ok=True)
        raise
    loop.call_later(SETTLE_AFTER, settle)
    try:
        await stop.wait()
    finally:
        for task in lame_duck:
            task.cancel()
        await broker.stop()
        if config.pid_file is not None:
            config.pid_file.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None, program: str | None = None) -> int:
    program = program or program_name(sys.argv[0])
    try:
        values, rest = flags.parse(list(sys.argv[1:] if argv is None else argv))
    except FlagError as e:  # Go prints the error, then the usage; nats-server's usage exits 0, an error is 2 here
        print(e, file=sys.stderr)
        print(flags.usage(program))
        return 2
    command = rest[0] if rest else None
    if values.get("help") or command == "help":
        print(flags.usage(program))
        return 0
    if values.get("version") or command == "version":
        print(version_text(program), end="")
        return 0
    if values.get("help_tls"):
        print(flags.tls_usage())
        return 0
    if command is not None:
        print(f'{program}: unrecognized command: "{command}"', file=sys.stderr)
        return 1
    problem = refused(values)
    if problem is not None:
        print(f"{program}: {problem}", file=sys.stderr)
        return 1
    if values.get("nats_server_link"):
        try:
            print(install_link(str(values["nats_server_link"])))
        except (ConfigError, OSError) as e:
            print(f"{program}: {e}", file=sys.stderr)
            return 1
        return 0
    if values.get("signal"):
        from .signals import SignalError, send

        try:
            send(str(values["signal"]))
        except SignalError as e:
            print(f"{program}: {e}", file=sys.stderr)
            return 1
        return 0
    if values.get("check_config") and not values.get("config"):
        print(f"{program}: must specify [-c, --config] option to check configuration file syntax", file=sys.stderr)
        return 1
    try:
        config = config_from_flags(values, program)
    except ConfigError as e:
        print(f"{program}: {e}", file=sys.stderr)
        return 1
    if values.get("check_config"):
        digest = hashlib.sha256(Path(str(values["config"])).read_bytes()).hexdigest()
        print(f"{program}: configuration file {values['config']} is valid (sha256:{digest})", file=sys.stderr)
        return 0
    try:
        logs.configure(config.log_level, config.log_file, config.log_format, config.logtime, config.logtime_utc)
    except OSError as e:
        print(f"{program}: error opening file: {e}", file=sys.stderr)
        return 1
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
        run(serve(config, program))
    except ConfigError as e:  # found at start: a TLS file, the pid file, the store directory
        logs.fatal(str(e))
        return 1
    except OSError as e:
        logs.fatal(f"Error listening on port: {config.host}:{config.port}, \"{e.strerror or e}\" "
                   "(pick a free port with -p/-m)")
        return 1
    finally:
        gc.enable()
    return 0
