"""Looking at a queue's messages without claiming them, searching them, and an operator's
deletes — one message, or those a filter selects (SPEC §3.6, §3.11)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from retsu.application.ports import MessageBrowser
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.browsing import BrowseState, MessagePosition, StoredMessage
from retsu.domain.errors import MessageNotFound
from retsu.domain.groups import GroupPosition, GroupState, GroupSummary
from retsu.domain.message import Priority
from retsu.domain.pagination import DEFAULT_LIST_LIMIT, LIST_LIMIT, Page
from retsu.domain.search import BULK_LIMIT, DEFAULT_BULK_LIMIT, EVERYTHING, BulkOutcome, Search


@dataclass(frozen=True, slots=True)
class ListMessagesQuery:
    queue_id: UUID
    # None: every live message.
    state: BrowseState | None = None
    # None: every priority.
    priority: Priority | None = None
    limit: int = DEFAULT_LIST_LIMIT
    group: str | None = None
    # A JSON object the payload must contain (SPEC §3.11).
    match: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        LIST_LIMIT.check(self.limit)


@dataclass(frozen=True, slots=True)
class ListGroupsQuery:
    queue_id: UUID
    # None: every group with a live message.
    state: GroupState | None = None
    limit: int = DEFAULT_LIST_LIMIT

    def __post_init__(self) -> None:
        LIST_LIMIT.check(self.limit)


@dataclass(frozen=True, slots=True)
class DeleteMessageCommand:
    queue_id: UUID
    message_id: UUID
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True, slots=True)
class DeleteMessagesCommand:
    """A bulk delete (SPEC §3.11): the messages in ``state`` (every live one when None)
    that ``search`` admits, at most ``limit``; ``dry_run`` only counts them."""

    queue_id: UUID
    state: BrowseState | None = None
    search: Search = EVERYTHING
    limit: int = DEFAULT_BULK_LIMIT
    dry_run: bool = False
    caller: Caller = field(default_factory=Caller)

    def __post_init__(self) -> None:
        BULK_LIMIT.check(self.limit)


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
            group=query.group,
            match=query.match,
        )
        messages = batch.messages
        resume = batch.resume_after
        if len(messages) > query.limit:
            messages = messages[: query.limit]
            resume = MessagePosition.of(query.state, messages[-1])
        return Page(messages, resume)

    async def groups(
        self, query: ListGroupsQuery, after: GroupPosition | None = None
    ) -> Page[GroupSummary, GroupPosition]:
        """A page of the queue's groups, the longest-waiting first (SPEC §3.10)."""
        found = await self._browser.list_groups(
            query.queue_id, state=query.state, limit=query.limit + 1, after=after
        )
        rows = found.items
        resume = found.resume_after
        if len(rows) > query.limit:
            rows = rows[: query.limit]
            resume = rows[-1][1]
        return Page([summary for summary, _ in rows], resume)

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

    async def delete_many(self, cmd: DeleteMessagesCommand) -> BulkOutcome:
        """Delete (or, on a dry run, count) what the filter selects; one audit row naming the
        filter and the count."""
        if cmd.dry_run:
            matched = await self._browser.count_messages(
                cmd.queue_id, state=cmd.state, search=cmd.search, limit=cmd.limit
            )
            return BulkOutcome(matched, dry_run=True)
        audit = AuditEntry.of_queue(
            AuditAction.MESSAGE_DELETED,
            cmd.queue_id,
            cmd.caller,
            filter=_described(cmd.state, cmd.search),
            limit=cmd.limit,
        )
        deleted = await self._browser.delete_messages(
            cmd.queue_id, state=cmd.state, search=cmd.search, limit=cmd.limit, audit=audit
        )
        return BulkOutcome(deleted, dry_run=False)


def _described(state: BrowseState | None, search: Search) -> dict[str, Any]:
    return ({"state": str(state)} if state is not None else {}) | search.described()
