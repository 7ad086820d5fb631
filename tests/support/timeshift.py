"""Moving time forward for PostgreSQL-backed tests without sleeping.

PostgreSQL's clock (`now()`) cannot be faked, so tests shift every stored
timestamp back instead: to the rows, that is the same as time moving forward.
Only for a test session's own database — or only for some queues' rows
(``queue_ids``), so other tests sharing the database never see time jump.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import asyncpg

_BACK = "make_interval(secs => $1)"
# The times inside an attempt record (migration 0009): each attempt's "at" and "end".
_ATTEMPTS = f"""(
    SELECT jsonb_agg(
        e || jsonb_build_object('at', (e ->> 'at')::timestamptz - {_BACK})
          || CASE WHEN e ? 'end'
                  THEN jsonb_build_object('end', (e ->> 'end')::timestamptz - {_BACK})
                  ELSE '{{}}'::jsonb END
        ORDER BY i)
    FROM jsonb_array_elements(attempts) WITH ORDINALITY AS a(e, i))"""
# Every stored moment, table by table; ``$2``: the queues whose rows move (NULL: all).
_OURS = "($2::uuid[] IS NULL OR queue_id = ANY ($2::uuid[]))"
SHIFTS = [
    f"""UPDATE queue_message SET
        enqueued_at = enqueued_at - {_BACK}, expires_at = expires_at - {_BACK},
        available_after = available_after - {_BACK},
        last_delivered_at = last_delivered_at - {_BACK},
        completed_at = completed_at - {_BACK}, attempts = {_ATTEMPTS}
    WHERE {_OURS}""",
    f"""UPDATE queue_dead_letter_message SET
        enqueued_at = enqueued_at - {_BACK},
        last_delivered_at = last_delivered_at - {_BACK},
        dead_lettered_at = dead_lettered_at - {_BACK}, attempts = {_ATTEMPTS}
    WHERE {_OURS}""",
    f"""UPDATE queue_group SET
        last_delivered_at = last_delivered_at - {_BACK}, tokens_at = tokens_at - {_BACK}
    WHERE {_OURS}""",
    f"UPDATE queue_rate_bucket SET tokens_at = tokens_at - {_BACK} WHERE {_OURS}",
    f"UPDATE idempotency_key SET created_at = created_at - {_BACK} WHERE {_OURS}",
    f"UPDATE queue_history SET at = at - {_BACK} WHERE {_OURS}",
    f"""UPDATE queue_schedule SET
        next_run_at = next_run_at - {_BACK}, last_run_at = last_run_at - {_BACK},
        created_at = created_at - {_BACK}, updated_at = updated_at - {_BACK}
    WHERE {_OURS}""",
]


def plain_url(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def shift(
    connection: asyncpg.Connection, seconds: float, queue_ids: Sequence[UUID] | None = None
) -> None:
    """Move the stored moments (of ``queue_ids`` only, when given) ``seconds`` back."""
    async with connection.transaction():
        for statement in SHIFTS:
            await connection.execute(
                statement, float(seconds), None if queue_ids is None else list(queue_ids)
            )


async def advance_database_clock(database_url: str, seconds: float) -> None:
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        await shift(connection, seconds)
    finally:
        await connection.close()
