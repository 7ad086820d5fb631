"""Every PostgreSQL storage port over one engine, for integration tests.

Built as the containers build them, minus telemetry and long-poll announcements:
``storage.messages.enqueue(...)``, ``storage.queues.add_queue(...)``.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.audit_log import PostgresAuditLog
from retsu.adapters.postgres.browsing import PostgresMessageBrowser
from retsu.adapters.postgres.consumers import PostgresConsumers
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.dead_letters import PostgresDeadLetters
from retsu.adapters.postgres.history import PostgresHistory
from retsu.adapters.postgres.leadership import AdvisoryLockLeadership
from retsu.adapters.postgres.maintenance import PostgresMaintenance
from retsu.adapters.postgres.messages import PostgresMessages
from retsu.adapters.postgres.queues import PostgresQueues
from retsu.adapters.postgres.schedules import PostgresSchedules
from retsu.adapters.postgres.secrets import PostgresServerSecrets
from retsu.adapters.postgres.state import PostgresQueueState
from tests.support.timeshift import plain_url


class PostgresStorage:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.database = Database(engine)
        self.queues = PostgresQueues(self.database)
        self.messages = PostgresMessages(self.database)
        self.dead_letters = PostgresDeadLetters(self.database)
        self.audit_log = PostgresAuditLog(self.database)
        self.state = PostgresQueueState(self.database)
        self.maintenance = PostgresMaintenance(self.database)
        self.leadership = AdvisoryLockLeadership(self.database)
        self.secrets = PostgresServerSecrets(self.database)
        self.browser = PostgresMessageBrowser(self.database)
        self.consumers = PostgresConsumers(self.database)
        self.history = PostgresHistory(self.database)
        self.schedules = PostgresSchedules(self.database)


def _migration(revision: str) -> ModuleType:
    """A migration module, by its file (migrations/ is not a package)."""
    (path,) = (Path(__file__).parents[2] / "migrations" / "versions").glob(f"{revision}_*.py")
    spec = importlib.util.spec_from_file_location(f"retsu_migration_{revision}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The latest migration that defines the hot functions (claim, state): 0009 (lanes).
HOT_PATH_MIGRATION = _HOT_PATH = _migration("0009")
# The planner settings the server-side functions pin ("enable_seqscan = off", ...).
PINNED_SETTINGS: list[str] = [
    part.strip() for part in _HOT_PATH.PINNED.split("SET ") if part.strip()
]


def state_query(*, one_queue: bool) -> str:
    """``retsu_queue_state``'s query (one queue: ``:queue_id``), to EXPLAIN it."""
    return str(_HOT_PATH._state_query(one_queue)).replace("p_queue_id", ":queue_id")


async def set_read_only(database_url: str, read_only: bool) -> None:
    """What a connection to a standby (or to a virtual IP still pointing at one after a
    failover) meets: every new session of the database refuses writes (SQLSTATE 25006).
    Sessions already open keep what they started with."""
    admin = await asyncpg.connect(
        plain_url(database_url), server_settings={"default_transaction_read_only": "off"}
    )
    try:
        name = await admin.fetchval("SELECT current_database()")
        change = "SET default_transaction_read_only = on" if read_only else "RESET ALL"
        await admin.execute(f'ALTER DATABASE "{name}" {change}')
    finally:
        await admin.close()


async def buffers_touched(
    connection: asyncpg.Connection,
    statement: str,
    *args: object,
    then: str,
    then_args: Sequence[object] = (),
    warm: Sequence[str] = (),
    before: Sequence[str] = (),
) -> tuple[int, Any]:
    """The buffers ``statement`` touches, and ``then``'s value right after it, all in one
    transaction rolled back.

    ``EXPLAIN (ANALYZE, BUFFERS)`` of a PL/pgSQL call counts every buffer its nested
    statements touch, though it cannot show their plans. ``warm`` runs first and is undone
    (a session's first call also reads the catalog to plan the function's statements, cached
    for the session like a pooled connection's); ``before`` runs and stays for ``statement``.
    """
    transaction = connection.transaction()
    await transaction.start()
    try:
        await connection.execute("SAVEPOINT warm")
        for sql in warm:
            await connection.execute(sql)
        await connection.execute("ROLLBACK TO SAVEPOINT warm")
        for sql in before:
            await connection.execute(sql)
        raw = await connection.fetchval(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", *args
        )
        value = await connection.fetchval(then, *then_args)
    finally:
        await transaction.rollback()
    root = json.loads(raw)[0]["Plan"]
    return int(root["Shared Hit Blocks"]) + int(root["Shared Read Blocks"]), value


# What migration 0017 dropped as table CHECKs (two columns each, so no domain could hold
# them): the functions keep both. The PostgreSQL contract suite asserts them after each
# test on the queues it created; the suites that drive the SQL interface, the scheduler
# and flow control over HTTP assert them on their whole database before dropping it.
_BROKEN_INVARIANTS = """
SELECT id, state, receipt_handle, enqueued_at, expires_at FROM queue_message
WHERE ($1::uuid[] IS NULL OR queue_id = ANY ($1::uuid[]))
  AND (expires_at <= enqueued_at OR (state = 2 AND receipt_handle IS NULL))
LIMIT 5
"""


async def assert_message_invariants(engine: AsyncEngine, queue_ids: Sequence[Any]) -> None:
    """No message of ``queue_ids`` expires at or before its enqueue, and every IN_FLIGHT
    message has a receipt handle."""
    async with engine.connect() as connection:
        raw = await connection.get_raw_connection()
        broken = await raw.driver_connection.fetch(_BROKEN_INVARIANTS, list(queue_ids))
    assert not broken, f"messages breaking migration 0017's dropped CHECKs: {broken}"


async def assert_database_message_invariants(database_url: str) -> None:
    """The same for every message of the database at ``database_url`` (nothing to check
    where no migration ever ran)."""
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        if await connection.fetchval("SELECT to_regclass('queue_message') IS NOT NULL"):
            broken = await connection.fetch(_BROKEN_INVARIANTS, None)
            assert not broken, f"messages breaking migration 0017's dropped CHECKs: {broken}"
    finally:
        await connection.close()
