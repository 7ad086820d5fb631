"""One contract for every repository adapter (QueueRepository + MessageRepository).

A test module subclasses :class:`RepositoryContract` and provides a ``harness``
fixture: the repository, a way to move time forward, and read-only views of what
the port cannot read (dead letters, stored message count). Every test creates its
own queues with unique names, so tests never see each other's data.

A subclass may list tests its adapter is known to fail in ``KNOWN_GAPS`` (name →
reason); they run as strict expected failures, so a fix turns them red until the
entry is removed.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Protocol
from uuid import UUID

import pytest

from retsu.adapters.ids import uuid7
from retsu.domain.errors import QueueAlreadyExists, QueueNotFound
from retsu.domain.message import (
    REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
    DeadLetter,
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    Priority,
    Receipt,
)
from retsu.domain.queue import Queue, QueueSettings, QueueSettingsUpdate

# Slack for adapters whose clock keeps running while a test runs (PostgreSQL's now()).
CLOCK_SLACK = timedelta(seconds=5)


class Repository(Protocol):
    async def add_queue(self, queue: Queue) -> Queue: ...
    async def get_queue(self, queue_id: UUID) -> Queue | None: ...
    async def update_queue(self, queue_id: UUID, update: QueueSettingsUpdate) -> Queue | None: ...
    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None: ...
    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int,
        max_delivery_attempts: int,
        dead_letter_batch_size: int,
    ) -> DequeueResult: ...
    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int: ...


class RepositoryHarness(Protocol):
    repository: Repository

    async def advance(self, seconds: float) -> None:
        """Move the adapter's clock forward."""

    async def dead_letters(self, queue_id: UUID) -> list[DeadLetter]:
        """The queue's dead letters, newest first (the order the API lists them)."""

    async def stored(self, queue_id: UUID) -> int:
        """How many live messages the queue holds, whatever their state."""


# -- building blocks ------------------------------------------------------------


def unique_name(prefix: str = "contract") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def new_queue(name: str | None = None, *, paused: bool = False, **settings: int) -> Queue:
    now = datetime.now(UTC)
    return Queue(
        id=uuid7(),
        name=name or unique_name(),
        settings=QueueSettings(**settings),
        paused=paused,
        created_at=now,
        updated_at=now,
    )


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


class Scenario:
    """One queue on one repository, with verbs that read like the domain."""

    def __init__(self, harness: RepositoryHarness, queue: Queue) -> None:
        self.harness = harness
        self.repository = harness.repository
        self.queue = queue

    @property
    def id(self) -> UUID:
        return self.queue.id

    async def send(self, *messages: MessageToStore) -> list[UUID]:
        await self.repository.enqueue(self.queue.id, list(messages))
        return [m.id for m in messages]

    async def send_payloads(self, *payloads: str, priority: Priority = Priority.MEDIUM) -> None:
        await self.send(*(message(p, priority) for p in payloads))

    async def take(
        self,
        limit: int = 1,
        *,
        visibility: int = 30,
        max_attempts: int = 5,
        dead_letter_batch: int = 100,
    ) -> DequeueResult:
        return await self.repository.dequeue(
            self.queue.id,
            limit=limit,
            visibility_timeout_seconds=visibility,
            max_delivery_attempts=max_attempts,
            dead_letter_batch_size=dead_letter_batch,
        )

    async def take_messages(self, limit: int = 1, **options: Any) -> list[DeliveredMessage]:
        return (await self.take(limit, **options)).messages

    async def take_payloads(self, limit: int = 1, **options: Any) -> list[str]:
        return [m.payload for m in await self.take_messages(limit, **options)]

    async def ack(self, *deliveries: DeliveredMessage) -> int:
        return await self.repository.acknowledge(
            self.queue.id, [Receipt(d.id, d.receipt_handle) for d in deliveries]
        )

    async def advance(self, seconds: float) -> None:
        await self.harness.advance(seconds)

    async def dead_letters(self) -> list[DeadLetter]:
        return await self.harness.dead_letters(self.queue.id)

    async def stored(self) -> int:
        return await self.harness.stored(self.queue.id)


class RepositoryContract:
    """The behaviour every repository adapter must share."""

    KNOWN_GAPS: ClassVar[dict[str, str]] = {}

    @pytest.fixture(autouse=True)
    def _known_gaps(self, request: pytest.FixtureRequest) -> None:
        reason = self.KNOWN_GAPS.get(request.node.originalname)
        if reason is not None:
            request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))

    @pytest.fixture
    async def q(self, harness: RepositoryHarness) -> Scenario:
        return Scenario(harness, await harness.repository.add_queue(new_queue()))

    async def scenario(self, harness: RepositoryHarness, **settings: int) -> Scenario:
        return Scenario(harness, await harness.repository.add_queue(new_queue(**settings)))

    # -- queues -----------------------------------------------------------------

    async def test_an_added_queue_reads_back_as_stored(self, harness: RepositoryHarness) -> None:
        queue = new_queue(
            visibility_timeout_seconds=7, max_delivery_attempts=3, default_message_ttl_seconds=90
        )
        stored = await harness.repository.add_queue(queue)
        assert (stored.id, stored.name, stored.settings, stored.paused) == (
            queue.id,
            queue.name,
            QueueSettings(7, 3, 90),
            False,
        )
        assert stored.created_at.tzinfo is not None
        assert stored.created_at == stored.updated_at
        assert await harness.repository.get_queue(queue.id) == stored

    async def test_a_paused_queue_reads_back_paused(self, harness: RepositoryHarness) -> None:
        stored = await harness.repository.add_queue(new_queue(paused=True))
        assert stored.paused is True
        assert (await harness.repository.get_queue(stored.id)).paused is True  # type: ignore[union-attr]

    async def test_an_unknown_queue_reads_as_nothing(self, harness: RepositoryHarness) -> None:
        assert await harness.repository.get_queue(uuid7()) is None

    async def test_a_taken_name_is_queue_already_exists(self, harness: RepositoryHarness) -> None:
        first = await harness.repository.add_queue(new_queue())
        with pytest.raises(QueueAlreadyExists) as raised:
            await harness.repository.add_queue(new_queue(first.name, max_delivery_attempts=1))
        assert raised.value.code == "queue_already_exists"
        assert await harness.repository.get_queue(first.id) == first

    async def test_names_differing_only_in_punctuation_are_distinct(
        self, harness: RepositoryHarness
    ) -> None:
        base = unique_name()
        a = await harness.repository.add_queue(new_queue(f"{base}.a"))
        b = await harness.repository.add_queue(new_queue(f"{base}-a"))
        assert a.id != b.id

    async def test_an_update_changes_only_the_given_settings(
        self, harness: RepositoryHarness
    ) -> None:
        queue = await harness.repository.add_queue(
            new_queue(visibility_timeout_seconds=7, max_delivery_attempts=3)
        )
        updated = await harness.repository.update_queue(
            queue.id, QueueSettingsUpdate(max_delivery_attempts=9)
        )
        assert updated is not None
        assert updated.settings == QueueSettings(7, 9, queue.settings.default_message_ttl_seconds)
        assert (updated.id, updated.name, updated.paused) == (queue.id, queue.name, False)
        assert updated.created_at == queue.created_at
        assert updated.updated_at >= queue.updated_at
        assert await harness.repository.get_queue(queue.id) == updated

        again = await harness.repository.update_queue(
            queue.id,
            QueueSettingsUpdate(visibility_timeout_seconds=21_600, default_message_ttl_seconds=1),
        )
        assert again is not None
        assert again.settings == QueueSettings(21_600, 9, 1)

    async def test_updating_an_unknown_queue_returns_nothing(
        self, harness: RepositoryHarness
    ) -> None:
        update = QueueSettingsUpdate(max_delivery_attempts=2)
        assert await harness.repository.update_queue(uuid7(), update) is None

    # -- enqueue ----------------------------------------------------------------

    async def test_enqueue_to_a_missing_queue_is_queue_not_found(
        self, harness: RepositoryHarness
    ) -> None:
        with pytest.raises(QueueNotFound) as raised:
            await harness.repository.enqueue(uuid7(), [message(), message()])
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
            await harness.repository.dequeue(
                uuid7(),
                limit=1,
                visibility_timeout_seconds=30,
                max_delivery_attempts=5,
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
        (dead,) = await q.dead_letters()
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
        assert [d.payload for d in await q.dead_letters()] == ["poison"]

    async def test_an_exhausted_message_with_an_active_lease_stays_acknowledgeable(
        self, q: Scenario
    ) -> None:
        await q.send_payloads("last-try")
        (delivered,) = await q.take_messages(visibility=30, max_attempts=1)
        assert await q.take(max_attempts=1) == DequeueResult(messages=[], dead_lettered=0)
        assert await q.dead_letters() == []
        assert await q.ack(delivered) == 1

    async def test_an_expired_exhausted_message_is_left_to_the_cleaner(self, q: Scenario) -> None:
        await q.send(message("short-lived", ttl=10))
        await q.take_messages(visibility=30, max_attempts=1)
        await q.advance(31)
        assert await q.take(max_attempts=1) == DequeueResult(messages=[], dead_lettered=0)
        assert await q.dead_letters() == []
        assert await q.stored() == 1

    async def test_max_delivery_attempts_is_judged_at_dequeue_time(self, q: Scenario) -> None:
        await q.send_payloads("m")
        for _ in range(2):
            await q.take_messages(visibility=10, max_attempts=5)
            await q.advance(11)
        # The queue's limit was lowered to 2 in the meantime.
        assert (await q.take(max_attempts=2)).dead_lettered == 1

    async def test_dead_letter_moves_are_bounded_per_dequeue(self, q: Scenario) -> None:
        await q.send_payloads(*(str(i) for i in range(5)))
        await q.take_messages(5, visibility=10, max_attempts=1)
        await q.advance(11)
        moved = [
            (await q.take(max_attempts=1, dead_letter_batch=2)).dead_lettered for _ in range(4)
        ]
        assert moved == [2, 2, 1, 0]
        assert len(await q.dead_letters()) == 5
        assert await q.stored() == 0

    async def test_messages_moved_by_one_dequeue_share_a_timestamp_and_list_newest_first(
        self, q: Scenario
    ) -> None:
        await q.send_payloads("a", "b", "c")
        await q.take_messages(3, visibility=10, max_attempts=1)
        await q.advance(11)
        assert (await q.take(max_attempts=1)).dead_lettered == 3
        dead = await q.dead_letters()
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
            now_dead = {d.payload[:2] for d in await q.dead_letters()}
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
        assert await q.repository.acknowledge(q.id, [receipt]) == 0
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

    async def test_acknowledging_in_a_missing_queue_removes_nothing(self, q: Scenario) -> None:
        await q.send_payloads("job")
        (delivered,) = await q.take_messages()
        receipt = Receipt(delivered.id, delivered.receipt_handle)
        assert await q.repository.acknowledge(uuid7(), [receipt]) == 0
        assert await q.stored() == 1

    async def test_a_batch_acknowledge_counts_each_current_delivery_once(self, q: Scenario) -> None:
        await q.send_payloads("a", "b", "c", "d")
        a, b, c, d = await q.take_messages(4)
        stale_b = dataclasses.replace(b, receipt_handle=str(uuid.uuid4()))
        junk_d = dataclasses.replace(d, receipt_handle="junk")
        assert await q.ack(a, stale_b, c, a, junk_d) == 2
        assert await q.stored() == 2
        assert await q.ack(b, d) == 2

    async def test_an_empty_acknowledge_removes_nothing(self, q: Scenario) -> None:
        assert await q.repository.acknowledge(q.id, []) == 0
