"""Use case: one batch of the dead-letter cleaner."""

from __future__ import annotations

from retsu.application.batch_worker import BatchResult
from retsu.application.ports import MaintenanceEvents, MessageMaintenance


class CleanDeadLetters:
    def __init__(
        self, maintenance: MessageMaintenance, events: MaintenanceEvents, retention_seconds: int
    ) -> None:
        if retention_seconds < 0:
            raise ValueError("retention_seconds cannot be negative")
        self._maintenance = maintenance
        self._events = events
        self._retention_seconds = retention_seconds

    async def __call__(self, batch_size: int) -> BatchResult:
        """Delete up to ``batch_size`` dead letters older than the retention."""
        removed = await self._maintenance.delete_dead_letters_older_than(
            self._retention_seconds, batch_size
        )
        for group in removed:
            self._events.dead_letters_purged(group.queue_name, group.count)
        return BatchResult.of(sum(group.count for group in removed), batch_size)
