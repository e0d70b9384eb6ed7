"""Waiting for a state without sleeping blindly: poll a check until it holds, or fail saying what was
awaited and what was last seen (tests/README.md, "Waiting without sleeping")."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


def poll(check: Callable[[], Any], *, timeout: float, interval: float = 0.1, what: str = "condition") -> Any:
    """Call `check` until it returns a truthy value; fail with `what` (and the last value) at the timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
        time.sleep(interval)


async def poll_async(check: Callable[[], Any], *, timeout: float, interval: float = 0.05,
                     what: str = "condition") -> Any:
    """`poll` for tests on an event loop: `check` may return a value or an awaitable of one; the loop
    keeps running (servers' timers, subscriptions) while it waits."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
        await asyncio.sleep(interval)
