"""Queue messages on PostgreSQL: enqueue, claim, acknowledge, change visibility.

Times come from the database clock (``now()``), never from the API host. The four hot
statements run through ``Database.hot``: one statement, one round trip, each its own
transaction on the pooled asyncpg connection. Whether a statement may run again after
its connection broke while it was running (its reply lost, so it may have committed):

* enqueue: no. Without an idempotency key nothing tells a repeat from a new message,
  so the caller gets DatabaseUnavailable (503: it may retry with a key).
* dequeue: yes. A lost claim leaves a lease that simply times out and the message is
  delivered again: the at-least-once delivery a consumer already handles. Messages it
  moved to dead-letter storage moved in the same transaction, exactly once.
* acknowledge: yes. A second run finds the message gone and deletes nothing.
* change visibility: yes. A second run sets the same lease end a moment later (after a
  release to 0 it finds the lease over and answers "not the current delivery").
* idempotent enqueue: yes. Its key makes a repeat find the first run's message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.database import Database, HotStatement
from retsu.adapters.postgres.errors import FOREIGN_KEY_VIOLATION, sqlstate
from retsu.adapters.postgres.tables import queue
from retsu.domain.errors import IdempotencyKeyConflict, InvalidInput, QueueNotFound
from retsu.domain.idempotency import IDEMPOTENCY_KEY_RETENTION_SECONDS, IdempotentEnqueued
from retsu.domain.message import (
    REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
    Acknowledged,
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    Priority,
    Receipt,
)
from retsu.domain.receipt import parse_receipt_handle

# The four hot statements are calls of the server-side functions of migration 0005 (their
# plans are cached by the server session, which transaction pooling cannot take away; they
# count what they change in the state rollup; claims, acknowledgements and visibility
# changes commit with synchronous_commit off, a lost one being a redelivery, which
# at-least-once delivery already allows — see the migration).
_ENQUEUE = sa.text(
    "SELECT queue_found, invalid_delay_at FROM retsu_enqueue("
    ":queue_id, :ids, :payloads, :priorities, :ttls, :delays, :groups, :schedule_ids)"
)
_DEQUEUE = sa.text(
    "SELECT * FROM retsu_dequeue("
    ":queue_id, :limit, :visibility_timeout, :elapsed_batch, :reason, :consumer)"
)
_ACKNOWLEDGE = sa.text(
    "SELECT queue_found, removed, wake FROM retsu_acknowledge(:queue_id, :ids, :handles, :results)"
)
_CHANGE_VISIBILITY = sa.text(
    "SELECT queue_found, changed "
    "FROM retsu_change_visibility(:queue_id, :id, :handle, :timeout, :error)"
)
_UNCLAIM = sa.text("SELECT retsu_unclaim(:queue_id, :ids, :handles) AS taken")

# Idempotent enqueue, in one transaction: claim the key (a new row, or one older than the
# retention the cleaner has not removed yet), then, only if claimed, store the message.
# A concurrent claimer of the same key waits on the key's row (ON CONFLICT), then finds it
# taken.
_CLAIM_IDEMPOTENCY_KEY = sa.text(
    """
    INSERT INTO idempotency_key AS k (queue_id, key, message_id, fingerprint, created_at)
    VALUES (:queue_id, :key, :id, :fingerprint, now())
    ON CONFLICT (queue_id, key) DO UPDATE
    SET message_id = excluded.message_id, fingerprint = excluded.fingerprint,
        created_at = excluded.created_at
    WHERE k.created_at <= now() - make_interval(secs => CAST(:retention AS integer))
    RETURNING k.message_id
    """
)
_ENQUEUE_ONE = sa.text(
    "SELECT queue_found, invalid_delay_at FROM retsu_enqueue(CAST(:queue_id AS uuid), "
    "ARRAY[CAST(:id AS uuid)], ARRAY[CAST(:payload AS text)], "
    "ARRAY[CAST(:priority AS smallint)], ARRAY[CAST(:ttl AS integer)], "
    "ARRAY[CAST(:delay AS integer)], ARRAY[CAST(:group AS text)], "
    "ARRAY[CAST(:schedule_id AS uuid)])"
)
# ... and when the key was taken: the winner's row, read with a fresh snapshot (a new
# statement), so a winner that committed while we waited is seen.
_IDEMPOTENCY_KEY = sa.text(
    "SELECT message_id, fingerprint FROM idempotency_key WHERE queue_id = :queue_id AND key = :key"
)

_HOT_ENQUEUE = HotStatement(_ENQUEUE, operation="enqueue")
# One message: its values as scalars, made arrays by the server (asyncpg encodes five
# one-element arrays at ~8 µs of the API's CPU a request, measured; docs/performance.md).
_HOT_ENQUEUE_ONE = HotStatement(_ENQUEUE_ONE, operation="enqueue")
_HOT_DEQUEUE = HotStatement(_DEQUEUE, operation="dequeue")
_HOT_ACKNOWLEDGE = HotStatement(_ACKNOWLEDGE, operation="acknowledge")
_HOT_CHANGE_VISIBILITY = HotStatement(_CHANGE_VISIBILITY, operation="change_visibility")
_HOT_UNCLAIM = HotStatement(_UNCLAIM, operation="unclaim")

# Never a receipt handle Retsu hands out (they are random v4 UUIDs).
_NO_HANDLE = UUID(int=0)


class PostgresMessages:
    """Implements MessageRepository."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None:
        if len(messages) == 1:
            (row,) = await self._database.hot(
                _HOT_ENQUEUE_ONE, _one_message(queue_id, messages[0]), repeatable=False
            )
            _check_enqueued(queue_id, row["queue_found"], row["invalid_delay_at"])
            return
        parameters = {
            "queue_id": queue_id,
            "ids": [m.id for m in messages],
            "payloads": [m.payload for m in messages],
            "priorities": [int(m.priority) for m in messages],
            "ttls": [m.ttl_seconds for m in messages],
            "delays": [m.delay_seconds for m in messages],
            "groups": [m.group for m in messages],
            "schedule_ids": [m.schedule_id for m in messages],
        }
        # (A queue deleted under the enqueue: the function's lock on its row waits for the
        # deletion, then finds it gone: queue_found false. Migration 0017.)
        (row,) = await self._database.hot(_HOT_ENQUEUE, parameters, repeatable=False)
        _check_enqueued(queue_id, row["queue_found"], row["invalid_delay_at"])

    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int | None,
        dead_letter_batch_size: int,
        consumer: str | None = None,
    ) -> DequeueResult:
        parameters = {
            "queue_id": queue_id,
            "limit": limit,
            "visibility_timeout": visibility_timeout_seconds,
            "elapsed_batch": dead_letter_batch_size,
            "reason": REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
            "consumer": consumer,
        }
        rows = await self._database.hot(_HOT_DEQUEUE, parameters, repeatable=True)
        last = rows[-1]  # the totals
        if not last["queue_found"]:
            raise QueueNotFound(queue_id)
        # Rows come in delivery order (the function claims in it).
        return DequeueResult(
            messages=[
                DeliveredMessage(
                    id=row["id"],
                    payload=row["payload"],
                    priority=Priority(row["priority"]),
                    receipt_handle=str(row["receipt_handle"]),
                    delivery_attempts=row["delivery_attempts"],
                    enqueued_at=row["enqueued_at"],
                    group=row["group_key"],
                )
                for row in rows[:-1]
            ],
            dead_lettered=int(last["dead_lettered"]),
            next_available_in_seconds=last["next_available_in"],
            paused=bool(last["paused"]),
            throttled=last["throttled"],
        )

    async def enqueue_idempotent(
        self, queue_id: UUID, message: MessageToStore, key: str, fingerprint: bytes
    ) -> IdempotentEnqueued:
        claim_key = {
            "queue_id": queue_id,
            "key": key,
            "id": message.id,
            "fingerprint": fingerprint,
            "retention": IDEMPOTENCY_KEY_RETENTION_SECONDS,
        }
        store = _one_message(queue_id, message)

        async def claim(connection: AsyncConnection) -> tuple[bool, Any]:
            """(stored, the key's row when another message holds it)."""
            if (await connection.execute(_CLAIM_IDEMPOTENCY_KEY, claim_key)).one_or_none():
                row = (await connection.execute(_ENQUEUE_ONE, store)).one()
                _check_enqueued(queue_id, row.queue_found, row.invalid_delay_at)
                return True, None
            known = await connection.execute(_IDEMPOTENCY_KEY, {"queue_id": queue_id, "key": key})
            return False, known.one_or_none()

        # A key can vanish between the two statements (the cleaner, or the queue being
        # deleted): then the claim is simply tried again.
        for _ in range(3):
            try:
                stored, known = await self._database.transaction(
                    claim, operation="enqueue_idempotent", repeatable=True
                )
            except DBAPIError as error:
                if sqlstate(error) == FOREIGN_KEY_VIOLATION:
                    raise QueueNotFound(queue_id) from None
                raise
            if stored:
                return IdempotentEnqueued(message.id, replayed=False)
            if known is not None:
                if bytes(known.fingerprint) != fingerprint:
                    raise IdempotencyKeyConflict()
                return IdempotentEnqueued(known.message_id, replayed=True)
            if not await self._queue_exists(queue_id):
                raise QueueNotFound(queue_id)
        raise RuntimeError("the Idempotency-Key kept vanishing; try again")

    async def _queue_exists(self, queue_id: UUID) -> bool:
        statement = sa.select(queue.c.id).where(queue.c.id == queue_id)

        async def read(connection: AsyncConnection) -> bool:
            return (await connection.execute(statement)).one_or_none() is not None

        return await self._database.read(read, operation="queue_exists")

    async def change_visibility(
        self,
        queue_id: UUID,
        receipt: Receipt,
        visibility_timeout_seconds: int,
        error: str | None = None,
    ) -> bool:
        # A handle that is not even a UUID is simply not the current delivery; the
        # statement still runs (matching nothing) so a missing queue is reported.
        handle = parse_receipt_handle(receipt.receipt_handle) or _NO_HANDLE
        parameters = {
            "queue_id": queue_id,
            "id": receipt.message_id,
            "handle": handle,
            "timeout": visibility_timeout_seconds,
            "error": error,
        }
        (row,) = await self._database.hot(_HOT_CHANGE_VISIBILITY, parameters, repeatable=True)
        if not row["queue_found"]:
            raise QueueNotFound(queue_id)
        return int(row["changed"]) == 1

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> Acknowledged:
        ids, handles, results = _receipts(receipts)
        parameters = {"queue_id": queue_id, "ids": ids, "handles": handles, "results": results}
        (row,) = await self._database.hot(_HOT_ACKNOWLEDGE, parameters, repeatable=True)
        if not row["queue_found"]:
            raise QueueNotFound(queue_id)
        return Acknowledged(removed=int(row["removed"]), wake=bool(row["wake"]))

    async def unclaim(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        # Repeatable: a second run finds no current delivery left to take back.
        ids, handles, _ = _receipts(receipts)
        parameters = {"queue_id": queue_id, "ids": ids, "handles": handles}
        (row,) = await self._database.hot(_HOT_UNCLAIM, parameters, repeatable=True)
        return int(row["taken"])


def _one_message(queue_id: UUID, message: MessageToStore) -> dict[str, Any]:
    """The parameters of ``_ENQUEUE_ONE``."""
    return {
        "queue_id": queue_id,
        "id": message.id,
        "payload": message.payload,
        "priority": int(message.priority),
        "ttl": message.ttl_seconds,
        "delay": message.delay_seconds,
        "group": message.group,
        "schedule_id": message.schedule_id,
    }


def _receipts(receipts: Sequence[Receipt]) -> tuple[list[UUID], list[UUID], list[str | None]]:
    """Ids, handles and results of receipts; a handle that is not even a UUID is simply
    stale (left out)."""
    ids: list[UUID] = []
    handles: list[UUID] = []
    results: list[str | None] = []
    for receipt in receipts:
        handle = parse_receipt_handle(receipt.receipt_handle)
        if handle is not None:
            ids.append(receipt.message_id)
            handles.append(handle)
            results.append(receipt.result)
    return ids, handles, results


def _check_enqueued(queue_id: UUID, queue_found: bool, invalid_delay_at: int | None) -> None:
    if not queue_found:
        raise QueueNotFound(queue_id)
    if invalid_delay_at is not None:
        # The use case checks every delay before storing (against the queue's default
        # lifetime when a delayed message has none of its own), so only a queue whose
        # default lifetime was shortened in between gets here.
        raise InvalidInput(
            f"messages[{invalid_delay_at - 1}]: delay_seconds must be shorter than the message "
            "lifetime.",
            code="invalid_delay",
        )
