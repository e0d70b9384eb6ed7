"""`jsbroker --signal <command>=<pid or pid file>`: send a running jsbroker a command, as nats-server's
`--signal`. The pid may be a number or the path of the file `--pid` / `pid_file` wrote.

Commands and their signals (nats-server's): ldm SIGUSR2 (lame duck mode), quit SIGINT, term SIGTERM
(graceful stop), stop SIGKILL, reload SIGHUP (re-read TLS files). `reopen` (SIGUSR1, log reopening)
is refused: jsbroker does not reopen its log file and the signal would kill it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

COMMANDS = {"ldm": signal.SIGUSR2, "quit": signal.SIGINT, "term": signal.SIGTERM, "stop": signal.SIGKILL,
            "reload": signal.SIGHUP}


class SignalError(Exception):
    """What is wrong with a --signal request, in words for the user."""


def parse(spec: str) -> tuple[signal.Signals, int]:
    """`<command>=<pid or pid file>` -> (signal, pid)."""
    command, sep, target = spec.partition("=")
    if command == "reopen":
        raise SignalError("reopen is not supported: jsbroker does not reopen its log file (restart it instead)")
    if command not in COMMANDS:
        raise SignalError(f"unknown signal {command!r}; use one of {', '.join(COMMANDS)}")
    if not sep or not target:
        raise SignalError(f"give the process: --signal {command}=<pid or pid file>")
    text = target
    if not target.isdigit():
        try:
            text = Path(target).read_text().strip()
        except OSError as e:
            raise SignalError(f"cannot read the pid file {target}: {e.strerror or e}") from None
    if not text.isdigit() or int(text) <= 0:
        raise SignalError(f"invalid pid: {text!r}")
    return COMMANDS[command], int(text)


def send(spec: str) -> None:
    sig, pid = parse(spec)
    try:
        os.kill(pid, sig)
    except OSError as e:
        raise SignalError(f"signal {sig.name} to {pid}: {e.strerror or e}") from None
