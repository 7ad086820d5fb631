"""How ``Database`` treats the failures a dropped or read-only connection produces (SPEC §3.1:
a dropped connection is a 503, and a retry where nothing was committed; issue 23).

The engine is a scripted stand-in: each checkout hands out the next connection, whose
statement (and closing) succeed or raise what asyncpg and SQLAlchemy were seen raising
when sessions were killed under load or a connection reached a read-only server. The
same failures against a real server: tests/integration/test_database_restarts.py and
test_api_database_restarts.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from retsu.adapters.postgres.database import Database, HotStatement
from retsu.adapters.postgres.errors import Broken, broken_connection
from retsu.domain.errors import DatabaseUnavailable

# What asyncpg raised when the server ended the session while the connection sat idle:
# it refuses the next operation before sending anything.
OUT_OF_STEP = "cannot switch to state 12; another operation (2) is in progress"
READ_ONLY = "cannot execute INSERT in a read-only transaction"

STATEMENT = HotStatement(sa.text("SELECT :value AS value"), operation="select_value")


def wrapped(error: BaseException) -> DBAPIError:
    """``error`` as SQLAlchemy's asyncpg dialect hands it on: its own DBAPI exception,
    caused by asyncpg's, inside a DBAPIError."""
    adapted = Exception(str(error))
    adapted.__cause__ = error
    return DBAPIError("SELECT 1", None, adapted)


class Connection:
    """One pooled connection: what its statement does, and what closing it does."""

    def __init__(self, outcome: Any = None, *, on_close: BaseException | None = None) -> None:
        self.outcome = outcome
        self.on_close = on_close
        self.invalidated = False

    async def start(self) -> Connection:
        return self

    async def close(self) -> None:
        if self.on_close is not None and not self.invalidated:
            raise self.on_close

    async def get_raw_connection(self) -> Any:
        return SimpleNamespace(driver_connection=self)

    async def fetch(self, sql: str, *arguments: Any) -> list[Any]:
        return [self._run()]

    async def execute(self, statement: Any) -> Any:
        return self._run()

    def _run(self) -> Any:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    async def commit(self) -> None:
        pass

    async def invalidate(self) -> None:
        self.invalidated = True


class Engine:
    def __init__(self, *connections: Connection) -> None:
        self.connections = list(connections)
        self.handed_out: list[Connection] = []

    def connect(self) -> Connection:
        connection = self.connections.pop(0)
        self.handed_out.append(connection)
        return connection


def database(*connections: Connection) -> tuple[Database, Engine]:
    engine = Engine(*connections)
    return Database(engine), engine  # type: ignore[arg-type]


async def run(connection: Any) -> Any:
    return await connection.execute(None)


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.exceptions.InternalClientError(OUT_OF_STEP),
        asyncpg.exceptions.InternalClientError(
            'cannot switch to state 15; protocol is in the "failed" state'
        ),
    ],
)
def test_asyncpg_refusing_an_operation_out_of_step_is_a_connection_nothing_was_sent_on(
    error: BaseException,
) -> None:
    assert broken_connection(error) is Broken.UNSENT
    assert broken_connection(wrapped(error)) is Broken.UNSENT


def test_a_read_only_server_makes_the_connection_unusable() -> None:
    error = asyncpg.ReadOnlySQLTransactionError(READ_ONLY)
    assert broken_connection(error) is Broken.READ_ONLY
    assert broken_connection(wrapped(error)) is Broken.READ_ONLY


def test_other_errors_leave_the_connection_alone() -> None:
    assert broken_connection(asyncpg.UniqueViolationError("duplicate key")) is None
    assert broken_connection(asyncpg.exceptions.InternalClientError("something else")) is None


async def test_an_enqueue_refused_out_of_step_runs_again_on_a_fresh_connection() -> None:
    # Not repeatable (an enqueue), yet safe to run again: nothing reached the server.
    first = Connection(asyncpg.exceptions.InternalClientError(OUT_OF_STEP))
    db, _ = database(first, Connection("stored"))
    assert await db.hot(STATEMENT, {"value": 1}, repeatable=False) == ["stored"]
    assert first.invalidated


async def test_a_hot_statement_on_a_read_only_server_is_unavailable_never_its_error() -> None:
    refused = [Connection(asyncpg.ReadOnlySQLTransactionError(READ_ONLY)) for _ in range(2)]
    db, _ = database(*refused)
    with pytest.raises(DatabaseUnavailable):
        await db.hot(STATEMENT, {"value": 1}, repeatable=False)
    assert all(connection.invalidated for connection in refused)  # neither pooled again


async def test_a_write_refused_as_read_only_runs_again_where_the_new_primary_may_answer() -> None:
    db, _ = database(
        Connection(asyncpg.ReadOnlySQLTransactionError(READ_ONLY)), Connection("stored")
    )
    assert await db.hot(STATEMENT, {"value": 1}, repeatable=False) == ["stored"]
    refused = Connection(wrapped(asyncpg.ReadOnlySQLTransactionError(READ_ONLY)))
    db, _ = database(refused, Connection("committed"))
    assert await db.transaction(run, operation="test") == "committed"
    assert refused.invalidated


async def test_a_transaction_on_read_only_servers_only_is_unavailable() -> None:
    error = wrapped(asyncpg.ReadOnlySQLTransactionError(READ_ONLY))
    db, _ = database(Connection(error), Connection(error))
    with pytest.raises(DatabaseUnavailable):
        await db.transaction(run, operation="test")


@pytest.mark.parametrize(
    "on_close",
    [
        # SQLAlchemy rolls back the read's transaction when the connection is closed; the
        # server had ended the session meanwhile. Both were seen as 500s.
        wrapped(asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed")),
        wrapped(asyncpg.exceptions.InternalClientError(OUT_OF_STEP)),
    ],
    ids=["connection-gone", "out-of-step"],
)
async def test_a_read_whose_connection_fails_to_close_runs_again(on_close: DBAPIError) -> None:
    db, engine = database(Connection("stale", on_close=on_close), Connection("fresh"))
    assert await db.read(run, operation="test") == "fresh"
    assert len(engine.handed_out) == 2


async def test_a_close_failure_twice_is_unavailable_and_other_close_errors_pass() -> None:
    gone = wrapped(asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"))
    db, _ = database(Connection("a", on_close=gone), Connection("b", on_close=gone))
    with pytest.raises(DatabaseUnavailable):
        await db.read(run, operation="test")
    other = ValueError("not a database error")
    db, _ = database(Connection("a", on_close=other))
    with pytest.raises(ValueError, match="not a database error"):
        await db.read(run, operation="test")
