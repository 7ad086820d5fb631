"""One contract for every storage adapter, over the ports of ``retsu.application.ports``.

QueueRepository, MessageRepository, DeadLetterRepository, AuditLog, QueueStateReader,
the cleaners' Maintenance and the collector's Leadership (its session reads every
queue's state): what every adapter (memory, PostgreSQL) must do alike.
A test module subclasses :class:`RepositoryContract` and provides a ``harness``
fixture: one object per port, a way to move time forward, and read-only views of what
the ports cannot read (dead letters, stored message count). Every test creates its own
queues with unique names, so tests never see each other's data; the cleaners' batches
are global, so maintenance tests look only at their own queues' counts.

A subclass may list tests its adapter is known to fail in ``KNOWN_GAPS`` (name →
reason); they run as strict expected failures, so a fix turns them red until the
entry is removed.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Protocol
from uuid import UUID

import pytest

from retsu.adapters.ids import uuid7
from retsu.application.ports import (
    AuditLog,
    DeadLetterRepository,
    Leadership,
    Maintenance,
    MessageBrowser,
    MessageRepository,
    QueueRepository,
    QueueStateReader,
)
from retsu.domain.audit import AuditAction, AuditEntry, AuditRecord, Caller
from retsu.domain.browsing import BrowseState, MessagePosition, StoredMessage
from retsu.domain.errors import IdempotencyKeyConflict, QueueAlreadyExists, QueueNotFound
from retsu.domain.idempotency import IdempotentEnqueued
from retsu.domain.message import (
    REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
    DeadLetter,
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    Priority,
    Receipt,
)
from retsu.domain.pagination import AuditPosition, QueuePosition
from retsu.domain.queue import Queue, QueueSettings, QueueSettingsUpdate
from retsu.domain.state import PriorityState
from tests.contract.observed_contract import ObservedContract
from tests.contract.schedule_contract import ScheduleContract

# Slack for adapters whose clock keeps running while a test runs (PostgreSQL's now()).
CLOCK_SLACK = timedelta(seconds=5)


class RepositoryHarness(Protocol):
    queues: QueueRepository
    messages: MessageRepository
    dead_letters: DeadLetterRepository
    audit_log: AuditLog
    state: QueueStateReader
    maintenance: Maintenance
    leadership: Leadership
    browser: MessageBrowser

    async def advance(self, seconds: float) -> None:
        """Move the adapter's clock forward."""

    async def dead_letter_records(self, queue_id: UUID) -> list[DeadLetter]:
        """The queue's dead letters, newest first (the order the API lists them)."""

    async def stored(self, queue_id: UUID) -> int:
        """How many live messages the queue holds, whatever their state."""

    async def idempotency_keys(self, queue_id: UUID) -> int:
        """How many Idempotency-Keys the queue remembers."""


# -- building blocks ------------------------------------------------------------


def unique_name(prefix: str = "contract") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def new_queue(name: str | None = None, *, paused: bool = False, **settings: Any) -> Queue:
    now = datetime.now(UTC)
    return Queue(
        id=uuid7(),
        name=name or unique_name(),
        settings=QueueSettings(**settings),
        paused=paused,
        created_at=now,
        updated_at=now,
    )


CALLER = Caller(actor="contract-operator", request_id="contract-request")


def audit_of(queue_id: UUID, action: AuditAction = AuditAction.QUEUE_UPDATED) -> AuditEntry:
    return AuditEntry.of_queue(action, queue_id, CALLER, note="contract")


def created(queue: Queue) -> AuditEntry:
    return audit_of(queue.id, AuditAction.QUEUE_CREATED)


def message(
    payload: str = "x",
    priority: Priority = Priority.MEDIUM,
    *,
    ttl: int = 3600,
    delay: int = 0,
    message_id: UUID | None = None,
) -> MessageToStore:
    return MessageToStore(
        id=message_id or uuid7(),
        payload=payload,
        priority=priority,
        ttl_seconds=ttl,
        delay_seconds=delay,
    )


async def add(harness: RepositoryHarness, queue: Queue) -> Queue:
    return await harness.queues.add_queue(queue, created(queue))


class Scenario:
    """One queue on one repository, with verbs that read like the domain."""

    def __init__(self, harness: RepositoryHarness, queue: Queue) -> None:
        self.harness = harness
        self.queues = harness.queues
        self.messages = harness.messages
        self.dead_letters = harness.dead_letters
        self.audit_log = harness.audit_log
        self.state = harness.state
        self.maintenance = harness.maintenance
        self.queue = queue

    @property
    def id(self) -> UUID:
        return self.queue.id

    async def send(self, *messages: MessageToStore) -> list[UUID]:
        await self.messages.enqueue(self.queue.id, list(messages))
        return [m.id for m in messages]

    async def send_payloads(self, *payloads: str, priority: Priority = Priority.MEDIUM) -> None:
        await self.send(*(message(p, priority) for p in payloads))

    async def take(
        self,
        limit: int = 1,
        *,
        visibility: int | None = 30,
        max_attempts: int | None = None,
        dead_letter_batch: int = 100,
    ) -> DequeueResult:
        """Dequeue; ``max_attempts`` first sets the queue's attempts limit (storage reads
        the limit from the queue itself, at dequeue time)."""
        if max_attempts is not None and max_attempts != self.queue.settings.max_delivery_attempts:
            updated = await self.harness.queues.update_queue(
                self.queue.id,
                QueueSettingsUpdate(max_delivery_attempts=max_attempts),
                audit_of(self.queue.id),
            )
            assert updated is not None
            self.queue = updated
        return await self.messages.dequeue(
            self.queue.id,
            limit=limit,
            visibility_timeout_seconds=visibility,
            dead_letter_batch_size=dead_letter_batch,
        )

    async def take_messages(self, limit: int = 1, **options: Any) -> list[DeliveredMessage]:
        return (await self.take(limit, **options)).messages

    async def take_payloads(self, limit: int = 1, **options: Any) -> list[str]:
        return [m.payload for m in await self.take_messages(limit, **options)]

    async def ack(self, *deliveries: DeliveredMessage) -> int:
        acknowledged = await self.messages.acknowledge(
            self.queue.id, [Receipt(d.id, d.receipt_handle) for d in deliveries]
        )
        return acknowledged.removed

    async def advance(self, seconds: float) -> None:
        await self.harness.advance(seconds)

    async def dead_letter_records(self) -> list[DeadLetter]:
        return await self.harness.dead_letter_records(self.queue.id)

    async def stored(self) -> int:
        return await self.harness.stored(self.queue.id)


class MessageBrowsingContract:
    """SPEC §3.6: looking at live messages without claiming them, and an operator's delete
    (the ``MessageBrowser`` port). Mixed into ``RepositoryContract``."""

    async def browse(
        self,
        q: Scenario,
        state: BrowseState | None = None,
        *,
        priority: Priority | None = None,
        limit: int = 100,
        after: MessagePosition | None = None,
    ) -> list[StoredMessage]:
        batch = await q.harness.browser.list_messages(
            q.id, state=state, priority=priority, limit=limit, after=after
        )
        assert batch.resume_after is None  # small queues never reach the scan budget
        return batch.messages

    async def payloads(self, q: Scenario, state: BrowseState | None = None, **kw: Any) -> list[str]:
        return [m.payload for m in await self.browse(q, state, **kw)]

    async def mixed(self, harness: RepositoryHarness) -> tuple[Scenario, dict[str, UUID]]:
        """ready: high (released once), low-1, low-2 · in flight: medium · delayed: later."""
        q = Scenario(harness, await add(harness, new_queue()))
        ids = {}
        for payload, priority, delay in [
            ("low-1", Priority.LOW, 0),
            ("medium", Priority.MEDIUM, 0),
            ("low-2", Priority.LOW, 0),
            ("later", Priority.HIGH, 600),
            ("high", Priority.HIGH, 0),
        ]:
            (ids[payload],) = await q.send(message(payload, priority, delay=delay))
        high, medium = await q.take_messages(2, visibility=300)
        assert (high.payload, medium.payload) == ("high", "medium")
        receipt = Receipt(high.id, high.receipt_handle)
        assert await q.messages.change_visibility(q.id, receipt, 0) is True
        await q.advance(0.001)
        return q, ids

    async def test_each_state_is_listed_in_its_order(self, harness: RepositoryHarness) -> None:
        q, ids = await self.mixed(harness)
        assert await self.payloads(q, BrowseState.READY) == ["high", "low-1", "low-2"]
        assert await self.payloads(q, BrowseState.IN_FLIGHT) == ["medium"]
        assert await self.payloads(q, BrowseState.DELAYED) == ["later"]
        assert await self.payloads(q) == ["low-1", "medium", "low-2", "later", "high"]
        every = {m.payload: m for m in await self.browse(q)}
        assert {p: m.state for p, m in every.items()} == {
            "low-1": BrowseState.READY,
            "medium": BrowseState.IN_FLIGHT,
            "low-2": BrowseState.READY,
            "later": BrowseState.DELAYED,
            "high": BrowseState.READY,
        }
        high, medium, later = every["high"], every["medium"], every["later"]
        assert (high.id, high.delivery_attempts, high.priority) == (ids["high"], 1, Priority.HIGH)
        assert high.last_delivered_at is not None and high.redriven_from is None
        assert medium.available_at - medium.last_delivered_at == timedelta(seconds=300)  # type: ignore[operator]
        assert later.last_delivered_at is None and later.delivery_attempts == 0
        assert later.available_at - later.enqueued_at == timedelta(seconds=600)
        assert every["low-1"].available_at <= every["low-1"].enqueued_at + CLOCK_SLACK

    async def test_browsing_never_claims_or_changes_a_message(
        self, harness: RepositoryHarness
    ) -> None:
        q, _ = await self.mixed(harness)

        async def counts() -> list[tuple[int, int, int]]:
            return [(s.ready, s.in_flight, s.delayed) for s in await q.state.read_state(q.id)]

        before = await counts()
        first = await self.browse(q)
        for state in BrowseState:
            await self.browse(q, state)
        assert await counts() == before
        assert await self.browse(q) == first
        assert await q.take_payloads(10) == ["high", "low-1", "low-2"]

    async def test_a_priority_filter_keeps_each_lists_order(
        self, harness: RepositoryHarness
    ) -> None:
        q, _ = await self.mixed(harness)
        assert await self.payloads(q, priority=Priority.LOW) == ["low-1", "low-2"]
        assert await self.payloads(q, BrowseState.READY, priority=Priority.LOW) == [
            "low-1",
            "low-2",
        ]
        assert await self.payloads(q, BrowseState.READY, priority=Priority.HIGH) == ["high"]
        assert await self.payloads(q, BrowseState.IN_FLIGHT, priority=Priority.LOW) == []
        assert await self.payloads(q, BrowseState.DELAYED, priority=Priority.HIGH) == ["later"]

    @pytest.mark.parametrize("state", [None, *BrowseState])
    async def test_pages_follow_one_another_without_gaps_or_repeats(
        self, harness: RepositoryHarness, state: BrowseState | None
    ) -> None:
        keep = 3600 if state is BrowseState.COMPLETED else 0
        q = Scenario(harness, await add(harness, new_queue(completed_retention_seconds=keep)))
        for i in range(7):
            priority = [Priority.LOW, Priority.HIGH, Priority.MEDIUM][i % 3]
            delay = 600 - 10 * i if state is BrowseState.DELAYED else 0
            await q.send(message(f"m{i}", priority, delay=delay))
            await q.advance(0.01)
        if state is BrowseState.IN_FLIGHT:
            for seconds in (50, 20, 40, 10, 70, 30, 60):
                await q.take_messages(1, visibility=seconds)
        if state is BrowseState.COMPLETED:
            for _ in range(7):
                assert await q.ack(*await q.take_messages(1)) == 1
                await q.advance(0.01)
        whole = await self.browse(q, state)
        assert len(whole) == 7
        seen: list[StoredMessage] = []
        after = None
        while True:
            page = await self.browse(q, state, limit=2, after=after)
            if not page:
                break
            seen += page
            after = MessagePosition.of(state, page[-1])
        assert [m.id for m in seen] == [m.id for m in whole]
        if state is BrowseState.IN_FLIGHT:
            ends = [m.available_at for m in whole]
            assert ends == sorted(ends)

    async def test_messages_in_no_state_are_not_listed_shown_or_deleted(
        self, harness: RepositoryHarness
    ) -> None:
        q = Scenario(harness, await add(harness, new_queue(max_delivery_attempts=2)))
        (exhausted,) = await q.send(message("exhausted", Priority.HIGH))
        (stale,) = await q.send(message("stale", Priority.MEDIUM))
        (alive,) = await q.send(message("alive", Priority.LOW))
        (expired,) = await q.send(message("expired", Priority.LOW, ttl=10))
        assert await q.take_payloads(2, visibility=5) == ["exhausted", "stale"]
        await q.advance(6)
        # "exhausted" takes its last attempt; "stale" loses to it and is ready again.
        assert await q.take_payloads(1, visibility=5) == ["exhausted"]
        await q.advance(6)  # "exhausted"'s last lease has ended; "expired" has expired
        # A lowered limit leaves "stale" (one attempt used) with none.
        updated = await q.queues.update_queue(
            q.id, QueueSettingsUpdate(max_delivery_attempts=1), audit_of(q.id)
        )
        assert updated is not None
        assert await self.payloads(q) == ["alive"]
        for state in BrowseState:
            assert await self.payloads(q, state) == (
                ["alive"] if state is BrowseState.READY else []
            )
        audit = AuditEntry.of_message(AuditAction.MESSAGE_DELETED, q.id, expired, CALLER)
        for gone in [expired, exhausted, stale, uuid7()]:
            assert await q.harness.browser.get_message(q.id, gone) is None
            assert await q.harness.browser.delete_message(q.id, gone, audit) is False
        assert (await q.harness.browser.get_message(q.id, alive)) is not None
        assert await q.stored() == 4  # nothing was deleted

    async def test_an_in_flight_message_past_its_lifetime_is_still_in_flight(
        self, q: Scenario
    ) -> None:
        (leased,) = await q.send(message("leased", ttl=10))
        await q.take_messages(visibility=60)
        await q.advance(20)
        shown = await q.harness.browser.get_message(q.id, leased)
        assert shown is not None and shown.state is BrowseState.IN_FLIGHT
        assert await self.payloads(q, BrowseState.IN_FLIGHT) == ["leased"]

    async def test_ended_delays_and_leases_are_ready_in_delivery_order(self, q: Scenario) -> None:
        await q.send(message("delayed", Priority.LOW, delay=5))
        await q.send(message("leased", Priority.LOW))
        await q.send(message("plain", Priority.LOW))
        assert await q.take_payloads(1, visibility=5) == ["leased"]
        await q.advance(6)
        ready = await self.browse(q, BrowseState.READY)
        assert [m.payload for m in ready] == ["delayed", "leased", "plain"]
        assert all(m.state is BrowseState.READY for m in ready)
        assert await q.take_payloads(3) == ["delayed", "leased", "plain"]

    async def test_a_message_is_shown_whole_and_only_in_its_queue(
        self, harness: RepositoryHarness
    ) -> None:
        q, ids = await self.mixed(harness)
        other = Scenario(harness, await add(harness, new_queue()))
        listed = {m.id: m for m in await self.browse(q)}
        for message_id in ids.values():
            assert await q.harness.browser.get_message(q.id, message_id) == listed[message_id]
            assert await q.harness.browser.get_message(other.id, message_id) is None

    async def test_browsing_a_missing_queue_is_queue_not_found(
        self, harness: RepositoryHarness
    ) -> None:
        browser, missing = harness.browser, uuid7()
        audit = AuditEntry.of_message(AuditAction.MESSAGE_DELETED, missing, missing, CALLER)
        with pytest.raises(QueueNotFound):
            await browser.list_messages(missing, state=None, priority=None, limit=5, after=None)
        with pytest.raises(QueueNotFound):
            await browser.get_message(missing, uuid7())
        with pytest.raises(QueueNotFound):
            await browser.delete_message(missing, uuid7(), audit)

    async def test_delete_removes_a_message_in_any_state_and_is_audited(
        self, harness: RepositoryHarness
    ) -> None:
        q, ids = await self.mixed(harness)
        (medium,) = [m for m in await self.browse(q) if m.payload == "medium"]
        for payload in ["high", "medium", "later", "low-1"]:
            audit = AuditEntry.of_message(AuditAction.MESSAGE_DELETED, q.id, ids[payload], CALLER)
            assert await q.harness.browser.delete_message(q.id, ids[payload], audit) is True
            assert await q.harness.browser.get_message(q.id, ids[payload]) is None
            assert await q.harness.browser.delete_message(q.id, ids[payload], audit) is False
        assert await self.payloads(q) == ["low-2"]
        assert await q.stored() == 1
        state = {s.priority: s for s in await q.state.read_state(q.id)}
        assert [(s.ready, s.in_flight, s.delayed) for s in state.values()] == [
            (0, 0, 0),
            (0, 0, 0),
            (1, 0, 0),
        ]
        rows = await q.audit_log.list_audit_records(
            limit=10, after=None, queue_id=q.id, action=AuditAction.MESSAGE_DELETED
        )
        assert sorted(r.target_id for r in rows) == sorted(
            str(ids[p]) for p in ["high", "medium", "later", "low-1"]
        )
        assert {(r.target_type, r.actor, r.request_id) for r in rows} == {
            ("message", CALLER.actor, CALLER.request_id)
        }
        assert medium.id == ids["medium"]

    async def test_the_delivery_of_a_deleted_message_acknowledges_as_a_no_op(
        self, q: Scenario
    ) -> None:
        await q.send_payloads("job")
        (delivered,) = await q.take_messages()
        audit = AuditEntry.of_message(AuditAction.MESSAGE_DELETED, q.id, delivered.id, CALLER)
        assert await q.harness.browser.delete_message(q.id, delivered.id, audit) is True
        assert await q.ack(delivered) == 0
        assert await q.take_messages() == []

    async def test_redriven_messages_remember_their_dead_letter(
        self, harness: RepositoryHarness
    ) -> None:
        q = Scenario(harness, await add(harness, new_queue(max_delivery_attempts=1)))
        await q.send_payloads("a", "b", "c")
        await q.take_messages(3, visibility=10)
        await q.advance(11)
        assert (await q.take()).dead_lettered == 3
        c, b, a = await q.dead_letter_records()
        one, *many = uuid7(), uuid7(), uuid7()
        single = AuditEntry.of_dead_letter(AuditAction.DEAD_LETTER_REDRIVEN, q.id, a.id, CALLER)
        assert await q.dead_letters.redrive_dead_letter(q.id, a.id, one, single)
        bulk = AuditEntry.of_queue(AuditAction.DEAD_LETTER_REDRIVEN, q.id, CALLER, limit=2)
        assert await q.dead_letters.redrive_dead_letters(q.id, many, bulk) == 2
        shown = {m.id: m.redriven_from for m in await self.browse(q)}
        assert shown == {one: a.id, many[0]: b.id, many[1]: c.id}
        (latest, *_) = await q.audit_log.list_audit_records(
            limit=1, after=None, queue_id=q.id, action=AuditAction.DEAD_LETTER_REDRIVEN
        )
        assert latest.details["new_message_ids"] == {
            str(b.id): str(many[0]),
            str(c.id): str(many[1]),
        }
        assert latest.details["redriven"] == 2


from tests.contract.flow_contract import FlowContract  # noqa: E402 (it builds on the above)


class RepositoryContract(MessageBrowsingContract, ObservedContract, FlowContract, ScheduleContract):
    """The behaviour every repository adapter must share (consumers and history:
    ``observed_contract.py``; lanes, limits, attempts, search: ``flow_contract.py``;
    schedules: ``schedule_contract.py``)."""

    KNOWN_GAPS: ClassVar[dict[str, str]] = {}

    @pytest.fixture(autouse=True)
    def _known_gaps(self, request: pytest.FixtureRequest) -> None:
        reason = self.KNOWN_GAPS.get(request.node.originalname)
        if reason is not None:
            request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))

    @pytest.fixture
    async def q(self, harness: RepositoryHarness) -> Scenario:
        return Scenario(harness, await add(harness, new_queue()))

    async def scenario(self, harness: RepositoryHarness, **settings: int) -> Scenario:
        return Scenario(harness, await add(harness, new_queue(**settings)))

    # -- queues -----------------------------------------------------------------

    async def test_an_added_queue_reads_back_as_stored(self, harness: RepositoryHarness) -> None:
        queue = new_queue(
            visibility_timeout_seconds=7, max_delivery_attempts=3, default_message_ttl_seconds=90
        )
        stored = await add(harness, queue)
        assert (stored.id, stored.name, stored.settings, stored.paused) == (
            queue.id,
            queue.name,
            QueueSettings(7, 3, 90),
            False,
        )
        assert stored.created_at.tzinfo is not None
        assert stored.created_at == stored.updated_at
        assert await harness.queues.get_queue(queue.id) == stored

    async def test_a_paused_queue_reads_back_paused(self, harness: RepositoryHarness) -> None:
        stored = await add(harness, new_queue(paused=True))
        assert stored.paused is True
        assert (await harness.queues.get_queue(stored.id)).paused is True  # type: ignore[union-attr]

    async def test_an_unknown_queue_reads_as_nothing(self, harness: RepositoryHarness) -> None:
        assert await harness.queues.get_queue(uuid7()) is None

    async def test_a_taken_name_is_queue_already_exists(self, harness: RepositoryHarness) -> None:
        first = await add(harness, new_queue())
        with pytest.raises(QueueAlreadyExists) as raised:
            await add(harness, new_queue(first.name, max_delivery_attempts=1))
        assert raised.value.code == "queue_already_exists"
        assert await harness.queues.get_queue(first.id) == first

    async def test_names_differing_only_in_punctuation_are_distinct(
        self, harness: RepositoryHarness
    ) -> None:
        base = unique_name()
        a = await add(harness, new_queue(f"{base}.a"))
        b = await add(harness, new_queue(f"{base}-a"))
        assert a.id != b.id

    async def test_an_update_changes_only_the_given_settings(
        self, harness: RepositoryHarness
    ) -> None:
        queue = await add(harness, new_queue(visibility_timeout_seconds=7, max_delivery_attempts=3))
        updated = await harness.queues.update_queue(
            queue.id, QueueSettingsUpdate(max_delivery_attempts=9), audit_of(queue.id)
        )
        assert updated is not None
        assert updated.settings == QueueSettings(7, 9, queue.settings.default_message_ttl_seconds)
        assert (updated.id, updated.name, updated.paused) == (queue.id, queue.name, False)
        assert updated.created_at == queue.created_at
        assert updated.updated_at >= queue.updated_at
        assert await harness.queues.get_queue(queue.id) == updated

        again = await harness.queues.update_queue(
            queue.id,
            QueueSettingsUpdate(visibility_timeout_seconds=21_600, default_message_ttl_seconds=1),
            audit_of(queue.id),
        )
        assert again is not None
        assert again.settings == QueueSettings(21_600, 9, 1)

    async def test_updating_an_unknown_queue_returns_nothing(
        self, harness: RepositoryHarness
    ) -> None:
        update = QueueSettingsUpdate(max_delivery_attempts=2)
        assert await harness.queues.update_queue(uuid7(), update, audit_of(uuid7())) is None

    # -- enqueue ----------------------------------------------------------------

    async def test_enqueue_to_a_missing_queue_is_queue_not_found(
        self, harness: RepositoryHarness
    ) -> None:
        with pytest.raises(QueueNotFound) as raised:
            await harness.messages.enqueue(uuid7(), [message(), message()])
        assert raised.value.code == "queue_not_found"

    async def test_a_batch_that_storage_refuses_stores_none_of_its_messages(
        self, q: Scenario
    ) -> None:
        (taken,) = await q.send(message("first"))
        with pytest.raises(Exception):  # noqa: B017 - any storage failure will do
            await q.send(message("a"), message("reused id", message_id=taken), message("c"))
        assert await q.stored() == 1
        assert await q.take_payloads(10) == ["first"]

    async def test_a_batch_shares_one_enqueue_time(self, q: Scenario) -> None:
        await q.send_payloads("a", "b", "c")
        delivered = await q.take_messages(3)
        assert len({m.enqueued_at for m in delivered}) == 1
        assert delivered[0].enqueued_at.tzinfo is not None

    # -- dequeue order ----------------------------------------------------------

    async def test_highest_priority_first_then_fifo_across_a_batch(self, q: Scenario) -> None:
        await q.send(
            message("low-1", Priority.LOW),
            message("high-1", Priority.HIGH),
            message("medium-1", Priority.MEDIUM),
            message("low-2", Priority.LOW),
            message("high-2", Priority.HIGH),
            message("medium-2", Priority.MEDIUM),
            message("high-3", Priority.HIGH),
        )
        expected = ["high-1", "high-2", "high-3", "medium-1", "medium-2", "low-1", "low-2"]
        assert await q.take_payloads(7) == expected

    async def test_one_at_a_time_follows_the_same_order(self, q: Scenario) -> None:
        await q.send(
            message("low-1", Priority.LOW),
            message("high-1", Priority.HIGH),
            message("low-2", Priority.LOW),
            message("high-2", Priority.HIGH),
        )
        order = [(await q.take_payloads(1))[0] for _ in range(4)]
        assert order == ["high-1", "high-2", "low-1", "low-2"]
        assert await q.take_payloads(1) == []

    async def test_fifo_holds_across_separate_enqueues(self, q: Scenario) -> None:
        for i in range(5):
            await q.send_payloads(f"m{i}")
        await q.send_payloads("h", priority=Priority.HIGH)
        assert await q.take_payloads(10) == ["h", "m0", "m1", "m2", "m3", "m4"]

    async def test_a_big_batch_keeps_its_order(self, q: Scenario) -> None:
        payloads = [f"{i:03}" for i in range(100)]
        await q.send_payloads(*payloads)
        assert await q.take_payloads(100) == payloads

    async def test_the_limit_bounds_one_dequeue(self, q: Scenario) -> None:
        await q.send_payloads(*(str(i) for i in range(7)))
        assert await q.take_payloads(3) == ["0", "1", "2"]
        assert await q.take_payloads(3) == ["3", "4", "5"]
        assert await q.take_payloads(3) == ["6"]
        result = await q.take(3)
        assert (result.messages, result.dead_lettered) == ([], 0)

    async def test_an_empty_queue_delivers_nothing(self, q: Scenario) -> None:
        assert await q.take(5) == DequeueResult(messages=[], dead_lettered=0)

    async def test_queues_never_share_messages(self, harness: RepositoryHarness) -> None:
        a = await self.scenario(harness)
        b = await self.scenario(harness)
        await a.send_payloads("for-a")
        assert await b.take_payloads(10) == []
        assert await a.take_payloads(10) == ["for-a"]

    async def test_dequeue_from_a_missing_queue_is_queue_not_found(
        self, harness: RepositoryHarness
    ) -> None:
        with pytest.raises(QueueNotFound):
            await harness.messages.dequeue(
                uuid7(),
                limit=1,
                visibility_timeout_seconds=30,
                dead_letter_batch_size=100,
            )

    # -- a delivery ---------------------------------------------------------------

    async def test_a_delivery_carries_the_message_and_a_fresh_receipt(self, q: Scenario) -> None:
        (message_id,) = await q.send(message('{"order": 7} キュー', Priority.HIGH))
        (delivered,) = await q.take_messages()
        assert delivered.id == message_id
        assert delivered.payload == '{"order": 7} キュー'
        assert delivered.priority is Priority.HIGH
        assert delivered.delivery_attempts == 1
        assert uuid.UUID(delivered.receipt_handle)

    async def test_every_delivery_in_a_batch_has_its_own_receipt(self, q: Scenario) -> None:
        await q.send_payloads(*(str(i) for i in range(10)))
        delivered = await q.take_messages(10)
        assert len({d.receipt_handle for d in delivered}) == 10

    # -- delay and expiry -------------------------------------------------------

    async def test_a_delayed_message_waits_for_its_delay(self, q: Scenario) -> None:
        await q.send(message("later", Priority.HIGH, delay=10), message("now", Priority.LOW))
        assert await q.take_payloads(10) == ["now"]
        await q.advance(8)
        assert await q.take_payloads(10) == []
        await q.advance(3)
        assert await q.take_payloads(10) == ["later"]

    async def test_a_message_without_a_lifetime_gets_the_queue_default_when_stored(
        self, harness: RepositoryHarness
    ) -> None:
        q = await self.scenario(harness, default_message_ttl_seconds=60)
        default = MessageToStore(uuid7(), "default", Priority.HIGH, None, 0)
        await q.send(default, message("own", Priority.LOW, ttl=3600))
        await q.advance(59)
        assert await q.take_payloads(10, visibility=1) == ["default", "own"]
        await q.advance(2)  # both leases over; the default lifetime (60 s) too
        assert await q.take_payloads(10) == ["own"]

    async def test_an_expired_message_is_never_delivered_but_stays_for_the_cleaner(
        self, q: Scenario
    ) -> None:
        await q.send(message("old", Priority.HIGH, ttl=10), message("fresh", Priority.LOW))
        await q.advance(11)
        assert await q.take_payloads(10) == ["fresh"]
        assert await q.stored() == 2

    # -- leases -----------------------------------------------------------------

    async def test_a_leased_message_is_hidden_until_the_lease_ends_then_redelivered(
        self, q: Scenario
    ) -> None:
        await q.send_payloads("job")
        (first,) = await q.take_messages(visibility=30)
        await q.advance(28)
        assert await q.take_messages() == []
        await q.advance(3)
        (again,) = await q.take_messages()
        assert again.id == first.id
        assert again.payload == "job"
        assert again.delivery_attempts == 2
        assert again.receipt_handle != first.receipt_handle

    async def test_the_visibility_timeout_is_chosen_per_dequeue(self, q: Scenario) -> None:
        await q.send_payloads("short", "long")
        await q.take_messages(visibility=5)
        await q.take_messages(visibility=600)
        await q.advance(6)
        assert await q.take_payloads(10) == ["short"]

    async def test_an_elapsed_lease_keeps_its_fifo_place(self, q: Scenario) -> None:
        await q.send_payloads("a", "b", "c")
        assert await q.take_payloads(2, visibility=10) == ["a", "b"]
        await q.advance(11)
        # "a" is claimed straight from its elapsed lease; "b" goes back to its place.
        assert await q.take_payloads(1) == ["a"]
        assert await q.take_payloads(1) == ["b"]
        assert await q.take_payloads(1) == ["c"]

    async def test_an_elapsed_lease_competes_by_priority(self, q: Scenario) -> None:
        await q.send(message("low", Priority.LOW))
        await q.take_messages(visibility=10)
        await q.send(message("high", Priority.HIGH), message("low-later", Priority.LOW))
        await q.advance(11)
        assert await q.take_payloads(3) == ["high", "low", "low-later"]

    # -- dead letters -----------------------------------------------------------

    async def test_an_exhausted_message_moves_to_dead_letters_on_a_later_dequeue(
        self, q: Scenario
    ) -> None:
        (message_id,) = await q.send(message("poison", Priority.HIGH))
        for attempt in (1, 2):
            (delivered,) = await q.take_messages(visibility=10, max_attempts=2)
            assert delivered.delivery_attempts == attempt
            await q.advance(11)

        result = await q.take(visibility=10, max_attempts=2)

        assert (result.messages, result.dead_lettered) == ([], 1)
        (dead,) = await q.dead_letter_records()
        assert (dead.id, dead.queue_id, dead.payload, dead.priority) == (
            message_id,
            q.id,
            "poison",
            Priority.HIGH,
        )
        assert dead.delivery_attempts == 2
        assert dead.reason == REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED
        assert dead.last_delivered_at is not None
        assert dead.enqueued_at < dead.last_delivered_at < dead.dead_lettered_at
        assert (
            timedelta(seconds=11)
            <= dead.last_delivered_at - dead.enqueued_at
            < timedelta(seconds=11) + CLOCK_SLACK
        )
        assert (
            timedelta(seconds=22)
            <= dead.dead_lettered_at - dead.enqueued_at
            < timedelta(seconds=22) + CLOCK_SLACK
        )
        assert await q.stored() == 0

    async def test_an_exhausted_message_never_hides_a_deliverable_one(self, q: Scenario) -> None:
        await q.send(message("poison", Priority.HIGH))
        await q.take_messages(visibility=10, max_attempts=1)
        await q.advance(11)
        await q.send(message("good", Priority.LOW))

        result = await q.take(visibility=10, max_attempts=1)

        assert [m.payload for m in result.messages] == ["good"]
        assert result.dead_lettered == 1
        assert [d.payload for d in await q.dead_letter_records()] == ["poison"]

    async def test_an_exhausted_message_with_an_active_lease_stays_acknowledgeable(
        self, q: Scenario
    ) -> None:
        await q.send_payloads("last-try")
        (delivered,) = await q.take_messages(visibility=30, max_attempts=1)
        assert await q.take(max_attempts=1) == DequeueResult(messages=[], dead_lettered=0)
        assert await q.dead_letter_records() == []
        assert await q.ack(delivered) == 1

    async def test_an_expired_exhausted_message_is_left_to_the_cleaner(self, q: Scenario) -> None:
        await q.send(message("short-lived", ttl=10))
        await q.take_messages(visibility=30, max_attempts=1)
        await q.advance(31)
        assert await q.take(max_attempts=1) == DequeueResult(messages=[], dead_lettered=0)
        assert await q.dead_letter_records() == []
        assert await q.stored() == 1

    async def test_max_delivery_attempts_is_judged_at_dequeue_time(self, q: Scenario) -> None:
        await q.send_payloads("m")
        for _ in range(2):
            await q.take_messages(visibility=10, max_attempts=5)
            await q.advance(11)
        # The queue's limit was lowered to 2 in the meantime.
        assert (await q.take(max_attempts=2)).dead_lettered == 1

    async def test_a_requeued_message_past_a_lowered_limit_is_dead_lettered_not_delivered(
        self, q: Scenario
    ) -> None:
        await q.send(message("retried", Priority.LOW))
        for _ in range(2):
            await q.take_messages(visibility=10, max_attempts=5)
            await q.advance(11)
        # A HIGH message wins the next claim; "retried" goes back to READY (2 attempts).
        await q.send(message("first", Priority.HIGH))
        assert await q.take_payloads(visibility=10, max_attempts=5) == ["first"]
        state = {s.priority: s for s in await q.state.read_state(q.id)}
        assert state[Priority.LOW].ready == 1

        # The limit drops to 2: "retried" has no attempt left. It counts as nothing...
        await q.queues.update_queue(
            q.id, QueueSettingsUpdate(max_delivery_attempts=2), audit_of(q.id)
        )
        state = {s.priority: s for s in await q.state.read_state(q.id)}
        assert (state[Priority.LOW].ready, state[Priority.LOW].oldest_ready_age_seconds) == (0, 0)
        # ... is never delivered a third time, and the next dequeue moves it to dead letters.
        result = await q.take(visibility=10)
        assert (result.messages, result.dead_lettered) == ([], 1)
        (dead,) = await q.dead_letter_records()
        assert (dead.payload, dead.delivery_attempts) == ("retried", 2)
        assert await q.stored() == 1  # "first", still in flight

    async def test_a_paused_queue_claims_and_moves_nothing(self, q: Scenario) -> None:
        await q.send_payloads("held")
        await q.take_messages(visibility=10, max_attempts=1)
        await q.advance(11)  # its lease ended with no attempt left
        await q.send_payloads("waiting")
        await q.queues.set_paused(q.id, True, audit_of(q.id, AuditAction.QUEUE_PAUSED))
        result = await q.take()
        assert (result.messages, result.dead_lettered, result.paused) == ([], 0, True)
        assert await q.dead_letter_records() == []
        await q.queues.set_paused(q.id, False, audit_of(q.id, AuditAction.QUEUE_RESUMED))
        result = await q.take()
        assert ([m.payload for m in result.messages], result.dead_lettered) == (["waiting"], 1)

    async def test_dead_letter_moves_are_bounded_per_dequeue(self, q: Scenario) -> None:
        await q.send_payloads(*(str(i) for i in range(5)))
        await q.take_messages(5, visibility=10, max_attempts=1)
        await q.advance(11)
        moved = [
            (await q.take(max_attempts=1, dead_letter_batch=2)).dead_lettered for _ in range(4)
        ]
        assert moved == [2, 2, 1, 0]
        assert len(await q.dead_letter_records()) == 5
        assert await q.stored() == 0

    async def test_messages_moved_by_one_dequeue_share_a_timestamp_and_list_newest_first(
        self, q: Scenario
    ) -> None:
        await q.send_payloads("a", "b", "c")
        await q.take_messages(3, visibility=10, max_attempts=1)
        await q.advance(11)
        assert (await q.take(max_attempts=1)).dead_lettered == 3
        dead = await q.dead_letter_records()
        assert [d.payload for d in dead] == ["c", "b", "a"]
        assert len({d.dead_lettered_at for d in dead}) == 1

    async def test_exhausted_messages_sharing_a_lease_end_leave_in_fifo_order(
        self, q: Scenario
    ) -> None:
        # Payloads of ~1.5 kB spread the rows over many pages, so storage order (what an
        # index walk returns for equal keys) differs from enqueue order after the claim.
        payloads = [f"{i:02}" + "." * 1500 for i in range(20)]
        await q.send_payloads(*payloads)
        await q.take_messages(20, visibility=10, max_attempts=1)  # one lease end for all
        await q.advance(11)
        seen: set[str] = set()
        for start in range(0, 20, 5):
            assert (await q.take(max_attempts=1, dead_letter_batch=5)).dead_lettered == 5
            now_dead = {d.payload[:2] for d in await q.dead_letter_records()}
            assert sorted(now_dead - seen) == [p[:2] for p in payloads[start : start + 5]]
            seen = now_dead

    async def test_exhausted_messages_beyond_the_dead_letter_batch_never_hide_a_retry(
        self, q: Scenario
    ) -> None:
        # Spec §3.3: "an exhausted message never hides a deliverable one". Here the only
        # deliverable message is an elapsed lease queued behind more exhausted leases
        # than one dequeue moves.
        await q.send_payloads("poison-1", "poison-2", "poison-3")
        await q.take_messages(3, visibility=10, max_attempts=2)
        await q.advance(11)
        assert await q.take_payloads(3, visibility=10, max_attempts=2) == [
            "poison-1",
            "poison-2",
            "poison-3",
        ]  # second and last attempt; the leases end first
        await q.advance(1)
        await q.send_payloads("retry")
        assert await q.take_payloads(1, visibility=10, max_attempts=2) == ["retry"]
        await q.advance(11)  # every lease has ended: three exhausted, one retryable

        result = await q.take(1, visibility=10, max_attempts=2, dead_letter_batch=1)

        assert [m.payload for m in result.messages] == ["retry"]

    # -- acknowledge ------------------------------------------------------------

    async def test_acknowledging_the_current_delivery_removes_the_message(
        self, q: Scenario
    ) -> None:
        await q.send_payloads("done")
        (delivered,) = await q.take_messages(visibility=10)
        assert await q.ack(delivered) == 1
        assert await q.stored() == 0
        await q.advance(11)
        assert await q.take_messages() == []

    async def test_a_second_acknowledge_removes_nothing(self, q: Scenario) -> None:
        await q.send_payloads("done")
        (delivered,) = await q.take_messages()
        assert await q.ack(delivered) == 1
        assert await q.ack(delivered) == 0

    async def test_a_stale_handle_never_removes_the_newer_delivery(self, q: Scenario) -> None:
        await q.send_payloads("job")
        (old,) = await q.take_messages(visibility=10)
        await q.advance(11)
        (new,) = await q.take_messages(visibility=10)
        assert await q.ack(old) == 0
        assert await q.stored() == 1
        assert await q.ack(new) == 1

    async def test_a_handle_whose_lease_elapsed_removes_nothing(self, q: Scenario) -> None:
        await q.send_payloads("job")
        (delivered,) = await q.take_messages(visibility=10)
        await q.advance(11)
        assert await q.ack(delivered) == 0
        (again,) = await q.take_messages()
        assert again.delivery_attempts == 2

    async def test_a_leased_message_can_be_acknowledged_after_its_lifetime_ends(
        self, q: Scenario
    ) -> None:
        await q.send(message("slow", ttl=10))
        (delivered,) = await q.take_messages(visibility=60)
        await q.advance(30)
        assert await q.ack(delivered) == 1

    @pytest.mark.parametrize("handle", ["", "junk", "x" * 200, "random-uuid"])
    async def test_a_junk_or_unknown_handle_removes_nothing(self, q: Scenario, handle: str) -> None:
        await q.send_payloads("job")
        (delivered,) = await q.take_messages()
        if handle == "random-uuid":
            handle = str(uuid.uuid4())
        assert await q.ack(dataclasses.replace(delivered, receipt_handle=handle)) == 0
        assert await q.ack(delivered) == 1

    async def test_a_never_delivered_message_cannot_be_acknowledged(self, q: Scenario) -> None:
        (message_id,) = await q.send(message())
        receipt = Receipt(message_id, str(uuid.uuid4()))
        assert (await q.messages.acknowledge(q.id, [receipt])).removed == 0
        assert await q.stored() == 1

    async def test_acknowledging_with_another_queue_id_removes_nothing(
        self, harness: RepositoryHarness
    ) -> None:
        mine = await self.scenario(harness)
        other = await self.scenario(harness)
        await mine.send_payloads("job")
        (delivered,) = await mine.take_messages()
        assert await other.ack(delivered) == 0
        assert await mine.stored() == 1
        assert await mine.ack(delivered) == 1

    async def test_acknowledging_in_a_missing_queue_is_queue_not_found(self, q: Scenario) -> None:
        # Another API process may still hold the deleted queue's name in its local
        # cache; storage itself must then say the queue is gone (SPEC §3.1: 404).
        await q.send_payloads("job")
        (delivered,) = await q.take_messages()
        receipt = Receipt(delivered.id, delivered.receipt_handle)
        with pytest.raises(QueueNotFound):
            await q.messages.acknowledge(uuid7(), [receipt])
        assert await q.stored() == 1

    async def test_changing_visibility_in_a_missing_queue_is_queue_not_found(
        self, q: Scenario
    ) -> None:
        await q.send_payloads("job")
        (delivered,) = await q.take_messages()
        receipt = Receipt(delivered.id, delivered.receipt_handle)
        with pytest.raises(QueueNotFound):
            await q.messages.change_visibility(uuid7(), receipt, 0)

    async def test_a_batch_acknowledge_counts_each_current_delivery_once(self, q: Scenario) -> None:
        await q.send_payloads("a", "b", "c", "d")
        a, b, c, d = await q.take_messages(4)
        stale_b = dataclasses.replace(b, receipt_handle=str(uuid.uuid4()))
        junk_d = dataclasses.replace(d, receipt_handle="junk")
        assert await q.ack(a, stale_b, c, a, junk_d) == 2
        assert await q.stored() == 2
        assert await q.ack(b, d) == 2

    async def test_an_empty_acknowledge_removes_nothing(self, q: Scenario) -> None:
        assert (await q.messages.acknowledge(q.id, [])).removed == 0

    # -- audit rows of queue changes ---------------------------------------------

    async def audit_rows(
        self, harness: RepositoryHarness, queue_id: UUID, action: AuditAction | None = None
    ) -> list[AuditRecord]:
        return await harness.audit_log.list_audit_records(
            limit=100, after=None, queue_id=queue_id, action=action
        )

    async def test_adding_a_queue_writes_its_audit_row(self, harness: RepositoryHarness) -> None:
        queue = await add(harness, new_queue())
        (row,) = await self.audit_rows(harness, queue.id)
        assert (row.action, row.target_type, row.target_id) == (
            "queue.created",
            "queue",
            str(queue.id),
        )
        assert (row.actor, row.request_id, row.details) == (
            "contract-operator",
            "contract-request",
            {"note": "contract"},
        )
        assert row.at.tzinfo is not None
        assert row.id.version == 7

    async def test_a_refused_change_writes_no_audit_row(self, harness: RepositoryHarness) -> None:
        first = await add(harness, new_queue())
        clash = new_queue(first.name)
        with pytest.raises(QueueAlreadyExists):
            await add(harness, clash)
        missing = uuid7()
        update = QueueSettingsUpdate(max_delivery_attempts=2)
        assert await harness.queues.update_queue(missing, update, audit_of(missing)) is None
        assert await harness.queues.set_paused(missing, True, audit_of(missing)) is None
        assert await harness.queues.purge_queue(missing, audit_of(missing)) is None
        assert await harness.queues.delete_queue(missing, audit_of(missing)) is False
        assert await self.audit_rows(harness, clash.id) == []
        assert await self.audit_rows(harness, missing) == []

    async def test_an_update_writes_its_audit_row(self, harness: RepositoryHarness) -> None:
        queue = await add(harness, new_queue())
        await harness.queues.update_queue(
            queue.id, QueueSettingsUpdate(max_delivery_attempts=2), audit_of(queue.id)
        )
        rows = await self.audit_rows(harness, queue.id)
        assert [r.action for r in rows] == ["queue.updated", "queue.created"]  # newest first

    # -- pause and resume --------------------------------------------------------

    async def test_pause_and_resume_read_back_and_are_audited(
        self, harness: RepositoryHarness
    ) -> None:
        queue = await add(harness, new_queue())
        paused = await harness.queues.set_paused(
            queue.id, True, audit_of(queue.id, AuditAction.QUEUE_PAUSED)
        )
        assert paused is not None and paused.paused is True
        assert paused.settings == queue.settings and paused.name == queue.name
        assert paused.updated_at >= queue.updated_at
        assert await harness.queues.get_queue(queue.id) == paused
        resumed = await harness.queues.set_paused(
            queue.id, False, audit_of(queue.id, AuditAction.QUEUE_RESUMED)
        )
        assert resumed is not None and resumed.paused is False
        assert await harness.queues.get_queue(queue.id) == resumed
        rows = await self.audit_rows(harness, queue.id)
        assert [r.action for r in rows] == ["queue.resumed", "queue.paused", "queue.created"]

    # -- listing queues ----------------------------------------------------------

    async def test_queues_are_listed_by_name_in_byte_order_a_page_at_a_time(
        self, harness: RepositoryHarness
    ) -> None:
        base = unique_name("list")
        # Byte order: '-' < '.' < '0' < '9' < '_' < 'a' < 'z'.
        names = [f"{base}z", f"{base}_b", f"{base}.a", f"{base}0", f"{base}-a", f"{base}a9"]
        for name in names:
            await add(harness, new_queue(name))
        expected = sorted(names, key=str.encode)
        assert expected == [
            f"{base}-a",
            f"{base}.a",
            f"{base}0",
            f"{base}_b",
            f"{base}a9",
            f"{base}z",
        ]
        # Every name after `base` itself that starts with it is ours (the prefix is unique).
        listed = await harness.queues.list_queues(limit=6, after=QueuePosition(base), name=None)
        assert [q.name for q in listed] == expected
        pages: list[str] = []
        after = QueuePosition(base)
        while len(pages) < 6:
            page = await harness.queues.list_queues(limit=4, after=after, name=None)
            pages += [q.name for q in page][: 6 - len(pages)]
            after = QueuePosition(page[-1].name)
        assert pages == expected

    async def test_a_name_filter_finds_exactly_that_queue(self, harness: RepositoryHarness) -> None:
        queue = await add(harness, new_queue())
        await add(harness, new_queue(queue.name + "x"))
        found = await harness.queues.list_queues(limit=50, after=None, name=queue.name)
        assert found == [queue]
        assert await harness.queues.list_queues(limit=50, after=None, name="no-such") == []
        past = QueuePosition(queue.name)
        assert await harness.queues.list_queues(limit=50, after=past, name=queue.name) == []

    # -- purge and delete --------------------------------------------------------

    async def make_dead_letters(self, q: Scenario, *payloads: str) -> list[DeadLetter]:
        """Dead letters of ``payloads``, moved by one dequeue (so they share a timestamp)."""
        await q.send_payloads(*payloads)
        await q.take_messages(len(payloads), visibility=10, max_attempts=1)
        await q.advance(11)
        assert (await q.take(max_attempts=1)).dead_lettered == len(payloads)
        return await q.dead_letter_records()

    async def test_purge_removes_every_live_message_but_no_dead_letter(self, q: Scenario) -> None:
        await self.make_dead_letters(q, "dead")
        await q.send(message("ready"), message("delayed", delay=600), message("short", ttl=5))
        await q.send_payloads("leased")
        await q.take_messages(2)  # "ready" and "leased" go in flight
        await q.advance(6)  # "short" has expired but is still stored
        assert await q.stored() == 4

        purged = await q.queues.purge_queue(q.id, audit_of(q.id, AuditAction.QUEUE_PURGED))

        assert purged == 4
        assert await q.stored() == 0
        assert [d.payload for d in await q.dead_letter_records()] == ["dead"]
        assert await q.take_messages(10) == []
        (row, *_) = await q.audit_log.list_audit_records(
            limit=1, after=None, queue_id=q.id, action=AuditAction.QUEUE_PURGED
        )
        assert row.details == {"note": "contract", "purged": 4}

    async def test_purging_an_empty_queue_counts_zero(self, q: Scenario) -> None:
        assert await q.queues.purge_queue(q.id, audit_of(q.id)) == 0

    async def test_delete_removes_the_queue_and_everything_in_it(
        self, harness: RepositoryHarness
    ) -> None:
        q = await self.scenario(harness, max_delivery_attempts=1)
        await self.make_dead_letters(q, "dead-1", "dead-2")
        await q.send_payloads("a", "b", "c")
        await q.messages.enqueue_idempotent(q.id, message("keyed"), "key-1", b"f" * 32)
        assert await q.state.read_state(q.id) != []

        deleted = await harness.queues.delete_queue(q.id, audit_of(q.id, AuditAction.QUEUE_DELETED))

        assert deleted is True
        assert await harness.queues.get_queue(q.id) is None
        assert await q.stored() == 0
        assert await q.dead_letter_records() == []
        assert await harness.state.read_state(q.id) == []
        assert await harness.queues.delete_queue(q.id, audit_of(q.id)) is False
        with pytest.raises(QueueNotFound):
            await q.send_payloads("late")
        with pytest.raises(QueueNotFound):
            await q.messages.enqueue_idempotent(q.id, message("keyed"), "key-1", b"f" * 32)
        (row, *_) = await self.audit_rows(harness, q.id, AuditAction.QUEUE_DELETED)
        assert row.details == {
            "note": "contract",
            "name": q.queue.name,
            "messages": 4,
            "dead_letters": 2,
        }
        # The audit trail outlives the queue.
        assert [r.action for r in await self.audit_rows(harness, q.id)] == [
            "queue.deleted",
            "queue.created",
        ]

    async def test_a_deleted_queues_name_is_free_again(self, harness: RepositoryHarness) -> None:
        old = await add(harness, new_queue())
        await harness.queues.delete_queue(old.id, audit_of(old.id))
        new = await add(harness, new_queue(old.name))
        assert new.id != old.id
        assert await harness.queues.list_queues(limit=5, after=None, name=old.name) == [new]
        fresh = Scenario(harness, new)
        assert await fresh.take_payloads(10) == []
        assert await fresh.dead_letter_records() == []
        # Same key, same queue name, new queue: the old key is gone with the old queue.
        result = await fresh.messages.enqueue_idempotent(new.id, message("m"), "k", b"x")
        assert result.replayed is False

    # -- state -------------------------------------------------------------------

    async def test_read_state_counts_one_queue_per_priority(self, q: Scenario) -> None:
        await self.make_dead_letters(q, "dead")
        await q.send(
            message("h1", Priority.HIGH),
            message("h2", Priority.HIGH),
            message("l1", Priority.LOW, delay=600),
            message("m1", Priority.MEDIUM),
        )
        await q.take_messages(1)  # h1 in flight
        states = {s.priority: s for s in await q.state.read_state(q.id)}
        assert set(states) == set(Priority)
        high, medium, low = states[Priority.HIGH], states[Priority.MEDIUM], states[Priority.LOW]
        assert (high.ready, high.in_flight, high.delayed) == (1, 1, 0)
        assert (medium.ready, medium.in_flight, medium.dead_letters) == (1, 0, 1)
        assert (low.ready, low.delayed) == (0, 1)
        assert await q.state.read_state(uuid7()) == []

    async def test_read_states_reads_several_queues_in_the_order_given(
        self, harness: RepositoryHarness
    ) -> None:
        first = Scenario(harness, await add(harness, new_queue()))
        second = Scenario(harness, await add(harness, new_queue()))
        await first.send(message("a", Priority.HIGH), message("b", Priority.LOW))
        await second.send(message("c", Priority.MEDIUM, delay=600))
        await second.take_messages(1)  # nothing ready: stays delayed
        states = await harness.state.read_states([second.id, uuid7(), first.id])
        assert [s.queue_id for s in states] == [second.id] * 3 + [first.id] * 3

        def counts(of: list[PriorityState]) -> list[tuple[int, ...]]:  # ages move with time
            return [(s.priority, s.ready, s.in_flight, s.delayed, s.dead_letters) for s in of]

        assert counts(states[:3]) == counts(await harness.state.read_state(second.id))
        assert counts(states[3:]) == counts(await harness.state.read_state(first.id))
        assert await harness.state.read_states([]) == []

    # -- idempotent enqueue -------------------------------------------------------

    async def test_an_idempotency_key_stores_one_message_and_replays_its_id(
        self, q: Scenario
    ) -> None:
        first = message("once")
        stored = await q.messages.enqueue_idempotent(q.id, first, "order-7", b"a" * 32)
        assert stored == IdempotentEnqueued(first.id, replayed=False)
        again = await q.messages.enqueue_idempotent(q.id, message("once"), "order-7", b"a" * 32)
        assert again == IdempotentEnqueued(first.id, replayed=True)
        assert await q.stored() == 1
        assert await q.take_payloads(10) == ["once"]

    async def test_a_key_is_replayed_after_its_message_was_consumed(self, q: Scenario) -> None:
        first = message("once")
        await q.messages.enqueue_idempotent(q.id, first, "k", b"a")
        (delivered,) = await q.take_messages()
        assert await q.ack(delivered) == 1
        again = await q.messages.enqueue_idempotent(q.id, message("once"), "k", b"a")
        assert again == IdempotentEnqueued(first.id, replayed=True)
        assert await q.stored() == 0

    async def test_a_key_with_another_message_is_a_conflict(self, q: Scenario) -> None:
        await q.messages.enqueue_idempotent(q.id, message("one"), "k", b"a")
        with pytest.raises(IdempotencyKeyConflict) as raised:
            await q.messages.enqueue_idempotent(q.id, message("two"), "k", b"b")
        assert raised.value.code == "idempotency_key_conflict"
        assert await q.stored() == 1

    async def test_keys_are_scoped_to_their_queue(self, harness: RepositoryHarness) -> None:
        a = await self.scenario(harness)
        b = await self.scenario(harness)
        in_a = await a.messages.enqueue_idempotent(a.id, message("a"), "k", b"a")
        in_b = await b.messages.enqueue_idempotent(b.id, message("b"), "k", b"b")
        assert not in_a.replayed and not in_b.replayed
        assert in_a.id != in_b.id

    async def test_a_key_is_forgotten_after_24_hours(self, q: Scenario) -> None:
        first = message("day-1")
        await q.messages.enqueue_idempotent(q.id, first, "k", b"a")
        await q.advance(23 * 3600)
        replay = await q.messages.enqueue_idempotent(q.id, message("day-1"), "k", b"a")
        assert replay == IdempotentEnqueued(first.id, replayed=True)
        await q.advance(3600)
        second = message("day-2")
        fresh = await q.messages.enqueue_idempotent(q.id, second, "k", b"b")
        assert fresh == IdempotentEnqueued(second.id, replayed=False)
        again = await q.messages.enqueue_idempotent(q.id, message("day-2"), "k", b"b")
        assert again == IdempotentEnqueued(second.id, replayed=True)

    async def test_an_idempotent_enqueue_to_a_missing_queue_is_queue_not_found(
        self, harness: RepositoryHarness
    ) -> None:
        with pytest.raises(QueueNotFound):
            await harness.messages.enqueue_idempotent(uuid7(), message(), "k", b"a")

    async def test_an_idempotent_message_keeps_its_delay_and_lifetime(self, q: Scenario) -> None:
        await q.messages.enqueue_idempotent(q.id, message("d", delay=10, ttl=20), "k", b"a")
        assert await q.take_payloads() == []
        await q.advance(11)
        assert await q.take_payloads(visibility=30) == ["d"]

    # -- visibility -----------------------------------------------------------------

    async def change(self, q: Scenario, delivered: DeliveredMessage, seconds: int) -> bool:
        receipt = Receipt(delivered.id, delivered.receipt_handle)
        return await q.messages.change_visibility(q.id, receipt, seconds)

    async def test_extending_a_lease_hides_the_message_longer(self, q: Scenario) -> None:
        await q.send_payloads("slow")
        (delivered,) = await q.take_messages(visibility=10)
        await q.advance(8)
        assert await self.change(q, delivered, 60) is True
        await q.advance(50)  # 58 s after the change's start: still leased
        assert await q.take_messages() == []
        assert await q.ack(delivered) == 1

    async def test_shortening_a_lease_redelivers_sooner(self, q: Scenario) -> None:
        await q.send_payloads("job")
        (delivered,) = await q.take_messages(visibility=600)
        assert await self.change(q, delivered, 5) is True
        await q.advance(6)
        (again,) = await q.take_messages()
        assert again.id == delivered.id and again.delivery_attempts == 2

    async def test_visibility_zero_releases_at_once_and_the_attempt_counts(
        self, q: Scenario
    ) -> None:
        await q.send_payloads("job")
        (delivered,) = await q.take_messages(visibility=600)
        assert await self.change(q, delivered, 0) is True
        await q.advance(0.001)
        (again,) = await q.take_messages()
        assert (again.id, again.delivery_attempts) == (delivered.id, 2)
        assert await q.ack(delivered) == 0  # the released delivery is no longer current
        assert await self.change(q, delivered, 30) is False

    async def test_a_released_last_attempt_is_dead_lettered_by_the_next_dequeue(
        self, q: Scenario
    ) -> None:
        await q.send_payloads("last")
        (delivered,) = await q.take_messages(visibility=600, max_attempts=1)
        assert await self.change(q, delivered, 0) is True
        await q.advance(0.001)
        assert (await q.take(max_attempts=1)).dead_lettered == 1

    async def test_a_stale_elapsed_or_foreign_handle_changes_nothing(
        self, harness: RepositoryHarness
    ) -> None:
        q = await self.scenario(harness)
        other = await self.scenario(harness)
        await q.send_payloads("job")
        (old,) = await q.take_messages(visibility=10)
        assert await self.change(other, old, 30) is False  # another queue
        await q.advance(11)
        assert await self.change(q, old, 30) is False  # the lease has elapsed
        (new,) = await q.take_messages(visibility=10)
        assert await self.change(q, old, 30) is False  # a newer delivery exists
        for handle in ("", "junk", str(uuid.uuid4())):
            forged = dataclasses.replace(new, receipt_handle=handle)
            assert await self.change(q, forged, 30) is False
        (never,) = await q.send(message("never delivered"))
        receipt = Receipt(never, str(uuid.uuid4()))
        assert await q.messages.change_visibility(q.id, receipt, 30) is False
        assert await self.change(q, new, 30) is True

    # -- dead letters ---------------------------------------------------------------

    async def test_dead_letters_list_newest_first_a_page_at_a_time(self, q: Scenario) -> None:
        await self.make_dead_letters(q, "a", "b", "c")
        await q.advance(1)
        await self.make_dead_letters(q, "d", "e")
        newest_first = ["e", "d", "c", "b", "a"]
        assert [d.payload for d in await q.dead_letter_records()] == newest_first
        listed = (await q.dead_letters.list_dead_letters(q.id, limit=10, after=None)).items
        assert [d.payload for d, _ in listed] == newest_first
        seen: list[str] = []
        after = None
        while True:
            page = (await q.dead_letters.list_dead_letters(q.id, limit=2, after=after)).items
            if not page:
                break
            seen += [d.payload for d, _ in page]
            after = page[-1][1]
        assert seen == newest_first
        record, position = listed[0]
        assert position.dead_lettered_at == record.dead_lettered_at

    async def test_a_dead_letter_reads_back_whole(self, harness: RepositoryHarness) -> None:
        q = await self.scenario(harness)
        other = await self.scenario(harness)
        (dead,) = await self.make_dead_letters(q, "poison")
        assert await q.dead_letters.get_dead_letter(q.id, dead.id) == dead
        assert await q.dead_letters.get_dead_letter(other.id, dead.id) is None
        assert await q.dead_letters.get_dead_letter(q.id, uuid7()) is None

    async def test_redriving_one_makes_a_fresh_message_and_removes_the_record(
        self, harness: RepositoryHarness
    ) -> None:
        q = await self.scenario(harness, default_message_ttl_seconds=100)
        await q.send(message("poison", Priority.HIGH, ttl=3600))
        await q.take_messages(visibility=10, max_attempts=1)
        await q.advance(11)
        await q.take(max_attempts=1)
        (dead,) = await q.dead_letter_records()
        new_id = uuid7()
        audit = AuditEntry.of_dead_letter(AuditAction.DEAD_LETTER_REDRIVEN, q.id, dead.id, CALLER)

        assert await q.dead_letters.redrive_dead_letter(q.id, dead.id, new_id, audit) is True

        assert await q.dead_letter_records() == []
        assert await q.dead_letters.get_dead_letter(q.id, dead.id) is None
        (fresh,) = await q.take_messages(visibility=10, max_attempts=1)
        assert (fresh.id, fresh.payload, fresh.priority) == (new_id, "poison", Priority.HIGH)
        assert fresh.delivery_attempts == 1  # attempts started again from 0
        assert fresh.enqueued_at > dead.enqueued_at
        assert await q.ack(fresh) == 1
        # The record is gone: a second redrive finds nothing and writes no audit row.
        assert await q.dead_letters.redrive_dead_letter(q.id, dead.id, uuid7(), audit) is False
        (row, *_) = await self.audit_rows(harness, q.id, AuditAction.DEAD_LETTER_REDRIVEN)
        assert (row.target_type, row.target_id) == ("dead_letter", str(dead.id))
        assert len(await self.audit_rows(harness, q.id, AuditAction.DEAD_LETTER_REDRIVEN)) == 1

    async def test_a_redriven_message_lives_as_long_as_the_queue_default(
        self, harness: RepositoryHarness
    ) -> None:
        q = await self.scenario(harness, default_message_ttl_seconds=100)
        (dead,) = await self.make_dead_letters(q, "poison")
        audit = audit_of(q.id, AuditAction.DEAD_LETTER_REDRIVEN)
        assert await q.dead_letters.redrive_dead_letter(q.id, dead.id, uuid7(), audit)
        await q.advance(99)
        assert await q.stored() == 1
        await q.advance(2)
        assert await q.take_messages() == []  # expired: the default lifetime was 100 s

    async def test_a_record_of_another_queue_is_not_redriven(
        self, harness: RepositoryHarness
    ) -> None:
        q = await self.scenario(harness)
        other = await self.scenario(harness)
        (dead,) = await self.make_dead_letters(q, "poison")
        audit = audit_of(other.id, AuditAction.DEAD_LETTER_REDRIVEN)
        assert (
            await other.dead_letters.redrive_dead_letter(other.id, dead.id, uuid7(), audit) is False
        )
        assert await other.stored() == 0
        assert len(await q.dead_letter_records()) == 1
        assert await self.audit_rows(harness, other.id, AuditAction.DEAD_LETTER_REDRIVEN) == []

    async def test_bulk_redrive_takes_the_oldest_first_in_their_order(
        self, harness: RepositoryHarness
    ) -> None:
        q = await self.scenario(harness)
        await self.make_dead_letters(q, "a", "b", "c")
        await q.advance(1)
        await self.make_dead_letters(q, "d", "e")
        new_ids = [uuid7() for _ in range(4)]
        audit = audit_of(q.id, AuditAction.DEAD_LETTER_REDRIVEN)

        assert await q.dead_letters.redrive_dead_letters(q.id, new_ids, audit) == 4

        assert [d.payload for d in await q.dead_letter_records()] == ["e"]
        delivered = await q.take_messages(10)
        assert [(m.id, m.payload) for m in delivered] == list(
            zip(new_ids, ["a", "b", "c", "d"], strict=True)
        )
        assert all(m.delivery_attempts == 1 for m in delivered)
        assert await q.dead_letters.redrive_dead_letters(q.id, [uuid7(), uuid7()], audit) == 1
        assert await q.dead_letters.redrive_dead_letters(q.id, [uuid7()], audit) == 0
        rows = await self.audit_rows(harness, q.id, AuditAction.DEAD_LETTER_REDRIVEN)
        assert [r.details["redriven"] for r in rows] == [0, 1, 4]
        assert all(r.target_type == "queue" for r in rows)

    async def test_deleting_a_dead_letter(self, harness: RepositoryHarness) -> None:
        q = await self.scenario(harness)
        first, second = await self.make_dead_letters(q, "a", "b")
        audit = AuditEntry.of_dead_letter(AuditAction.DEAD_LETTER_DELETED, q.id, first.id, CALLER)
        assert await q.dead_letters.delete_dead_letter(q.id, first.id, audit) is True
        assert await q.dead_letter_records() == [second]
        assert await q.dead_letters.delete_dead_letter(q.id, first.id, audit) is False
        rows = await self.audit_rows(harness, q.id, AuditAction.DEAD_LETTER_DELETED)
        assert [(r.target_type, r.target_id) for r in rows] == [("dead_letter", str(first.id))]

    # -- the audit log ----------------------------------------------------------------

    async def test_the_audit_log_lists_newest_first_filtered_and_paged(
        self, harness: RepositoryHarness
    ) -> None:
        q = await self.scenario(harness)
        for paused in (True, False, True):
            action = AuditAction.QUEUE_PAUSED if paused else AuditAction.QUEUE_RESUMED
            await q.queues.set_paused(q.id, paused, audit_of(q.id, action))
        everything = await self.audit_rows(harness, q.id)
        assert [r.action for r in everything] == [
            "queue.paused",
            "queue.resumed",
            "queue.paused",
            "queue.created",
        ]
        assert [(r.at, r.id) for r in everything] == sorted(
            ((r.at, r.id) for r in everything), reverse=True
        )
        pauses = await self.audit_rows(harness, q.id, AuditAction.QUEUE_PAUSED)
        assert [r.id for r in pauses] == [everything[0].id, everything[2].id]
        seen = []
        after = None
        while True:
            page = await harness.audit_log.list_audit_records(
                limit=3, after=after, queue_id=q.id, action=None
            )
            if not page:
                break
            seen += [r.id for r in page]
            after = AuditPosition(page[-1].at, page[-1].id)
        assert seen == [r.id for r in everything]
        # Unfiltered, this queue's newest row is the whole log's newest (no other test of
        # this adapter instance wrote since).
        latest = await harness.audit_log.list_audit_records(
            limit=1, after=None, queue_id=None, action=None
        )
        assert latest[0].at >= everything[0].at

    # -- state counting (GET /v1/queues/{id} and the collector) ------------------------

    async def test_state_counts_what_time_made_of_the_stored_rows(self, q: Scenario) -> None:
        await q.send(
            message("h-expiring", Priority.HIGH, ttl=10),
            message("h-live", Priority.HIGH),
            message("l-delayed", Priority.LOW, delay=600),
        )
        await q.advance(11)
        states = {s.priority: s for s in await q.state.read_state(q.id)}
        high, medium, low = states[Priority.HIGH], states[Priority.MEDIUM], states[Priority.LOW]
        # The expired message is nobody's to deliver any more (the cleaner's), so not ready.
        assert (high.ready, high.in_flight, high.delayed) == (1, 0, 0)
        assert 11 <= high.oldest_ready_age_seconds <= 11 + CLOCK_SLACK.total_seconds()
        assert (low.ready, low.delayed, low.oldest_ready_age_seconds) == (0, 1, 0)
        assert (medium.ready, medium.in_flight, medium.delayed, medium.dead_letters) == (0,) * 4
        assert medium.oldest_ready_age_seconds == medium.oldest_in_flight_age_seconds == 0

    async def test_an_elapsed_lease_counts_ready_while_attempts_remain_then_neither(
        self, harness: RepositoryHarness
    ) -> None:
        q = await self.scenario(harness, max_delivery_attempts=2)
        await q.send(message("a"), message("b"))

        async def medium() -> PriorityState:
            states = {s.priority: s for s in await q.state.read_state(q.id)}
            return states[Priority.MEDIUM]

        assert len(await q.take_messages(2, visibility=5, max_attempts=2)) == 2
        leased = await medium()
        assert (leased.ready, leased.in_flight) == (0, 2)
        assert leased.oldest_in_flight_age_seconds <= CLOCK_SLACK.total_seconds()
        await q.advance(6)
        elapsed = await medium()  # no write happened: the leases simply ended
        assert (elapsed.ready, elapsed.in_flight) == (2, 0)
        assert elapsed.oldest_ready_age_seconds >= 6
        assert len(await q.take_messages(2, visibility=5, max_attempts=2)) == 2
        await q.advance(6)
        exhausted = await medium()  # no attempt left: dead letters at the next dequeue
        assert (exhausted.ready, exhausted.in_flight, exhausted.dead_letters) == (0, 0, 0)
        await q.take(max_attempts=2)
        assert (await medium()).dead_letters == 2

    async def test_the_leader_reads_every_queue_with_all_three_priorities(
        self, harness: RepositoryHarness
    ) -> None:
        busy = await self.scenario(harness)
        empty = await self.scenario(harness)
        await busy.send(message("h", Priority.HIGH), message("l", Priority.LOW))
        session = await harness.leadership.try_acquire()
        assert session is not None
        try:
            assert await harness.leadership.try_acquire() is None  # held: never waits
            states = await session.read_state()
        finally:
            await session.release()
        ours = [s for s in states if s.queue_id in (busy.id, empty.id)]
        assert {(s.queue_name, s.priority, s.ready) for s in ours} == {
            (busy.queue.name, Priority.HIGH, 1),
            (busy.queue.name, Priority.MEDIUM, 0),
            (busy.queue.name, Priority.LOW, 1),
            (empty.queue.name, Priority.HIGH, 0),
            (empty.queue.name, Priority.MEDIUM, 0),
            (empty.queue.name, Priority.LOW, 0),
        }

        # What the collector reads counts like what one queue's reader reads.
        def counts(states: list[PriorityState]) -> list[tuple[Priority, int, int, int, int]]:
            return [(s.priority, s.ready, s.in_flight, s.delayed, s.dead_letters) for s in states]

        led = [s for s in ours if s.queue_id == busy.id]
        assert counts(led) == counts(await busy.state.read_state(busy.id))
        again = await harness.leadership.try_acquire()
        assert again is not None  # released: free for the next leader
        await again.release()

    # -- maintenance (the cleaners' batches) ---------------------------------------------
    # A batch is global: it also removes what other tests of this adapter left expired,
    # so each test drains until a batch finds nothing and looks at its own queue only.

    async def expire_all(self, q: Scenario, batch_size: int = 100) -> dict[str, int]:
        """Run expired-message batches until one removes nothing; this queue's counts."""
        counts: dict[str, int] = {}
        for _ in range(100):
            removed = await q.maintenance.delete_expired_messages(batch_size)
            assert sum(group.count for group in removed) <= batch_size
            if not removed:
                return counts
            for group in removed:
                if group.queue_name == q.queue.name:
                    counts[group.delivery_history] = (
                        counts.get(group.delivery_history, 0) + group.count
                    )
        raise AssertionError("the expired-message batches never ran dry")

    async def test_expired_messages_are_removed_and_counted_by_delivery_history(
        self, q: Scenario
    ) -> None:
        await q.send(*(message(f"never-{i}", ttl=10) for i in range(3)))
        await q.send(message("leased", Priority.HIGH, ttl=10))
        await q.send(message("alive", Priority.LOW))
        assert await q.take_payloads(1, visibility=60) == ["leased"]
        await q.advance(11)
        # The leased one stays while its lease runs: its consumer may still acknowledge.
        assert await self.expire_all(q, batch_size=2) == {"never_delivered": 3}
        assert await q.stored() == 2
        await q.advance(60)
        assert await self.expire_all(q) == {"previously_delivered": 1}
        assert await q.stored() == 1
        assert await q.take_payloads(1) == ["alive"]

    async def test_an_unexpired_message_is_never_the_cleaners(self, q: Scenario) -> None:
        await q.send(message("delayed", ttl=3600, delay=600), message("ready", ttl=3600))
        await q.advance(700)
        assert await self.expire_all(q) == {}
        assert await q.stored() == 2

    async def test_dead_letters_older_than_the_retention_are_purged_in_bounded_batches(
        self, harness: RepositoryHarness
    ) -> None:
        q = await self.scenario(harness, max_delivery_attempts=1)
        await self.make_dead_letters(q, "old-1", "old-2", "old-3")
        await q.advance(100)
        await self.make_dead_letters(q, "young")
        ours = 0
        for _ in range(100):
            purged = await q.maintenance.delete_dead_letters_older_than(90, 2)
            assert sum(group.count for group in purged) <= 2
            if not purged:
                break
            ours += sum(group.count for group in purged if group.queue_name == q.queue.name)
        assert ours == 3
        assert [d.payload for d in await q.dead_letter_records()] == ["young"]

    async def test_idempotency_keys_older_than_the_age_are_forgotten(self, q: Scenario) -> None:
        first = await q.messages.enqueue_idempotent(q.id, message("a"), "old-key", b"fp")
        await q.advance(100)
        await q.messages.enqueue_idempotent(q.id, message("b"), "new-key", b"fp")
        assert await q.harness.idempotency_keys(q.id) == 2
        for _ in range(100):
            if not await q.maintenance.delete_idempotency_keys_older_than(90, 10):
                break
        assert await q.harness.idempotency_keys(q.id) == 1
        # The old key is free again: the same key now stores a new message.
        again = await q.messages.enqueue_idempotent(q.id, message("a2"), "old-key", b"other")
        assert again.replayed is False and again.id != first.id
        replay = await q.messages.enqueue_idempotent(q.id, message("b2"), "new-key", b"fp")
        assert replay.replayed is True
