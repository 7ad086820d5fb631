"""The database-health contract on the memory twin (time on a ManualClock)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from tests.contract.health_contract import DatabaseHealthContract


class MemoryHealthHarness:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.storage = MemoryStorage(self.clock)
        self.health = self.storage

    @asynccontextmanager
    async def hold_transaction(self, application_name: str) -> AsyncIterator[None]:
        held = self.storage.hold_transaction(application_name)
        try:
            yield
        finally:
            held.end()

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)


class TestMemoryDatabaseHealth(DatabaseHealthContract):
    @pytest.fixture
    def harness(self) -> MemoryHealthHarness:
        return MemoryHealthHarness()
