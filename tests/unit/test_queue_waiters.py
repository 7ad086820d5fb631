"""Which queues an API process registers in ``queue_waiter`` (migration 0013), and when.

``WaiterRegistry`` is the PostgreSQL signals' bookkeeping, fed by the in-process fan-out
when a long poll starts to wait and when it ends; no I/O, time given by the test. The
statements it plans run against a real database in
``tests/integration/test_queue_waiters.py``.
"""

from __future__ import annotations

import asyncio
import uuid

from retsu.adapters.postgres.notifications import WaiterRegistry
from retsu.adapters.signals import InProcessMessageSignals

REFRESH, LINGER = 10.0, 5.0


def registry() -> WaiterRegistry:
    return WaiterRegistry(refresh_seconds=REFRESH, linger_seconds=LINGER)


def test_nothing_waits_nothing_is_due() -> None:
    waiters = registry()
    assert waiters.due(0.0) is None
    assert not waiters.has_rows


def test_a_first_waiter_is_written_at_once_and_its_waiters_told_after() -> None:
    waiters, queue = registry(), uuid.uuid4()
    assert waiters.started(queue, 0.0) is True
    assert waiters.due(0.0) == 0
    sync = waiters.plan(0.0)
    assert (sync.keep, sync.drop, sync.new) == ([queue], [], [queue])
    waiters.synced(sync, 0.0)
    assert waiters.registered == {queue}
    # A second poll on a registered queue writes nothing; the refresh is next.
    assert waiters.started(queue, 1.0) is False
    assert waiters.due(1.0) == REFRESH - 1.0


def test_rows_are_refreshed_while_polls_wait() -> None:
    waiters, queue = registry(), uuid.uuid4()
    waiters.started(queue, 0.0)
    waiters.synced(waiters.plan(0.0), 0.0)
    assert waiters.due(REFRESH) == 0
    sync = waiters.plan(REFRESH)
    assert (sync.keep, sync.drop, sync.new) == ([queue], [], [])


def test_a_row_lingers_after_its_last_waiter_then_is_deleted() -> None:
    waiters, queue = registry(), uuid.uuid4()
    waiters.started(queue, 0.0)
    waiters.started(queue, 0.0)
    waiters.synced(waiters.plan(0.0), 0.0)
    assert waiters.ended(queue, 1.0) is False  # one still waits
    assert waiters.ended(queue, 2.0) is True
    assert waiters.due(2.0) == LINGER
    assert waiters.plan(2.0 + LINGER - 0.1).drop == []
    sync = waiters.plan(2.0 + LINGER)
    assert (sync.keep, sync.drop) == ([], [queue])
    waiters.synced(sync, 2.0 + LINGER)
    assert waiters.registered == frozenset() and not waiters.has_rows
    assert waiters.due(100.0) is None


def test_a_busy_consumer_keeps_its_row_instead_of_churning_it() -> None:
    waiters, queue = registry(), uuid.uuid4()
    waiters.started(queue, 0.0)
    waiters.synced(waiters.plan(0.0), 0.0)
    for moment in range(1, 40):  # a poll that waits a little now and then
        waiters.ended(queue, moment - 0.5)
        assert waiters.started(queue, float(moment)) is False
    # Only the refreshes were due meanwhile (the row never went).
    assert waiters.plan(40.0).drop == []


def test_a_lost_connection_writes_everything_again() -> None:
    waiters, waiting, lingering = registry(), uuid.uuid4(), uuid.uuid4()
    waiters.started(waiting, 0.0)
    waiters.started(lingering, 0.0)
    waiters.synced(waiters.plan(0.0), 0.0)
    waiters.ended(lingering, 1.0)
    waiters.forget()
    assert waiters.due(2.0) == 0
    sync = waiters.plan(2.0)
    assert sorted(sync.keep) == sorted([waiting, lingering]) and sync.new == [waiting]


def test_closing_deletes_every_row() -> None:
    waiters, waiting, lingering = registry(), uuid.uuid4(), uuid.uuid4()
    waiters.started(waiting, 0.0)
    waiters.started(lingering, 0.0)
    waiters.synced(waiters.plan(0.0), 0.0)
    waiters.ended(lingering, 1.0)
    assert waiters.due(1.5, closing=True) == 0
    sync = waiters.plan(1.5, closing=True)
    assert sync.keep == [] and sorted(sync.drop) == sorted([waiting, lingering])
    waiters.synced(sync, 1.5)
    assert not waiters.has_rows and waiters.due(1.5, closing=True) is None


def test_a_failed_write_is_tried_again_at_the_next_refresh_not_at_once() -> None:
    waiters, queue = registry(), uuid.uuid4()
    waiters.started(queue, 0.0)
    waiters.synced(waiters.plan(0.0), 0.0)  # as after a refused statement
    assert waiters.due(0.0) == REFRESH


class Recording(InProcessMessageSignals):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, uuid.UUID]] = []

    def _waiting_started(self, queue_id: uuid.UUID) -> None:
        self.events.append(("started", queue_id))

    def _waiting_ended(self, queue_id: uuid.UUID) -> None:
        self.events.append(("ended", queue_id))


async def test_only_a_watch_that_waits_is_reported_once_and_its_end() -> None:
    signals, queue = Recording(), uuid.uuid4()
    with signals.watch(queue) as watch:  # answered at once: never waits
        signals.signal(queue)
        assert await watch.wait(5) is True
    assert signals.events == []
    with signals.watch(queue) as watch:
        assert await watch.wait(0.01) is False
        assert await watch.wait(0.01) is False  # waiting again: still one report
        signals.signal(queue)
        assert await watch.wait(5) is True
    assert signals.events == [("started", queue), ("ended", queue)]


async def test_a_waiter_cancelled_mid_wait_is_reported_ended() -> None:
    signals, queue = Recording(), uuid.uuid4()

    async def poll() -> None:
        with signals.watch(queue) as watch:
            await watch.wait(30)

    task = asyncio.create_task(poll())
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert signals.events == [("started", queue), ("ended", queue)]
