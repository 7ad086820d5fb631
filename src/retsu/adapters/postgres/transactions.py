"""Transactions that give way: wait at most briefly for any lock, and start over.

Operator actions and cleaner batches touch many rows and rollup counters that
consumers also write. Rather than queue behind a consumer (or become its deadlock
partner for PostgreSQL's whole deadlock_timeout), such a transaction gives up a
lock after 200 ms and runs again a little later; the consumer never waits long.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from retsu.adapters.postgres.errors import DEADLOCK_DETECTED, LOCK_NOT_AVAILABLE, sqlstate

T = TypeVar("T")

log = logging.getLogger("retsu.adapters.postgres")

_LOCK_TIMEOUT = sa.text("SET LOCAL lock_timeout = '200ms'")
_RETRY_DELAY_SECONDS = 0.05


async def run_yielding(
    engine: AsyncEngine, work: Callable[[AsyncConnection], Awaitable[T]], *, attempts: int
) -> T:
    """Run ``work`` in one transaction, up to ``attempts`` times while it keeps giving
    way to a lock (or was chosen as a deadlock victim); other errors propagate."""
    for attempt in range(1, attempts + 1):
        try:
            async with engine.begin() as connection:
                await connection.execute(_LOCK_TIMEOUT)
                return await work(connection)
        except DBAPIError as error:
            code = sqlstate(error)
            if attempt == attempts or code not in (LOCK_NOT_AVAILABLE, DEADLOCK_DETECTED):
                raise
            log.debug("transaction gave way to a concurrent writer (%s); retrying", code)
        await asyncio.sleep(_RETRY_DELAY_SECONDS * attempt)
    raise AssertionError("unreachable")
