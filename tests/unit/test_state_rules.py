"""SPEC §3.2 counting rules, as the in-memory repository's ``read_state`` applies them.

ready: unexpired and deliverable now (never delivered and past any delay, or an
elapsed lease with attempts left); in flight: an active lease, even if the message
has expired; delayed: never delivered, still inside its delay. An elapsed lease
with no attempts left, or an expired ready message, counts in none.

The scripted scenario below is shared with tests/integration/test_state_reader.py,
which plays it against PostgreSQL and compares the PostgreSQL state reader with
these results.
"""

from __future__ import annotations

import uuid
from typing import Protocol
from uuid import UUID

import pytest

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.application.clean_expired_messages import CleanExpiredMessages
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.message import MessageToStore, Priority
from retsu.domain.queue import Queue, QueueSettings
from retsu.domain.state import PriorityState, QueueStats

H, M, L = Priority.HIGH, Priority.MEDIUM, Priority.LOW

# (ready, in_flight, delayed, dead_letters, oldest_ready_age, oldest_in_flight_age)
Counts = tuple[int, int, int, int, float, float]


def audit() -> AuditEntry:
    return AuditEntry.of_queue(AuditAction.QUEUE_CREATED, uuid.uuid4(), Caller())


class ScenarioDriver(Protocol):
    """One storage adapter, with a way to move its clock."""

    async def add_queue(self, name: str, *, max_attempts: int) -> UUID: ...

    async def send(
        self, queue_id: UUID, priority: Priority, *, ttl: int, delay: int = 0, n: int = 1
    ) -> None: ...

    async def receive(
        self, queue_id: UUID, *, n: int, visibility: int, max_attempts: int
    ) -> tuple[int, int]:
        """(delivered, dead-lettered)"""
        ...

    async def later(self, seconds: float) -> None: ...

    async def read_state(self) -> list[PriorityState]: ...


async def play_first_act(d: ScenarioDriver) -> dict[str, UUID]:
    """Up to t = 40 s. Returns the queue ids by name."""
    q = {
        "alpha": await d.add_queue("alpha", max_attempts=2),
        "bravo": await d.add_queue("bravo", max_attempts=2),
        "charlie": await d.add_queue("charlie", max_attempts=1),
        "delta": await d.add_queue("delta", max_attempts=1),
        "echo": await d.add_queue("echo", max_attempts=5),
    }
    # t = 0
    await d.send(q["alpha"], H, ttl=1000, n=2)  # ready, oldest at the end: 40 s
    await d.send(q["alpha"], L, ttl=20)  # expires ready at t = 20: counts in none
    await d.send(q["alpha"], M, ttl=1000, delay=500)  # delayed
    await d.send(q["bravo"], M, ttl=1000, n=3)
    assert await d.receive(q["bravo"], n=3, visibility=30, max_attempts=2) == (3, 0)
    await d.send(q["charlie"], H, ttl=25)
    assert await d.receive(q["charlie"], n=1, visibility=60, max_attempts=1) == (1, 0)
    await d.send(q["charlie"], L, ttl=1000, n=2)
    assert await d.receive(q["charlie"], n=2, visibility=30, max_attempts=1) == (2, 0)
    await d.send(q["delta"], H, ttl=1000, n=2)
    assert await d.receive(q["delta"], n=2, visibility=5, max_attempts=1) == (2, 0)
    await d.send(q["echo"], M, ttl=35)
    assert await d.receive(q["echo"], n=1, visibility=30, max_attempts=5) == (1, 0)
    await d.later(10)
    # t = 10
    await d.send(q["alpha"], H, ttl=1000)
    assert await d.receive(q["delta"], n=1, visibility=30, max_attempts=1) == (0, 2)
    await d.later(30)
    # t = 40: bravo's three leases have elapsed (attempts left); one is claimed again.
    assert await d.receive(q["bravo"], n=1, visibility=100, max_attempts=2) == (1, 0)
    return q


# At t = 40 s.
FIRST_ACT: dict[tuple[str, Priority], Counts] = {
    ("alpha", H): (3, 0, 0, 0, 40, 0),
    ("alpha", M): (0, 0, 1, 0, 0, 0),
    ("alpha", L): (0, 0, 0, 0, 0, 0),  # expired ready: none
    ("bravo", H): (0, 0, 0, 0, 0, 0),
    ("bravo", M): (2, 1, 0, 0, 40, 40),  # elapsed leases with attempts left are ready
    ("bravo", L): (0, 0, 0, 0, 0, 0),
    ("charlie", H): (0, 1, 0, 0, 0, 40),  # expired at 25 but leased until 60: in flight
    ("charlie", M): (0, 0, 0, 0, 0, 0),
    ("charlie", L): (0, 0, 0, 0, 0, 0),  # elapsed leases, no attempts left: none
    ("delta", H): (0, 0, 0, 2, 0, 0),
    ("delta", M): (0, 0, 0, 0, 0, 0),
    ("delta", L): (0, 0, 0, 0, 0, 0),
    ("echo", H): (0, 0, 0, 0, 0, 0),
    ("echo", M): (0, 0, 0, 0, 0, 0),  # lease over and expired: none, attempts left or not
    ("echo", L): (0, 0, 0, 0, 0, 0),
}


async def play_second_act(d: ScenarioDriver) -> None:
    await d.later(25)  # t = 65: charlie's expired message loses its lease


SECOND_ACT: dict[tuple[str, Priority], Counts] = {
    **{
        key: (c[0], c[1], c[2], c[3], c[4] + 25 if c[4] else 0, c[5] + 25 if c[5] else 0)
        for key, c in FIRST_ACT.items()
    },
    ("charlie", H): (0, 0, 0, 0, 0, 0),
}


def as_counts(states: list[PriorityState]) -> dict[tuple[str, Priority], Counts]:
    return {
        (s.queue_name, s.priority): (
            s.ready,
            s.in_flight,
            s.delayed,
            s.dead_letters,
            s.oldest_ready_age_seconds,
            s.oldest_in_flight_age_seconds,
        )
        for s in states
    }


def assert_counts(
    actual: dict[tuple[str, Priority], Counts],
    expected: dict[tuple[str, Priority], Counts],
    *,
    age_tolerance: float = 0.0,
) -> None:
    assert actual.keys() == expected.keys()
    for key, want in expected.items():
        got = actual[key]
        assert got[:4] == want[:4], (key, got, want)
        for got_age, want_age in zip(got[4:], want[4:], strict=True):
            assert abs(got_age - want_age) <= age_tolerance, (key, got, want)


class MemoryDriver:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.repository = MemoryStorage(self.clock)

    async def add_queue(self, name: str, *, max_attempts: int) -> UUID:
        queue = await self.repository.add_queue(
            Queue(
                id=uuid.uuid4(),
                name=name,
                settings=QueueSettings(max_delivery_attempts=max_attempts),
                paused=False,
                created_at=self.clock.now(),
                updated_at=self.clock.now(),
            ),
            audit(),
        )
        return queue.id

    async def send(
        self, queue_id: UUID, priority: Priority, *, ttl: int, delay: int = 0, n: int = 1
    ) -> None:
        await self.repository.enqueue(
            queue_id,
            [MessageToStore(uuid.uuid4(), "x", priority, ttl, delay) for _ in range(n)],
        )

    async def receive(
        self, queue_id: UUID, *, n: int, visibility: int, max_attempts: int
    ) -> tuple[int, int]:
        result = await self.repository.dequeue(
            queue_id,
            limit=n,
            visibility_timeout_seconds=visibility,
            dead_letter_batch_size=100,
        )
        return len(result.messages), result.dead_lettered

    async def later(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def read_state(self) -> list[PriorityState]:
        return await self.repository.read_state()


async def test_the_scripted_scenario_counts_by_the_rules() -> None:
    d = MemoryDriver()
    q = await play_first_act(d)
    states = await d.read_state()
    # Queues in byte order of their names, priorities from HIGH to LOW, zeros included.
    assert [(s.queue_name, s.priority) for s in states] == list(FIRST_ACT)
    assert_counts(as_counts(states), FIRST_ACT)

    await play_second_act(d)
    assert_counts(as_counts(await d.read_state()), SECOND_ACT)

    # The cleaner removes only messages that already counted in none: nothing changes.
    class NoEvents:
        def expired(self, queue_name: str, delivery_history: str, count: int = 1) -> None: ...

        def dead_letters_purged(self, queue_name: str, count: int = 1) -> None: ...

    cleaned = await CleanExpiredMessages(d.repository, NoEvents())(500)
    assert cleaned.removed == 3  # alpha LOW, charlie HIGH, echo MEDIUM
    assert_counts(as_counts(await d.read_state()), SECOND_ACT)

    # One queue alone.
    one = await d.repository.read_state(q["bravo"])
    assert [(s.queue_name, s.priority) for s in one] == [("bravo", H), ("bravo", M), ("bravo", L)]
    assert await d.repository.read_state(uuid.uuid4()) == []


@pytest.fixture
def driver() -> MemoryDriver:
    return MemoryDriver()


async def only(d: MemoryDriver, name: str, priority: Priority = M) -> PriorityState:
    [state] = [s for s in await d.read_state() if s.queue_name == name and s.priority is priority]
    return state


async def test_a_delayed_message_becomes_ready_when_its_delay_ends(driver: MemoryDriver) -> None:
    q = await driver.add_queue("q", max_attempts=5)
    await driver.send(q, M, ttl=100, delay=30)
    await driver.later(29.9)
    state = await only(driver, "q")
    assert (state.ready, state.delayed, state.oldest_ready_age_seconds) == (0, 1, 0)
    await driver.later(0.1)
    state = await only(driver, "q")
    assert (state.ready, state.delayed) == (1, 0)
    assert state.oldest_ready_age_seconds == pytest.approx(30)  # measured from enqueue


async def test_a_lease_is_in_flight_until_it_ends_then_ready_while_attempts_are_left(
    driver: MemoryDriver,
) -> None:
    q = await driver.add_queue("q", max_attempts=2)
    await driver.send(q, M, ttl=1000)
    await driver.receive(q, n=1, visibility=30, max_attempts=2)
    await driver.later(29.9)
    assert (await only(driver, "q")).in_flight == 1
    await driver.later(0.1)  # lease over, one attempt left
    state = await only(driver, "q")
    assert (state.ready, state.in_flight) == (1, 0)
    await driver.receive(q, n=1, visibility=30, max_attempts=2)
    await driver.later(30)  # lease over, no attempt left
    state = await only(driver, "q")
    assert (state.ready, state.in_flight, state.delayed, state.dead_letters) == (0, 0, 0, 0)
    assert await driver.receive(q, n=1, visibility=30, max_attempts=2) == (0, 1)
    assert (await only(driver, "q")).dead_letters == 1


async def test_with_nothing_ready_the_oldest_age_is_zero(driver: MemoryDriver) -> None:
    await driver.add_queue("q", max_attempts=2)
    await driver.later(100)
    state = await only(driver, "q")
    assert (state.oldest_ready_age_seconds, state.oldest_in_flight_age_seconds) == (0, 0)


def test_queue_stats_add_up_priorities_and_take_the_oldest_age() -> None:
    def p(priority: Priority, ready: int, age: float) -> PriorityState:
        return PriorityState(uuid.uuid4(), "q", priority, ready, 1, 2, 3, age, 9.0)

    stats = QueueStats.combine([p(H, 1, 5.0), p(M, 2, 7.0), p(L, 0, 0.0)])
    assert stats == QueueStats(
        ready=3, in_flight=3, delayed=6, dead_letters=9, oldest_ready_age_seconds=7.0
    )
    assert QueueStats.combine([]) == QueueStats(0, 0, 0, 0, 0.0)
