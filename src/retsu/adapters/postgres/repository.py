"""The PostgreSQL repository: queues and messages, one transaction per change.

Times come from the database clock (``now()``), never from the API host.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

import asyncpg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import asyncpg as postgresql_asyncpg
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from retsu.adapters.ids import uuid7
from retsu.adapters.postgres.errors import (
    FOREIGN_KEY_VIOLATION,
    UNIQUE_VIOLATION,
    sqlstate,
)
from retsu.adapters.postgres.state import read_queue
from retsu.adapters.postgres.tables import (
    MessageState,
    audit_log,
    idempotency_key,
    queue,
    queue_dead_letter_message,
    queue_message,
)
from retsu.adapters.postgres.transactions import run_yielding
from retsu.domain.audit import AuditAction, AuditEntry, AuditRecord
from retsu.domain.cursor import AuditPosition, DeadLetterPosition, QueuePosition
from retsu.domain.errors import IdempotencyKeyConflict, QueueAlreadyExists, QueueNotFound
from retsu.domain.idempotency import IDEMPOTENCY_KEY_RETENTION_SECONDS, IdempotentEnqueued
from retsu.domain.message import (
    REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
    DeadLetter,
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    Priority,
    Receipt,
)
from retsu.domain.queue import Queue, QueueSettings, QueueSettingsUpdate
from retsu.domain.receipt import parse_receipt_handle
from retsu.domain.state import PriorityState

T = TypeVar("T")

READY = int(MessageState.READY)
IN_FLIGHT = int(MessageState.IN_FLIGHT)

# Claims, acknowledgements and visibility changes commit without waiting for their WAL
# flush (synchronous_commit = off for that one statement's own transaction; the
# setting is read at commit, before a local setting ends). A PostgreSQL crash can
# lose the last few hundred milliseconds of them, and then the message is simply
# delivered again: exactly what at-least-once delivery already promises a consumer
# (a lost acknowledgement means a redelivery, a lost claim a fresh delivery; nothing
# is lost and no message is stored twice). Enqueues, idempotency keys, redrives and
# every operator action stay fully durable. Measured: ~+10-30 % dequeue+ack
# throughput on these machines, whose commits wait on a slow fsync (docs/performance.md).
_RELAXED_COMMIT = "set_config('synchronous_commit', 'off', true) AS relaxed_commit"

_ENQUEUE = sa.text(
    f"""
    INSERT INTO queue_message
        (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
         delivery_attempts)
    SELECT m.id, :queue_id, m.payload, m.priority, {READY}, now(),
           now() + make_interval(secs => m.ttl), now() + make_interval(secs => m.delay), 0
    FROM unnest(CAST(:ids AS uuid[]), CAST(:payloads AS text[]), CAST(:priorities AS smallint[]),
                CAST(:ttls AS integer[]), CAST(:delays AS integer[]))
         WITH ORDINALITY AS m(id, payload, priority, ttl, delay, ordinality)
    ORDER BY m.ordinality
    """
)

# One statement, so one round trip and one transaction:
#  * exhausted: a bounded batch of elapsed leases with no attempts left (of unexpired
#    messages: expired ones belong to the expired-message cleaner) moves to
#    dead-letter storage (dead, buried) before anything is claimed;
#  * retryable: a bounded batch of elapsed leases with attempts left, scanned
#    separately so exhausted leases never crowd them out: an exhausted message never
#    hides a deliverable one;
#  * these compete with the head of the ready part of the order index (ready) in
#    priority/FIFO order (chosen); winners get a fresh lease and receipt handle
#    (claimed); retryable losers become physically READY again (requeued), so the
#    next dequeue finds them in their FIFO place in the order index.
# Every scan takes row locks with SKIP LOCKED: concurrent dequeues never get the
# same delivery and never wait for each other.
_DEQUEUE = sa.text(
    f"""
    WITH exhausted AS (
        SELECT id, priority
        FROM queue_message
        WHERE queue_id = :queue_id AND state = {IN_FLIGHT}
          AND available_after <= now() AND expires_at > now()
          AND delivery_attempts >= :max_attempts
        ORDER BY available_after, enqueue_order
        LIMIT :elapsed_batch
        FOR UPDATE SKIP LOCKED
    ), retryable AS (
        SELECT id, priority, enqueue_order
        FROM queue_message
        WHERE queue_id = :queue_id AND state = {IN_FLIGHT}
          AND available_after <= now() AND expires_at > now()
          AND delivery_attempts < :max_attempts
        ORDER BY available_after, enqueue_order
        LIMIT :elapsed_batch
        FOR UPDATE SKIP LOCKED
    ), ready AS (
        SELECT id, priority, enqueue_order
        FROM queue_message
        WHERE queue_id = :queue_id AND state = {READY}
          AND available_after <= now() AND expires_at > now()
        ORDER BY priority DESC, enqueue_order
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), counters AS (
        -- Every rollup counter row this statement's triggers will write, locked now in
        -- key order: the claim, requeue, removal and dead-letter triggers then find
        -- them already held, so this statement takes its counter locks in one ordered
        -- pass, like every other writer, and cannot deadlock with them.
        SELECT 1
        FROM queue_state_rollup AS r
        WHERE r.queue_id = :queue_id
          AND (r.priority, r.shard) IN (
              SELECT touched.priority, (get_byte(uuid_send(touched.id), 15) & 31)::smallint
              FROM (
                  SELECT id, priority FROM exhausted
                  UNION ALL SELECT id, priority FROM retryable
                  UNION ALL SELECT id, priority FROM ready
              ) AS touched
          )
        ORDER BY r.priority, r.shard
        FOR UPDATE
    ), chosen AS (
        SELECT id FROM (
            SELECT id, priority, enqueue_order FROM ready
            UNION ALL
            SELECT id, priority, enqueue_order FROM retryable
        ) AS candidate
        ORDER BY priority DESC, enqueue_order
        LIMIT :limit
    ), claimed AS (
        UPDATE queue_message AS m
        SET state = {IN_FLIGHT},
            delivery_attempts = m.delivery_attempts + 1,
            receipt_handle = gen_random_uuid(),
            available_after = now() + make_interval(secs => :visibility_timeout),
            last_delivered_at = now()
        FROM chosen
        WHERE m.id = chosen.id
        RETURNING m.id, m.payload, m.priority, m.receipt_handle, m.delivery_attempts,
                  m.enqueued_at, m.enqueue_order
    ), requeued AS (
        UPDATE queue_message AS m
        SET state = {READY}
        FROM retryable
        WHERE m.id = retryable.id AND m.id NOT IN (SELECT id FROM chosen)
        RETURNING m.id
    ), dead AS (
        DELETE FROM queue_message AS m
        USING exhausted
        WHERE m.id = exhausted.id
        RETURNING m.id, m.queue_id, m.enqueue_order, m.payload, m.priority,
                  m.delivery_attempts, m.enqueued_at, m.last_delivered_at
    ), buried AS (
        INSERT INTO queue_dead_letter_message
            (id, queue_id, enqueue_order, payload, priority, delivery_attempts, enqueued_at,
             last_delivered_at, dead_lettered_at, reason)
        SELECT id, queue_id, enqueue_order, payload, priority, delivery_attempts, enqueued_at,
               last_delivered_at, now(), :reason
        FROM dead
        RETURNING 1
    )
    SELECT claimed.*, counts.dead_lettered,
           EXISTS (SELECT 1 FROM queue WHERE id = :queue_id) AS queue_exists,
           (SELECT count(*) FROM counters) AS counters_locked,
           {_RELAXED_COMMIT},
           -- Only when nothing was claimed (the subquery is an InitPlan, evaluated on
           -- first use, so a successful claim never runs it): seconds until the next
           -- delay or lease of the queue ends, two index probes. A long poll sleeps
           -- until then instead of polling (docs/long-polling.md).
           CASE WHEN claimed.id IS NULL THEN CAST(EXTRACT(epoch FROM (
               SELECT min(upcoming.at) FROM (
                   (SELECT available_after AS at FROM queue_message
                    WHERE queue_id = :queue_id AND state = {READY} AND delivery_attempts = 0
                      AND available_after > enqueued_at AND available_after > now()
                    ORDER BY available_after LIMIT 1)
                   UNION ALL
                   (SELECT available_after FROM queue_message
                    WHERE queue_id = :queue_id AND state = {IN_FLIGHT} AND available_after > now()
                    ORDER BY available_after LIMIT 1)
               ) AS upcoming
           ) - now()) AS double precision) END AS next_available_in
    FROM (SELECT count(*) AS dead_lettered FROM buried) AS counts
    LEFT JOIN claimed ON true
    """
)

# The existence check rides along: another process's name cache may still know a
# queue that is gone, and then the answer must be queue_not_found, not 204.
_ACKNOWLEDGE = sa.text(
    f"""
    WITH removed AS (
        DELETE FROM queue_message AS m
        USING unnest(CAST(:ids AS uuid[]), CAST(:handles AS uuid[])) AS r(id, handle)
        WHERE m.id = r.id AND m.queue_id = :queue_id AND m.state = {IN_FLIGHT}
          AND m.receipt_handle = r.handle AND m.available_after > now()
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM removed) AS removed,
           EXISTS (SELECT 1 FROM queue WHERE id = :queue_id) AS queue_exists,
           {_RELAXED_COMMIT}
    """
)


# Idempotent enqueue, the first statement: claim the key (a new row, or one older than
# the retention the cleaner has not removed yet) and, only if claimed, insert the
# message — one statement, in the caller's transaction. A concurrent claimer of the
# same key waits here for the other transaction (ON CONFLICT), then finds it taken.
_ENQUEUE_IDEMPOTENT = sa.text(
    f"""
    WITH claimed AS (
        INSERT INTO idempotency_key AS k (queue_id, key, message_id, fingerprint, created_at)
        VALUES (:queue_id, :key, :id, :fingerprint, now())
        ON CONFLICT (queue_id, key) DO UPDATE
        SET message_id = excluded.message_id, fingerprint = excluded.fingerprint,
            created_at = excluded.created_at
        WHERE k.created_at <= now() - make_interval(secs => CAST(:retention AS integer))
        RETURNING k.message_id
    ), stored AS (
        INSERT INTO queue_message
            (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
             delivery_attempts)
        SELECT claimed.message_id, CAST(:queue_id AS uuid), CAST(:payload AS text),
               CAST(:priority AS smallint), {READY}, now(),
               now() + make_interval(secs => CAST(:ttl AS integer)),
               now() + make_interval(secs => CAST(:delay AS integer)), 0
        FROM claimed
        RETURNING id
    )
    SELECT count(*) AS stored FROM stored
    """
)
# ... and when the key was taken: the winner's row, read with a fresh snapshot (a new
# statement), so a winner that committed while we waited is seen.
_IDEMPOTENCY_KEY = sa.text(
    "SELECT message_id, fingerprint FROM idempotency_key WHERE queue_id = :queue_id AND key = :key"
)

_CHANGE_VISIBILITY = sa.text(
    f"""
    WITH changed AS (
        UPDATE queue_message
        SET available_after = now() + make_interval(secs => :timeout)
        WHERE id = :id AND queue_id = :queue_id AND state = {IN_FLIGHT}
          AND receipt_handle = :handle AND available_after > now()
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM changed) AS changed,
           EXISTS (SELECT 1 FROM queue WHERE id = :queue_id) AS queue_exists,
           {_RELAXED_COMMIT}
    """
)

# Redrive: the record leaves dead-letter storage and comes back as a fresh message
# (new id, attempts 0, the queue's default lifetime read in the same statement, same
# priority), in one statement. The bulk form takes the oldest records first, skipping
# any another redrive holds, and gives them the new ids (and enqueue order) in that order.
_REDRIVE_ONE = sa.text(
    f"""
    WITH moved AS (
        DELETE FROM queue_dead_letter_message
        WHERE queue_id = :queue_id AND id = :message_id
        RETURNING payload, priority
    ), stored AS (
        INSERT INTO queue_message
            (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
             delivery_attempts)
        SELECT CAST(:new_id AS uuid), q.id, moved.payload, moved.priority, {READY}, now(),
               now() + make_interval(secs => q.default_message_ttl_seconds), now(), 0
        FROM moved JOIN queue AS q ON q.id = :queue_id
        RETURNING id
    )
    SELECT count(*) AS stored FROM stored
    """
)
_REDRIVE_MANY = sa.text(
    f"""
    WITH picked AS (
        SELECT id
        FROM queue_dead_letter_message
        WHERE queue_id = :queue_id
        ORDER BY dead_lettered_at, enqueue_order
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        DELETE FROM queue_dead_letter_message AS d
        USING picked
        WHERE d.id = picked.id
        RETURNING d.payload, d.priority, d.dead_lettered_at, d.enqueue_order
    ), numbered AS (
        SELECT payload, priority,
               row_number() OVER (ORDER BY dead_lettered_at, enqueue_order) AS n
        FROM moved
    ), stored AS (
        INSERT INTO queue_message
            (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
             delivery_attempts)
        SELECT ids.id, q.id, numbered.payload, numbered.priority, {READY}, now(),
               now() + make_interval(secs => q.default_message_ttl_seconds), now(), 0
        FROM numbered
        JOIN unnest(CAST(:ids AS uuid[])) WITH ORDINALITY AS ids(id, n) ON ids.n = numbered.n
        JOIN queue AS q ON q.id = :queue_id
        ORDER BY numbered.n
        RETURNING id
    )
    SELECT count(*) AS stored FROM stored
    """
)

# Operator bulk changes (purge, delete) wait at most this long for any one lock, then
# start over: they yield to message traffic instead of ever making a consumer's or
# producer's transaction the victim of a deadlock (lock_timeout < deadlock_timeout).
_OPERATOR_ATTEMPTS = 25

_DELETE_ROLLUP = sa.text("DELETE FROM queue_state_rollup WHERE queue_id = :queue_id")

_DEAD_LETTER_COLUMNS = (
    queue_dead_letter_message.c.id,
    queue_dead_letter_message.c.queue_id,
    queue_dead_letter_message.c.payload,
    queue_dead_letter_message.c.priority,
    queue_dead_letter_message.c.delivery_attempts,
    queue_dead_letter_message.c.enqueued_at,
    queue_dead_letter_message.c.last_delivered_at,
    queue_dead_letter_message.c.dead_lettered_at,
    queue_dead_letter_message.c.reason,
    queue_dead_letter_message.c.enqueue_order,
)


def _dead_letter_from_row(row: Any) -> DeadLetter:
    return DeadLetter(
        id=row.id,
        queue_id=row.queue_id,
        payload=row.payload,
        priority=Priority(row.priority),
        delivery_attempts=row.delivery_attempts,
        enqueued_at=row.enqueued_at,
        last_delivered_at=row.last_delivered_at,
        dead_lettered_at=row.dead_lettered_at,
        reason=row.reason,
    )


def _audit_insert(entry: AuditEntry) -> sa.Insert:
    return sa.insert(audit_log).values(
        id=uuid7(),
        at=sa.func.now(),
        actor=entry.caller.actor,
        action=entry.action.value,
        target_type=entry.target_type,
        target_id=entry.target_id,
        queue_id=entry.queue_id,
        request_id=entry.caller.request_id,
        details=entry.details,
    )


def _queue_from_row(row: Any) -> Queue:
    return Queue(
        id=row.id,
        name=row.name,
        settings=QueueSettings(
            visibility_timeout_seconds=row.visibility_timeout_seconds,
            max_delivery_attempts=row.max_delivery_attempts,
            default_message_ttl_seconds=row.default_message_ttl_seconds,
        ),
        paused=row.paused,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class HotStatement:
    """A ``text()`` statement compiled once for asyncpg: ``$n`` SQL and the order in
    which its named parameters become positional arguments."""

    def __init__(self, statement: sa.TextClause) -> None:
        compiled = statement.compile(dialect=_ASYNCPG_DIALECT)
        self.sql = compiled.string
        self._order = tuple(compiled.positiontup or ())

    def arguments(self, parameters: Mapping[str, Any]) -> list[Any]:
        return [parameters[name] for name in self._order]


_ASYNCPG_DIALECT = postgresql_asyncpg.dialect()  # type: ignore[no-untyped-call]
_HOT_ENQUEUE = HotStatement(_ENQUEUE)
_HOT_DEQUEUE = HotStatement(_DEQUEUE)
_HOT_ACKNOWLEDGE = HotStatement(_ACKNOWLEDGE)
_HOT_CHANGE_VISIBILITY = HotStatement(_CHANGE_VISIBILITY)

_CONSUMER_ATTEMPTS = 5
# Never a receipt handle Retsu hands out (they are random v4 UUIDs).
_NO_HANDLE = UUID(int=0)


class PostgresRepository:
    """Implements QueueRepository, MessageRepository, DeadLetterRepository, AuditLog and
    QueueStateReader on PostgreSQL."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        # Same pool; each statement commits on its own.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def _yielding(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Operator actions give way to consumers (see adapters/postgres/transactions.py)."""
        return await run_yielding(self._engine, work, attempts=_OPERATOR_ATTEMPTS)

    async def _hot(self, statement: HotStatement, parameters: Mapping[str, Any]) -> list[Any]:
        """Run one hot-path statement (enqueue, dequeue, acknowledge, visibility) on a
        pooled connection's asyncpg driver directly: one round trip, its own implicit
        transaction (no BEGIN/COMMIT), asyncpg's prepared-statement cache, none of
        SQLAlchemy's per-execution work. Run again if PostgreSQL aborted it as a
        deadlock or serialization victim: the statement changed nothing then. (The
        dequeue pre-locks its rollup counters so it does not deadlock with other
        writers; the retry is the safety net.)"""
        arguments = statement.arguments(parameters)
        for attempt in range(1, _CONSUMER_ATTEMPTS + 1):
            try:
                async with self._engine.connect() as connection:
                    raw = await connection.get_raw_connection()
                    driver = raw.driver_connection
                    assert driver is not None
                    return list(await driver.fetch(statement.sql, *arguments))
            except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
                if attempt == _CONSUMER_ATTEMPTS:
                    raise
            await asyncio.sleep(random.uniform(0, 0.005 * attempt))
        raise AssertionError("unreachable")

    # -- queues ---------------------------------------------------------------

    async def add_queue(self, new: Queue, audit: AuditEntry) -> Queue:
        statement = (
            sa.insert(queue)
            .values(
                id=new.id,
                name=new.name,
                visibility_timeout_seconds=new.settings.visibility_timeout_seconds,
                max_delivery_attempts=new.settings.max_delivery_attempts,
                default_message_ttl_seconds=new.settings.default_message_ttl_seconds,
                paused=new.paused,
                created_at=sa.func.now(),
                updated_at=sa.func.now(),
            )
            .returning(*queue.c)
        )
        try:
            async with self._engine.begin() as connection:
                row = (await connection.execute(statement)).one()
                await connection.execute(_audit_insert(audit))
        except IntegrityError as error:
            if sqlstate(error) == UNIQUE_VIOLATION:
                raise QueueAlreadyExists(new.name) from None
            raise
        return _queue_from_row(row)

    async def get_queue(self, queue_id: UUID) -> Queue | None:
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(sa.select(*queue.c).where(queue.c.id == queue_id))
            ).one_or_none()
        return None if row is None else _queue_from_row(row)

    async def update_queue(
        self, queue_id: UUID, update: QueueSettingsUpdate, audit: AuditEntry
    ) -> Queue | None:
        values: dict[str, Any] = {"updated_at": sa.func.now()}
        if update.visibility_timeout_seconds is not None:
            values["visibility_timeout_seconds"] = update.visibility_timeout_seconds
        if update.max_delivery_attempts is not None:
            values["max_delivery_attempts"] = update.max_delivery_attempts
        if update.default_message_ttl_seconds is not None:
            values["default_message_ttl_seconds"] = update.default_message_ttl_seconds
        return await self._change_queue(queue_id, values, audit)

    async def set_paused(self, queue_id: UUID, paused: bool, audit: AuditEntry) -> Queue | None:
        return await self._change_queue(
            queue_id, {"paused": paused, "updated_at": sa.func.now()}, audit
        )

    async def _change_queue(
        self, queue_id: UUID, values: dict[str, Any], audit: AuditEntry
    ) -> Queue | None:
        statement = (
            sa.update(queue).where(queue.c.id == queue_id).values(**values).returning(*queue.c)
        )
        async with self._engine.begin() as connection:
            row = (await connection.execute(statement)).one_or_none()
            if row is None:
                return None
            await connection.execute(_audit_insert(audit))
        return _queue_from_row(row)

    async def list_queues(
        self, *, limit: int, after: QueuePosition | None, name: str | None
    ) -> list[Queue]:
        # The name column is COLLATE "C": byte order, walked on its unique index.
        statement = sa.select(*queue.c).order_by(queue.c.name).limit(limit)
        if name is not None:
            statement = statement.where(queue.c.name == name)
        if after is not None:
            statement = statement.where(queue.c.name > after.name)
        async with self._engine.connect() as connection:
            rows = (await connection.execute(statement)).all()
        return [_queue_from_row(row) for row in rows]

    async def purge_queue(self, queue_id: UUID, audit: AuditEntry) -> int | None:
        async def purge(connection: AsyncConnection) -> int | None:
            # KEY SHARE: the queue cannot be deleted under the purge, while enqueues,
            # dequeues and settings changes go on.
            exists = await connection.execute(
                sa.select(queue.c.id).where(queue.c.id == queue_id).with_for_update(key_share=True)
            )
            if exists.one_or_none() is None:
                return None
            result = await connection.execute(
                sa.delete(queue_message).where(queue_message.c.queue_id == queue_id)
            )
            purged = int(result.rowcount)
            await connection.execute(_audit_insert(audit.with_details(purged=purged)))
            return purged

        return await self._yielding(purge)

    async def delete_queue(self, queue_id: UUID, audit: AuditEntry) -> bool:
        async def delete(connection: AsyncConnection) -> bool:
            # Lock the queue first: from here on no enqueue, dead-lettering or redrive of
            # this queue can start (their foreign-key check waits, then fails).
            row = (
                await connection.execute(
                    sa.select(queue.c.name).where(queue.c.id == queue_id).with_for_update()
                )
            ).one_or_none()
            if row is None:
                return False
            # Messages and dead letters go explicitly, before the queue row, so their
            # rollup triggers decrement the counters; then the counter rows themselves.
            messages = await connection.execute(
                sa.delete(queue_message).where(queue_message.c.queue_id == queue_id)
            )
            dead_letters = await connection.execute(
                sa.delete(queue_dead_letter_message).where(
                    queue_dead_letter_message.c.queue_id == queue_id
                )
            )
            await connection.execute(
                sa.delete(idempotency_key).where(idempotency_key.c.queue_id == queue_id)
            )
            await connection.execute(sa.delete(queue).where(queue.c.id == queue_id))
            await connection.execute(_DELETE_ROLLUP, {"queue_id": queue_id})
            await connection.execute(
                _audit_insert(
                    audit.with_details(
                        name=row.name,
                        messages=int(messages.rowcount),
                        dead_letters=int(dead_letters.rowcount),
                    )
                )
            )
            return True

        return await self._yielding(delete)

    # -- queue state ------------------------------------------------------------

    async def read_state(self, queue_id: UUID) -> list[PriorityState]:
        async with self._engine.connect() as connection:
            return await read_queue(connection, queue_id)

    # -- messages -------------------------------------------------------------

    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None:
        parameters = {
            "queue_id": queue_id,
            "ids": [m.id for m in messages],
            "payloads": [m.payload for m in messages],
            "priorities": [int(m.priority) for m in messages],
            "ttls": [m.ttl_seconds for m in messages],
            "delays": [m.delay_seconds for m in messages],
        }

        try:
            await self._hot(_HOT_ENQUEUE, parameters)
        except asyncpg.ForeignKeyViolationError:
            raise QueueNotFound(queue_id) from None

    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int,
        max_delivery_attempts: int,
        dead_letter_batch_size: int,
    ) -> DequeueResult:
        parameters = {
            "queue_id": queue_id,
            "limit": limit,
            "visibility_timeout": float(visibility_timeout_seconds),
            "max_attempts": max_delivery_attempts,
            "elapsed_batch": dead_letter_batch_size,
            "reason": REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
        }

        rows = await self._hot(_HOT_DEQUEUE, parameters)
        first = rows[0]
        if not first["queue_exists"]:
            raise QueueNotFound(queue_id)
        claimed = sorted(
            (row for row in rows if row["id"] is not None),
            key=lambda row: (-row["priority"], row["enqueue_order"]),
        )
        return DequeueResult(
            messages=[
                DeliveredMessage(
                    id=row["id"],
                    payload=row["payload"],
                    priority=Priority(row["priority"]),
                    receipt_handle=str(row["receipt_handle"]),
                    delivery_attempts=row["delivery_attempts"],
                    enqueued_at=row["enqueued_at"],
                )
                for row in claimed
            ],
            dead_lettered=int(first["dead_lettered"]),
            next_available_in_seconds=None if claimed else first["next_available_in"],
        )

    async def enqueue_idempotent(
        self, queue_id: UUID, message: MessageToStore, key: str, fingerprint: bytes
    ) -> IdempotentEnqueued:
        parameters = {
            "queue_id": queue_id,
            "key": key,
            "id": message.id,
            "fingerprint": fingerprint,
            "retention": IDEMPOTENCY_KEY_RETENTION_SECONDS,
            "payload": message.payload,
            "priority": int(message.priority),
            "ttl": message.ttl_seconds,
            "delay": message.delay_seconds,
        }
        # A key can vanish between the two statements (the cleaner, or the queue being
        # deleted): then the claim is simply tried again.
        for _ in range(3):
            try:
                async with self._engine.begin() as connection:
                    stored = (await connection.execute(_ENQUEUE_IDEMPOTENT, parameters)).scalar()
                    if stored:
                        return IdempotentEnqueued(message.id, replayed=False)
                    known = (
                        await connection.execute(
                            _IDEMPOTENCY_KEY, {"queue_id": queue_id, "key": key}
                        )
                    ).one_or_none()
            except DBAPIError as error:
                if sqlstate(error) == FOREIGN_KEY_VIOLATION:
                    raise QueueNotFound(queue_id) from None
                raise
            if known is not None:
                if bytes(known.fingerprint) != fingerprint:
                    raise IdempotencyKeyConflict()
                return IdempotentEnqueued(known.message_id, replayed=True)
            if await self.get_queue(queue_id) is None:
                raise QueueNotFound(queue_id)
        raise RuntimeError("the Idempotency-Key kept vanishing; try again")

    async def change_visibility(
        self, queue_id: UUID, receipt: Receipt, visibility_timeout_seconds: int
    ) -> bool:
        # A handle that is not even a UUID is simply not the current delivery; the
        # statement still runs (matching nothing) so a missing queue is reported.
        handle = parse_receipt_handle(receipt.receipt_handle) or _NO_HANDLE
        parameters = {
            "queue_id": queue_id,
            "id": receipt.message_id,
            "handle": handle,
            "timeout": float(visibility_timeout_seconds),
        }

        (row,) = await self._hot(_HOT_CHANGE_VISIBILITY, parameters)
        if not row["queue_exists"]:
            raise QueueNotFound(queue_id)
        return int(row["changed"]) == 1

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        ids: list[UUID] = []
        handles: list[UUID] = []
        for receipt in receipts:
            handle = parse_receipt_handle(receipt.receipt_handle)
            if handle is not None:  # a handle that is not even a UUID is simply stale
                ids.append(receipt.message_id)
                handles.append(handle)
        parameters = {"queue_id": queue_id, "ids": ids, "handles": handles}

        (row,) = await self._hot(_HOT_ACKNOWLEDGE, parameters)
        if not row["queue_exists"]:
            raise QueueNotFound(queue_id)
        return int(row["removed"])

    # -- dead letters -----------------------------------------------------------

    async def list_dead_letters(
        self, queue_id: UUID, *, limit: int, after: DeadLetterPosition | None
    ) -> list[tuple[DeadLetter, DeadLetterPosition]]:
        t = queue_dead_letter_message
        statement = (
            sa.select(*_DEAD_LETTER_COLUMNS)
            .where(t.c.queue_id == queue_id)
            .order_by(t.c.dead_lettered_at.desc(), t.c.enqueue_order.desc())
            .limit(limit)
        )
        if after is not None:
            statement = statement.where(
                sa.tuple_(t.c.dead_lettered_at, t.c.enqueue_order)
                < sa.tuple_(
                    sa.bindparam(
                        "after_at", after.dead_lettered_at, type_=t.c.dead_lettered_at.type
                    ),
                    sa.bindparam("after_order", after.enqueue_order, type_=sa.BigInteger),
                )
            )
        async with self._engine.connect() as connection:
            rows = (await connection.execute(statement)).all()
        return [
            (
                _dead_letter_from_row(row),
                DeadLetterPosition(row.dead_lettered_at, row.enqueue_order),
            )
            for row in rows
        ]

    async def get_dead_letter(self, queue_id: UUID, message_id: UUID) -> DeadLetter | None:
        t = queue_dead_letter_message
        statement = sa.select(*_DEAD_LETTER_COLUMNS).where(
            t.c.queue_id == queue_id, t.c.id == message_id
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(statement)).one_or_none()
        return None if row is None else _dead_letter_from_row(row)

    # Redrives and deletions are operator actions: like purge and delete they yield to
    # message traffic (a dequeue that dead-letters touches the same state counters).

    async def redrive_dead_letter(
        self, queue_id: UUID, message_id: UUID, new_id: UUID, audit: AuditEntry
    ) -> bool:
        parameters = {"queue_id": queue_id, "message_id": message_id, "new_id": new_id}

        async def redrive(connection: AsyncConnection) -> bool:
            stored = (await connection.execute(_REDRIVE_ONE, parameters)).scalar_one()
            if not stored:
                return False
            await connection.execute(_audit_insert(audit))
            return True

        return await self._yielding(redrive)

    async def redrive_dead_letters(
        self, queue_id: UUID, new_ids: Sequence[UUID], audit: AuditEntry
    ) -> int:
        parameters = {"queue_id": queue_id, "ids": list(new_ids), "limit": len(new_ids)}

        async def redrive(connection: AsyncConnection) -> int:
            stored = int((await connection.execute(_REDRIVE_MANY, parameters)).scalar_one())
            await connection.execute(_audit_insert(audit.with_details(redriven=stored)))
            return stored

        return await self._yielding(redrive)

    async def delete_dead_letter(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        t = queue_dead_letter_message
        statement = sa.delete(t).where(t.c.queue_id == queue_id, t.c.id == message_id)

        async def delete(connection: AsyncConnection) -> bool:
            if int((await connection.execute(statement)).rowcount) == 0:
                return False
            await connection.execute(_audit_insert(audit))
            return True

        return await self._yielding(delete)

    # -- audit log --------------------------------------------------------------

    async def list_audit_records(
        self,
        *,
        limit: int,
        after: AuditPosition | None,
        queue_id: UUID | None,
        action: AuditAction | None,
    ) -> list[AuditRecord]:
        t = audit_log
        statement = (
            sa.select(
                t.c.id,
                t.c.at,
                t.c.actor,
                t.c.action,
                t.c.target_type,
                t.c.target_id,
                t.c.request_id,
                t.c.details,
            )
            .order_by(t.c.at.desc(), t.c.id.desc())
            .limit(limit)
        )
        if queue_id is not None:
            statement = statement.where(t.c.queue_id == queue_id)
        if action is not None:
            statement = statement.where(t.c.action == action.value)
        if after is not None:
            statement = statement.where(
                sa.tuple_(t.c.at, t.c.id)
                < sa.tuple_(
                    sa.bindparam("after_at", after.at, type_=t.c.at.type),
                    sa.bindparam("after_id", after.id, type_=t.c.id.type),
                )
            )
        async with self._engine.connect() as connection:
            rows = (await connection.execute(statement)).all()
        return [
            AuditRecord(
                id=row.id,
                at=row.at,
                actor=row.actor,
                action=row.action,
                target_type=row.target_type,
                target_id=row.target_id,
                request_id=row.request_id,
                details=dict(row.details),
            )
            for row in rows
        ]
