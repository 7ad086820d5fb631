"""Bulk removals for the cleaners, one bounded transaction per batch.

Each statement walks one index in order (expiry, dead-letter time, key creation
time), stops after ``batch_size`` rows and locks them with SKIP LOCKED, so several
cleaner replicas split the work between them instead of waiting on each other,
and a batch never waits for a row a dequeue or acknowledge is holding. Deleting
messages and dead letters takes them off the state rollup in the same statement
(``counters.py``).

Background work yields to foreground work: a batch waits at most 200 ms for any
lock (in practice a state-rollup counter row that a dequeue or enqueue holds), then
gives up and starts over a moment later; a deadlock reported by PostgreSQL is retried
the same way.

Every batch is repeatable: when its connection breaks while it may be committing it
runs once more on a fresh connection (rows already deleted are simply not found
again; only the first run's counts are lost). When the database cannot be reached the
batch raises DatabaseUnavailable, and the cleaner retries at its next interval.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.counters import (
    COMPLETED,
    COUNTED_DELAYED,
    COUNTED_READY,
    GROUPS_LEFT,
    IN_FLIGHT,
    groups_left_parameters,
    uncount_dead_letters,
    uncount_messages,
)
from retsu.adapters.postgres.database import Database
from retsu.domain.maintenance import (
    NEVER_DELIVERED,
    PREVIOUSLY_DELIVERED,
    ExpiredMessages,
    PurgedDeadLetters,
)

_ATTEMPTS = 10

# Expired: past ``expires_at``; an in-flight message only once its lease has ended
# too (a consumer holding an active lease may still acknowledge it); never a completed one
# (history, removed after its retention instead). Dequeue never touches expired rows, so
# expiry wins over dead-lettering. Messages not in flight come from
# queue_message_expiry_idx, oldest expiry first; ended leases from each queue's lease index
# (the expiry index leaves rows in flight out, so a claim adds no entry to it). Each part
# stops at the batch size. What was removed comes back summed per counter row, with the
# grouped ones' lanes: those leave their lanes (``GROUPS_LEFT``, per queue), then come off
# the counters and count as expired (``_UNCOUNT_EXPIRED``) — separate statements of the
# same transaction, in every writer's lock order (message rows, group rows, counter rows).
_DELETE_EXPIRED = sa.text(
    f"""
    WITH idle AS (
        SELECT id FROM queue_message
        WHERE expires_at <= now() AND state NOT IN ({IN_FLIGHT}, {COMPLETED})
        ORDER BY expires_at
        LIMIT :batch_size
        FOR UPDATE SKIP LOCKED
    ), leased AS (
        SELECT m.id
        FROM queue AS q CROSS JOIN LATERAL (
            SELECT id FROM queue_message
            WHERE queue_id = q.id AND state = {IN_FLIGHT} AND available_after <= now()
              AND expires_at <= now()
            ORDER BY available_after
            LIMIT :batch_size
            FOR UPDATE SKIP LOCKED
        ) AS m
        LIMIT greatest(:batch_size - (SELECT count(*) FROM idle), 0)
    ), removed AS (
        DELETE FROM queue_message AS m
        USING (SELECT id FROM idle UNION ALL SELECT id FROM leased) AS doomed
        WHERE m.id = doomed.id
        RETURNING m.queue_id, m.id, m.priority, m.state, m.group_key,
                  m.delivery_attempts > 0 AS previously_delivered
    )
    SELECT r.queue_id, q.name, r.priority, retsu_shard(r.id) AS shard,
           count(*) FILTER (WHERE r.state IN {COUNTED_READY}) AS ready,
           count(*) FILTER (WHERE r.state = {IN_FLIGHT}) AS in_flight,
           count(*) FILTER (WHERE r.state IN {COUNTED_DELAYED}) AS delayed,
           count(*) AS n,
           count(*) FILTER (WHERE r.previously_delivered) AS previously_delivered,
           array_agg(r.group_key) FILTER (WHERE r.group_key IS NOT NULL) AS groups,
           array_agg(r.state) FILTER (WHERE r.group_key IS NOT NULL) AS group_states
    FROM removed AS r JOIN queue AS q ON q.id = r.queue_id
    GROUP BY r.queue_id, q.name, r.priority, retsu_shard(r.id)
    """
)
_UNCOUNT_EXPIRED = sa.text(
    """
    UPDATE queue_state_rollup AS c
    SET ready = c.ready - d.ready, in_flight = c.in_flight - d.in_flight,
        delayed = c.delayed - d.delayed, expired = c.expired + d.n
    FROM (
        SELECT * FROM unnest(
            CAST(:queue_ids AS uuid[]), CAST(:priorities AS smallint[]),
            CAST(:shards AS smallint[]), CAST(:ready AS bigint[]),
            CAST(:in_flight AS bigint[]), CAST(:delayed AS bigint[]), CAST(:n AS bigint[])
        ) AS u(queue_id, priority, shard, ready, in_flight, delayed, n)
        ORDER BY 1, 2, 3
    ) AS d
    WHERE c.queue_id = d.queue_id AND c.priority = d.priority AND c.shard = d.shard
    """
)

# Completed messages kept past their queue's retention (SPEC §3.11), oldest completion
# first per queue (queue_message_completed_idx); a retention lowered later applies to
# what is already kept. They count only as completed.
_DELETE_COMPLETED = sa.text(
    f"""
    WITH doomed AS (
        SELECT m.id
        FROM queue AS q CROSS JOIN LATERAL (
            SELECT id FROM queue_message
            WHERE queue_id = q.id AND state = {COMPLETED}
              AND completed_at <= now() - make_interval(secs => q.completed_retention_seconds)
            ORDER BY completed_at
            LIMIT :batch_size
            FOR UPDATE SKIP LOCKED
        ) AS m
        LIMIT :batch_size
    ), deleted AS (
        DELETE FROM queue_message AS m USING doomed
        WHERE m.id = doomed.id
        RETURNING m.queue_id, m.id, m.priority, m.state
    ), {uncount_messages("deleted")}
    SELECT count(*) AS removed FROM deleted
    """
)

# Strictly older than the retention: a record exactly ``retention_seconds`` old stays.
_DELETE_OLD_DEAD_LETTERS = sa.text(
    f"""
    WITH doomed AS (
        SELECT id FROM queue_dead_letter_message
        WHERE dead_lettered_at < now() - make_interval(secs => :retention_seconds)
        ORDER BY dead_lettered_at
        LIMIT :batch_size
        FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM queue_dead_letter_message AS d USING doomed
        WHERE d.id = doomed.id
        RETURNING d.queue_id, d.id, d.priority
    ), {uncount_dead_letters("deleted")}
    SELECT q.name, count(*) AS removed
    FROM deleted JOIN queue AS q ON q.id = deleted.queue_id
    GROUP BY q.name
    """
)

# Idempotency-Keys are remembered for 24 h; older ones go, oldest first
# (idempotency_key_created_idx).
_DELETE_OLD_IDEMPOTENCY_KEYS = sa.text(
    """
    WITH doomed AS (
        SELECT queue_id, key FROM idempotency_key
        WHERE created_at < now() - make_interval(secs => :age_seconds)
        ORDER BY created_at
        LIMIT :batch_size
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM idempotency_key AS k USING doomed
    WHERE k.queue_id = doomed.queue_id AND k.key = doomed.key
    """
)


class PostgresMaintenance:
    """Implements MessageMaintenance and IdempotencyKeyMaintenance."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def _run(
        self,
        statement: sa.TextClause,
        parameters: dict[str, Any],
        *,
        operation: str,
        rows: bool = True,
    ) -> Sequence[Any] | int:
        """One batch in its own transaction: the rows it returns (or its row count)."""

        async def batch(connection: AsyncConnection) -> Sequence[Any] | int:
            result = await connection.execute(statement, parameters)
            return result.all() if rows else int(result.rowcount)

        return await self._database.yielding(
            batch, operation=operation, attempts=_ATTEMPTS, repeatable=True
        )

    async def delete_expired_messages(self, batch_size: int) -> list[ExpiredMessages]:
        async def batch(connection: AsyncConnection) -> list[ExpiredMessages]:
            rows = list(
                (await connection.execute(_DELETE_EXPIRED, {"batch_size": batch_size})).all()
            )
            if not rows:
                return []
            by_queue: dict[Any, list[Any]] = {}
            for row in rows:
                by_queue.setdefault(row.queue_id, []).append(row)
            for queue_id in sorted(by_queue, key=str):
                lanes = groups_left_parameters(queue_id, by_queue[queue_id])
                if lanes is not None:
                    await connection.execute(GROUPS_LEFT, lanes)
            await connection.execute(
                _UNCOUNT_EXPIRED,
                {
                    "queue_ids": [row.queue_id for row in rows],
                    "priorities": [row.priority for row in rows],
                    "shards": [row.shard for row in rows],
                    "ready": [row.ready for row in rows],
                    "in_flight": [row.in_flight for row in rows],
                    "delayed": [row.delayed for row in rows],
                    "n": [row.n for row in rows],
                },
            )
            counts: Counter[tuple[str, str]] = Counter()
            for row in rows:
                counts[row.name, PREVIOUSLY_DELIVERED] += int(row.previously_delivered)
                counts[row.name, NEVER_DELIVERED] += int(row.n - row.previously_delivered)
            return [
                ExpiredMessages(queue_name=name, delivery_history=history, count=n)
                for (name, history), n in counts.items()
                if n
            ]

        return await self._database.yielding(
            batch, operation="delete_expired_messages", attempts=_ATTEMPTS, repeatable=True
        )

    async def delete_completed_messages(self, batch_size: int) -> int:
        rows = await self._run(
            _DELETE_COMPLETED, {"batch_size": batch_size}, operation="delete_completed_messages"
        )
        assert not isinstance(rows, int)
        return int(rows[0].removed)

    async def delete_dead_letters_older_than(
        self, retention_seconds: int, batch_size: int
    ) -> list[PurgedDeadLetters]:
        rows = await self._run(
            _DELETE_OLD_DEAD_LETTERS,
            {"retention_seconds": float(retention_seconds), "batch_size": batch_size},
            operation="delete_dead_letters_older_than",
        )
        assert not isinstance(rows, int)
        return [PurgedDeadLetters(queue_name=row.name, count=int(row.removed)) for row in rows]

    async def delete_idempotency_keys_older_than(self, age_seconds: int, batch_size: int) -> int:
        count = await self._run(
            _DELETE_OLD_IDEMPOTENCY_KEYS,
            {"age_seconds": float(age_seconds), "batch_size": batch_size},
            operation="delete_idempotency_keys_older_than",
            rows=False,
        )
        assert isinstance(count, int)
        return count
