"""Database health in memory (``DatabaseHealthReader``): the twin of
``adapters/postgres/health.py``.

Memory has no sessions and no vacuum, so a test stages what PostgreSQL would show: a
transaction held open elsewhere (``hold_transaction``, dated by the storage's clock, so a
``ManualClock`` ages it without sleeping) and a table's dead rows and last autovacuum
(``set_table_statistics``). Every Retsu table is reported, with no dead rows and never
autovacuumed until a test says otherwise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime

from retsu.adapters.memory.tables import MemoryTables
from retsu.application.ports import Clock
from retsu.domain.database_health import (
    HOLDER_LIMIT,
    RETSU_TABLES,
    DatabaseHealth,
    HolderKind,
    HorizonHolder,
    TableHealth,
)


@dataclass(slots=True)
class HeldTransaction:
    """A transaction held open in another session, until ``end()``."""

    application_name: str
    state: str
    xid: int
    since: datetime
    pid: int
    _open: dict[int, HeldTransaction]

    def end(self) -> None:
        self._open.pop(self.pid, None)


class DatabaseHealthPart(MemoryTables):
    """Implements DatabaseHealthReader over staged sessions and table statistics."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self._held: dict[int, HeldTransaction] = {}
        self._ids = itertools.count(1000)
        self._table_statistics: dict[str, TableHealth] = {}

    def hold_transaction(
        self, application_name: str, *, state: str = "idle in transaction"
    ) -> HeldTransaction:
        pid = next(self._ids)
        held = HeldTransaction(application_name, state, pid, self._clock.now(), pid, self._held)
        self._held[pid] = held
        return held

    def set_table_statistics(
        self, table: str, *, dead_rows: int, last_autovacuum: datetime | None
    ) -> None:
        if table not in RETSU_TABLES:
            raise ValueError(f"{table!r} is not one of Retsu's tables")
        self._table_statistics[table] = TableHealth(table, dead_rows, last_autovacuum)

    async def read_database_health(self) -> DatabaseHealth:
        now = self._clock.now()
        newest = next(self._ids)
        held = sorted(self._held.values(), key=lambda h: h.xid)
        return DatabaseHealth(
            taken_at=now,
            oldest_transaction_start=min((h.since for h in held), default=None),
            holders=tuple(
                HorizonHolder(
                    kind=HolderKind.SESSION,
                    name=h.application_name,
                    state=h.state,
                    xid=h.xid,
                    xid_age=newest - h.xid,
                    since=h.since,
                    pid=h.pid,
                )
                for h in held[:HOLDER_LIMIT]
            ),
            tables=tuple(
                self._table_statistics.get(name, TableHealth(name, 0, None))
                for name in RETSU_TABLES
            ),
        )
