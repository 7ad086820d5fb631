"""Collector leadership through a PostgreSQL session advisory lock.

The lock belongs to one session, so the leader keeps that one connection for its
whole leadership and runs every state query on it: if the session dies, the lock
is gone *and* the next query fails, so the old leader cannot keep collecting
through another connection. When leadership ends the connection is invalidated
(closed), never returned to the pool, where an unrelated borrower would inherit
the lock.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from retsu.adapters.postgres.state import read_all_queues
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


class AdvisoryLockSession:
    def __init__(self, connection: AsyncConnection) -> None:
        self._connection = connection

    async def read_state(self) -> list[PriorityState]:
        # One statement in its own short transaction: one consistent snapshot, and
        # no transaction left open between refreshes. On failure the session is
        # released (invalidated), so there is nothing to roll back here.
        state = await read_all_queues(self._connection)
        await self._connection.commit()
        return state

    async def release(self) -> None:
        try:
            await self._connection.invalidate()
        finally:
            await self._connection.close()


class AdvisoryLockLeadership:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def try_acquire(self) -> AdvisoryLockSession | None:
        connection = await self._engine.connect()
        try:
            acquired = (
                await connection.execute(_TRY_LOCK, {"k1": LOCK_KEY[0], "k2": LOCK_KEY[1]})
            ).scalar_one()
            await connection.commit()
        except BaseException:
            await connection.invalidate()
            await connection.close()
            raise
        if not acquired:
            await connection.close()  # back to the pool: it holds no lock
            return None
        session = AdvisoryLockSession(connection)
        try:
            for statement in _KEEPALIVES:
                await connection.execute(statement)
            await connection.commit()
        except BaseException:
            await session.release()
            raise
        return session
