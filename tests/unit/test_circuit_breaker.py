"""The shared cache's circuit breaker, on a fake clock: nobody sleeps."""

from __future__ import annotations

import pytest

from retsu.adapters.cache.breaker import CircuitBreaker


class ManualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def breaker(clock: ManualClock) -> CircuitBreaker:
    return CircuitBreaker(clock=clock)


def fail_probe_when_due(breaker: CircuitBreaker, clock: ManualClock) -> float:
    """Advance to the next attempt, take it, fail it; returns the wait that was needed."""
    wait = breaker.next_attempt_in
    assert wait is not None
    clock.advance(wait)
    assert breaker.try_probe()
    breaker.record_failure()
    return wait


def test_closed_until_a_failure(breaker: CircuitBreaker) -> None:
    assert breaker.closed
    assert breaker.next_attempt_in is None
    assert not breaker.try_probe()  # nothing to probe while closed
    assert not breaker.record_success()
    assert breaker.closed


def test_a_failure_opens_it_and_the_first_attempt_comes_after_one_second(
    breaker: CircuitBreaker, clock: ManualClock
) -> None:
    assert breaker.record_failure() is True
    assert not breaker.closed
    assert breaker.next_attempt_in == pytest.approx(1.0)
    clock.advance(0.999)
    assert not breaker.try_probe()
    clock.advance(0.001)
    assert breaker.try_probe()
    assert not breaker.try_probe()  # one attempt at a time
    assert not breaker.closed


def test_failed_attempts_back_off_by_doubling_up_to_five_seconds(
    breaker: CircuitBreaker, clock: ManualClock
) -> None:
    breaker.record_failure()
    waits = [fail_probe_when_due(breaker, clock) for _ in range(6)]
    assert waits == pytest.approx([1.0, 2.0, 4.0, 5.0, 5.0, 5.0])
    assert not breaker.closed


def test_a_successful_attempt_closes_it_and_resets_the_backoff(
    breaker: CircuitBreaker, clock: ManualClock
) -> None:
    breaker.record_failure()
    for _ in range(4):
        fail_probe_when_due(breaker, clock)
    clock.advance(breaker.next_attempt_in or 0)
    assert breaker.try_probe()
    assert breaker.record_success() is True
    assert breaker.closed
    assert breaker.next_attempt_in is None
    breaker.record_failure()  # a new outage starts again at one second
    assert breaker.next_attempt_in == pytest.approx(1.0)


def test_stragglers_neither_close_it_nor_push_the_attempt_back(
    breaker: CircuitBreaker, clock: ManualClock
) -> None:
    breaker.record_failure()
    clock.advance(0.5)
    # Requests that started before it opened report late.
    assert breaker.record_failure() is False
    assert breaker.record_success() is False
    assert not breaker.closed
    assert breaker.next_attempt_in == pytest.approx(0.5)


def test_an_attempt_that_never_reports_counts_as_failed_when_the_next_is_due(
    breaker: CircuitBreaker, clock: ManualClock
) -> None:
    breaker.record_failure()
    clock.advance(1.0)
    assert breaker.try_probe()  # ...and its caller vanishes
    clock.advance(0.999)
    assert not breaker.try_probe()
    clock.advance(0.001)
    assert breaker.try_probe()  # another attempt, after the same one-second slot
    breaker.record_failure()
    assert breaker.next_attempt_in == pytest.approx(4.0)  # backed off twice


def test_the_timings_are_configurable(clock: ManualClock) -> None:
    breaker = CircuitBreaker(first_retry_seconds=0.1, max_retry_seconds=0.3, clock=clock)
    breaker.record_failure()
    waits = [fail_probe_when_due(breaker, clock) for _ in range(4)]
    assert waits == pytest.approx([0.1, 0.2, 0.3, 0.3])
    with pytest.raises(ValueError):
        CircuitBreaker(first_retry_seconds=2, max_retry_seconds=1)
