"""Use case: one batch of the expired-message cleaner."""

from __future__ import annotations

from retsu.application.ports import MaintenanceEvents, MessageMaintenance


class CleanExpiredMessages:
    def __init__(self, maintenance: MessageMaintenance, events: MaintenanceEvents) -> None:
        self._maintenance = maintenance
        self._events = events

    async def __call__(self, batch_size: int) -> int:
        """Delete one batch; returns how many messages it removed."""
        removed = await self._maintenance.delete_expired_messages(batch_size)
        for group in removed:
            self._events.expired(group.queue_name, group.delivery_history, group.count)
        return sum(group.count for group in removed)
