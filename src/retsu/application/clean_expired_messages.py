"""Use case: one batch of the expired-message cleaner.

A batch is two bounded statements: up to ``batch_size`` expired messages (an
in-flight one only once its lease has also ended), then up to ``batch_size``
Idempotency-Keys older than 24 h. The batch counts as full when either came back
full, so the worker goes on at once while either backlog remains.
"""

from __future__ import annotations

import logging

from retsu.application.batch_worker import BatchResult
from retsu.application.ports import IdempotencyKeyMaintenance, MaintenanceEvents, MessageMaintenance
from retsu.domain.maintenance import IDEMPOTENCY_KEY_RETENTION_SECONDS

log = logging.getLogger("retsu.worker.expired_message_cleaner")


class CleanExpiredMessages:
    def __init__(
        self,
        maintenance: MessageMaintenance,
        events: MaintenanceEvents,
        idempotency_keys: IdempotencyKeyMaintenance | None = None,
        idempotency_key_retention_seconds: int = IDEMPOTENCY_KEY_RETENTION_SECONDS,
    ) -> None:
        self._maintenance = maintenance
        self._events = events
        self._idempotency_keys = idempotency_keys
        self._key_retention_seconds = idempotency_key_retention_seconds

    async def __call__(self, batch_size: int) -> BatchResult:
        """Delete one batch; returns how many rows it removed and whether it was full."""
        removed = await self._maintenance.delete_expired_messages(batch_size)
        # Counted as soon as the deleting transaction has committed.
        for group in removed:
            self._events.expired(group.queue_name, group.delivery_history, group.count)
        messages = sum(group.count for group in removed)
        keys = 0
        if self._idempotency_keys is not None:
            keys = await self._idempotency_keys.delete_idempotency_keys_older_than(
                self._key_retention_seconds, batch_size
            )
            if keys:
                log.info("forgot %d idempotency keys older than 24 h", keys)
        return BatchResult(
            removed=messages + keys, full=messages >= batch_size or keys >= batch_size
        )
