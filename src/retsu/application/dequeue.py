"""Use case: claim the next deliverable message(s) of a queue, waiting for one if asked.

One claim is one storage call: the storage reads the queue's own row for its settings and
its paused flag in the same transaction, so a pause, or a lowered attempts limit, holds in
every API process at once (no cached copy decides a delivery). The queue's name, for the
dead-letter metric, comes from the name cache and only when something was dead-lettered.

Long polling (``wait_seconds`` > 0): the poll registers with the message signals
*before* its first claim, so a signal that arrives between an empty claim and the
wait is kept (no lost wakeup). Then it loops: claim; if nothing, wait until the
queue is signalled (an enqueue, a release, a resume...), the next scheduled moment a
message may become deliverable (a delay or a lease ending, reported by the empty claim),
at most ``RECHECK_SECONDS`` (the safety net that keeps the poll correct when a signal is
lost), or the end of the wait — and claim again. An idle waiter therefore costs about one
claim query a second and holds no database connection between claims; a paused queue's
claim is one primary-key read. On shutdown the signals close: every waiting poll answers
empty at once.

A dequeue that names its consumer (``consumer``) is reported to the consumer tracker after
every claim (the first one is the request's start; the messages handed over are counted)
and once more when a long poll ends empty: a dictionary update, never a database write
(``track_consumers.py``). A dequeue of a queue that does not exist is not reported.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import MessageRepository, MessageSignals, QueueEvents, QueueNames
from retsu.application.track_consumers import ConsumerTracker
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.message import DEAD_LETTER_BATCH_SIZE, DeliveredMessage, DequeueResult

# The longest a waiting poll goes without asking the database (the "about one query
# per second per idle waiter" budget, and the bound on latency when a signal is lost).
RECHECK_SECONDS = 1.0
# The shortest wait between two claims of one poll, so a poll never spins.
MIN_WAIT_SECONDS = 0.01


@dataclass(frozen=True, slots=True)
class DequeueCommand:
    queue_id: UUID
    options: DequeueOptions = field(default_factory=DequeueOptions)
    # The Retsu-Consumer name, already checked (domain.consumer.parse_consumer_name).
    consumer: str | None = None


class _SleepingWatch:
    """A watch that is never signalled: waiting is plain sleeping (no signals wired)."""

    def __enter__(self) -> _SleepingWatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    @property
    def queue_changed(self) -> bool:
        return False

    async def wait(self, seconds: float) -> bool:
        await asyncio.sleep(seconds)
        return False


class _NoSignals:
    """MessageSignals for callers that wire none: long polls re-check every second."""

    closed = False

    def watch(self, queue_id: UUID) -> _SleepingWatch:
        return _SleepingWatch()

    def close(self) -> None:
        return None


class Dequeue:
    def __init__(
        self,
        messages: MessageRepository,
        names: QueueNames,
        events: QueueEvents,
        *,
        signals: MessageSignals | None = None,
        consumers: ConsumerTracker | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._messages = messages
        self._names = names
        self._events = events
        self._signals: MessageSignals = signals if signals is not None else _NoSignals()
        self._monotonic = monotonic
        self._consumers = consumers

    async def __call__(self, cmd: DequeueCommand) -> list[DeliveredMessage]:
        consumer = cmd.consumer if self._consumers is not None else None
        if cmd.options.wait_seconds <= 0 or self._signals.closed:
            return (await self._claim(cmd.queue_id, cmd.options, consumer)).messages
        messages = await self._long_poll(cmd.queue_id, cmd.options, consumer)
        if consumer is not None and not messages:
            self._seen(cmd.queue_id, consumer, 0)  # the end of an empty long poll
        return messages

    def _seen(self, queue_id: UUID, consumer: str, deliveries: int) -> None:
        assert self._consumers is not None
        self._consumers.seen(queue_id, consumer, deliveries)

    async def _long_poll(
        self, queue_id: UUID, options: DequeueOptions, consumer: str | None
    ) -> list[DeliveredMessage]:
        deadline = self._monotonic() + options.wait_seconds
        # Registered before the first claim: a signal from now on is kept.
        with self._signals.watch(queue_id) as watch:
            while True:
                result = await self._claim(queue_id, options, consumer)
                if result.messages:
                    return result.messages
                remaining = deadline - self._monotonic()
                if remaining <= 0 or self._signals.closed:
                    return []
                timeout = min(remaining, RECHECK_SECONDS)
                if result.next_available_in_seconds is not None:
                    timeout = min(timeout, max(result.next_available_in_seconds, MIN_WAIT_SECONDS))
                await watch.wait(timeout)
                if self._signals.closed:
                    return []  # shutdown: answer empty at once, no further claim

    async def _claim(
        self, queue_id: UUID, options: DequeueOptions, consumer: str | None
    ) -> DequeueResult:
        result = await self._messages.dequeue(
            queue_id,
            limit=options.limit,
            visibility_timeout_seconds=options.visibility_timeout_seconds,
            dead_letter_batch_size=DEAD_LETTER_BATCH_SIZE,
        )
        if consumer is not None:
            self._seen(queue_id, consumer, len(result.messages))
        if result.dead_lettered:
            self._events.dead_lettered(await self._names.name_of(queue_id), result.dead_lettered)
        return result
