"""A sleeper for tests: records the waits, moves a fake clock, stops on demand.

Nothing really waits, but every sleep yields to the event loop once, so several
workers driven by fake sleepers in one test take turns like real ones would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from retsu.adapters.memory.clock import ManualClock


class FakeSleeper:
    def __init__(self, clock: ManualClock | None = None, *, stop_after: int | None = None) -> None:
        self.clock = clock
        self.sleeps: list[float] = []
        self._stop_after = stop_after
        self._stopping = False
        self.on_sleep: Callable[[float], None] | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        self._stopping = True

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.clock is not None:
            self.clock.advance(seconds)
        if self.on_sleep is not None:
            self.on_sleep(seconds)
        if self._stop_after is not None and len(self.sleeps) >= self._stop_after:
            self._stopping = True
        await asyncio.sleep(0)
