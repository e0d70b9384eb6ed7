"""Structured, level-filtered logging: one `key=value` line per event. The default level, info, shows the
start-up banner and lifecycle events only (like nats-server's notices); per-client events are debug.

Modules get a `Logger` with bound context (`get_logger("jsbroker", server=...)`) and log an event name
plus fields: `log.info("client connected", cid=5)`. `configure()` is called once by the CLI; embedded
brokers inherit whatever the host application configured on the standard `logging` module.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

TRACE = 5
logging.addLevelName(TRACE, "TRACE")
_LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _fmt_value(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "='):
        return '"' + text.replace('"', '\\"') + '"'
    return text


class Logger:
    """A thin wrapper binding context fields to a stdlib logger."""

    __slots__ = ("_log", "_context")

    def __init__(self, log: logging.Logger, context: dict[str, Any]) -> None:
        self._log = log
        self._context = context

    def bind(self, **fields: Any) -> "Logger":
        return Logger(self._log, {**self._context, **fields})

    def _emit(self, level: int, event: str, fields: dict[str, Any], exc_info: bool = False) -> None:
        if not self._log.isEnabledFor(level):
            return
        merged = {k: v for k, v in {**self._context, **fields}.items() if v is not None}
        tail = " ".join(f"{k}={_fmt_value(v)}" for k, v in merged.items())
        self._log.log(level, f"{_fmt_value(event)} {tail}" if tail else _fmt_value(event), exc_info=exc_info)

    def trace(self, event: str, **fields: Any) -> None:
        self._emit(TRACE, event, fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, event, fields, exc_info=True)


def get_logger(name: str, **context: Any) -> Logger:
    return Logger(logging.getLogger(name), context)


def level_from_name(name: str) -> int:
    try:
        return _LEVELS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown log level {name!r}; use one of {', '.join(_LEVELS)}") from None


def configure(level: str = "info", file: Path | None = None) -> None:
    """Send `jsbroker` logs to stderr (or `file`) as `time level event key=value...` lines."""
    handler: logging.Handler = logging.FileHandler(file) if file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("jsbroker")
    root.handlers[:] = [handler]
    root.setLevel(level_from_name(level))
    root.propagate = False
