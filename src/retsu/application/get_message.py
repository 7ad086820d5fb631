"""Use case: show one live message without claiming it."""

from __future__ import annotations

from uuid import UUID

from retsu.application.ports import MessageBrowser
from retsu.domain.browsing import StoredMessage
from retsu.domain.errors import MessageNotFound


class GetMessage:
    def __init__(self, browser: MessageBrowser) -> None:
        self._browser = browser

    async def __call__(self, queue_id: UUID, message_id: UUID) -> StoredMessage:
        message = await self._browser.get_message(queue_id, message_id)  # QueueNotFound
        if message is None:
            raise MessageNotFound(message_id)
        return message
