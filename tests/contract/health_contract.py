"""The contract of ``DatabaseHealthReader`` (SPEC §10), for every adapter (memory,
PostgreSQL).

A test module subclasses :class:`DatabaseHealthContract` and provides a ``harness``
fixture with ``health`` (the reader), ``hold_transaction(application_name)`` (an async
context manager: a transaction holding back the horizon in another session, with that
application_name, for as long as the block runs) and ``advance(seconds)`` (time passes:
the memory clock moves; PostgreSQL's clock runs by itself, so there it only sleeps a
little). Holders are found by a unique application_name, so whatever else the database
holds never matters.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from retsu.application.ports import DatabaseHealthReader
from retsu.domain.database_health import (
    RETSU_TABLES,
    DatabaseHealth,
    HolderKind,
    HorizonHolder,
)


class HealthHarness(Protocol):
    health: DatabaseHealthReader

    def hold_transaction(self, application_name: str) -> AbstractAsyncContextManager[None]: ...

    async def advance(self, seconds: float) -> None: ...


def _named(health: DatabaseHealth, name: str) -> list[HorizonHolder]:
    return [h for h in health.holders if h.name == name]


def _unique(prefix: str = "retsu-contract") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class DatabaseHealthContract:
    async def test_every_retsu_table_is_reported_once(self, harness: HealthHarness) -> None:
        health = await harness.health.read_database_health()
        assert tuple(t.table for t in health.tables) == RETSU_TABLES
        for table in health.tables:
            assert table.dead_rows >= 0
            assert table.last_autovacuum_age_seconds(health.taken_at) >= 0

    async def test_a_transaction_held_elsewhere_is_named_with_its_state_and_age(
        self, harness: HealthHarness
    ) -> None:
        name = _unique()
        async with harness.hold_transaction(name):
            first = await harness.health.read_database_health()
            (holder,) = _named(first, name)
            assert holder.kind is HolderKind.SESSION
            assert holder.state == "idle in transaction"
            assert holder.since is not None
            assert holder.pid is not None
            assert holder.xid_age >= 0
            held = holder.age_seconds(first.taken_at)
            assert held is not None and held >= 0
            # It is a transaction, and it holds the horizon: both gauges cover it.
            assert first.oldest_transaction_age_seconds >= held
            assert first.xmin_horizon_age_seconds >= held

            await harness.advance(1.2)
            later = await harness.health.read_database_health()
            (again,) = _named(later, name)
            assert again.since == holder.since  # the same hold, older now
            assert again.xid == holder.xid
            later_held = again.age_seconds(later.taken_at)
            assert later_held is not None and later_held >= held + 1
            assert later.xmin_horizon_age_seconds >= later_held
        after = await harness.health.read_database_health()
        assert _named(after, name) == []

    async def test_holders_come_oldest_xmin_first(self, harness: HealthHarness) -> None:
        older, newer = _unique("retsu-older"), _unique("retsu-newer")
        async with harness.hold_transaction(older):
            await harness.advance(0.2)
            async with harness.hold_transaction(newer):
                health = await harness.health.read_database_health()
        names = [h.name for h in health.holders if h.name in (older, newer)]
        assert names == [older, newer]
        first, second = (_named(health, n)[0] for n in names)
        # The newer one's snapshot may be as old as the older one's xid (PostgreSQL: it
        # took it while that transaction ran); the older one still comes first.
        assert first.xid_age >= second.xid_age
        assert first.since is not None and second.since is not None
        assert first.since < second.since
        longest = health.longest_holder()
        assert longest is not None and longest.since is not None
        assert longest.since <= first.since
