"""One process's pool, and the only way the PostgreSQL adapter's modules run statements.

Every statement of every port goes through ``Database``, which keeps four promises:

1. **A connection the server dropped is never used.** At checkout the pool discards a
   connection asyncpg already knows is closed (``engine.py``: a local flag, no round
   trip) and hands out a fresh one; a connection that breaks under a statement (or when
   it is closed), or turns out to be on a read-only server, is invalidated, never
   returned to the pool (``errors.py`` says which errors mean that).
2. **A statement that failed because its connection broke runs once more on a fresh
   connection, when that cannot store anything twice.** Nothing sent (asyncpg refused
   to send on a closed connection): always. Inside an explicit transaction, a failure
   before COMMIT was sent: always (nothing was committed). A failure while the
   statement (or its COMMIT) may have been running: only for work marked
   ``repeatable``, whose repetition changes nothing more than the first run did.
3. **An unreachable database is a domain error.** Refused, restarting, a server-ended
   session that fails again, no free pooled connection within
   ``database.acquire_timeout_seconds``: ``DatabaseUnavailable`` (the HTTP layer answers
   503 database_unavailable with Retry-After; workers retry at their next interval).
4. **Every operation is measured once, here.** Each run is named where its statement is
   defined (``HotStatement(..., operation="dequeue")``, ``read(work, operation=...)``) and
   timed (and traced) by the ``OperationTelemetry`` the container hands in
   (``adapters/telemetry/operations.py``): no port is wrapped by a decorator.

Hot statements (enqueue, dequeue, acknowledge, visibility) run on the pooled asyncpg
driver connection directly: one round trip, their own implicit transaction, asyncpg's
prepared-statement cache, none of SQLAlchemy's per-execution work. Between one hot
statement and the next their connection stays checked out (``hot_connections.py``: at
most half the pool, back to it after a second idle), which saves the pool's checkout and
return — more CPU than the statement itself. (Behind a transaction
pooler there is no cache: an unnamed statement, two round trips; docs/performance.md,
"Behind PgBouncer".) Everything else runs through SQLAlchemy, whose disconnect detection
invalidates a broken connection.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NoReturn, Protocol, TypeVar

import asyncpg
import sqlalchemy as sa
import sqlalchemy.exc
import tenacity
from sqlalchemy.dialects.postgresql import asyncpg as postgresql_asyncpg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from retsu.adapters.postgres.engine import LEARNED_AT_CONNECT, PIN_TRANSACTION, PooledEngine
from retsu.adapters.postgres.errors import (
    DEADLOCK_DETECTED,
    LOCK_NOT_AVAILABLE,
    Broken,
    broken_connection,
    sqlstate,
)
from retsu.adapters.postgres.hot_connections import HotConnection
from retsu.domain.errors import Busy, DatabaseUnavailable

T = TypeVar("T")

log = logging.getLogger("retsu.adapters.postgres")

# What a failed checkout (a pool wait, or opening a new connection) can raise when the
# database cannot be reached: refused or reset (OSError), the connect timeout, the pool
# still exhausted after database.acquire_timeout_seconds, the server refusing the
# session (starting up, shutting down, too many connections), or SQLAlchemy giving up
# after a checked-out connection kept turning out closed.
_UNREACHABLE = (
    OSError,
    TimeoutError,
    sqlalchemy.exc.TimeoutError,
    sqlalchemy.exc.DBAPIError,
    sqlalchemy.exc.InvalidRequestError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)

# A hot statement PostgreSQL aborted as a deadlock or serialization victim changed
# nothing: it runs again after a short random pause, up to this many times in all.
_CONFLICT_ATTEMPTS = 5

# Give-way transactions (operator actions, cleaner batches) wait at most this long for
# any lock, then start over (see ``Database.yielding``).
_LOCK_TIMEOUT_SETTING = "set_config('lock_timeout', '200ms', true)"
_LOCK_TIMEOUT = sa.text(f"SELECT {_LOCK_TIMEOUT_SETTING}")
# Behind a transaction pooler the planner pins cannot be session settings: each
# transaction sets them first (one statement, together with the lock timeout where
# there is one).
_PINS = sa.text(PIN_TRANSACTION)
_LOCK_TIMEOUT_AND_PINS = sa.text(f"{PIN_TRANSACTION}, {_LOCK_TIMEOUT_SETTING}")
_GIVE_WAY_DELAY_SECONDS = 0.05

_ASYNCPG_DIALECT = postgresql_asyncpg.dialect()  # type: ignore[no-untyped-call]


class OperationTelemetry(Protocol):
    """Times (and traces) one named database operation: a context manager around it."""

    def operation(self, name: str) -> AbstractContextManager[object]: ...


class _NoTelemetry:
    def operation(self, name: str) -> AbstractContextManager[object]:
        return nullcontext()


class HotStatement:
    """A ``text()`` statement compiled once for asyncpg: ``$n`` SQL and the order in
    which its named parameters become positional arguments; ``operation`` names it in
    the telemetry."""

    def __init__(self, statement: sa.TextClause, *, operation: str) -> None:
        self.operation = operation
        compiled = statement.compile(dialect=_ASYNCPG_DIALECT)
        self.sql = compiled.string
        self._order = tuple(compiled.positiontup or ())
        # Behind a transaction pooler each new connection learns its types once, safely.
        LEARNED_AT_CONNECT.append(self.sql)

    def arguments(self, parameters: Mapping[str, Any]) -> list[Any]:
        return [parameters[name] for name in self._order]


class _Broke(Exception):
    """Internal: the connection broke under the work (already invalidated)."""

    def __init__(self, kind: Broken, error: BaseException, *, committing: bool) -> None:
        super().__init__(kind.value)
        self.kind = kind
        self.error = error
        self.committing = committing


def _unavailable(error: BaseException) -> NoReturn:
    raise DatabaseUnavailable() from error


def _raise_broken_at_close(error: BaseException, *, committing: bool) -> NoReturn:
    """An error of a checked-out connection that reached ``async with``'s exit: the work's
    own errors (re-raised as they are), or closing the connection failed because the
    server dropped it meanwhile (SQLAlchemy rolls back an unfinished transaction there) —
    a broken connection like any other, so never a 500."""
    broken = broken_connection(error)
    if broken is None:
        raise error
    raise _Broke(broken, error, committing=committing) from error


async def _close_broken(connection: AsyncConnection, *, invalidate: bool = True) -> None:
    """Out of the pool (invalidated) or back to it; an error closing a connection already
    broken changes nothing."""
    try:
        if invalidate:
            await connection.invalidate()
        await connection.close()
    except _UNREACHABLE as error:
        log.debug("a broken connection did not close cleanly: %r", error)


def _gave_way(error: BaseException) -> bool:
    return isinstance(error, DBAPIError) and sqlstate(error) in (
        LOCK_NOT_AVAILABLE,
        DEADLOCK_DETECTED,
    )


class Database:
    """The pool plus the rules above. One per process (per engine).

    ``pin_transactions``: the engine leads to a transaction-mode pooler, so its sessions
    carry no planner settings (``engine.py``); every transaction run here sets them for
    itself first. The hot statements need nothing: their functions pin their own.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        pin_transactions: bool = False,
        telemetry: OperationTelemetry | None = None,
    ) -> None:
        self.engine = engine
        # The connections hot statements keep between statements (hot_connections.py);
        # an engine not made by ``create_engine`` (a test's) has none.
        self._kept = engine.hot if isinstance(engine, PooledEngine) else None
        self._telemetry: OperationTelemetry = telemetry or _NoTelemetry()
        self._preamble = _PINS if pin_transactions else None
        self._give_way_preamble = _LOCK_TIMEOUT_AND_PINS if pin_transactions else _LOCK_TIMEOUT

    def measured(self, operation: str) -> AbstractContextManager[object]:
        """Telemetry around ``operation`` for work that runs on a connection its caller
        holds (the collector's lock session)."""
        return self._telemetry.operation(operation)

    async def connect(self) -> AsyncConnection:
        """A pooled connection the caller keeps and closes (or invalidates) itself: the
        collector's lock session. DatabaseUnavailable when none can be had."""
        return await self._checkout()

    # -- hot statements: one round trip on the asyncpg driver connection ---------------

    async def hot(
        self, statement: HotStatement, parameters: Mapping[str, Any], *, repeatable: bool
    ) -> list[asyncpg.Record]:
        """Run one hot statement in its own implicit transaction; its rows.

        ``repeatable``: running it again after a run whose reply was lost stores nothing
        twice (a dequeue: the lost claim's lease simply times out; an acknowledgement or a
        visibility change: the same end state). An enqueue is not: if its connection
        breaks while it may be running, the caller gets DatabaseUnavailable.
        """
        with self._telemetry.operation(statement.operation):
            return await self._hot(statement, parameters, repeatable=repeatable)

    async def _hot(
        self, statement: HotStatement, parameters: Mapping[str, Any], *, repeatable: bool
    ) -> list[asyncpg.Record]:
        arguments = statement.arguments(parameters)
        conflicts = 0
        reconnected = False
        # A hand-written retry: measured, stamina costs ~31 µs and tenacity ~56 µs per call
        # on this path against ~0.2 µs for this loop (docs/architecture.md).
        while True:
            try:
                return await self._fetch(statement.sql, arguments)
            except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
                conflicts += 1
                if conflicts == _CONFLICT_ATTEMPTS:
                    raise
            except _Broke as broke:
                if reconnected or (broke.kind is Broken.LOST and not repeatable):
                    _unavailable(broke.error)
                reconnected = True
                log.info("database connection lost (%s); running again", broke.kind.value)
                continue
            await asyncio.sleep(random.uniform(0, 0.005 * conflicts))

    async def _fetch(self, sql: str, arguments: list[Any]) -> list[asyncpg.Record]:
        held = await self._hold()
        try:
            rows = await held.driver.fetch(sql, *arguments)
        except Exception as error:
            broken = broken_connection(error)
            if broken is None:
                # The statement failed and its implicit transaction with it; the
                # connection is as good as before.
                await self._put(held)
                raise
            await _close_broken(held.connection)
            raise _Broke(broken, error, committing=True) from error
        except BaseException:
            # Cancelled while the statement ran: the pool's reset decides what is left.
            await _close_broken(held.connection, invalidate=False)
            raise
        await self._put(held)
        return list(rows)

    async def _hold(self) -> HotConnection:
        """A connection for one hot statement: one the hot path kept, else the pool's."""
        if self._kept is not None:
            held = await self._kept.take()
            if held is not None:
                return held
        connection = await self._checkout()
        try:
            raw = await connection.get_raw_connection()
        except _UNREACHABLE as error:
            await _close_broken(connection)
            _raise_broken_at_close(error, committing=False)
        return HotConnection(connection, raw.driver_connection, time.monotonic())

    async def _put(self, held: HotConnection) -> None:
        if self._kept is not None:
            await self._kept.put(held)
        else:
            # The statement is done: a connection that fails to close now fails nothing.
            await _close_broken(held.connection, invalidate=False)

    async def _checkout(self) -> AsyncConnection:
        """A connection of its own for one piece of work: an idle one the hot statements
        kept (no pool round), else one from the pool. DatabaseUnavailable when none."""
        if self._kept is not None:
            held = await self._kept.take()
            if held is not None:
                return held.connection
        connection = self.engine.connect()
        try:
            await connection.start()
        except _UNREACHABLE as error:
            _unavailable(error)
        return connection

    # -- everything else: SQLAlchemy, read-only or one explicit transaction -----------

    async def read(self, work: Callable[[AsyncConnection], Awaitable[T]], *, operation: str) -> T:
        """Run read-only ``work``; on a broken connection, once more on a fresh one."""
        with self._telemetry.operation(operation):
            return await self._retrying(
                work, commit=False, repeatable=True, preamble=self._preamble
            )

    async def transaction(
        self,
        work: Callable[[AsyncConnection], Awaitable[T]],
        *,
        operation: str,
        repeatable: bool = False,
    ) -> T:
        """Run ``work`` in one transaction (BEGIN … COMMIT).

        On a broken connection before COMMIT was sent (nothing committed), or while
        committing when ``repeatable`` (running it again stores nothing twice), it runs
        once more on a fresh connection; else DatabaseUnavailable.
        """
        with self._telemetry.operation(operation):
            return await self._retrying(
                work, commit=True, repeatable=repeatable, preamble=self._preamble
            )

    async def _retrying(
        self,
        work: Callable[[AsyncConnection], Awaitable[T]],
        *,
        commit: bool,
        repeatable: bool,
        preamble: sa.TextClause | None,
    ) -> T:
        try:
            return await self._once(work, commit=commit, preamble=preamble)
        except _Broke as broke:
            if broke.kind is Broken.LOST and broke.committing and not repeatable:
                _unavailable(broke.error)
            log.info("database connection lost (%s); running again", broke.kind.value)
        try:
            return await self._once(work, commit=commit, preamble=preamble)
        except _Broke as broke:
            _unavailable(broke.error)

    async def _once(
        self,
        work: Callable[[AsyncConnection], Awaitable[T]],
        *,
        commit: bool,
        preamble: sa.TextClause | None,
    ) -> T:
        connection = await self._checkout()
        committing = False
        try:
            try:
                if preamble is not None:
                    await connection.execute(preamble)
                result = await work(connection)
                if commit:
                    committing = True
                    await connection.commit()
            except Exception as error:
                broken = broken_connection(error)
                if broken is None:
                    raise
                await connection.invalidate()
                raise _Broke(broken, error, committing=committing) from error
            finally:
                # Closing rolls back a transaction the work left open (a read, or work
                # that failed), and never one that committed.
                await connection.close()
        except _UNREACHABLE as error:
            _raise_broken_at_close(error, committing=False)
        return result

    async def yielding(
        self,
        work: Callable[[AsyncConnection], Awaitable[T]],
        *,
        operation: str,
        attempts: int,
        repeatable: bool = False,
    ) -> T:
        """A transaction that gives way: it waits at most 200 ms for any lock (or is
        chosen as a deadlock victim), then starts over a little later, up to ``attempts``
        times; then Busy.

        Operator actions and cleaner batches touch many rows and the rollup counters that
        consumers also write. Rather than queue behind a consumer (or become its deadlock
        partner for PostgreSQL's whole deadlock_timeout), they give up a lock quickly and
        run again; the consumer never waits long.
        """

        async def giving_way() -> T:
            return await self._retrying(
                work, commit=True, repeatable=repeatable, preamble=self._give_way_preamble
            )

        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(_gave_way),
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_incrementing(_GIVE_WAY_DELAY_SECONDS, _GIVE_WAY_DELAY_SECONDS),
            before_sleep=_log_gave_way,
            reraise=True,
        )
        try:
            with self._telemetry.operation(operation):
                return await retrying(giving_way)
        except DBAPIError as error:
            if _gave_way(error):
                raise Busy() from error
            raise


def _log_gave_way(state: tenacity.RetryCallState) -> None:
    outcome = state.outcome
    error = outcome.exception() if outcome is not None else None
    code = sqlstate(error) if isinstance(error, DBAPIError) else None
    log.debug("transaction gave way to a concurrent writer (%s); retrying", code)
