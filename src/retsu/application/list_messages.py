"""Use case: browse a queue's live messages without claiming them, a page at a time."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import MessageBrowser, ServerSecrets
from retsu.domain.browsing import (
    MESSAGES_CURSOR_KIND,
    BrowseState,
    MessagePosition,
    StoredMessage,
)
from retsu.domain.cursor import DEFAULT_LIST_LIMIT, LIST_LIMIT, Page, open_cursor, seal_cursor
from retsu.domain.message import Priority


@dataclass(frozen=True, slots=True)
class ListMessagesQuery:
    queue_id: UUID
    # ready | in_flight | delayed (else invalid_state); None: every live message.
    state: str | None = None
    # HIGH | MEDIUM | LOW (else invalid_priority); None: every priority.
    priority: str | None = None
    limit: int = DEFAULT_LIST_LIMIT
    cursor: str | None = None


class ListMessages:
    def __init__(self, browser: MessageBrowser, secrets: ServerSecrets) -> None:
        self._browser = browser
        self._secrets = secrets

    async def __call__(self, query: ListMessagesQuery) -> Page[StoredMessage]:
        state = None if query.state is None else BrowseState.parse(query.state)
        priority = None if query.priority is None else Priority.parse(query.priority)
        limit = LIST_LIMIT.check(query.limit)
        # A cursor is bound to its queue and filters: one from another list is invalid.
        scope = [
            str(query.queue_id),
            None if state is None else state.value,
            None if priority is None else priority.name,
        ]
        after = None
        if query.cursor is not None:
            key = await self._secrets.cursor_signing_key()
            after = MessagePosition.read(
                state, open_cursor(key, MESSAGES_CURSOR_KIND, scope, query.cursor)
            )
        # One more than asked: whether another page exists (never an empty last page).
        batch = await self._browser.list_messages(
            query.queue_id, state=state, priority=priority, limit=limit + 1, after=after
        )
        messages = batch.messages
        resume = batch.resume_after
        if len(messages) > limit:
            messages = messages[:limit]
            resume = MessagePosition.of(state, messages[-1])
        next_cursor = None
        if resume is not None:
            key = await self._secrets.cursor_signing_key()
            next_cursor = seal_cursor(key, MESSAGES_CURSOR_KIND, scope, resume.seal(state))
        return Page(messages, next_cursor)
