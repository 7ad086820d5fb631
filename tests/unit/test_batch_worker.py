"""The cleaners' loop: full batches back to back, then a rest; a stop ends it cleanly."""

from __future__ import annotations

import asyncio

import pytest

from retsu.adapters.system import StopAwareSleeper
from retsu.application.batch_worker import BatchResult, BatchSchedule, BatchWorker
from retsu.domain.errors import Busy, DatabaseUnavailable
from tests.support.doubles.sleeper import FakeSleeper

SCHEDULE = BatchSchedule(batch_size=10, interval_seconds=60, saturated_batch_delay_seconds=0.05)


class ScriptedBatches:
    """Returns the scripted number of removed rows per call (0 once the script ends)."""

    def __init__(self, *removed: int) -> None:
        self.script = list(removed)
        self.calls: list[int] = []

    async def __call__(self, batch_size: int) -> BatchResult:
        self.calls.append(batch_size)
        removed = self.script.pop(0) if self.script else 0
        return BatchResult.of(removed, batch_size)


async def test_a_full_batch_is_followed_by_the_saturated_delay_a_partial_one_by_the_interval() -> (
    None
):
    batches = ScriptedBatches(10, 10, 3, 0, 10, 0)
    sleeper = FakeSleeper(stop_after=6)
    worker = BatchWorker("cleaner", batches, SCHEDULE, sleeper)

    await worker.run()

    assert batches.calls == [10] * 6  # always asks for the configured batch size
    assert sleeper.sleeps == [0.05, 0.05, 60, 60, 0.05, 60]
    assert worker.batches == 6
    assert worker.removed == 33


async def test_a_batch_that_removed_more_than_its_size_still_counts_as_full() -> None:
    async def run_batch(batch_size: int) -> BatchResult:
        return BatchResult(removed=3, full=True)  # e.g. one of two statements came back full

    sleeper = FakeSleeper(stop_after=2)
    await BatchWorker("cleaner", run_batch, SCHEDULE, sleeper).run()
    assert sleeper.sleeps == [0.05, 0.05]


async def test_a_stop_during_a_batch_lets_it_finish_then_exits_without_resting() -> None:
    sleeper = FakeSleeper()
    finished: list[int] = []

    async def run_batch(batch_size: int) -> BatchResult:
        sleeper.stop()  # SIGTERM arrives while the batch is running
        await asyncio.sleep(0)
        finished.append(batch_size)
        return BatchResult.of(batch_size, batch_size)

    worker = BatchWorker("cleaner", run_batch, SCHEDULE, sleeper)
    await worker.run()

    assert finished == [10]  # the batch in progress completed
    assert worker.batches == 1  # and no other one started
    assert sleeper.sleeps == []  # nor did the worker rest before exiting


async def test_a_stop_during_the_rest_ends_the_wait_at_once_with_the_real_sleeper() -> None:
    sleeper = StopAwareSleeper()
    ran = asyncio.Event()

    async def empty_batch(batch_size: int) -> BatchResult:
        ran.set()
        return BatchResult.of(0, batch_size)  # nothing to do: the worker rests for an hour

    worker = BatchWorker(
        "cleaner",
        empty_batch,
        BatchSchedule(batch_size=10, interval_seconds=3600, saturated_batch_delay_seconds=1),
        sleeper,
    )
    task = asyncio.create_task(worker.run())
    await ran.wait()
    sleeper.stop()
    await asyncio.wait_for(task, timeout=5)  # the hour-long rest ended at once
    assert worker.batches == 1


async def test_a_worker_that_is_already_stopping_runs_no_batch() -> None:
    sleeper = FakeSleeper()
    sleeper.stop()
    batches = ScriptedBatches(10)
    await BatchWorker("cleaner", batches, SCHEDULE, sleeper).run()
    assert batches.calls == []


async def test_a_batch_failing_for_another_reason_propagates_so_the_process_exits_non_zero() -> (
    None
):
    async def run_batch(batch_size: int) -> BatchResult:
        raise RuntimeError("a bug")

    sleeper = FakeSleeper()
    with pytest.raises(RuntimeError):
        await BatchWorker("cleaner", run_batch, SCHEDULE, sleeper).run()
    assert sleeper.sleeps == []


@pytest.mark.parametrize("unavailable", [DatabaseUnavailable(), Busy()])
async def test_a_batch_the_database_could_not_serve_is_tried_again_after_one_interval(
    unavailable: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    script: list[Exception | int] = [unavailable, unavailable, 10, 3]

    async def run_batch(batch_size: int) -> BatchResult:
        step = script.pop(0) if script else 0
        if isinstance(step, Exception):
            raise step
        return BatchResult.of(step, batch_size)

    sleeper = FakeSleeper(stop_after=4)
    worker = BatchWorker("cleaner", run_batch, SCHEDULE, sleeper)
    await worker.run()
    # The database restarting: two failed batches, each followed by one interval; then
    # the backlog goes as usual.
    assert sleeper.sleeps == [60, 60, 0.05, 60]
    assert (worker.failed_batches, worker.batches, worker.removed) == (2, 2, 13)
    assert caplog.text.count("batch failed") == 2


def test_a_schedule_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        BatchSchedule(batch_size=0, interval_seconds=60, saturated_batch_delay_seconds=0.05)
    with pytest.raises(ValueError):
        BatchSchedule(batch_size=1, interval_seconds=-1, saturated_batch_delay_seconds=0.05)


def test_a_batch_is_full_when_it_removed_its_size() -> None:
    assert BatchResult.of(10, 10).full
    assert not BatchResult.of(9, 10).full
