"""Level-filtered logging in two formats. `nats` (the default) writes nats-server's lines, so tools that wait on
or parse its output work unchanged: `[pid] 2026/11/28 13:14:15.123456 [INF] text` (`-T=false`: no time).
`structured` writes `time level "text" key=value...` for log pipelines.

Modules get a `Logger` with bound context (`get_logger("jsbroker", server=...)`) and log nats-server's text plus
fields: `log.info("Listening for client connections on 0.0.0.0:4222", port=4222)`. A record's message is the
text with its fields (`"text" key=value`), so embedded brokers log usefully through whatever the host
application configured on the standard `logging` module; `configure()` is called once by the CLI.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

TRACE = 5
logging.addLevelName(TRACE, "TRACE")
_LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_LABELS = {TRACE: "TRC", logging.DEBUG: "DBG", logging.INFO: "INF", logging.WARNING: "WRN", logging.ERROR: "ERR",
           logging.CRITICAL: "FTL"}
FORMATS = ("nats", "structured")


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

    def _emit(self, level: int, text: str, fields: dict[str, Any], exc_info: bool = False) -> None:
        if not self._log.isEnabledFor(level):
            return
        merged = {k: v for k, v in {**self._context, **fields}.items() if v is not None}
        tail = " ".join(f"{k}={_fmt_value(v)}" for k, v in merged.items())
        message = f"{_fmt_value(text)} {tail}" if tail else _fmt_value(text)
        self._log.log(level, message, exc_info=exc_info, extra={"nats_text": text})

    def trace(self, text: str, **fields: Any) -> None:
        self._emit(TRACE, text, fields)

    def debug(self, text: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, text, fields)

    def info(self, text: str, **fields: Any) -> None:
        self._emit(logging.INFO, text, fields)

    def warning(self, text: str, **fields: Any) -> None:
        self._emit(logging.WARNING, text, fields)

    def error(self, text: str, **fields: Any) -> None:
        self._emit(logging.ERROR, text, fields)

    def exception(self, text: str, **fields: Any) -> None:
        self._emit(logging.ERROR, text, fields, exc_info=True)

    def fatal(self, text: str, **fields: Any) -> None:
        self._emit(logging.CRITICAL, text, fields)


class NatsFormatter(logging.Formatter):
    """nats-server's line: `[pid] date time.micros [INF] text`, local time unless `utc`, no time with `logtime`
    False."""

    def __init__(self, logtime: bool = True, utc: bool = False) -> None:
        super().__init__()
        self.logtime = logtime
        self.utc = utc
        self.prefix = f"[{os.getpid()}] "

    def format(self, record: logging.LogRecord) -> str:
        text = getattr(record, "nats_text", None) or record.getMessage()
        label = _LABELS.get(record.levelno, "INF")
        if not self.logtime:
            line = f"{self.prefix}[{label}] {text}"
        else:
            stamp = (time.gmtime if self.utc else time.localtime)(record.created)
            micros = int(record.created % 1 * 1_000_000)
            line = f"{self.prefix}{time.strftime('%Y/%m/%d %H:%M:%S', stamp)}.{micros:06d} [{label}] {text}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def get_logger(name: str, **context: Any) -> Logger:
    return Logger(logging.getLogger(name), context)


def level_from_name(name: str) -> int:
    try:
        return _LEVELS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown log level {name!r}; use one of {', '.join(_LEVELS)}") from None


def configure(level: str = "info", file: Path | None = None, fmt: str = "nats", logtime: bool = True,
              utc: bool = False) -> None:
    """Send `jsbroker` logs to stderr (or `file`, appended to) in `fmt` (FORMATS)."""
    handler: logging.Handler = logging.FileHandler(file) if file else logging.StreamHandler(sys.stderr)
    if fmt == "nats":
        handler.setFormatter(NatsFormatter(logtime, utc))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("jsbroker")
    root.handlers[:] = [handler]
    root.setLevel(level_from_name(level))
    root.propagate = False


def fatal(text: str) -> None:
    """An error that ends the program, as nats-server's [FTL] line (through stderr if logging is not set up)."""
    log = logging.getLogger("jsbroker")
    if log.handlers:
        get_logger("jsbroker").fatal(text)
    else:
        print(text, file=sys.stderr)
