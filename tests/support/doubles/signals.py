"""Message signals in virtual time for unit tests.

``FakeMessageSignals`` is the in-process fan-out (``retsu.adapters.signals``) whose
waits end, when nothing signals them, only when the test moves a ``ManualClock`` past
their timeout with ``advance()`` — nobody sleeps.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.signals import InProcessMessageSignals


class FakeMessageSignals(InProcessMessageSignals):
    """Virtual time: an unsignalled wait ends when ``advance()`` moves the clock past it."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock
        # Every timeout asked for, in order (a test can assert a poll never waited).
        self.waits: list[float] = []
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()

    def monotonic(self) -> float:
        """The fake clock as a monotonic time source (for the Dequeue use case)."""
        return self.clock.now().timestamp()

    async def _sleep_until(self, woken: asyncio.Future[None], seconds: float) -> None:
        self.waits.append(seconds)
        timer = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (self.monotonic() + seconds, next(self._sequence), timer))
        try:
            await asyncio.wait((woken, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()

    async def settle(self) -> None:
        """Let every runnable task run until it waits again (no real time passes)."""
        for _ in range(50):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move virtual time forward, ending each wait whose timeout falls within it, in
        order, and letting the woken polls run before time moves on."""
        await self.settle()
        target = self.monotonic() + seconds
        while True:
            while self._timers and self._timers[0][2].done():
                heapq.heappop(self._timers)
            if not self._timers or self._timers[0][0] > target:
                break
            deadline, _, timer = heapq.heappop(self._timers)
            if deadline > self.monotonic():
                self.clock.advance(deadline - self.monotonic())
            timer.set_result(None)
            await self.settle()
        if target > self.monotonic():
            self.clock.advance(target - self.monotonic())
        await self.settle()
