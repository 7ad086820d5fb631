"""Use case: an operator removes one live message, whatever its state (audited)."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import MessageBrowser
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import MessageNotFound


@dataclass(frozen=True, slots=True)
class DeleteMessageCommand:
    queue_id: UUID
    message_id: UUID
    caller: Caller = field(default_factory=Caller)


class DeleteMessage:
    def __init__(self, browser: MessageBrowser) -> None:
        self._browser = browser

    async def __call__(self, cmd: DeleteMessageCommand) -> None:
        """A later acknowledge of the deleted message's delivery is the usual idempotent
        no-op: the message is simply gone."""
        audit = AuditEntry.of_message(
            AuditAction.MESSAGE_DELETED, cmd.queue_id, cmd.message_id, cmd.caller
        )
        if not await self._browser.delete_message(cmd.queue_id, cmd.message_id, audit):
            raise MessageNotFound(cmd.message_id)
