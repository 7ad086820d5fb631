"""The operator and consumer use cases of SPEC §3.2–3.5 on the in-memory adapters.

Time moves with a fake clock; nobody sleeps. The caches are spies over the pass-through
lookups, so the write order (database, then shared, then local cache) is checked too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import pytest
from dependency_injector import providers
from itsdangerous import URLSafeSerializer

from retsu.adapters.cache.passthrough import DetailsQueueNames, RepositoryQueueDetails
from retsu.adapters.http import pages
from retsu.adapters.http.cursors import CURSOR_VERSION, CursorKind, Cursors
from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.secrets import RandomServerSecrets
from retsu.adapters.memory.storage import MemoryStorage
from retsu.application.dead_letters import (
    DeadLetterCommand,
    RedriveDeadLettersCommand,
)
from retsu.application.messages import (
    AcknowledgeCommand,
    ChangeVisibilityCommand,
    DequeueCommand,
    EnqueueCommand,
    EnqueueIdempotentCommand,
)
from retsu.application.queues import CreateQueueCommand, QueueCommand, UpdateQueueCommand
from retsu.domain.audit import AuditRecord, Caller
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.errors import (
    DeadLetterNotFound,
    IdempotencyKeyConflict,
    InvalidInput,
    QueueAlreadyExists,
    QueueNotFound,
    RetsuError,
    StaleReceiptHandle,
)
from retsu.domain.message import DeliveredMessage, NewMessage, Receipt
from retsu.domain.queue import Queue
from tests.support.containers import api_container
from tests.support.doubles.events import RecordingQueueEvents

ALICE = Caller(actor="alice", request_id="req-1")


class SpyDetails(RepositoryQueueDetails):
    def __init__(self, queues: MemoryStorage, log: list[str]) -> None:
        super().__init__(queues)
        self.log = log

    async def remember(self, queue: Queue) -> None:
        self.log.append(f"shared.remember paused={queue.paused}")

    async def forget(self, queue_id: UUID) -> None:
        self.log.append("shared.forget")


class SpyNames(DetailsQueueNames):
    def __init__(self, details: RepositoryQueueDetails, log: list[str]) -> None:
        super().__init__(details)
        self.log = log

    async def remember(self, queue: Queue) -> None:
        self.log.append(f"local.remember paused={queue.paused}")

    async def forget(self, queue_id: UUID) -> None:
        self.log.append("local.forget")


# The command names these tests were written with: one command shape serves several actions.
PauseQueueCommand = PurgeQueueCommand = DeleteQueueCommand = QueueCommand
RedriveDeadLetterCommand = DeleteDeadLetterCommand = DeadLetterCommand


@dataclass(frozen=True)
class ListQueuesQuery:
    """A list request as the HTTP layer gets it (cursors are the HTTP adapter's)."""

    limit: int = 50
    cursor: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class ListDeadLettersQuery:
    queue_id: UUID
    limit: int = 50
    cursor: str | None = None


@dataclass(frozen=True)
class ListAuditLogQuery:
    limit: int = 50
    cursor: str | None = None
    queue_id: UUID | None = None
    action: str | None = None


class World:
    """The services as the API container wires them, on the memory twin, with spies as
    the caches; lists go through the HTTP adapter's pages (cursors included)."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.repository = r = MemoryStorage(self.clock)
        self.cache_log: list[str] = []
        self.details = SpyDetails(r, self.cache_log)
        self.names = SpyNames(self.details, self.cache_log)
        self.events = RecordingQueueEvents()
        self.secrets = RandomServerSecrets()
        container = api_container(
            clock=self.clock, storage=r, metrics=self.events, secrets=self.secrets
        )
        container.lookups.details.override(providers.Object(self.details))
        container.lookups.names.override(providers.Object(self.names))
        self.cursors = Cursors(self.secrets)
        queues = self.queues = container.use_cases.queues()
        messages = container.use_cases.messages()
        dead_letters = self.dead_letter_service = container.use_cases.dead_letters()
        self.activity = container.use_cases.activity()
        self.create_queue = queues.create
        self.update_queue = queues.update
        self.get_queue = queues.get
        self.pause_queue = queues.pause
        self.resume_queue = queues.resume
        self.purge_queue = queues.purge
        self.delete_queue = queues.delete
        self.enqueue = messages.enqueue
        self.enqueue_idempotent = messages.enqueue_idempotent
        self.dequeue = messages.dequeue
        self.acknowledge = messages.acknowledge
        self.change_visibility = messages.change_visibility
        self.get_dead_letter = dead_letters.get
        self.redrive_dead_letter = dead_letters.redrive
        self.redrive_dead_letters = dead_letters.redrive_many
        self.delete_dead_letter = dead_letters.delete

    async def list_queues(self, query: ListQueuesQuery) -> pages.Listed[Queue]:
        return await pages.queues_page(
            self.queues, self.cursors, limit=query.limit, cursor=query.cursor, name=query.name
        )

    async def list_dead_letters(self, query: ListDeadLettersQuery) -> pages.Listed[Any]:
        return await pages.dead_letters_page(
            self.dead_letter_service,
            self.cursors,
            query.queue_id,
            limit=query.limit,
            cursor=query.cursor,
        )

    async def list_audit_log(self, query: ListAuditLogQuery) -> pages.Listed[AuditRecord]:
        return await pages.audit_log_page(
            self.activity,
            self.cursors,
            limit=query.limit,
            cursor=query.cursor,
            queue_id=query.queue_id,
            action=query.action,
        )

    async def queue(self, name: str = "orders", **settings: Any) -> Queue:
        return await self.create_queue(CreateQueueCommand(name=name, caller=ALICE, **settings))

    async def send(
        self, queue: Queue, payload: str = "x", priority: str = "MEDIUM", **kw: Any
    ) -> UUID:
        message = NewMessage.parse(payload, priority, kw.get("ttl"), kw.get("delay"))
        (message_id,) = await self.enqueue(EnqueueCommand(queue.id, [message]))
        return message_id

    async def receive(
        self, queue: Queue, n: int = 10, visibility: int | None = None
    ) -> list[DeliveredMessage]:
        options = DequeueOptions(max_messages=n, visibility_timeout_seconds=visibility)
        return await self.dequeue(DequeueCommand(queue.id, options))

    async def poison(self, queue: Queue, *payloads: str) -> None:
        """Dead-letter ``payloads`` (the queue must allow one attempt); each call's records
        are one second newer than the previous call's."""
        for payload in payloads:
            await self.send(queue, payload)
        for start in range(0, len(payloads), 100):
            await self.receive(queue, min(100, len(payloads) - start), visibility=1)
        self.clock.advance(2)
        before = len(self.repository.dead_letters_of(queue.id))
        while len(self.repository.dead_letters_of(queue.id)) < before + len(payloads):
            assert await self.receive(queue, 1) == []
        self.clock.advance(1)

    async def audit(self, **query: Any) -> list[AuditRecord]:
        return (await self.list_audit_log(ListAuditLogQuery(limit=100, **query))).items


@pytest.fixture
def world() -> World:
    return World()


def _code(error: pytest.ExceptionInfo[RetsuError]) -> str:
    return error.value.code


# -- create and update are audited -----------------------------------------------------


async def test_creating_a_queue_writes_an_audit_row_naming_the_caller(world: World) -> None:
    queue = await world.queue(visibility_timeout_seconds=7)
    (row,) = await world.audit()
    assert (row.action, row.target_type, row.target_id) == ("queue.created", "queue", str(queue.id))
    assert (row.actor, row.request_id) == ("alice", "req-1")
    assert row.details == {
        "name": "orders",
        "visibility_timeout_seconds": 7,
        "max_delivery_attempts": 5,
        "default_message_ttl_seconds": 604_800,
        "group_max_in_flight": 1,
        "max_in_flight": None,
        "rate_limit": None,
        "group_rate_limit": None,
        "completed_retention_seconds": 0,
    }


async def test_the_caller_defaults_to_anonymous(world: World) -> None:
    await world.create_queue(CreateQueueCommand(name="plain"))
    (row,) = await world.audit()
    assert (row.actor, row.request_id) == ("anonymous", None)


async def test_an_update_is_audited_with_its_changes(world: World) -> None:
    queue = await world.queue()
    await world.update_queue(UpdateQueueCommand(queue.id, max_delivery_attempts=2, caller=ALICE))
    row = (await world.audit(action="queue.updated"))[0]
    assert row.details == {"changes": {"max_delivery_attempts": 2}}


async def test_failed_actions_write_no_audit_row(world: World) -> None:
    queue = await world.queue()
    missing = UUID(int=7)
    failing = [
        world.queue("orders"),  # taken name
        world.queue("Bad Name"),
        world.update_queue(UpdateQueueCommand(missing, max_delivery_attempts=2)),
        world.update_queue(UpdateQueueCommand(queue.id)),  # empty
        world.pause_queue(PauseQueueCommand(missing)),
        world.resume_queue(PauseQueueCommand(missing)),
        world.purge_queue(PurgeQueueCommand(missing)),
        world.delete_queue(DeleteQueueCommand(missing)),
        world.redrive_dead_letter(RedriveDeadLetterCommand(queue.id, missing)),
        world.redrive_dead_letter(RedriveDeadLetterCommand(missing, missing)),
        world.redrive_dead_letters(RedriveDeadLettersCommand(missing)),
        world.redrive_dead_letters(RedriveDeadLettersCommand(queue.id, limit=0)),
        world.delete_dead_letter(DeleteDeadLetterCommand(queue.id, missing)),
    ]
    for call in failing:
        with pytest.raises(RetsuError):
            await call
    assert [r.action for r in await world.audit()] == ["queue.created"]


# -- read one queue with stats ---------------------------------------------------------


async def test_get_queue_reads_the_queue_and_exact_stats(world: World) -> None:
    queue = await world.queue(max_delivery_attempts=1, visibility_timeout_seconds=5)
    await world.poison(queue, "dead")
    await world.send(queue, "a", "HIGH")
    world.clock.advance(10)
    await world.send(queue, "b", "LOW")
    await world.send(queue, "later", "LOW", delay=60)
    await world.send(queue, "leased", "MEDIUM")
    leased = await world.receive(queue, 1)
    assert [m.payload for m in leased] == ["a"]

    found = await world.get_queue(queue.id)

    assert found.queue == await world.repository.get_queue(queue.id)
    stats = found.stats
    assert (stats.ready, stats.in_flight, stats.delayed, stats.dead_letters) == (2, 1, 1, 1)
    assert stats.oldest_ready_age_seconds == 0.0  # "b" and "leased" were just enqueued
    world.clock.advance(3)
    assert (await world.get_queue(queue.id)).stats.oldest_ready_age_seconds == 3.0


async def test_get_queue_of_an_unknown_id_is_queue_not_found(world: World) -> None:
    with pytest.raises(QueueNotFound):
        await world.get_queue(UUID(int=1))


# -- list queues -----------------------------------------------------------------------


async def test_queues_are_listed_in_byte_order_a_page_at_a_time(world: World) -> None:
    for name in ("b", "a-1", "a.1", "a0", "a_1", "c"):
        await world.queue(name)
    first = await world.list_queues(ListQueuesQuery(limit=4))
    assert [q.name for q in first.items] == ["a-1", "a.1", "a0", "a_1"]
    assert first.next_cursor is not None
    second = await world.list_queues(ListQueuesQuery(limit=4, cursor=first.next_cursor))
    assert [q.name for q in second.items] == ["b", "c"]
    assert second.next_cursor is None


async def test_a_full_last_page_has_no_next_cursor(world: World) -> None:
    for name in ("a", "b", "c", "d"):
        await world.queue(name)
    first = await world.list_queues(ListQueuesQuery(limit=2))
    second = await world.list_queues(ListQueuesQuery(limit=2, cursor=first.next_cursor))
    assert [q.name for q in second.items] == ["c", "d"]
    assert second.next_cursor is None
    everything = await world.list_queues(ListQueuesQuery())
    assert len(everything.items) == 4 and everything.next_cursor is None


async def test_a_name_filter_is_exact(world: World) -> None:
    for name in ("orders", "orders-2", "order"):
        await world.queue(name)
    page = await world.list_queues(ListQueuesQuery(name="orders"))
    assert [q.name for q in page.items] == ["orders"]
    assert (await world.list_queues(ListQueuesQuery(name="nope"))).items == []
    # No queue can have this name, so the exact filter matches nothing.
    assert (await world.list_queues(ListQueuesQuery(name="Not A Name"))).items == []


@pytest.mark.parametrize("limit", [0, 101, -1])
async def test_list_limits_outside_1_to_100_are_invalid_limit(world: World, limit: int) -> None:
    for call in (
        world.list_queues(ListQueuesQuery(limit=limit)),
        world.list_audit_log(ListAuditLogQuery(limit=limit)),
    ):
        with pytest.raises(InvalidInput) as raised:
            await call
        assert _code(raised) == "invalid_limit"


async def test_list_limits_at_the_bounds_are_accepted(world: World) -> None:
    await world.queue()
    assert len((await world.list_queues(ListQueuesQuery(limit=1))).items) == 1
    assert len((await world.list_queues(ListQueuesQuery(limit=100))).items) == 1


async def test_forged_and_foreign_cursors_are_invalid_cursor(world: World) -> None:
    for name in ("a", "b", "c"):
        await world.queue(name)
    page = await world.list_queues(ListQueuesQuery(limit=1))
    assert page.next_cursor is not None
    key = await world.secrets.cursor_signing_key()

    def seal(key: bytes, kind: str, scope: list[Any], position: list[Any]) -> str:
        signer = URLSafeSerializer(
            key, salt="retsu.cursor", signer_kwargs={"digest_method": hashlib.sha256}
        )
        return str(signer.dumps([CURSOR_VERSION, scope, *position], salt=kind))

    foreign = [
        "garbage",
        page.next_cursor + "A",
        page.next_cursor[:-2],
        seal(b"x" * 32, CursorKind.QUEUES, [None], ["a"]),  # another key
        seal(key, CursorKind.AUDIT_LOG, [None], ["a"]),  # another list
        seal(key, CursorKind.QUEUES, [None], [1]),  # wrong types
        seal(key, CursorKind.QUEUES, [None, None], ["a"]),  # another scope
    ]
    assert (
        seal(key, CursorKind.QUEUES, [None], ["a"]) == page.next_cursor
    )  # the helper seals as the server does
    for cursor in foreign:
        with pytest.raises(InvalidInput) as raised:
            await world.list_queues(ListQueuesQuery(limit=1, cursor=cursor))
        assert _code(raised) == "invalid_cursor", cursor
    # A cursor is bound to the filter it was made under.
    with pytest.raises(InvalidInput) as raised:
        await world.list_queues(ListQueuesQuery(limit=1, cursor=page.next_cursor, name="a"))
    assert _code(raised) == "invalid_cursor"


# -- pause and resume ------------------------------------------------------------------


async def test_pause_stops_delivery_and_resume_restarts_it(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, "job")
    paused = await world.pause_queue(PauseQueueCommand(queue.id, ALICE))
    assert paused.paused is True
    assert await world.receive(queue) == []
    await world.send(queue, "while-paused")  # enqueue still works
    resumed = await world.resume_queue(PauseQueueCommand(queue.id, ALICE))
    assert resumed.paused is False
    assert [m.payload for m in await world.receive(queue)] == ["job", "while-paused"]
    actions = [r.action for r in await world.audit(queue_id=queue.id)]
    assert actions == ["queue.resumed", "queue.paused", "queue.created"]


async def test_pause_and_resume_go_through_both_caches_after_the_database(world: World) -> None:
    queue = await world.queue()
    world.cache_log.clear()
    await world.pause_queue(PauseQueueCommand(queue.id))
    await world.resume_queue(PauseQueueCommand(queue.id))
    assert world.cache_log == [
        "shared.remember paused=True",
        "local.remember paused=True",
        "shared.remember paused=False",
        "local.remember paused=False",
    ]


async def test_acknowledge_and_visibility_still_work_while_paused(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, "a")
    await world.send(queue, "b")
    a, b = await world.receive(queue)
    await world.pause_queue(PauseQueueCommand(queue.id))
    assert (
        await world.acknowledge(AcknowledgeCommand(queue.id, [Receipt(a.id, a.receipt_handle)]))
        == 1
    )
    await world.change_visibility(
        ChangeVisibilityCommand(queue.id, Receipt(b.id, b.receipt_handle), 0)
    )
    assert await world.receive(queue) == []  # released, but the queue is paused


# -- purge -----------------------------------------------------------------------------


async def test_purge_counts_and_removes_live_messages_only(world: World) -> None:
    queue = await world.queue(max_delivery_attempts=1)
    await world.poison(queue, "dead")
    for payload in ("a", "b", "c"):
        await world.send(queue, payload)
    await world.receive(queue, 1)
    assert await world.purge_queue(PurgeQueueCommand(queue.id, ALICE)) == 3
    assert world.repository.message_count(queue.id) == 0
    assert len(world.repository.dead_letters_of(queue.id)) == 1
    (row,) = await world.audit(action="queue.purged")
    assert row.details == {"purged": 3}
    assert (row.actor, row.target_id) == ("alice", str(queue.id))


# -- delete ----------------------------------------------------------------------------


async def test_delete_removes_everything_forgets_the_caches_and_frees_the_name(
    world: World,
) -> None:
    queue = await world.queue(max_delivery_attempts=1)
    await world.poison(queue, "dead")
    await world.send(queue, "live")
    world.cache_log.clear()

    await world.delete_queue(DeleteQueueCommand(queue.id, ALICE))

    assert world.cache_log == ["shared.forget", "local.forget"]
    with pytest.raises(QueueNotFound):
        await world.get_queue(queue.id)
    with pytest.raises(QueueNotFound):
        await world.delete_queue(DeleteQueueCommand(queue.id))
    with pytest.raises(QueueNotFound):
        await world.list_dead_letters(ListDeadLettersQuery(queue.id))
    again = await world.queue("orders")
    assert again.id != queue.id
    assert await world.receive(again) == []
    (row,) = await world.audit(action="queue.deleted")
    assert row.details == {"name": "orders", "messages": 1, "dead_letters": 1}
    assert next(r.action for r in await world.audit(queue_id=queue.id)) == "queue.deleted"


# -- idempotent enqueue ----------------------------------------------------------------


async def _keyed(world: World, queue: Queue, key: str, payload: str = "p", **kw: Any) -> Any:
    message = NewMessage.parse(payload, kw.pop("priority", "HIGH"), kw.get("ttl"), kw.get("delay"))
    return await world.enqueue_idempotent(EnqueueIdempotentCommand(queue.id, message, key))


async def test_a_repeated_key_replays_the_first_id_and_counts_one_enqueue(world: World) -> None:
    queue = await world.queue()
    first = await _keyed(world, queue, "k")
    again = await _keyed(world, queue, "k")
    assert (first.replayed, again.replayed) == (False, True)
    assert again.id == first.id
    assert world.repository.message_count(queue.id) == 1
    assert world.events.counts["enqueued", "orders", "HIGH"] == 1


async def test_a_key_replays_after_the_message_was_consumed(world: World) -> None:
    queue = await world.queue()
    first = await _keyed(world, queue, "k")
    (delivered,) = await world.receive(queue)
    await world.acknowledge(
        AcknowledgeCommand(queue.id, [Receipt(delivered.id, delivered.receipt_handle)])
    )
    assert (await _keyed(world, queue, "k")).id == first.id


async def test_equal_after_parsing_is_the_same_message(world: World) -> None:
    queue = await world.queue()
    first = await _keyed(world, queue, "k", "p", delay=None)
    assert (await _keyed(world, queue, "k", "p", delay=0)).id == first.id


@pytest.mark.parametrize(
    "changed",
    [{"payload": "other"}, {"priority": "LOW"}, {"ttl": 60}, {"delay": 5}],
)
async def test_the_same_key_with_another_message_is_a_conflict(
    world: World, changed: dict[str, Any]
) -> None:
    queue = await world.queue()
    await _keyed(world, queue, "k")
    with pytest.raises(IdempotencyKeyConflict):
        await _keyed(world, queue, "k", **changed)
    assert world.repository.message_count(queue.id) == 1


async def test_keys_are_per_queue_and_forgotten_after_a_day(world: World) -> None:
    a = await world.queue("a")
    b = await world.queue("b")
    in_a = await _keyed(world, a, "k")
    assert (await _keyed(world, b, "k", "other")).replayed is False
    world.clock.advance(24 * 3600)
    fresh = await _keyed(world, a, "k", "other")
    assert fresh.replayed is False and fresh.id != in_a.id


@pytest.mark.parametrize("key", ["", "x" * 129, "with space", "é"])
async def test_an_invalid_key_is_refused_before_anything_is_stored(world: World, key: str) -> None:
    queue = await world.queue()
    with pytest.raises(InvalidInput) as raised:
        await _keyed(world, queue, key)
    assert _code(raised) == "invalid_idempotency_key"
    assert world.repository.message_count(queue.id) == 0


async def test_an_idempotent_enqueue_keeps_the_message_rules(world: World) -> None:
    queue = await world.queue(default_message_ttl_seconds=60)
    with pytest.raises(InvalidInput) as raised:
        await _keyed(world, queue, "k", delay=60)
    assert _code(raised) == "invalid_delay"
    with pytest.raises(QueueNotFound):
        message = NewMessage.parse("p", "LOW")
        await world.enqueue_idempotent(EnqueueIdempotentCommand(UUID(int=3), message, "k"))
    # The refused request did not take the key.
    assert (await _keyed(world, queue, "k")).replayed is False


# -- visibility ------------------------------------------------------------------------


async def _visibility(
    world: World, queue_id: UUID, message: DeliveredMessage, seconds: int
) -> None:
    receipt = Receipt(message.id, message.receipt_handle)
    await world.change_visibility(ChangeVisibilityCommand(queue_id, receipt, seconds))


async def test_visibility_extends_releases_and_refuses_stale_handles(world: World) -> None:
    queue = await world.queue(visibility_timeout_seconds=10)
    await world.send(queue, "job")
    (first,) = await world.receive(queue)
    await _visibility(world, queue.id, first, 100)
    world.clock.advance(50)
    assert await world.receive(queue) == []
    await _visibility(world, queue.id, first, 0)
    (second,) = await world.receive(queue)
    assert (second.id, second.delivery_attempts) == (first.id, 2)
    with pytest.raises(StaleReceiptHandle) as raised:
        await _visibility(world, queue.id, first, 30)
    assert _code(raised) == "stale_receipt_handle"
    world.clock.advance(11)  # the second lease has elapsed
    with pytest.raises(StaleReceiptHandle):
        await _visibility(world, queue.id, second, 30)


@pytest.mark.parametrize("seconds", [-1, 21_601])
async def test_visibility_outside_0_to_21600_is_invalid(world: World, seconds: int) -> None:
    queue = await world.queue()
    await world.send(queue)
    (message,) = await world.receive(queue)
    with pytest.raises(InvalidInput) as raised:
        await _visibility(world, queue.id, message, seconds)
    assert _code(raised) == "invalid_visibility_timeout"
    await _visibility(world, queue.id, message, 21_600)


async def test_visibility_in_an_unknown_queue_is_queue_not_found(world: World) -> None:
    queue = await world.queue()
    await world.send(queue)
    (message,) = await world.receive(queue)
    with pytest.raises(QueueNotFound):
        await _visibility(world, UUID(int=9), message, 10)


# -- dead letters ----------------------------------------------------------------------


async def test_dead_letters_are_browsed_newest_first_with_a_cursor(world: World) -> None:
    queue = await world.queue(max_delivery_attempts=1)
    await world.poison(queue, "a", "b", "c")
    await world.poison(queue, "d", "e")
    seen: list[str] = []
    cursor = None
    while True:
        page = await world.list_dead_letters(ListDeadLettersQuery(queue.id, 2, cursor))
        seen += [d.payload for d in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == ["e", "d", "c", "b", "a"]


async def test_a_dead_letter_cursor_is_bound_to_its_queue(world: World) -> None:
    a = await world.queue("a", max_delivery_attempts=1)
    b = await world.queue("b", max_delivery_attempts=1)
    await world.poison(a, "1", "2")
    await world.poison(b, "3", "4")
    page = await world.list_dead_letters(ListDeadLettersQuery(a.id, 1))
    with pytest.raises(InvalidInput) as raised:
        await world.list_dead_letters(ListDeadLettersQuery(b.id, 1, page.next_cursor))
    assert _code(raised) == "invalid_cursor"


async def test_reading_a_dead_letter(world: World) -> None:
    queue = await world.queue(max_delivery_attempts=1)
    await world.poison(queue, "x")
    (record,) = world.repository.dead_letters_of(queue.id)
    assert await world.get_dead_letter(queue.id, record.id) == record
    with pytest.raises(DeadLetterNotFound) as raised:
        await world.get_dead_letter(queue.id, UUID(int=5))
    assert _code(raised) == "dead_letter_not_found"
    with pytest.raises(QueueNotFound):
        await world.get_dead_letter(UUID(int=5), record.id)


async def test_redriving_one_record_is_counted_and_audited(world: World) -> None:
    queue = await world.queue(max_delivery_attempts=1)
    await world.poison(queue, "x")
    (record,) = world.repository.dead_letters_of(queue.id)
    new_id = await world.redrive_dead_letter(RedriveDeadLetterCommand(queue.id, record.id, ALICE))
    assert new_id != record.id and new_id.version == 7
    assert world.events.counts["redriven", "orders"] == 1
    (delivered,) = await world.receive(queue)
    assert (delivered.id, delivered.delivery_attempts) == (new_id, 1)
    (row,) = await world.audit(action="dead_letter.redriven")
    assert (row.target_type, row.target_id) == ("dead_letter", str(record.id))
    assert row.details == {"new_message_id": str(new_id)}
    with pytest.raises(DeadLetterNotFound):
        await world.redrive_dead_letter(RedriveDeadLetterCommand(queue.id, record.id))


async def test_bulk_redrive_moves_the_oldest_first_up_to_the_limit(world: World) -> None:
    queue = await world.queue(max_delivery_attempts=1)
    await world.poison(queue, "a", "b")
    await world.poison(queue, "c")
    oldest = world.repository.dead_letters_of(queue.id)[:0:-1]  # a, b
    moved = await world.redrive_dead_letters(RedriveDeadLettersCommand(queue.id, 2, ALICE))
    assert moved.count == 2
    assert [d.payload for d in world.repository.dead_letters_of(queue.id)] == ["c"]
    received = await world.receive(queue)
    assert [m.payload for m in received] == ["a", "b"]
    assert world.events.counts["redriven", "orders"] == 2
    (row,) = await world.audit(action="dead_letter.redriven")
    # Both ids of every record moved (SPEC §3.6).
    assert row.details == {
        "limit": 2,
        "redriven": 2,
        "new_message_ids": {str(d.id): str(m.id) for d, m in zip(oldest, received, strict=True)},
    }
    assert (row.target_type, row.target_id) == ("queue", str(queue.id))


async def test_bulk_redrive_defaults_to_100(world: World) -> None:
    queue = await world.queue(max_delivery_attempts=1)
    await world.poison(queue, *(str(i) for i in range(101)))
    assert (await world.redrive_dead_letters(RedriveDeadLettersCommand(queue.id))).count == 100
    assert (await world.redrive_dead_letters(RedriveDeadLettersCommand(queue.id, 1000))).count == 1
    assert (await world.redrive_dead_letters(RedriveDeadLettersCommand(queue.id))).count == 0


@pytest.mark.parametrize("limit", [0, 1001])
async def test_bulk_redrive_limits_are_1_to_1000(world: World, limit: int) -> None:
    queue = await world.queue()
    with pytest.raises(InvalidInput) as raised:
        await world.redrive_dead_letters(RedriveDeadLettersCommand(queue.id, limit))
    assert _code(raised) == "invalid_limit"


async def test_deleting_a_dead_letter(world: World) -> None:
    queue = await world.queue(max_delivery_attempts=1)
    await world.poison(queue, "x")
    (record,) = world.repository.dead_letters_of(queue.id)
    await world.delete_dead_letter(DeleteDeadLetterCommand(queue.id, record.id, ALICE))
    assert world.repository.dead_letters_of(queue.id) == []
    with pytest.raises(DeadLetterNotFound):
        await world.delete_dead_letter(DeleteDeadLetterCommand(queue.id, record.id))
    with pytest.raises(QueueNotFound):
        await world.delete_dead_letter(DeleteDeadLetterCommand(UUID(int=4), record.id))
    (row,) = await world.audit(action="dead_letter.deleted")
    assert (row.target_id, row.actor) == (str(record.id), "alice")


# -- the audit log ---------------------------------------------------------------------


async def test_the_audit_log_pages_newest_first_and_filters(world: World) -> None:
    a = await world.queue("a")
    b = await world.queue("b")
    for _ in range(3):
        await world.pause_queue(PauseQueueCommand(a.id))
    everything = await world.audit()
    assert [r.action for r in everything] == ["queue.paused"] * 3 + ["queue.created"] * 2
    seen = []
    cursor = None
    while True:
        page = await world.list_audit_log(ListAuditLogQuery(limit=2, cursor=cursor))
        seen += page.items
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == everything
    assert [r.target_id for r in await world.audit(queue_id=b.id)] == [str(b.id)]
    assert len(await world.audit(queue_id=a.id, action="queue.paused")) == 3
    with pytest.raises(InvalidInput) as raised:
        await world.audit(action="queue.exploded")
    assert _code(raised) == "invalid_action"


async def test_an_audit_cursor_is_bound_to_its_filters(world: World) -> None:
    a = await world.queue("a")
    await world.queue("b")
    page = await world.list_audit_log(ListAuditLogQuery(limit=1))
    for query in (
        ListAuditLogQuery(limit=1, cursor=page.next_cursor, queue_id=a.id),
        ListAuditLogQuery(limit=1, cursor=page.next_cursor, action="queue.created"),
    ):
        with pytest.raises(InvalidInput) as raised:
            await world.list_audit_log(query)
        assert _code(raised) == "invalid_cursor"
    rest = await world.list_audit_log(ListAuditLogQuery(limit=1, cursor=page.next_cursor))
    assert [r.target_id for r in rest.items] == [str(a.id)]


async def test_a_taken_name_is_still_queue_already_exists(world: World) -> None:
    await world.queue()
    with pytest.raises(QueueAlreadyExists):
        await world.queue()
