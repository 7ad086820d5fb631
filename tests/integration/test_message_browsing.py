"""Browsing and deleting messages on PostgreSQL (SPEC §3.6): what the contract suite cannot
show — a page cut short by the scan budget resumes where it stopped, and an operator's
delete racing with consumers keeps every counter exact."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from uuid import UUID

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.http.cursors import Cursors
from retsu.adapters.http.pages import messages_page
from retsu.adapters.ids import uuid7
from retsu.adapters.postgres.browsing import PostgresMessageBrowser
from retsu.adapters.postgres.engine import create_engine
from retsu.application.browsing import BrowsingService
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.message import MessageToStore, Priority, Receipt
from tests.contract.repository_contract import add, new_queue
from tests.integration.test_rollup import assert_rollup_exact
from tests.support.postgres import PostgresStorage

pytestmark = pytest.mark.integration

CALLER = Caller(actor="browsing-test", request_id="browsing")


def _message(payload: str, priority: Priority, delay: int = 0) -> MessageToStore:
    return MessageToStore(uuid7(), payload, priority, 3600, delay)


@pytest.fixture(scope="module")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, max_connections=8)
    yield engine
    await engine.dispose()


@pytest.mark.parametrize("state", [None, "in_flight", "delayed"])
async def test_a_page_cut_short_by_the_scan_budget_resumes_where_it_stopped(
    engine: AsyncEngine, state: str | None
) -> None:
    storage = PostgresStorage(engine)
    # A tiny budget: 5 rows examined per page.
    browsing = BrowsingService(PostgresMessageBrowser(storage.database, budget=5))
    cursors = Cursors(storage.secrets)
    queue = await add(storage, new_queue())
    delay = 600 if state == "delayed" else 0
    high = [_message(f"high-{i}", Priority.HIGH, delay) for i in range(12)]
    low = [_message(f"low-{i}", Priority.LOW, delay and delay + 1) for i in range(3)]
    await storage.messages.enqueue(queue.id, high + low)
    if state == "in_flight":
        taken = await storage.messages.dequeue(
            queue.id, limit=15, visibility_timeout_seconds=60, dead_letter_batch_size=10
        )
        assert len(taken.messages) == 15

    pages, seen, cursor = 0, [], None
    while True:
        page = await messages_page(
            browsing, cursors, queue.id, state=state, priority="LOW", limit=2, cursor=cursor
        )
        pages += 1
        seen += [m.payload for m in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
        assert pages < 20

    assert seen == ["low-0", "low-1", "low-2"]
    assert pages >= 3  # the twelve HIGH rows ahead took pages with nothing LOW on them


async def test_deletes_racing_with_consumers_keep_the_counters_exact(
    engine: AsyncEngine, database_url: str
) -> None:
    storage = PostgresStorage(engine)
    queue = await add(storage, new_queue())
    outcomes: dict[str, int] = {"deleted": 0, "acknowledged": 0}

    def audit(message_id: UUID) -> AuditEntry:
        return AuditEntry.of_message(AuditAction.MESSAGE_DELETED, queue.id, message_id, CALLER)

    for round_ in range(30):
        message = _message(f"m{round_}", Priority.MEDIUM)
        await storage.messages.enqueue(queue.id, [message])
        taken, deleted = await asyncio.gather(
            storage.messages.dequeue(
                queue.id, limit=1, visibility_timeout_seconds=60, dead_letter_batch_size=10
            ),
            storage.browser.delete_message(queue.id, message.id, audit(message.id)),
        )
        outcomes["deleted"] += deleted
        for delivered in taken.messages:
            # The delivery of a message an operator deleted acknowledges as a no-op; else it
            # is acknowledged while another delete races with it: exactly one of them wins.
            receipt = Receipt(delivered.id, delivered.receipt_handle)
            acknowledged, deleted_now = await asyncio.gather(
                storage.messages.acknowledge(queue.id, [receipt]),
                storage.browser.delete_message(queue.id, delivered.id, audit(delivered.id)),
            )
            acked = acknowledged.removed
            assert acked + deleted_now == (0 if deleted else 1)
            outcomes["acknowledged"] += acked
            outcomes["deleted"] += deleted_now
    assert outcomes["deleted"] + outcomes["acknowledged"] == 30
    await assert_rollup_exact(database_url)
    batch = await storage.browser.list_messages(
        queue.id, state=None, priority=None, limit=10, after=None
    )
    assert batch.messages == []
