"""The repository contract on the in-memory adapter, with a fake clock."""

from __future__ import annotations

from uuid import UUID

import pytest

from retsu.adapters.memory.clock import FakeClock
from retsu.adapters.memory.repository import InMemoryRepository
from retsu.domain.message import DeadLetter
from tests.contract.repository_contract import RepositoryContract


class MemoryHarness:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.repository = InMemoryRepository(self.clock)

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def dead_letters(self, queue_id: UUID) -> list[DeadLetter]:
        return self.repository.dead_letters_of(queue_id)

    async def stored(self, queue_id: UUID) -> int:
        return self.repository.message_count(queue_id)


class TestInMemoryRepository(RepositoryContract):
    @pytest.fixture
    def harness(self) -> MemoryHarness:
        return MemoryHarness()
