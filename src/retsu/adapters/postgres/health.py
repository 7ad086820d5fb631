"""Database health from PostgreSQL's statistics views (``DatabaseHealthReader``, SPEC §10).

Only what holds back cleanup of *this* database's tables counts: since PostgreSQL 14 a
session's snapshot holds back vacuum only in its own database, while prepared transactions
of this database, replication slots' ``xmin`` and physical replication connections
(hot_standby_feedback) hold back every database. Autovacuum workers are left out (vacuum
ignores their snapshots), and so is the reading session itself.

Without the ``pg_read_all_stats`` role (``pg_monitor`` includes it) PostgreSQL hides the
state and transaction start of other roles' sessions; such a holder is still reported (its
xmin is visible to everyone), with ``state`` and ``since`` unknown.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.database import Database
from retsu.domain.database_health import (
    HOLDER_LIMIT,
    RETSU_TABLES,
    DatabaseHealth,
    HolderKind,
    HorizonHolder,
    TableHealth,
)

_HOLDERS = sa.text(
    """
    WITH holder AS (
        SELECT 'session' AS kind, coalesce(a.application_name, '') AS name, a.state,
               coalesce(a.backend_xmin, a.backend_xid) AS xid,
               -- A statement without an xid holds its own snapshot (read committed takes
               -- one per statement); anything else holds since its transaction began.
               CASE WHEN a.backend_xid IS NULL AND a.state = 'active' THEN a.query_start
                    ELSE a.xact_start END AS since,
               a.pid
        FROM pg_stat_activity AS a
        WHERE a.pid <> pg_backend_pid()
          AND coalesce(a.backend_xmin, a.backend_xid) IS NOT NULL
          AND a.backend_type <> 'autovacuum worker'
          AND (a.datname = current_database()
               OR (a.backend_type = 'walsender' AND a.datname IS NULL))
        UNION ALL
        SELECT 'prepared_transaction', p.gid, 'prepared', p.transaction, p.prepared, NULL
        FROM pg_prepared_xacts AS p
        WHERE p.database = current_database()
        UNION ALL
        SELECT 'replication_slot', s.slot_name::text,
               CASE WHEN s.active THEN 'active' ELSE 'inactive' END, s.xmin,
               NULL::timestamptz, s.active_pid
        FROM pg_replication_slots AS s
        WHERE s.xmin IS NOT NULL
    )
    SELECT kind, name, state, xid::text::bigint AS xid, age(xid) AS xid_age, since, pid
    FROM holder
    ORDER BY age(xid) DESC, since NULLS LAST
    LIMIT :limit
    """
)

_OLDEST_TRANSACTION = sa.text(
    """
    SELECT now() AS taken_at, least(
        (SELECT min(a.xact_start) FROM pg_stat_activity AS a
         WHERE a.datname = current_database() AND a.backend_type = 'client backend'
           AND a.pid <> pg_backend_pid()),
        (SELECT min(p.prepared) FROM pg_prepared_xacts AS p
         WHERE p.database = current_database())
    ) AS oldest
    """
)

_TABLES = sa.text(
    """
    SELECT relname, n_dead_tup, last_autovacuum
    FROM pg_stat_user_tables
    WHERE schemaname = current_schema() AND relname = ANY(CAST(:tables AS text[]))
    """
)


async def read_database_health(connection: AsyncConnection) -> DatabaseHealth:
    """Three reads of the statistics views in one transaction (the cumulative statistics
    are a snapshot per transaction, so they agree with each other)."""
    clock = (await connection.execute(_OLDEST_TRANSACTION)).one()
    holders = (await connection.execute(_HOLDERS, {"limit": HOLDER_LIMIT})).all()
    tables = {
        row.relname: row
        for row in (await connection.execute(_TABLES, {"tables": list(RETSU_TABLES)})).all()
    }
    return DatabaseHealth(
        taken_at=clock.taken_at,
        oldest_transaction_start=clock.oldest,
        holders=tuple(
            HorizonHolder(
                kind=HolderKind(row.kind),
                name=row.name,
                state=row.state,
                xid=int(row.xid),
                xid_age=int(row.xid_age),
                since=row.since,
                pid=row.pid,
            )
            for row in holders
        ),
        tables=tuple(
            TableHealth(
                table=name,
                dead_rows=int(tables[name].n_dead_tup),
                last_autovacuum=tables[name].last_autovacuum,
            )
            for name in RETSU_TABLES
            if name in tables
        ),
    )


class PostgresDatabaseHealth:
    """Implements DatabaseHealthReader on the pooled database."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def read_database_health(self) -> DatabaseHealth:
        return await self._database.read(read_database_health, operation="read_database_health")
