"""Looking at a queue's live messages without claiming them, and an operator's delete
(SPEC §3.6)."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import MessageBrowser
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.browsing import BrowseState, MessagePosition, StoredMessage
from retsu.domain.errors import MessageNotFound
from retsu.domain.message import Priority
from retsu.domain.pagination import DEFAULT_LIST_LIMIT, LIST_LIMIT, Page


@dataclass(frozen=True, slots=True)
class ListMessagesQuery:
    queue_id: UUID
    # None: every live message.
    state: BrowseState | None = None
    # None: every priority.
    priority: Priority | None = None
    limit: int = DEFAULT_LIST_LIMIT

    def __post_init__(self) -> None:
        LIST_LIMIT.check(self.limit)


@dataclass(frozen=True, slots=True)
class DeleteMessageCommand:
    queue_id: UUID
    message_id: UUID
    caller: Caller = field(default_factory=Caller)


class BrowsingService:
    def __init__(self, browser: MessageBrowser) -> None:
        self._browser = browser

    async def list(
        self, query: ListMessagesQuery, after: MessagePosition | None = None
    ) -> Page[StoredMessage, MessagePosition]:
        """A page of live messages in the order of ``query.state``'s list. A page may come
        back short with a next position when storage reached its scan budget first."""
        # One more than asked: whether another page exists (never an empty last page).
        batch = await self._browser.list_messages(
            query.queue_id,
            state=query.state,
            priority=query.priority,
            limit=query.limit + 1,
            after=after,
        )
        messages = batch.messages
        resume = batch.resume_after
        if len(messages) > query.limit:
            messages = messages[: query.limit]
            resume = MessagePosition.of(query.state, messages[-1])
        return Page(messages, resume)

    async def get(self, queue_id: UUID, message_id: UUID) -> StoredMessage:
        message = await self._browser.get_message(queue_id, message_id)  # QueueNotFound
        if message is None:
            raise MessageNotFound(message_id)
        return message

    async def delete(self, cmd: DeleteMessageCommand) -> None:
        """A later acknowledge of the deleted message's delivery is the usual idempotent
        no-op: the message is simply gone."""
        audit = AuditEntry.of_message(
            AuditAction.MESSAGE_DELETED, cmd.queue_id, cmd.message_id, cmd.caller
        )
        if not await self._browser.delete_message(cmd.queue_id, cmd.message_id, audit):
            raise MessageNotFound(cmd.message_id)
