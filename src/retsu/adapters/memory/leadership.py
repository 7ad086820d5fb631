"""Collector leadership in memory: one lock shared by every collector of a test."""

from __future__ import annotations

from collections.abc import Sequence

from retsu.adapters.memory.storage import MemoryStorage
from retsu.application.ports import LeadershipLost
from retsu.domain.state import PriorityState


class InMemoryLock:
    def __init__(self) -> None:
        self.holder: object | None = None


class InMemoryLeaderSession:
    def __init__(self, lock: InMemoryLock, storage: MemoryStorage) -> None:
        self._lock = lock
        self._storage = storage
        self.released = False
        # A test sets these to make the next read fail: the session is gone (killed,
        # the database restarted), or a query fails on a session that is still there.
        self.broken = False
        self.failing = False

    async def read_state(self) -> list[PriorityState]:
        if self.broken or self._lock.holder is not self:
            self._lock.holder = None  # the lock went with the session
            raise LeadershipLost("the leader's database session is gone")
        if self.failing:
            raise RuntimeError("the state query failed")
        return await self._storage.read_state()

    async def record_history(self, state: Sequence[PriorityState]) -> None:
        if self.broken or self._lock.holder is not self:
            self._lock.holder = None
            raise LeadershipLost("the leader's database session is gone")
        await self._storage.record_history(state)

    async def release(self) -> None:
        self.released = True
        if self._lock.holder is self:
            self._lock.holder = None


class InMemoryLeadership:
    def __init__(self, lock: InMemoryLock, storage: MemoryStorage) -> None:
        self._lock = lock
        self._storage = storage
        self.sessions: list[InMemoryLeaderSession] = []

    async def try_acquire(self) -> InMemoryLeaderSession | None:
        if self._lock.holder is not None:
            return None
        session = InMemoryLeaderSession(self._lock, self._storage)
        self._lock.holder = session
        self.sessions.append(session)
        return session
