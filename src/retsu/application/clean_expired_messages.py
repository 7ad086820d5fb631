"""Use case: one batch of the expired-message cleaner.

A batch is bounded statements: up to ``batch_size`` expired messages (an in-flight one only
once its lease has also ended), up to ``batch_size`` completed messages kept past their
queue's retention (SPEC §3.11), up to ``batch_size`` Idempotency-Keys older than 24 h; then
up to ``batch_size`` consumers not seen for 24 h (SPEC §3.7) and up to ``batch_size`` queue-
history snapshots older than 7 days (SPEC §3.8). The batch counts as full when any came back
full, so the worker goes on at once while a backlog remains."""

from __future__ import annotations

import logging

from retsu.application.batch_worker import BatchResult
from retsu.application.ports import (
    ConsumerMaintenance,
    HistoryMaintenance,
    IdempotencyKeyMaintenance,
    MaintenanceEvents,
    MessageMaintenance,
)
from retsu.domain.consumer import CONSUMER_RETENTION_SECONDS
from retsu.domain.history import HISTORY_RETENTION_SECONDS
from retsu.domain.maintenance import IDEMPOTENCY_KEY_RETENTION_SECONDS

log = logging.getLogger("retsu.worker.expired_message_cleaner")


class CleanExpiredMessages:
    def __init__(
        self,
        maintenance: MessageMaintenance,
        events: MaintenanceEvents,
        idempotency_keys: IdempotencyKeyMaintenance | None = None,
        idempotency_key_retention_seconds: int = IDEMPOTENCY_KEY_RETENTION_SECONDS,
        consumers: ConsumerMaintenance | None = None,
        history: HistoryMaintenance | None = None,
    ) -> None:
        self._maintenance = maintenance
        self._events = events
        self._idempotency_keys = idempotency_keys
        self._key_retention_seconds = idempotency_key_retention_seconds
        self._consumers = consumers
        self._history = history

    async def __call__(self, batch_size: int) -> BatchResult:
        """Delete one batch; returns how many rows it removed and whether it was full."""
        removed = await self._maintenance.delete_expired_messages(batch_size)
        # Counted as soon as the deleting transaction has committed.
        for group in removed:
            self._events.expired(group.queue_name, group.delivery_history, group.count)
        messages = sum(group.count for group in removed)
        # Completed messages past their queue's retention (SPEC §3.11): not expiries.
        completed = await self._maintenance.delete_completed_messages(batch_size)
        keys = 0
        if self._idempotency_keys is not None:
            keys = await self._idempotency_keys.delete_idempotency_keys_older_than(
                self._key_retention_seconds, batch_size
            )
            if keys:
                log.info("forgot %d idempotency keys older than 24 h", keys)
        consumers = snapshots = 0
        if self._consumers is not None:
            consumers = await self._consumers.delete_consumers_not_seen_for(
                CONSUMER_RETENTION_SECONDS, batch_size
            )
            if consumers:
                log.info("forgot %d consumers not seen for 24 h", consumers)
        if self._history is not None:
            snapshots = await self._history.delete_history_older_than(
                HISTORY_RETENTION_SECONDS, batch_size
            )
        return BatchResult(
            removed=messages + completed + keys + consumers + snapshots,
            full=max(messages, completed, keys, consumers, snapshots) >= batch_size,
        )
