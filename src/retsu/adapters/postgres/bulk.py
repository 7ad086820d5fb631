"""Bulk operator actions in bounded batches (SPEC §3.11): each batch its own transaction,
giving way to message traffic like every operator action; the action's one audit row is
written with the last batch, holding the whole count."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.audit_log import audit_insert
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.queues import OPERATOR_ATTEMPTS
from retsu.domain.audit import AuditEntry

# Rows one batch takes at most: a transaction of a few milliseconds.
BULK_BATCH = 1000


async def in_batches(
    database: Database,
    take: Callable[[AsyncConnection, int], Awaitable[int]],
    *,
    limit: int,
    audit: AuditEntry,
    counted_as: str,
    operation: str,
) -> int:
    """Run ``take(connection, n)`` (which takes up to n rows and says how many) until
    ``limit`` rows are taken or a batch comes back short (nothing more matches, or what
    matches is held by a dequeue: SKIP LOCKED); the total. The audit row's details get
    ``counted_as``: the total."""
    done = 0
    while True:
        want = min(BULK_BATCH, limit - done)

        async def batch(connection: AsyncConnection, want: int = want, done: int = done) -> int:
            n = await take(connection, want)
            if n < want or done + n >= limit:
                await connection.execute(audit_insert(audit.with_details(**{counted_as: done + n})))
            return n

        n = await database.yielding(batch, operation=operation, attempts=OPERATOR_ATTEMPTS)
        done += n
        if n < want or done >= limit:
            return done
