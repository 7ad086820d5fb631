"""The message lifecycle: enqueue (one, a batch, or under an Idempotency-Key), dequeue
(with long polling), acknowledge and visibility changes.

A change that can make a message deliverable is announced through the signals port after
it committed (an enqueue, an idempotent enqueue that stored something, a lease released
now), so polls waiting on the queue claim again at once — in this process, and through
the adapter in every other one. A lease shortened to a later moment is noticed by the
waiters' one-second re-check instead.

Dequeue: one claim is one storage call; the storage reads the queue's own row for its
settings and its paused flag in the same transaction, so a pause, or a lowered attempts
limit, holds in every API process at once (no cached copy decides a delivery). The
queue's name, for the dead-letter metric, comes from the name cache and only when
something was dead-lettered.

Long polling (``wait_seconds`` > 0): the poll registers with the message signals *before*
its first claim, so a signal that arrives between an empty claim and the wait is kept (no
lost wakeup). Then it loops: claim; if nothing, wait until the queue is signalled, the
next scheduled moment a message may become deliverable (a delay or a lease ending,
reported by the empty claim), at most ``RECHECK_SECONDS`` (the safety net that keeps the
poll correct when a signal is lost), or the end of the wait — and claim again. An idle
waiter therefore costs about one claim query a second and holds no database connection
between claims; a paused queue's claim is one primary-key read. On shutdown the signals
close: every waiting poll answers empty at once.

A dequeue whose client has gone (``ClientGone``, set by the HTTP adapter when the
connection closes) never keeps what it claimed (SPEC §3.1): a long poll stops waiting at
once and claims no more, and messages a claim returns after the client left are given
back at once (``unclaim``: deliverable again, the attempt not counted) — so a stopped
consumer's abandoned poll cannot swallow the next message for a whole lease. The last look
is right after each claim returns; what the adapter can still miss is its own to say
(``adapters/http/departure.py``).

A dequeue that names its consumer is reported to the consumer tracker after every claim
(the first one is the request's start; the messages handed over are counted, not
those given back) and once
more when a long poll ends empty: a dictionary update, never a database write
(``track_consumers.py``). A dequeue of a queue that does not exist is not reported.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

from retsu.application.ports import (
    ClientGone,
    IdGenerator,
    MessageRepository,
    MessageSignals,
    QueueDetails,
    QueueEvents,
    QueueNames,
)
from retsu.application.track_consumers import ConsumerTracker
from retsu.domain.attempts import validate_error, validate_result
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.errors import InvalidInput, StaleReceiptHandle
from retsu.domain.idempotency import IdempotentEnqueued, fingerprint, validate_idempotency_key
from retsu.domain.message import (
    DEAD_LETTER_BATCH_SIZE,
    VISIBILITY_CHANGE,
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    NewMessage,
    Receipt,
)

# The longest a waiting poll goes without asking the database (the "about one query
# per second per idle waiter" budget, and the bound on latency when a signal is lost).
RECHECK_SECONDS = 1.0
# The shortest wait between two claims of one poll, so a poll never spins.
MIN_WAIT_SECONDS = 0.01


@dataclass(frozen=True, slots=True)
class EnqueueCommand:
    queue_id: UUID
    messages: Sequence[NewMessage]
    # A batch request names the failing entry's index even when it holds one entry.
    batch: bool = False


@dataclass(frozen=True, slots=True)
class EnqueueIdempotentCommand:
    queue_id: UUID
    message: NewMessage
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class DequeueCommand:
    queue_id: UUID
    options: DequeueOptions = field(default_factory=DequeueOptions)
    # The Retsu-Consumer name, already checked (domain.consumer.parse_consumer_name).
    consumer: str | None = None
    # Set once the client has gone (it disconnected): stop waiting, keep nothing claimed.
    client_gone: ClientGone | None = None


@dataclass(frozen=True, slots=True)
class AcknowledgeCommand:
    queue_id: UUID
    receipts: Sequence[Receipt]


@dataclass(frozen=True, slots=True)
class ChangeVisibilityCommand:
    queue_id: UUID
    receipt: Receipt
    # The lease ends this many seconds from now; 0 releases the message for immediate
    # redelivery (the attempt still counts).
    visibility_timeout_seconds: int
    # Why the consumer gave the message back (recorded on the attempt; SPEC §3.11).
    error: str | None = None


class MessageService:
    def __init__(
        self,
        messages: MessageRepository,
        details: QueueDetails,
        names: QueueNames,
        ids: IdGenerator,
        events: QueueEvents,
        signals: MessageSignals,
        consumers: ConsumerTracker | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._messages = messages
        self._details = details
        self._names = names
        self._ids = ids
        self._events = events
        self._signals = signals
        self._consumers = consumers
        self._monotonic = monotonic

    # -- enqueue -----------------------------------------------------------------

    async def enqueue(self, cmd: EnqueueCommand) -> list[UUID]:
        if len(cmd.messages) == 1 and not cmd.batch:
            return [await self._enqueue_one(cmd.queue_id, cmd.messages[0])]
        if not any(m.needs_queue_settings for m in cmd.messages):
            # No message needs the queue's settings (none has a delay without a lifetime
            # of its own): the queue's name (for the metrics; an in-process cache on a
            # warm path) is all this looks up, and storage fills in the default lifetime.
            # Measured: a shared-cache round trip less per enqueue (docs/performance.md).
            name = await self._names.name_of(cmd.queue_id)  # raises QueueNotFound
            queue_id = cmd.queue_id
            to_store = self._to_store(cmd, lambda m, i: m.to_store_with_default_lifetime(i))
        else:
            # The queue's settings come through the caches: enqueue never reads the
            # queue table itself on a warm path.
            queue = await self._details.details_of(cmd.queue_id)
            name, queue_id = queue.name, queue.id
            to_store = self._to_store(cmd, lambda m, i: m.to_store(i, queue.settings))
        await self._messages.enqueue(queue_id, to_store)
        self._signals.announce(queue_id)
        for priority, count in Counter(m.priority for m in to_store).items():
            self._events.enqueued(name, priority, count)
        return [m.id for m in to_store]

    async def _enqueue_one(self, queue_id: UUID, message: NewMessage) -> UUID:
        """The same as a batch of one, without the batch's bookkeeping (a single enqueue is
        the commonest call: ~4 µs of the API's CPU less, measured)."""
        if message.needs_queue_settings:
            queue = await self._details.details_of(queue_id)
            name, queue_id = queue.name, queue.id
            to_store = message.to_store(self._ids.new_id(), queue.settings)
        else:
            name = await self._names.name_of(queue_id)  # raises QueueNotFound
            to_store = message.to_store_with_default_lifetime(self._ids.new_id())
        await self._messages.enqueue(queue_id, (to_store,))
        self._signals.announce(queue_id)
        self._events.enqueued(name, to_store.priority)
        return to_store.id

    def _to_store(
        self, cmd: EnqueueCommand, convert: Callable[[NewMessage, UUID], MessageToStore]
    ) -> list[MessageToStore]:
        to_store = []
        ids = self._ids.new_ids(len(cmd.messages))
        for index, (message, new_id) in enumerate(zip(cmd.messages, ids, strict=True)):
            try:
                to_store.append(convert(message, new_id))
            except InvalidInput as error:
                if cmd.batch:
                    raise InvalidInput(
                        f"messages[{index}]: {error.detail}", code=error.code
                    ) from None
                raise
        return to_store

    async def enqueue_idempotent(self, cmd: EnqueueIdempotentCommand) -> IdempotentEnqueued:
        """A repeat of the key with the same message (within 24 h, in the same queue)
        answers the first message's id and stores nothing, also when the repeats race and
        after the message was consumed; the key with a different message is a conflict."""
        key = validate_idempotency_key(cmd.idempotency_key)
        queue = await self._details.details_of(cmd.queue_id)
        to_store = cmd.message.to_store(self._ids.new_id(), queue.settings)
        result = await self._messages.enqueue_idempotent(
            queue.id, to_store, key, fingerprint(cmd.message)
        )
        if not result.replayed:  # a replay stored nothing: nothing to count or announce
            self._signals.announce(queue.id)
            self._events.enqueued(queue.name, to_store.priority)
        return result

    # -- dequeue -----------------------------------------------------------------

    async def dequeue(self, cmd: DequeueCommand) -> list[DeliveredMessage]:
        """The claimed messages; none when the client has gone (``cmd.client_gone``)."""
        consumer, gone = cmd.consumer, cmd.client_gone
        if cmd.options.wait_seconds <= 0 or self._signals.closed:
            return (await self._claim(cmd.queue_id, cmd.options, consumer, gone)).messages
        messages = await self._long_poll(cmd.queue_id, cmd.options, consumer, gone)
        if consumer is not None and self._consumers is not None and not messages:
            self._seen(cmd.queue_id, consumer, 0)  # the end of an empty long poll
        return messages

    def _seen(self, queue_id: UUID, consumer: str, deliveries: int) -> None:
        assert self._consumers is not None
        self._consumers.seen(queue_id, consumer, deliveries)

    async def _long_poll(
        self,
        queue_id: UUID,
        options: DequeueOptions,
        consumer: str | None,
        gone: ClientGone | None,
    ) -> list[DeliveredMessage]:
        deadline = self._monotonic() + options.wait_seconds
        # Waits for the client to go, for the whole poll (created at its first wait: a
        # poll answered by its first claim, the usual case under load, costs no task).
        leaving: asyncio.Future[object] | None = None
        try:
            # Registered before the first claim: a signal from now on is kept.
            with self._signals.watch(queue_id) as watch:
                while True:
                    result = await self._claim(queue_id, options, consumer, gone)
                    if result.messages:
                        return result.messages
                    remaining = deadline - self._monotonic()
                    if remaining <= 0 or self._signals.closed or _has_gone(gone):
                        return []
                    timeout = min(remaining, RECHECK_SECONDS)
                    if result.next_available_in_seconds is not None:
                        timeout = min(
                            timeout, max(result.next_available_in_seconds, MIN_WAIT_SECONDS)
                        )
                    if gone is None:
                        await watch.wait(timeout)
                    else:
                        if leaving is None:
                            leaving = asyncio.ensure_future(gone.wait())
                        await _wait_unless_gone(watch.wait(timeout), leaving)
                        if gone.is_set():
                            return []  # nobody to answer: no further claim
                    if self._signals.closed:
                        return []  # shutdown: answer empty at once, no further claim
        finally:
            if leaving is not None:
                leaving.cancel()

    async def _claim(
        self,
        queue_id: UUID,
        options: DequeueOptions,
        consumer: str | None,
        gone: ClientGone | None = None,
    ) -> DequeueResult:
        if _has_gone(gone):
            return DequeueResult(messages=[])  # nobody to answer: claim nothing
        result = await self._claim_once(
            queue_id, options.limit, options, consumer, DEAD_LETTER_BATCH_SIZE
        )
        if result.dead_lettered and len(result.messages) < options.limit:
            # A lane whose exhausted head the claim moved to dead letters hands the lane on
            # when the claim commits, too late for that claim. Once more, for the rest,
            # moving nothing (one batch per dequeue stays the bound), so an exhausted head
            # never hides its lane's next message from this dequeue (SPEC §3.3, §3.10).
            more = await self._claim_once(
                queue_id, options.limit - len(result.messages), options, consumer, 0
            )
            result = replace(
                more,
                messages=[*result.messages, *more.messages],
                dead_lettered=result.dead_lettered + more.dead_lettered,
                throttled=more.throttled or result.throttled,
            )
        if result.messages and _has_gone(gone):
            # Claimed for a client that left meanwhile: nobody can receive them.
            await self.unclaim(queue_id, result.messages)
            result = replace(result, messages=[])
        if consumer is not None and self._consumers is not None:
            self._seen(queue_id, consumer, len(result.messages))
        if result.dead_lettered:
            self._events.dead_lettered(await self._names.name_of(queue_id), result.dead_lettered)
        if result.throttled is not None:
            self._events.throttled(await self._names.name_of(queue_id), result.throttled)
        return result

    async def _claim_once(
        self,
        queue_id: UUID,
        limit: int,
        options: DequeueOptions,
        consumer: str | None,
        dead_letter_batch_size: int,
    ) -> DequeueResult:
        return await self._messages.dequeue(
            queue_id,
            limit=limit,
            visibility_timeout_seconds=options.visibility_timeout_seconds,
            dead_letter_batch_size=dead_letter_batch_size,
            consumer=consumer,
        )

    async def unclaim(self, queue_id: UUID, messages: Sequence[DeliveredMessage]) -> int:
        """Take back deliveries whose response could not reach their consumer (it
        disconnected; SPEC §3.1): they are deliverable again at once, their attempt not
        counted. Waiting polls are told."""
        taken = await self._messages.unclaim(
            queue_id, [Receipt(m.id, m.receipt_handle) for m in messages]
        )
        if taken:
            self._signals.announce(queue_id)
        return taken

    # -- after a delivery ----------------------------------------------------------

    async def acknowledge(self, cmd: AcknowledgeCommand) -> int:
        """Idempotent: a stale receipt removes nothing. How many were removed. A lane's
        next message, or a free lease under the queue's cap, wakes the waiting polls."""
        for receipt in cmd.receipts:
            validate_result(receipt.result)
        name = await self._names.name_of(cmd.queue_id)  # raises QueueNotFound
        done = await self._messages.acknowledge(cmd.queue_id, cmd.receipts)
        if done.wake:
            self._signals.announce(cmd.queue_id)
        if done.removed:
            self._events.acknowledged(name, done.removed)
        return done.removed

    async def change_visibility(self, cmd: ChangeVisibilityCommand) -> None:
        """Extend or end the lease of the current delivery; StaleReceiptHandle when the
        receipt is not the message's current, unexpired delivery."""
        timeout = VISIBILITY_CHANGE.check(cmd.visibility_timeout_seconds)
        error = validate_error(cmd.error)
        await self._names.name_of(cmd.queue_id)  # raises QueueNotFound
        if not await self._messages.change_visibility(cmd.queue_id, cmd.receipt, timeout, error):
            raise StaleReceiptHandle()
        if timeout == 0:  # released now: deliverable at once
            self._signals.announce(cmd.queue_id)


def _has_gone(gone: ClientGone | None) -> bool:
    return gone is not None and gone.is_set()


async def _wait_unless_gone(
    wait: Coroutine[Any, Any, bool], leaving: asyncio.Future[object]
) -> None:
    """Wait for the signals (``wait``) unless the client goes first; a wait cut short is
    cancelled (the signal watch allows it: its next wait, if any, starts afresh)."""
    waiting = asyncio.ensure_future(wait)
    try:
        await asyncio.wait((waiting, leaving), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()  # a no-op when it ended first
