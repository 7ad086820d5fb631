"""Collector leadership through a PostgreSQL session advisory lock.

The lock belongs to one session, so the leader keeps that one connection for its
whole leadership and runs every state query on it: if the session dies, the lock
is gone *and* the next query fails, so the old leader cannot keep collecting
through another connection. When leadership ends the connection is invalidated
(closed), never returned to the pool, where an unrelated borrower would inherit
the lock.

SPEC §5 tells two failures of a refresh apart, and so does ``read_state``:

* the session broke (killed, the database restarted, the socket reset; or asyncpg
  already knew it was closed): the lock went with it. ``LeadershipLost``: the
  collector stops exporting and competes again at its retry interval.
* anything else, on a session that is still there (a query error, a timeout): the
  exception itself, and the process exits non-zero.

Competing (``try_acquire``) on a pooled connection that turns out broken runs once more
on a fresh one (a lock taken by a session that died was released with it); when no
connection can be had, ``DatabaseUnavailable``, and the collector tries again later.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.errors import broken_connection
from retsu.adapters.postgres.history import insert_snapshot
from retsu.adapters.postgres.state import read_all_queues
from retsu.application.ports import LeadershipLost
from retsu.domain.errors import DatabaseUnavailable
from retsu.domain.state import PriorityState

# A fixed two-part key, used for nothing else: "RETS" and collector number 1.
LOCK_KEY = (0x52455453, 1)

_TRY_LOCK = sa.text("SELECT pg_try_advisory_lock(:k1, :k2)")

# On the leader's session only: PostgreSQL probes an idle leader connection after
# 10 s and drops it after three unanswered probes 5 s apart, so a leader cut off by
# the network loses the lock in about 25 s instead of the operating system's default
# (two hours and more). A live but busy leader answers probes from its kernel, so
# this never ends a healthy leadership. Ignored on Unix-socket connections.
_KEEPALIVES = (
    sa.text("SET tcp_keepalives_idle = 10"),
    sa.text("SET tcp_keepalives_interval = 5"),
    sa.text("SET tcp_keepalives_count = 3"),
)


async def _discard(connection: AsyncConnection) -> None:
    """Close a session for good: never back to the pool (it may hold the lock)."""
    try:
        await connection.invalidate()
    finally:
        await connection.close()


class AdvisoryLockSession:
    def __init__(self, connection: AsyncConnection, database: Database) -> None:
        self._connection = connection
        self._database = database

    async def read_state(self) -> list[PriorityState]:
        # One statement in its own short transaction: one consistent snapshot, and
        # no transaction left open between refreshes. On failure the session is
        # released (invalidated), so there is nothing to roll back here.
        try:
            with self._database.measured("read_state"):
                state = await read_all_queues(self._connection)
                await self._connection.commit()
        except Exception as error:
            if broken_connection(error) is not None:
                raise LeadershipLost(f"the leader's database session broke: {error}") from error
            raise
        return state

    async def record_history(self, state: Sequence[PriorityState]) -> None:
        # SPEC §3.8: one snapshot per queue, one statement, committed at once. Only the
        # leader writes (this session holds the lock), so snapshots never interleave.
        try:
            with self._database.measured("record_history"):
                await insert_snapshot(self._connection, state)
                await self._connection.commit()
        except Exception as error:
            if broken_connection(error) is not None:
                raise LeadershipLost(f"the leader's database session broke: {error}") from error
            raise

    async def release(self) -> None:
        with self._database.measured("release_leadership"):
            await _discard(self._connection)


class AdvisoryLockLeadership:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def try_acquire(self) -> AdvisoryLockSession | None:
        with self._database.measured("acquire_leadership"):
            try:
                return await self._try_acquire()
            except _SessionBroke:
                return await self._try_acquire(last_try=True)

    async def _try_acquire(self, *, last_try: bool = False) -> AdvisoryLockSession | None:
        connection = await self._database.connect()
        try:
            acquired = (
                await connection.execute(_TRY_LOCK, {"k1": LOCK_KEY[0], "k2": LOCK_KEY[1]})
            ).scalar_one()
            await connection.commit()
        except BaseException as error:
            await _discard(connection)
            _raise_broken(error, last_try=last_try)
            raise
        if not acquired:
            await connection.close()  # back to the pool: it holds no lock
            return None
        session = AdvisoryLockSession(connection, self._database)
        try:
            for statement in _KEEPALIVES:
                await connection.execute(statement)
            await connection.commit()
        except BaseException as error:
            await session.release()
            _raise_broken(error, last_try=True)
            raise
        return session


class _SessionBroke(Exception):
    """Internal: competing failed on a broken pooled connection; try a fresh one."""


def _raise_broken(error: BaseException, *, last_try: bool) -> None:
    if isinstance(error, Exception) and broken_connection(error) is not None:
        if last_try:
            raise DatabaseUnavailable() from error
        raise _SessionBroke() from error
