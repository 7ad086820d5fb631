"""The event loop every role runs on: uvloop where available (a faster loop and
faster transports for the HTTP and database sockets), else asyncio's own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every platform we ship
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(main)
