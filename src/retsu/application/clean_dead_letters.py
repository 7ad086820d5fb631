"""Use case: one batch of the dead-letter cleaner."""

from __future__ import annotations

from retsu.application.ports import MaintenanceEvents, MessageMaintenance


class CleanDeadLetters:
    def __init__(
        self, maintenance: MessageMaintenance, events: MaintenanceEvents, retention_seconds: int
    ) -> None:
        self._maintenance = maintenance
        self._events = events
        self._retention_seconds = retention_seconds

    async def __call__(self, batch_size: int) -> int:
        removed = await self._maintenance.delete_dead_letters_older_than(
            self._retention_seconds, batch_size
        )
        for group in removed:
            self._events.dead_letters_purged(group.queue_name, group.count)
        return sum(group.count for group in removed)
