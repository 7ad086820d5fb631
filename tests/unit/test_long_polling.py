"""Long polling on the memory twin: virtual time, fake signals, nobody sleeps.

``FakeMessageSignals`` ends an unsignalled wait only when the test moves time with
``advance()``; the services announce a queue after each committed change that can make a
message deliverable, through the signals port (the PostgreSQL signals also send it as a
NOTIFY to the other API processes). The services are the API container's.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any
from uuid import UUID

import pytest
from dependency_injector import providers

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.postgres.notifications import PostgresMessageSignals
from retsu.adapters.signals import InProcessMessageSignals
from retsu.application.dead_letters import DeadLetterCommand, RedriveDeadLettersCommand
from retsu.application.messages import (
    RECHECK_SECONDS,
    ChangeVisibilityCommand,
    DequeueCommand,
    EnqueueCommand,
    EnqueueIdempotentCommand,
)
from retsu.application.queues import CreateQueueCommand, QueueCommand
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.errors import DeadLetterNotFound, StaleReceiptHandle
from retsu.domain.message import DeliveredMessage, DequeueResult, NewMessage, Receipt
from retsu.domain.queue import Queue
from tests.support.containers import api_container
from tests.support.doubles.events import RecordingQueueEvents
from tests.support.doubles.signals import FakeMessageSignals

PauseQueueCommand = QueueCommand


class CountingRepository:
    """Forwards everything; counts claims (the database cost of a waiting poll)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.claims = 0
        # Called right after a claim, before its result reaches the use case.
        self.after_claim: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def dequeue(self, queue_id: UUID, **kwargs: Any) -> DequeueResult:
        self.claims += 1
        result: DequeueResult = await self._inner.dequeue(queue_id, **kwargs)
        if self.after_claim is not None:
            hook, self.after_claim = self.after_claim, None
            await hook()
        return result


class World:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.signals = FakeMessageSignals(self.clock)
        self.memory = MemoryStorage(self.clock)
        self.repository = CountingRepository(self.memory)
        container = api_container(
            clock=self.clock,
            storage=self.memory,
            metrics=RecordingQueueEvents(),
            signals=self.signals,
        )
        container.storage.messages.override(providers.Object(self.repository))
        container.core.monotonic.override(providers.Object(self.signals.monotonic))
        queues = container.use_cases.queues()
        messages = container.use_cases.messages()
        self.create_queue = queues.create
        self.pause_queue = queues.pause
        self.resume_queue = queues.resume
        self.enqueue = messages.enqueue
        self.change_visibility = messages.change_visibility
        self.dequeue = messages.dequeue
        self._start = self.signals.monotonic()

    @property
    def elapsed(self) -> float:
        """Virtual seconds since the world was made."""
        return round(self.signals.monotonic() - self._start, 6)

    async def queue(self) -> Queue:
        return await self.create_queue(CreateQueueCommand(name="orders"))

    async def send(self, queue: Queue, payload: str = "x", *, delay: int | None = None) -> UUID:
        message = NewMessage.parse(payload, "MEDIUM", None, delay)
        (message_id,) = await self.enqueue(EnqueueCommand(queue.id, [message]))
        return message_id

    def poll(
        self,
        queue: Queue,
        wait_seconds: int,
        *,
        max_messages: int | None = None,
        visibility: int | None = None,
        gone: asyncio.Event | None = None,
    ) -> asyncio.Task[list[DeliveredMessage]]:
        options = DequeueOptions(
            wait_seconds=wait_seconds,
            max_messages=max_messages,
            visibility_timeout_seconds=visibility,
        )
        command = DequeueCommand(queue.id, options, client_gone=gone)
        return asyncio.create_task(self.dequeue(command))

    async def settle(self) -> None:
        await self.signals.settle()

    async def advance(self, seconds: float) -> None:
        await self.signals.advance(seconds)


@pytest.fixture
def world() -> World:
    return World()


def payloads(delivered: list[DeliveredMessage]) -> list[str]:
    return [m.payload for m in delivered]


async def finish(task: asyncio.Task[Any]) -> Any:
    """The result of a task that must already be done (a poll that returned)."""
    assert task.done(), "the poll is still waiting"
    return task.result()


# -- waking ---------------------------------------------------------------------


async def test_a_waiting_dequeue_returns_the_message_enqueued_while_it_waits(
    world: World,
) -> None:
    queue = await world.queue()
    poll = world.poll(queue, wait_seconds=10)
    await world.advance(3.5)
    assert not poll.done()
    await world.send(queue, "arrived")
    await world.settle()
    assert payloads(await finish(poll)) == ["arrived"]
    assert world.elapsed == 3.5, "woken by the signal, not by a re-check"
    assert world.signals.waiting == 0, "the poll unregistered"


async def test_a_signal_wakes_every_poll_of_that_queue_and_only_those(world: World) -> None:
    orders = await world.queue()
    other = await world.create_queue(CreateQueueCommand(name="other"))
    first, second = world.poll(orders, 10), world.poll(orders, 10, max_messages=5)
    bystander = world.poll(other, 10)
    await world.settle()
    claims = world.repository.claims
    await world.send(orders, "one")
    await world.settle()
    done = [p for p in (first, second) if p.done()]
    assert len(done) == 1 and payloads(done[0].result()) == ["one"]
    assert world.repository.claims == claims + 2, "both waiters of the queue looked once"
    assert not bystander.done()
    await world.advance(10)
    assert all(p.done() for p in (first, second, bystander))


async def test_a_wait_that_finds_nothing_ends_empty_after_wait_seconds(world: World) -> None:
    queue = await world.queue()
    poll = world.poll(queue, wait_seconds=2)
    await world.advance(1.99)
    assert not poll.done()
    await world.advance(0.01)
    assert await finish(poll) == []
    assert world.elapsed == 2


async def test_an_idle_waiter_asks_the_repository_about_once_a_second(world: World) -> None:
    queue = await world.queue()
    poll = world.poll(queue, wait_seconds=20)
    await world.advance(20)
    assert await finish(poll) == []
    # One claim on arrival, then one per re-check (the last one at the deadline).
    assert world.repository.claims == 21
    assert max(world.signals.waits) == RECHECK_SECONDS


async def test_wait_seconds_zero_never_waits(world: World) -> None:
    queue = await world.queue()
    poll = world.poll(queue, wait_seconds=0)
    await world.settle()
    assert await finish(poll) == []
    assert world.signals.waits == []
    assert world.repository.claims == 1
    assert world.elapsed == 0


async def test_a_message_already_there_is_returned_without_waiting(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, "ready")
    poll = world.poll(queue, wait_seconds=20)
    await world.settle()
    assert payloads(await finish(poll)) == ["ready"]
    assert world.signals.waits == []


async def test_no_wakeup_is_lost_between_the_empty_claim_and_the_wait(world: World) -> None:
    queue = await world.queue()

    async def a_message_arrives() -> None:  # after the claim found nothing, before the wait
        await world.send(queue, "just-in-time")

    world.repository.after_claim = a_message_arrives
    poll = world.poll(queue, wait_seconds=20)
    await world.settle()
    assert payloads(await finish(poll)) == ["just-in-time"]
    assert world.elapsed == 0, "the signal was kept: no re-check was needed"
    assert world.repository.claims == 2


# -- what counts as "a message became available" ----------------------------------


async def test_a_paused_queue_holds_a_long_poll_until_it_is_resumed(world: World) -> None:
    queue = await world.queue()
    await world.pause_queue(PauseQueueCommand(queue.id))
    await world.send(queue, "held")
    poll = world.poll(queue, wait_seconds=20)
    await world.advance(5)
    assert not poll.done()
    # The claim itself is the gate (storage reads the queue's paused flag): while paused it
    # moves nothing, and the waiting poll asks about once a second.
    assert world.repository.claims <= 6
    assert await world.repository.read_state(queue.id) != []
    await world.resume_queue(PauseQueueCommand(queue.id))
    await world.settle()
    assert payloads(await finish(poll)) == ["held"]
    assert world.elapsed == 5


async def test_a_resume_wakes_a_waiting_poll_at_once(world: World) -> None:
    # The paused gate is the queue row the claim itself reads, never a cached flag: the
    # resume's signal is followed by a claim that already sees the queue resumed.
    queue = await world.queue()
    await world.pause_queue(PauseQueueCommand(queue.id))
    await world.send(queue, "held")
    poll = world.poll(queue, wait_seconds=20)
    await world.advance(2)
    assert not poll.done()
    await world.resume_queue(PauseQueueCommand(queue.id))
    await world.settle()
    assert payloads(await finish(poll)) == ["held"]
    assert world.elapsed == 2


async def test_a_queue_paused_during_a_wait_is_not_claimed_from(world: World) -> None:
    queue = await world.queue()
    poll = world.poll(queue, wait_seconds=10)
    await world.advance(1)
    await world.pause_queue(PauseQueueCommand(queue.id))
    await world.send(queue, "held")
    await world.advance(8.5)
    assert not poll.done()
    await world.resume_queue(PauseQueueCommand(queue.id))
    await world.settle()
    assert payloads(await finish(poll)) == ["held"]


async def test_a_paused_queue_answers_empty_when_the_wait_ends(world: World) -> None:
    queue = await world.queue()
    await world.pause_queue(PauseQueueCommand(queue.id))
    await world.send(queue, "held")
    poll = world.poll(queue, wait_seconds=3)
    await world.advance(3)
    assert await finish(poll) == []


async def test_a_delayed_message_wakes_the_poll_when_its_delay_ends(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, "later", delay=2)
    await world.advance(0.25)
    poll = world.poll(queue, wait_seconds=10)
    await world.advance(1.74)
    assert not poll.done()
    await world.advance(0.01)
    assert payloads(await finish(poll)) == ["later"]
    assert world.elapsed == 2, "woken when the delay ended, not at the next re-check"


async def test_an_ending_lease_wakes_the_poll_when_it_ends(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, "retry-me")
    first = await finish_now(world.poll(queue, 0, visibility=3))
    await world.advance(0.4)
    poll = world.poll(queue, wait_seconds=10)
    await world.advance(2.5)
    assert not poll.done()
    await world.advance(0.1)
    (again,) = await finish(poll)
    assert (again.id, again.delivery_attempts) == (first[0].id, 2)
    assert world.elapsed == 3


async def test_a_released_lease_wakes_the_poll_at_once(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, "release-me")
    (first,) = await finish_now(world.poll(queue, 0, visibility=300))
    poll = world.poll(queue, wait_seconds=20)
    await world.advance(2.5)
    await world.change_visibility(
        ChangeVisibilityCommand(queue.id, Receipt(first.id, first.receipt_handle), 0)
    )
    await world.settle()
    (again,) = await finish(poll)
    assert (again.id, again.delivery_attempts) == (first.id, 2)
    assert world.elapsed == 2.5


async def finish_now(task: asyncio.Task[list[DeliveredMessage]]) -> list[DeliveredMessage]:
    await asyncio.sleep(0)
    result: list[DeliveredMessage] = await task
    return result


# -- a client that goes (SPEC §3.1) ------------------------------------------------


async def test_a_poll_whose_client_goes_stops_waiting_at_once_and_claims_no_more(
    world: World,
) -> None:
    queue = await world.queue()
    gone = asyncio.Event()
    poll = world.poll(queue, wait_seconds=20, gone=gone)
    await world.advance(3)
    claims = world.repository.claims
    gone.set()
    await world.settle()
    assert await finish(poll) == []
    assert world.elapsed == 3, "it did not wait out its 20 seconds"
    assert world.repository.claims == claims
    assert world.signals.waiting == 0, "the poll unregistered"
    # So the next message goes to the next consumer, on its first attempt.
    await world.send(queue, "next")
    (delivered,) = await world.dequeue(DequeueCommand(queue.id))
    assert (delivered.payload, delivered.delivery_attempts) == ("next", 1)


@pytest.mark.parametrize("wait_seconds", [0, 20])
async def test_what_a_claim_took_for_a_client_that_went_meanwhile_is_given_back(
    world: World, wait_seconds: int
) -> None:
    queue = await world.queue()
    await world.send(queue, "first")
    await world.send(queue, "second")
    gone = asyncio.Event()

    async def the_client_goes() -> None:  # while the claim is in flight
        gone.set()

    world.repository.after_claim = the_client_goes
    poll = world.poll(queue, wait_seconds=wait_seconds, max_messages=2, gone=gone)
    await world.settle()
    assert await finish(poll) == []
    assert world.repository.claims == 1, "no further claim for a client that went"
    # Deliverable again at once (no lease to wait out), the abandoned attempt not counted.
    delivered = await world.dequeue(DequeueCommand(queue.id, DequeueOptions(max_messages=2)))
    assert [(m.payload, m.delivery_attempts) for m in delivered] == [
        ("first", 1),
        ("second", 1),
    ]


async def test_a_poll_waiting_meanwhile_gets_what_was_given_back_at_once(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, "given-back")
    gone = asyncio.Event()
    waiting: asyncio.Task[list[DeliveredMessage]] | None = None

    async def another_consumer_waits_then_the_client_goes() -> None:
        nonlocal waiting
        waiting = world.poll(queue, wait_seconds=20)
        await world.settle()  # it finds nothing (the message is claimed) and waits
        gone.set()

    world.repository.after_claim = another_consumer_waits_then_the_client_goes
    abandoned = world.poll(queue, wait_seconds=20, gone=gone)
    for _ in range(3):  # the hook settles too, inside the claim
        await world.settle()
    assert await finish(abandoned) == []
    assert waiting is not None
    (delivered,) = await finish(waiting)
    assert (delivered.payload, delivered.delivery_attempts) == ("given-back", 1)
    assert world.elapsed == 0, "woken by the give-back's signal, not by a re-check"


async def test_a_client_gone_before_the_claim_claims_nothing(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, "kept")
    gone = asyncio.Event()
    gone.set()
    assert await finish_soon(world, world.poll(queue, wait_seconds=0, gone=gone)) == []
    assert await finish_soon(world, world.poll(queue, wait_seconds=20, gone=gone)) == []
    assert world.repository.claims == 0
    (delivered,) = await world.dequeue(DequeueCommand(queue.id))
    assert (delivered.payload, delivered.delivery_attempts) == ("kept", 1)


async def test_a_client_that_stays_is_served_as_before(world: World) -> None:
    queue = await world.queue()
    gone = asyncio.Event()
    poll = world.poll(queue, wait_seconds=10, gone=gone)
    await world.advance(2)
    await world.send(queue, "arrived")
    await world.settle()
    assert payloads(await finish(poll)) == ["arrived"]
    assert world.elapsed == 2
    assert world.signals.waiting == 0


async def finish_soon(world: World, task: asyncio.Task[Any]) -> Any:
    await world.settle()
    return await finish(task)


# -- shutdown -------------------------------------------------------------------


async def test_shutdown_answers_every_waiting_poll_empty_at_once(world: World) -> None:
    queue = await world.queue()
    bare, listed = world.poll(queue, 20), world.poll(queue, 20, max_messages=10)
    await world.advance(2.5)
    claims = world.repository.claims
    world.signals.close()
    await world.settle()
    assert await finish(bare) == [] and await finish(listed) == []
    assert world.repository.claims == claims, "no claim after shutdown began"
    assert world.elapsed == 2.5


async def test_after_shutdown_began_a_long_poll_looks_once_and_does_not_wait(
    world: World,
) -> None:
    queue = await world.queue()
    world.signals.close()
    poll = world.poll(queue, wait_seconds=20)
    await world.settle()
    assert await finish(poll) == []
    assert world.signals.waits == []
    await world.send(queue, "still-served")
    assert payloads(await finish_now(world.poll(queue, 20))) == ["still-served"]


async def test_a_cancelled_poll_unregisters(world: World) -> None:
    queue = await world.queue()
    poll = world.poll(queue, 20)
    await world.settle()
    assert world.signals.waiting == 1
    poll.cancel()
    await world.settle()
    assert world.signals.waiting == 0


# -- what gets announced ----------------------------------------------------------


class RecordingSignals(InProcessMessageSignals):
    """The in-process signals, recording what the services announce."""

    def __init__(self) -> None:
        super().__init__()
        self.announced: list[UUID] = []
        self.queue_changes: list[UUID] = []

    def announce(self, queue_id: UUID, *, queue_changed: bool = False) -> None:
        (self.queue_changes if queue_changed else self.announced).append(queue_id)
        super().announce(queue_id, queue_changed=queue_changed)


class Announcing:
    """The API container's services over the memory twin, with recording signals."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.memory = MemoryStorage(self.clock)
        self.signals = RecordingSignals()
        use_cases = api_container(
            clock=self.clock, storage=self.memory, signals=self.signals
        ).use_cases
        self.queues = use_cases.queues()
        self.messages = use_cases.messages()
        self.dead_letters = use_cases.dead_letters()


async def test_only_changes_that_can_make_a_message_deliverable_are_announced() -> None:
    world = Announcing()
    announced = world.signals.announced
    queue = await world.queues.create(CreateQueueCommand(name="orders"))
    assert announced == [], "creating a queue makes nothing deliverable"

    await world.messages.enqueue(EnqueueCommand(queue.id, [NewMessage.parse("a", "LOW")]))
    assert announced == [queue.id]
    idempotent = EnqueueIdempotentCommand(queue.id, NewMessage.parse("b", "LOW"), "key-1")
    first = await world.messages.enqueue_idempotent(idempotent)
    again = await world.messages.enqueue_idempotent(idempotent)
    assert again.replayed and again.id == first.id
    assert announced == [queue.id] * 2, "a replay stores nothing new"

    (delivered,) = await world.messages.dequeue(DequeueCommand(queue.id))
    receipt = Receipt(delivered.id, delivered.receipt_handle)
    await world.messages.change_visibility(ChangeVisibilityCommand(queue.id, receipt, 60))
    assert announced == [queue.id] * 2, "a longer lease makes nothing deliverable"
    await world.messages.change_visibility(ChangeVisibilityCommand(queue.id, receipt, 0))
    assert announced == [queue.id] * 3, "a released lease does"
    with pytest.raises(StaleReceiptHandle):
        await world.messages.change_visibility(ChangeVisibilityCommand(queue.id, receipt, 0))
    assert announced == [queue.id] * 3, "a stale receipt changed nothing"
    assert world.signals.queue_changes == []


async def test_a_redrive_is_announced_only_when_something_moved() -> None:
    world = Announcing()
    queue = await world.queues.create(CreateQueueCommand(name="orders", max_delivery_attempts=1))
    assert (await world.dead_letters.redrive_many(RedriveDeadLettersCommand(queue.id))).count == 0
    with pytest.raises(DeadLetterNotFound):
        await world.dead_letters.redrive(DeadLetterCommand(queue.id, uuid.uuid4()))
    assert world.signals.announced == []
    await world.messages.enqueue(EnqueueCommand(queue.id, [NewMessage.parse("poison", "LOW")]))
    options = DequeueOptions(visibility_timeout_seconds=1)
    assert await world.messages.dequeue(DequeueCommand(queue.id, options))
    world.clock.advance(2)
    assert await world.messages.dequeue(DequeueCommand(queue.id, options)) == []
    assert len(world.memory.dead_letters_of(queue.id)) == 1
    world.signals.announced.clear()
    assert (await world.dead_letters.redrive_many(RedriveDeadLettersCommand(queue.id))).count == 1
    assert world.signals.announced == [queue.id]


async def test_pause_resume_and_delete_are_announced_as_queue_changes() -> None:
    world = Announcing()
    queue = await world.queues.create(CreateQueueCommand(name="orders"))
    await world.queues.pause(QueueCommand(queue.id))
    await world.queues.resume(QueueCommand(queue.id))
    await world.queues.purge(QueueCommand(queue.id))  # removes messages: nothing to wake
    await world.queues.delete(QueueCommand(queue.id))
    assert world.signals.queue_changes == [queue.id] * 3
    assert world.signals.announced == []


async def test_before_it_is_started_the_postgres_adapter_only_wakes_local_waiters() -> None:
    signals = PostgresMessageSignals("postgresql://nobody@127.0.0.1:1/none")
    queue_id = uuid.uuid4()
    with signals.watch(queue_id) as watch:
        signals.announce(queue_id)  # no connection task: nothing is queued for NOTIFY
        assert await watch.wait(5) is True
    assert not signals.listening
    await signals.stop()
    assert signals.closed
