"""The browsing use cases and rules (SPEC §3.6) without storage: cursors, the scan budget's
early page end, and the state rule."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from dependency_injector import providers
from itsdangerous import URLSafeSerializer

from retsu.adapters.http.cursors import CURSOR_VERSION, CursorKind, Cursors
from retsu.adapters.http.pages import Listed, messages_page
from retsu.adapters.ids import uuid7
from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.secrets import RandomServerSecrets
from retsu.application.browsing import BrowsingService, DeleteMessageCommand
from retsu.domain.audit import AuditAction, AuditEntry
from retsu.domain.browsing import (
    BrowseState,
    MessageBatch,
    MessagePosition,
    StoredMessage,
    logical_state,
)
from retsu.domain.errors import InvalidInput, MessageNotFound
from retsu.domain.message import Priority
from tests.support.containers import api_container

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
QUEUE = uuid7()


def stored(order: int, priority: Priority = Priority.LOW) -> StoredMessage:
    return StoredMessage(
        id=uuid7(),
        payload=f"m{order}",
        priority=priority,
        state=BrowseState.READY,
        delivery_attempts=0,
        enqueued_at=NOW,
        expires_at=NOW + timedelta(days=1),
        available_at=NOW + timedelta(seconds=order),
        last_delivered_at=None,
        redriven_from=None,
        enqueue_order=order,
    )


@dataclass
class ScriptedBrowser:
    """A MessageBrowser answering from a script; records what it was asked."""

    batches: list[MessageBatch] = field(default_factory=list)
    asked: list[dict[str, object]] = field(default_factory=list)
    deleted: list[AuditEntry] = field(default_factory=list)

    async def list_messages(
        self,
        queue_id: UUID,
        *,
        state: BrowseState | None,
        priority: Priority | None,
        limit: int,
        after: MessagePosition | None,
        group: str | None = None,
        match: dict[str, Any] | None = None,
    ) -> MessageBatch:
        self.asked.append({"state": state, "priority": priority, "limit": limit, "after": after})
        return self.batches.pop(0)

    async def get_message(self, queue_id: UUID, message_id: UUID) -> StoredMessage | None:
        return None

    async def delete_message(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        self.deleted.append(audit)
        return False


@dataclass(frozen=True)
class ListMessagesQuery:
    """A browse request as the HTTP layer gets it."""

    queue_id: UUID
    state: str | None = None
    priority: str | None = None
    limit: int = 50
    cursor: str | None = None


def browsing(browser: ScriptedBrowser, secrets: RandomServerSecrets) -> BrowsingService:
    """The production service, from the API container, over the scripted port."""
    container = api_container(clock=ManualClock(), secrets=secrets)
    container.storage.message_browser.override(providers.Object(browser))
    return container.use_cases.browsing()


def ListMessages(browser: ScriptedBrowser, secrets: RandomServerSecrets) -> Any:
    """One page through the HTTP adapter's pages (cursors included)."""

    async def list_page(query: ListMessagesQuery) -> Listed[StoredMessage]:
        return await messages_page(
            browsing(browser, secrets),
            Cursors(secrets),
            query.queue_id,
            state=query.state,
            priority=query.priority,
            limit=query.limit,
            cursor=query.cursor,
        )

    return list_page


def seal_cursor(key: bytes, kind: str, scope: list[Any], position: list[Any]) -> str:
    signer = URLSafeSerializer(
        key, salt="retsu.cursor", signer_kwargs={"digest_method": hashlib.sha256}
    )
    return str(signer.dumps([CURSOR_VERSION, scope, *position], salt=kind))


MESSAGES_CURSOR_KIND = CursorKind.MESSAGES


async def test_a_full_page_asks_one_more_and_seals_its_last_item() -> None:
    secrets = RandomServerSecrets()
    browser = ScriptedBrowser([MessageBatch([stored(1), stored(2), stored(3)])])
    page = await ListMessages(browser, secrets)(
        ListMessagesQuery(QUEUE, state="ready", priority="LOW", limit=2)
    )
    assert [m.enqueue_order for m in page.items] == [1, 2]
    assert browser.asked[0]["limit"] == 3
    assert browser.asked[0]["priority"] is Priority.LOW
    browser.batches.append(MessageBatch([stored(3)]))
    last = await ListMessages(browser, secrets)(
        ListMessagesQuery(QUEUE, state="ready", priority="LOW", limit=2, cursor=page.next_cursor)
    )
    assert browser.asked[1]["after"] == MessagePosition(2, priority=Priority.LOW)
    assert [m.enqueue_order for m in last.items] == [3] and last.next_cursor is None


async def test_a_page_the_budget_ended_early_resumes_after_the_last_row_examined() -> None:
    secrets = RandomServerSecrets()
    resume = MessagePosition(1000, at=NOW + timedelta(seconds=5))
    browser = ScriptedBrowser([MessageBatch([], resume_after=resume)])
    page = await ListMessages(browser, secrets)(
        ListMessagesQuery(QUEUE, state="delayed", priority="LOW", limit=50)
    )
    assert page.items == [] and page.next_cursor is not None
    browser.batches.append(MessageBatch([]))
    await ListMessages(browser, secrets)(
        ListMessagesQuery(QUEUE, state="delayed", priority="LOW", limit=50, cursor=page.next_cursor)
    )
    assert browser.asked[1]["after"] == resume


@pytest.mark.parametrize(
    "position",
    [[], [1, 2], ["1"], [True], [1.5]],
)
async def test_a_cursor_whose_position_has_the_wrong_shape_is_invalid(
    position: list[object],
) -> None:
    secrets = RandomServerSecrets()
    key = await secrets.cursor_signing_key()
    cursor = seal_cursor(key, MESSAGES_CURSOR_KIND, [str(QUEUE), None, None], position)
    with pytest.raises(InvalidInput) as error:
        await ListMessages(ScriptedBrowser(), secrets)(ListMessagesQuery(QUEUE, cursor=cursor))
    assert error.value.code == "invalid_cursor"


@pytest.mark.parametrize(
    ("state", "position"),
    [("ready", [4, 1]), ("ready", [0, 1]), ("ready", [1]), ("in_flight", [10**20, 1])],
)
async def test_state_positions_are_checked_too(state: str, position: list[object]) -> None:
    secrets = RandomServerSecrets()
    key = await secrets.cursor_signing_key()
    cursor = seal_cursor(key, MESSAGES_CURSOR_KIND, [str(QUEUE), state, None], position)
    with pytest.raises(InvalidInput) as error:
        await ListMessages(ScriptedBrowser(), secrets)(
            ListMessagesQuery(QUEUE, state=state, cursor=cursor)
        )
    assert error.value.code == "invalid_cursor"


async def test_unknown_or_dead_messages_are_message_not_found() -> None:
    browser = ScriptedBrowser()
    service = browsing(browser, RandomServerSecrets())
    with pytest.raises(MessageNotFound):
        await service.get(QUEUE, uuid7())
    message_id = uuid7()
    with pytest.raises(MessageNotFound):
        await service.delete(DeleteMessageCommand(QUEUE, message_id))
    (audit,) = browser.deleted
    assert (audit.action, audit.target_type, audit.target_id) == (
        AuditAction.MESSAGE_DELETED,
        "message",
        str(message_id),
    )


@pytest.mark.parametrize(
    ("leased", "after", "expires", "attempts", "expected"),
    [
        (True, 10, -5, 1, BrowseState.IN_FLIGHT),  # an active lease, even past its lifetime
        (True, -1, 60, 1, BrowseState.READY),  # an ended lease with attempts left
        (True, -1, 60, 3, None),  # an ended last lease
        (False, 10, 60, 0, BrowseState.DELAYED),
        (False, -1, 60, 0, BrowseState.READY),  # an ended delay
        (False, -1, -1, 0, None),  # expired
        (False, -1, 60, 3, None),  # a lowered limit left it no attempts
    ],
)
def test_the_state_rule(
    leased: bool, after: int, expires: int, attempts: int, expected: BrowseState | None
) -> None:
    assert (
        logical_state(
            leased=leased,
            available_after=NOW + timedelta(seconds=after),
            expires_at=NOW + timedelta(seconds=expires),
            delivery_attempts=attempts,
            max_delivery_attempts=3,
            now=NOW,
        )
        is expected
    )
