"""Moving time forward for PostgreSQL-backed tests without sleeping.

PostgreSQL's clock (`now()`) cannot be faked, so tests shift every stored
timestamp back instead: to the rows, that is the same as time moving forward.
Only for a test session's own database.
"""

from __future__ import annotations

import asyncpg

SHIFT = """
UPDATE queue_message SET
    enqueued_at = enqueued_at - make_interval(secs => $1),
    expires_at = expires_at - make_interval(secs => $1),
    available_after = available_after - make_interval(secs => $1),
    last_delivered_at = last_delivered_at - make_interval(secs => $1);
"""
SHIFT_DEAD = """
UPDATE queue_dead_letter_message SET
    enqueued_at = enqueued_at - make_interval(secs => $1),
    last_delivered_at = last_delivered_at - make_interval(secs => $1),
    dead_lettered_at = dead_lettered_at - make_interval(secs => $1);
"""


def plain_url(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def advance_database_clock(database_url: str, seconds: float) -> None:
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        async with connection.transaction():
            await connection.execute(SHIFT, float(seconds))
            await connection.execute(SHIFT_DEAD, float(seconds))
    finally:
        await connection.close()
