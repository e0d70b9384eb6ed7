"""nats-server 2.15.1's command line: every flag it defines, in one table, parsed as Go's `flag` package does.

Go's rules: `-name` and `--name` are the same; a value follows as `-name=value` or as the next argument; a bool
flag takes `-name` (true) or `-name=false`, never a separate argument; parsing stops at the first argument that
is not a flag (or after `--`). Each flag is `supported`, `refused` (with what to do instead) or a jsbroker
extension; broker/README.md's flag table is generated from `FLAGS` (`markdown_table`, checked by a test).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["bool", "string", "int"]
Status = Literal["supported", "refused", "jsbroker"]

CLUSTER = "jsbroker is a single server: run a nats-server cluster for routes"


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]  # without dashes, as nats-server --help spells them
    kind: Kind
    dest: str
    help: str
    status: Status = "supported"
    note: str = ""  # refused: why and what to do instead; otherwise how jsbroker differs, if it does

    @property
    def spelled(self) -> str:
        """As nats-server --help spells it: "-a, --addr, --net", "-VV", "--tls"."""
        def dashes(i: int, name: str) -> str:
            short = i == 0 and len(name) <= 3 and (len(self.names) > 1 or len(name) == 1 or name.isupper())
            return ("-" if short else "--") + name

        return ", ".join(dashes(i, n) for i, n in enumerate(self.names))


FLAGS: tuple[Flag, ...] = (
    # Server options
    Flag(("a", "addr", "net"), "string", "host", "Bind to host address (default: 0.0.0.0)",
         note="the wildcard address listens dual-stack as Go's does ([::1] answers too)"),
    Flag(("p", "port"), "int", "port", "Use port for clients (default: 4222; -1: a random port)"),
    Flag(("n", "name", "server_name"), "string", "server_name", "Server name (default: auto)"),
    Flag(("P", "pid"), "string", "pid_file", "File to store PID"),
    Flag(("m", "http_port"), "int", "http_port", "Use port for http monitoring (-1: a random port)"),
    Flag(("ms", "https_port"), "int", "https_port", "Use port for https monitoring (-1: a random port)"),
    Flag(("c", "config"), "string", "config", "Configuration file"),
    Flag(("t",), "bool", "check_config", "Test configuration and exit",
         note="the digest printed is the file's sha256, not nats-server's digest of the parsed settings"),
    Flag(("sl", "signal"), "string", "signal",
         "Send signal to a running server: ldm, stop, quit, term, reload (=<pid or pid file>)",
         note="reopen is refused: the log file is not reopened (restart instead)"),
    Flag(("client_advertise",), "string", "client_advertise", "Client URL to advertise (INFO's host and port)"),
    Flag(("ports_file_dir",), "string", "ports_file_dir",
         "Creates a ports file in the specified directory (<executable_name>_<pid>.ports)"),
    # Logging options
    Flag(("l", "log"), "string", "log_file", "File to redirect log output"),
    Flag(("T", "logtime"), "bool", "logtime", "Timestamp log entries (default: true)"),
    Flag(("logtime_utc",), "bool", "logtime_utc", "Timestamps in UTC instead of local timezone (default: false)"),
    Flag(("s", "syslog"), "bool", "syslog", "Log to syslog", "refused",
         "no syslog output: log to stderr or -l FILE and let the service manager forward it"),
    Flag(("r", "remote_syslog"), "string", "remote_syslog", "Syslog server addr (udp://localhost:514)", "refused",
         "no syslog output: log to stderr or -l FILE and ship that file"),
    Flag(("D", "debug"), "bool", "debug", "Enable debugging output"),
    Flag(("V", "trace"), "bool", "trace", "Trace the raw protocol",
         note="traces jsbroker's own events; protocol lines are not traced"),
    Flag(("VV",), "bool", "trace_verbose",
         "Verbose trace (as -V: the system account's internal traffic is not traced)"),
    Flag(("DV",), "bool", "debug_trace", "Debug and trace"),
    Flag(("DVV",), "bool", "debug_trace_verbose", "Debug and verbose trace (as -DV)"),
    Flag(("log_size_limit",), "int", "log_size_limit", "Logfile size limit", "refused",
         "the log file is not rotated: rotate it outside (logrotate with copytruncate)"),
    Flag(("max_traced_msg_len",), "int", "max_traced_msg_len", "Maximum printable length for traced messages",
         "refused", "message payloads are never traced"),
    # JetStream options
    Flag(("js", "jetstream"), "bool", "jetstream", "Enable JetStream functionality",
         note="as jsbroker on by default (-js=false turns it off); as nats-server off unless given"),
    Flag(("sd", "store_dir"), "string", "store_dir", "Set the storage directory"),
    # Authorization options
    Flag(("user",), "string", "user", "User required for connections"),
    Flag(("pass",), "string", "password", "Password required for connections"),
    Flag(("auth",), "string", "token", "Authorization token required for connections"),
    # TLS options
    Flag(("tls",), "bool", "tls", "Enable TLS, do not verify clients (default: false)"),
    Flag(("tlscert",), "string", "tlscert", "Server certificate file"),
    Flag(("tlskey",), "string", "tlskey", "Private key for server certificate"),
    Flag(("tlsverify",), "bool", "tlsverify", "Enable TLS, verify client certificates"),
    Flag(("tlscacert",), "string", "tlscacert", "Client certificate CA for verification"),
    # Cluster options
    Flag(("routes",), "string", "routes", "Routes to solicit and connect", "refused", CLUSTER),
    Flag(("cluster", "cluster_listen"), "string", "cluster", "Cluster URL for solicited routes", "refused", CLUSTER),
    Flag(("cluster_name",), "string", "cluster_name", "Cluster Name", "refused", CLUSTER),
    Flag(("no_advertise",), "bool", "no_advertise", "Do not advertise known cluster information to clients",
         "refused", CLUSTER),
    Flag(("cluster_advertise",), "string", "cluster_advertise", "Cluster URL to advertise to other servers",
         "refused", CLUSTER),
    Flag(("connect_retries",), "int", "connect_retries", "For implicit routes, number of connect retries", "refused",
         CLUSTER),
    # Profiling options
    Flag(("profile",), "int", "profile", "Profiling HTTP port", "refused",
         "Go's pprof profiler does not exist here: profile the Python process (py-spy)"),
    # Common options
    Flag(("h", "help"), "bool", "help", "Show this message"),
    Flag(("v", "version"), "bool", "version", "Show version"),
    Flag(("help_tls",), "bool", "help_tls", "TLS help"),
    # jsbroker's own
    Flag(("no_jetstream",), "bool", "no_jetstream", "Run the core NATS server only (as -js=false)", "jsbroker"),
    Flag(("max_payload",), "string", "max_payload", "Maximum message payload (bytes or e.g. 1MB; default 1MB)",
         "jsbroker"),
    Flag(("lame_duck_duration",), "string", "lame_duck_duration",
         "Lame duck mode closes the clients over this long (default 2m)", "jsbroker"),
    Flag(("lame_duck_grace_period",), "string", "lame_duck_grace_period",
         "Lame duck mode waits this long before closing clients (default 10s)", "jsbroker"),
    Flag(("log_format",), "string", "log_format", "nats (nats-server's lines, the default) or structured (key=value)",
         "jsbroker"),
    Flag(("nats_server_link",), "string", "nats_server_link",
         "Make DIR/nats-server a link to this program (it then behaves as nats-server) and exit", "jsbroker"),
)

BY_NAME = {name: flag for flag in FLAGS for name in flag.names}
Value = bool | str | int


class FlagError(Exception):
    """A command line Go's flag package refuses; the message is Go's."""


_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
_GO_INT = re.compile(r"[+-]?(0[xX][0-9a-fA-F_]+|0[oO]?[0-7_]*|0[bB][01_]+|[1-9][0-9_]*)")


def _go_int(text: str) -> int:
    """strconv.ParseInt(text, 0, 64): decimal, 0x hex, 0 / 0o octal, 0b binary."""
    if not _GO_INT.fullmatch(text):
        raise ValueError("parse error")
    sign = -1 if text[0] == "-" else 1
    digits = text.lstrip("+-").replace("_", "")
    if len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXoObB":
        digits = "0o" + digits[1:]
    value = sign * int(digits, 0)
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError("value out of range")
    return value


def parse(args: list[str]) -> tuple[dict[str, Value], list[str]]:
    """Go flag.Parse: (the flags given, by dest, in order; the arguments after the flags)."""
    values: dict[str, Value] = {}
    rest = list(args)
    while rest:
        arg = rest[0]
        if len(arg) < 2 or arg[0] != "-":
            break
        rest.pop(0)
        if arg == "--":
            break
        name = arg[2:] if arg[1] == "-" else arg[1:]
        if not name or name[0] in "-=":
            raise FlagError(f"bad flag syntax: {arg}")
        name, has_value, text = name.partition("=")
        flag = BY_NAME.get(name)
        if flag is None:
            raise FlagError(f"flag provided but not defined: -{name}")
        if flag.kind == "bool":
            if has_value and text not in _TRUE | _FALSE:
                raise FlagError(f'invalid boolean value "{text}" for -{name}: parse error')
            values[flag.dest] = not has_value or text in _TRUE
            continue
        if not has_value:
            if not rest:
                raise FlagError(f"flag needs an argument: -{name}")
            text = rest.pop(0)
        if flag.kind == "int":
            try:
                values[flag.dest] = _go_int(text)
            except ValueError as e:
                raise FlagError(f'invalid value "{text}" for flag -{name}: {e}') from None
        else:
            values[flag.dest] = text
    return values, rest


def usage(program: str) -> str:
    """The help text, nats-server's layout (flags, argument, what it does), with jsbroker's notes."""
    lines = [f"\nUsage: {program} [options]\n"]
    for flag in FLAGS:
        argument = "" if flag.kind == "bool" else f" <{flag.dest}>"
        text = flag.help if flag.status != "refused" else f"{flag.help} (refused: {flag.note})"
        lines.append(f"    {(flag.spelled + argument):<34} {text}")
    return "\n".join(lines) + "\n"


def tls_usage() -> str:
    """--help_tls: the TLS flags (nats-server's text also lists cipher and curve names, which are its Go ones)."""
    return "\n".join(f"    {flag.spelled:<34} {flag.help}" for flag in FLAGS if flag.dest.startswith("tls")) + \
        "\n\nMore settings (verify, timeout, the CA file) go in the config file's tls block.\n"


def markdown_table() -> str:
    """broker/README.md's flag table."""
    rows = ["| flag | meaning | jsbroker |", "|---|---|---|"]
    for flag in FLAGS:
        status = {"supported": "supported", "refused": "refused", "jsbroker": "jsbroker only"}[flag.status]
        spelled = flag.spelled.replace(", ", " ")
        note = f": {flag.note}" if flag.note else ""
        rows.append(f"| `{spelled}` | {flag.help} | {status}{note} |")
    return "\n".join(rows) + "\n"
