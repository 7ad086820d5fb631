"""Type introspection behind a transaction pooler changes no session setting.

asyncpg learns a type it has no codec for by setting ``jit`` off for the session, running
its introspection query and setting ``jit`` back: three statements that a transaction
pooler may send to three different server sessions. ``PoolerSafeConnection`` runs them
in one transaction with ``SET LOCAL`` instead. The statements each connection sends are
read with asyncpg's query logger (PostgreSQL itself, not PgBouncer: what is checked is
the sequence a pooler would see)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from retsu.adapters.postgres.engine import PoolerSafeConnection
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

SESSION_JIT_OFF = "set_config('jit', 'off', false)"


async def _sent(connection: asyncpg.Connection) -> list[str]:
    sent: list[str] = []
    connection.add_query_logger(lambda record: sent.append(" ".join(record.query.split())))
    # uuid[] has no built-in codec: the first statement using it makes asyncpg learn it.
    await connection.fetchval("SELECT cardinality($1::uuid[])", [])
    return sent


@pytest.fixture
async def url(database_url: str) -> AsyncIterator[str]:
    yield plain_url(database_url)


async def test_asyncpg_on_its_own_sets_jit_for_the_session_outside_a_transaction(
    url: str,
) -> None:
    """What the class exists for: asyncpg's own connection sends the session-level
    setting as a statement of its own (if a release stops doing so, the class can go)."""
    connection = await asyncpg.connect(url, statement_cache_size=0)
    try:
        jit_on = await connection.fetchval("SELECT current_setting('jit') <> 'off'")
        sent = await _sent(connection)
    finally:
        await connection.close()
    if not jit_on:
        pytest.fail("this PostgreSQL has jit off: the leak cannot be shown", pytrace=False)
    assert any(SESSION_JIT_OFF in query for query in sent), sent


async def test_outside_a_transaction_the_introspection_runs_in_one_of_its_own(url: str) -> None:
    connection = await asyncpg.connect(
        url, statement_cache_size=0, connection_class=PoolerSafeConnection
    )
    try:
        before = await connection.fetchval("SELECT current_setting('jit')")
        sent = await _sent(connection)
        after = await connection.fetchval("SELECT current_setting('jit')")
        assert not connection.is_in_transaction()
    finally:
        await connection.close()
    begin = next(i for i, query in enumerate(sent) if query.startswith("BEGIN"))
    local = next(i for i, query in enumerate(sent) if query == "SET LOCAL jit = off")
    learned = next(i for i, query in enumerate(sent) if "pg_catalog.pg_type" in query)
    # Rolled back, not committed: asyncpg's session-level set_config is undone with it.
    end = next(i for i, query in enumerate(sent) if query.startswith("ROLLBACK"))
    assert begin < local < learned < end, sent
    assert all(begin < i < end for i, query in enumerate(sent) if SESSION_JIT_OFF in query)
    assert after == before


async def _jit_after_a_pinned_transaction(connection: asyncpg.Connection) -> list[str]:
    """One of Retsu's transactions behind a pooler: ``jit`` pinned off for the
    transaction (``PIN_TRANSACTION``), a statement whose type asyncpg learns, COMMIT."""
    async with connection.transaction():
        await connection.execute("SELECT set_config('jit', 'off', true)")
        sent = await _sent(connection)
    return sent


async def test_asyncpg_on_its_own_keeps_jit_off_after_a_pinned_transaction(url: str) -> None:
    """The leak the topology test saw: asyncpg reads the pinned "off", sets it off for
    the session, never sets it back, and the COMMIT keeps it."""
    connection = await asyncpg.connect(url, statement_cache_size=0)
    try:
        default = await connection.fetchval("SELECT reset_val FROM pg_settings WHERE name = 'jit'")
        await _jit_after_a_pinned_transaction(connection)
        jit = await connection.fetchval("SELECT current_setting('jit')")
    finally:
        await connection.close()
    if default == "off":
        pytest.fail("this PostgreSQL has jit off: the leak cannot be shown", pytrace=False)
    assert jit == "off"


async def test_inside_a_transaction_it_learns_in_a_savepoint_it_rolls_back(url: str) -> None:
    connection = await asyncpg.connect(
        url, statement_cache_size=0, connection_class=PoolerSafeConnection
    )
    try:
        default = await connection.fetchval("SELECT reset_val FROM pg_settings WHERE name = 'jit'")
        sent = await _jit_after_a_pinned_transaction(connection)
        jit = await connection.fetchval("SELECT current_setting('jit')")
    finally:
        await connection.close()
    assert any(query.startswith("SAVEPOINT") for query in sent), sent
    assert any(query.startswith("ROLLBACK TO") for query in sent), sent
    assert jit == default
