"""Use case: extend or end the lease of the current delivery of a message."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import MessageRepository, QueueNames
from retsu.domain.errors import StaleReceiptHandle
from retsu.domain.message import VISIBILITY_CHANGE, Receipt


@dataclass(frozen=True, slots=True)
class ChangeVisibilityCommand:
    queue_id: UUID
    receipt: Receipt
    # The lease ends this many seconds from now; 0 releases the message for immediate
    # redelivery (the attempt still counts).
    visibility_timeout_seconds: int


class ChangeVisibility:
    def __init__(self, messages: MessageRepository, names: QueueNames) -> None:
        self._messages = messages
        self._names = names

    async def __call__(self, cmd: ChangeVisibilityCommand) -> None:
        timeout = VISIBILITY_CHANGE.check(cmd.visibility_timeout_seconds)
        await self._names.name_of(cmd.queue_id)  # raises QueueNotFound
        if not await self._messages.change_visibility(cmd.queue_id, cmd.receipt, timeout):
            raise StaleReceiptHandle()
