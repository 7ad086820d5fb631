"""The connections hot statements keep between statements (adapters/postgres/hot_connections.py),
on a real PostgreSQL: reused, bounded, returned when idle or disposed, never used once closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
import sqlalchemy as sa

from retsu.adapters.postgres import hot_connections
from retsu.adapters.postgres.database import Database, HotStatement
from retsu.adapters.postgres.engine import PooledEngine, create_engine
from retsu.adapters.postgres.hosts import libpq_url

pytestmark = pytest.mark.integration

# A hot statement that says which server session ran it (and, with a sleep, holds it).
_PID = HotStatement(sa.text("SELECT pg_backend_pid() AS pid, pg_sleep(:pause)"), operation="t")
_APP = "retsu-hot-connections-test"


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[PooledEngine]:
    engine = create_engine(database_url, max_connections=4, application_name=_APP)
    yield engine
    await engine.dispose()


async def _pid(database: Database, pause: float = 0) -> int:
    rows = await database.hot(_PID, {"pause": pause}, repeatable=True)
    return int(rows[0]["pid"])


async def _open_sessions(database_url: str) -> int:
    admin = await asyncpg.connect(libpq_url(database_url))
    try:
        return int(
            await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", _APP
            )
        )
    finally:
        await admin.close()


async def test_consecutive_hot_statements_run_on_one_kept_connection(
    engine: PooledEngine,
) -> None:
    database = Database(engine)
    pids = {await _pid(database) for _ in range(20)}
    assert len(pids) == 1
    assert len(engine.hot) == 1
    assert engine.sync_engine.pool.checkedout() == 1  # type: ignore[attr-defined]


async def test_at_most_half_the_pool_is_kept_and_every_statement_answers(
    engine: PooledEngine,
) -> None:
    database = Database(engine)
    # 12 statements at once on a pool of 4: they queue for the pool, none fails.
    pids = await asyncio.gather(*(_pid(database, 0.02) for _ in range(12)))
    assert len(pids) == 12
    assert len(set(pids)) <= 4
    assert len(engine.hot) == 2
    assert engine.sync_engine.pool.checkedout() == 2  # type: ignore[attr-defined]


async def test_other_work_takes_a_kept_connection_and_returns_it_to_the_pool(
    engine: PooledEngine,
) -> None:
    database = Database(engine)
    kept = await _pid(database)

    async def work(connection: sa.ext.asyncio.AsyncConnection) -> int:
        return int((await connection.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one())

    assert await database.transaction(work, operation="t") == kept
    assert len(engine.hot) == 0
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_kept_connections_go_back_to_the_pool_when_idle(
    engine: PooledEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hot_connections, "IDLE_SECONDS", 0.05)
    database = Database(engine)
    await asyncio.gather(*(_pid(database, 0.02) for _ in range(4)))
    assert len(engine.hot) == 2
    for _ in range(100):
        if len(engine.hot) == 0:
            break
        await asyncio.sleep(0.02)
    assert len(engine.hot) == 0
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    # Still usable afterwards, and kept again.
    await _pid(database)
    assert len(engine.hot) == 1


async def test_a_kept_connection_the_server_ended_is_never_used(
    engine: PooledEngine, database_url: str
) -> None:
    database = Database(engine)
    kept = await _pid(database)
    admin = await asyncpg.connect(libpq_url(database_url))
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", kept)
    finally:
        await admin.close()
    await asyncio.sleep(0.2)  # asyncpg notices the closed socket while the connection idles
    assert await _pid(database) != kept


async def test_disposing_the_engine_closes_what_was_kept(
    engine: PooledEngine, database_url: str
) -> None:
    database = Database(engine)
    await asyncio.gather(*(_pid(database, 0.02) for _ in range(4)))
    assert await _open_sessions(database_url) >= 2
    await engine.dispose()
    assert len(engine.hot) == 0
    for _ in range(50):
        if await _open_sessions(database_url) == 0:
            break
        await asyncio.sleep(0.02)
    assert await _open_sessions(database_url) == 0
    # An engine is usable after dispose, and keeps connections again.
    await _pid(database)
    assert len(engine.hot) == 1


async def test_a_failed_statement_keeps_its_connection(engine: PooledEngine) -> None:
    database = Database(engine)
    kept = await _pid(database)
    failing = HotStatement(sa.text("SELECT 1 / :zero AS x"), operation="t")
    with pytest.raises(asyncpg.DivisionByZeroError):
        await database.hot(failing, {"zero": 0}, repeatable=True)
    assert await _pid(database) == kept


async def test_a_cancelled_statement_returns_its_connection_to_the_pool(
    engine: PooledEngine,
) -> None:
    database = Database(engine)
    await _pid(database)
    task = asyncio.create_task(_pid(database, 5))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(engine.hot) == 0
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    # The pool's next connection answers (the cancelled query does not linger on it).
    assert await asyncio.wait_for(_pid(database), 5) > 0
