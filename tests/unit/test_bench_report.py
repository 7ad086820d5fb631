"""The benchmark report states every SPEC §7b target with its ratio and pass/fail."""

from __future__ import annotations

import pytest

pytest.importorskip("psutil", reason="the bench extra is not installed")

from bench.common import Checkpoints, autovacuum_note, checkpoint_note
from bench.report import render, target_rows, targets_table
from bench.runner import Options, RunOutcome
from bench.scenarios import Result

MB = 1024 * 1024


def _result(scenario: str, key: str, rate: float) -> Result:
    result = Result(scenario, key, key, int(rate * 10), 10.0)
    if scenario == "mixed":
        result.latency.series("enqueue").extend([0.010] * 99 + [0.030])
        result.latency.series("dequeue").extend([0.005] * 100)
    return result


def _outcome() -> RunOutcome:
    rates = {
        ("enqueue-1", "retsu"): 1300.0,
        ("enqueue-1", "pgqueuer"): 1000.0,
        ("enqueue-1", "floor"): 500.0,
        ("enqueue-1", "minimal"): 1000.0,
        ("dequeue-ack-1", "retsu"): 900.0,
        ("dequeue-ack-1", "pgqueuer"): 1000.0,
        ("dequeue-ack-1", "floor"): 700.0,
        ("dequeue-ack-1", "minimal"): 1000.0,
        ("enqueue-100", "retsu"): 100.0,
        ("enqueue-100", "pgqueuer"): 100.0,
        ("backlog-1k", "retsu"): 1000.0,
        ("backlog-100k", "retsu"): 800.0,
        ("delayed-head", "retsu"): 950.0,
        ("held-horizon", "retsu"): 750.0,
        ("backlog-1k", "pgqueuer"): 600.0,
        ("held-horizon", "pgqueuer"): 540.0,
        ("mixed", "retsu"): 400.0,
        ("consumer-1", "retsu"): 600.0,
        ("consumer-1", "pgqueuer"): 300.0,
    }
    results = [_result(scenario, key, rate) for (scenario, key), rate in rates.items()]
    return RunOutcome(results, {"api-1": 100 * MB, "api-2": 130 * MB}, 0.0, 60.0, Options("x"))


def test_every_target_is_listed_with_its_ratio_and_verdict() -> None:
    rows = {target: (measured, met) for target, _goal, measured, met in target_rows(_outcome())}
    assert len(rows) == 17  # SPEC §7b: seven ratios (one of them retsu.enqueue vs the SQL
    # floor), two consumer runners, three sensitivities, three new features' costs, p99, RSS
    assert rows["single-message HTTP enqueue"] == ("**1.30×** (1,300 vs 1,000 msg/s)", True)
    assert rows["single-message HTTP dequeue + ack"][1] is False  # 0.90 < 1.0
    assert rows["batched (100) HTTP enqueue"][1] is True  # 1.00 ≥ 1.0
    assert rows["`retsu.enqueue` from asyncpg vs Retsu's SQL floor enqueue"][0] == "not measured"
    assert rows["batched (100) HTTP dequeue + ack"] == ("not measured", None)
    assert rows["Retsu's SQL floor vs the minimal floor, enqueue-1"][1] is False  # 0.50
    assert rows["Retsu's SQL floor vs the minimal floor, dequeue+ack-1"][1] is True  # 0.70
    assert rows["dequeue + ack, 100,000 backlog vs 1,000"][1] is False  # 0.80 < 0.85
    assert rows["dequeue + ack, 30,000 delayed messages at the head vs none"][1] is True
    assert rows["consumer runner, concurrency 1 (PgQueuer batch 1), no-op handler"] == (
        "**2.00×** (600 vs 300 msg/s, medians)",
        True,
    )
    assert rows["consumer runner, concurrency 10 (PgQueuer batch 10), no-op handler"] == (
        "not measured",
        None,
    )
    held = "dequeue + ack with a transaction held open elsewhere for the whole window vs none"
    assert rows[held] == ("**0.75** (750 vs 1,000 msg/s)", False)  # 0.75 < 0.8
    p99, met = rows["p99 of every operation at half the peak load (mixed)"]
    assert "enqueue" in p99 and met is False  # 30 ms ≥ 25 ms
    assert rows["API RSS per process"] == (
        "peak **130 MB** (api-1 100 MB, api-2 130 MB)",
        False,
    )


def test_the_targets_come_first_in_the_rendered_section() -> None:
    section = render(_outcome(), {"date": "today"})
    assert section.index("### Targets") < section.index("### All figures")
    assert "5 of 11 measured targets met (17 in SPEC §7b)." in targets_table(_outcome())


def test_the_held_horizon_table_shows_each_systems_ratio_and_dead_rows() -> None:
    outcome = _outcome()
    for result in outcome.results:
        if result.scenario in ("backlog-1k", "held-horizon"):
            result.extra["dead_rows"] = 500 if result.scenario == "backlog-1k" else 25_000
    section = render(outcome, {"date": "today"})
    table = section.split("### A transaction held open in the database (SPEC §10)", 1)[1]
    assert "| retsu | 1,000 | 750 | 0.75 | 500 | 25,000 |" in table
    assert "| pgqueuer | 600 | 540 | 0.90 | 500 | 25,000 |" in table


GROUPS = "dequeue + ack on a queue of 10,000 groups × 10 messages vs the same run ungrouped"
CAP = "dequeue + ack with a `max_in_flight` cap that is never reached vs none"
ATTEMPTS = "dequeue + ack with attempts recorded vs the same statements without the record"
HELD = "dequeue + ack with a transaction held open elsewhere for the whole window vs none"


def _with(outcome: RunOutcome, rates: dict[tuple[str, str], float]) -> RunOutcome:
    outcome.results.extend(_result(scenario, key, rate) for (scenario, key), rate in rates.items())
    return outcome


def _rows(outcome: RunOutcome) -> dict[str, tuple[str, bool | None]]:
    return {target: (measured, met) for target, _goal, measured, met in target_rows(outcome)}


def test_the_new_features_costs_are_each_against_their_own_baseline() -> None:
    """groups, max-in-flight and attempts each compare with the baseline measured in the
    same paired scenario (not with backlog-1k); Retsu HTTP when it ran, else the floor."""
    outcome = _with(
        _outcome(),
        {
            ("groups", "retsu"): 700.0,
            ("groups:ungrouped", "retsu"): 1000.0,
            ("max-in-flight", "retsu"): 950.0,
            ("max-in-flight:none", "retsu"): 1000.0,
            ("attempts", "floor"): 880.0,
            ("attempts:not-recorded", "floor"): 1000.0,
            ("attempts", "retsu"): 500.0,  # its baseline is missing: the floor's pair counts
        },
    )
    rows = _rows(outcome)
    assert rows[GROUPS] == ("**0.70** (700 vs 1,000 msg/s, Retsu HTTP)", False)
    assert rows[CAP] == ("**0.95** (950 vs 1,000 msg/s, Retsu HTTP)", True)
    assert rows[ATTEMPTS] == ("**0.88** (880 vs 1,000 msg/s, floor)", False)
    section = render(outcome, {"date": "today"})
    table = section.split("### New features' costs (SPEC §7b, issue 24)", 1)[1]
    assert "| groups (vs ungrouped) | retsu | 700 | 1,000 | 0.70 |" in table
    assert "| max-in-flight (vs none) | retsu | 950 | 1,000 | 0.95 |" in table
    assert "| attempts (vs not-recorded) | floor | 880 | 1,000 | 0.88 |" in table
    assert "| attempts (vs not-recorded) | retsu |" not in table


def test_the_new_features_are_not_measured_without_their_pairs() -> None:
    rows = _rows(_with(_outcome(), {("groups", "retsu"): 700.0}))
    for target in (GROUPS, CAP, ATTEMPTS):
        assert rows[target] == ("not measured", None)
    assert "### New features' costs" not in render(_outcome(), {"date": "today"})


def test_the_held_horizon_target_is_a_line_of_its_own() -> None:
    assert _rows(_outcome())[HELD] == ("**0.75** (750 vs 1,000 msg/s)", False)
    assert f"| {HELD} | ≥ 0.8 | **0.75** (750 vs 1,000 msg/s) | **no** |" in targets_table(
        _outcome()
    )


def test_a_windows_autovacuum_work_becomes_a_note_longest_first() -> None:
    assert autovacuum_note({}) is None
    note = autovacuum_note({"VACUUM queue_state_rollup": 0.4, "VACUUM queue_message": 3.2})
    assert note == (
        "autovacuum during the window: VACUUM queue_message ~3.2 s, "
        "VACUUM queue_state_rollup ~0.4 s"
    )


def test_a_windows_checkpoint_work_becomes_a_note() -> None:
    assert checkpoint_note(None) is None
    assert checkpoint_note(Checkpoints()) is None
    before = Checkpoints(started=3, write_ms=100.0, sync_ms=20.0, buffers=1_000)
    after = Checkpoints(started=4, write_ms=2_100.0, sync_ms=1_270.0, buffers=4_500)
    assert checkpoint_note(after.since(before)) == (
        "checkpoints during the window: 1 started, 3,500 buffers written, sync 1,250 ms"
    )
