"""The storage contract on the in-memory adapter, with a fake clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from uuid import UUID

import pytest

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.leadership import InMemoryLeadership, InMemoryLock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.domain.message import DeadLetter
from tests.contract.repository_contract import RepositoryContract


class MemoryHarness:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.repository = MemoryStorage(self.clock)
        # One object serves every port.
        self.queues = self.messages = self.dead_letters = self.repository
        self.audit_log = self.state = self.maintenance = self.repository
        self.browser = self.repository
        self.leadership = InMemoryLeadership(InMemoryLock(), self.repository)
        self.consumers = self.history = self.schedules = self.repository

    async def now(self) -> datetime:
        return self.clock.now()

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def rewind_schedule(self, schedule_id: UUID, next_run_at: datetime) -> None:
        schedules = self.repository._schedules
        schedules[schedule_id] = replace(schedules[schedule_id], next_run_at=next_run_at)

    async def dead_letter_records(self, queue_id: UUID) -> list[DeadLetter]:
        return self.repository.dead_letters_of(queue_id)

    async def stored(self, queue_id: UUID) -> int:
        return self.repository.message_count(queue_id)

    async def idempotency_keys(self, queue_id: UUID) -> int:
        return self.repository.idempotency_key_count(queue_id)


class TestInMemoryRepository(RepositoryContract):
    @pytest.fixture
    def harness(self) -> MemoryHarness:
        return MemoryHarness()
