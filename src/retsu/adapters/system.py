"""The real clock and id generator."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from uuid import UUID

from retsu.adapters.ids import uuid7, uuid7_batch


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class Uuid7Generator:
    def new_id(self) -> UUID:
        return uuid7()

    def new_ids(self, count: int) -> list[UUID]:
        return uuid7_batch(count)


class StopAwareSleeper:
    """Sleeps that end early once ``stop()`` is called (SIGTERM/SIGINT)."""

    def __init__(self) -> None:
        self._stop = asyncio.Event()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
