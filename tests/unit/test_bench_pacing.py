"""The benchmark's open-loop pacing: clients at one rate offer a steady stream."""

from __future__ import annotations

import itertools
import time

from bench.scenarios import Counter, paced, spread


def test_clients_at_one_rate_are_spread_evenly_over_an_interval() -> None:
    phases = sorted(spread(i, 16) for i in range(16))
    assert phases[0] == 0.0
    gaps = {round(later - earlier, 9) for earlier, later in itertools.pairwise(phases)}
    assert gaps == {round(1 / 16, 9)}
    # Consumers sit half a step between producers: no two clients share a phase.
    consumers = {spread(i + 0.5, 16) for i in range(16)}
    assert not consumers & set(phases)
    assert all(0.0 <= phase < 1.0 for phase in consumers)


async def test_a_paced_client_first_waits_its_phase_then_keeps_its_rate() -> None:
    calls: list[float] = []

    async def step() -> None:
        calls.append(time.perf_counter())

    started = time.perf_counter()
    await paced(10.0, started + 0.45, step, Counter(), phase=0.5)
    # At 10/s with phase 0.5: calls at 0.05, 0.15, 0.25, 0.35 s (never earlier).
    offsets = [call - started for call in calls]
    assert len(offsets) == 4
    for offset, due in zip(offsets, (0.05, 0.15, 0.25, 0.35), strict=True):
        assert offset >= due - 0.002
