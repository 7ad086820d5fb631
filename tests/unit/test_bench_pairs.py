"""The paired scenarios' plumbing (bench/): the order of their halves, the CLI flag, and the
attempts what-if's rewrite against the claim and acknowledge as migration 0009 defines them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("psutil", reason="the bench extra is not installed")

from bench.__main__ import build_parser, config_from
from bench.common import CpuUse
from bench.scenarios import Config, Result, paired
from bench.what_if import ATTEMPTS_NOT_RECORDED

ROOT = Path(__file__).resolve().parents[2]


def _migration() -> ModuleType:
    path = ROOT / "migrations" / "versions" / "0009_lanes_flow_attempts.py"
    spec = importlib.util.spec_from_file_location("migration_0009", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("order", "ran"),
    [("baseline-first", ["baseline", "feature"]), ("feature-first", ["feature", "baseline"])],
)
async def test_a_pair_runs_in_the_chosen_order_and_gives_the_feature_first(
    order: str, ran: list[str]
) -> None:
    calls: list[str] = []

    def half(name: str) -> Result:
        calls.append(name)
        return Result(name, "s", "s", 1, 1.0)

    async def feature() -> Result:
        return half("feature")

    async def baseline() -> Result:
        return half("baseline")

    results = await paired(Config(pair_order=order), feature, baseline)
    assert calls == ran
    assert [r.scenario for r in results] == ["feature", "baseline"]


async def test_abba_runs_each_side_twice_around_the_other_and_pools_them() -> None:
    calls: list[str] = []
    rates = {"baseline": iter([100, 80]), "feature": iter([90, 70])}

    def half(name: str) -> Result:
        calls.append(name)
        messages = next(rates[name])
        cpu = CpuUse(seconds=2.0, bench=0.1, api=0.5, postgres=1.0, machine=1.8, cores=2)
        result = Result(name, "s", "s", messages, 1.0, cpu=cpu, notes=[f"{name} note"])
        result.latency.series("dequeue").append(messages / 1000)
        return result

    async def feature() -> Result:
        return half("feature")

    async def baseline() -> Result:
        return half("baseline")

    with_it, without = await paired(Config(), feature, baseline)
    assert calls == ["baseline", "feature", "feature", "baseline"]
    assert (with_it.scenario, with_it.messages, with_it.seconds) == ("feature", 160, 2.0)
    assert (without.scenario, without.messages, without.seconds) == ("baseline", 180, 2.0)
    assert with_it.rate / without.rate == pytest.approx(160 / 180)
    assert sorted(with_it.latency.samples["dequeue"]) == [0.07, 0.09]
    assert with_it.cpu is not None and with_it.cpu.seconds == 4.0
    assert with_it.cpu.postgres == pytest.approx(1.0)
    assert with_it.notes == ["2 runs pooled (90 / 70 msg/s)", "feature note"]


def test_the_pair_order_is_a_flag() -> None:
    parser = build_parser()
    assert config_from(parser.parse_args([])).pair_order == "abba"
    args = parser.parse_args(["--pair-order", "feature-first", "--scenarios", "groups,attempts"])
    assert config_from(args).pair_order == "feature-first"
    assert args.scenarios == ("groups", "attempts")


def test_the_attempts_what_if_finds_exactly_the_attempt_record_in_migration_0009() -> None:
    """What pg_get_functiondef returns is the migrated body: the rewrite must find each piece
    exactly once there, and leave nothing of the record behind."""
    migration = _migration()
    bodies = {
        "retsu_dequeue": migration.DEQUEUE,
        "retsu_claim_flow": migration.CLAIM_FLOW,
        "retsu_acknowledge": migration.ACKNOWLEDGE,
    }
    for rewrite in ATTEMPTS_NOT_RECORDED:
        changed, count = rewrite.pattern.subn(rewrite.replacement, bodies[rewrite.function])
        assert count == rewrite.expected, rewrite.function
        assert "retsu_new_attempt" not in changed
        assert "'acknowledged'" not in changed
        assert "attempts = m.attempts" in changed
