"""Queue messages in memory (``MessageRepository``): the twin of
``adapters/postgres/messages.py`` and the hot functions of migration 0009 — lanes, fair
service, the queue's cap and token buckets, attempts, completed messages.

An ungrouped message inside its first delay is READY with ``available_after`` in the
future (PostgreSQL keeps it DELAYED, out of its claim index; the memory store has no index,
so the rule "not before its delay" is a condition here). Grouped messages take the lane
states as in PostgreSQL (``lanes.py``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from uuid import UUID

from retsu.adapters.memory.lanes import LaneChange, LanesPart, tokens_now
from retsu.adapters.memory.tables import (
    State,
    StoredDeadLetter,
    StoredIdempotencyKey,
    StoredMessage,
)
from retsu.domain.attempts import Attempt, Outcome, last_error
from retsu.domain.errors import IdempotencyKeyConflict, InvalidInput, QueueNotFound
from retsu.domain.idempotency import IDEMPOTENCY_KEY_RETENTION_SECONDS, IdempotentEnqueued
from retsu.domain.message import (
    REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
    Acknowledged,
    DeadLetter,
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    Receipt,
)
from retsu.domain.queue import Queue
from retsu.domain.receipt import parse_receipt_handle

MAX_IN_FLIGHT = "max_in_flight"
RATE_LIMIT = "rate_limit"
GROUP_RATE_LIMIT = "group_rate_limit"


def close_attempt(
    attempts: list[Attempt], end: datetime, outcome: Outcome, error: str | None = None
) -> None:
    """Close the last attempt when it is still open (``retsu_close_attempt``)."""
    if attempts and attempts[-1].outcome is None:
        last = attempts[-1]
        attempts[-1] = replace(
            last, ended_at=end, outcome=outcome, error=error if error is not None else last.error
        )


class MessagesPart(LanesPart):
    """Implements MessageRepository over the tables."""

    # -- enqueue -------------------------------------------------------------------------

    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None:
        queue = self._queues.get(queue_id)
        if queue is None:
            raise QueueNotFound(queue_id)
        self._store(queue, messages)

    def _store(
        self,
        queue: Queue,
        messages: Sequence[MessageToStore],
        redriven_from: Sequence[UUID | None] | None = None,
    ) -> None:
        now = self._clock.now()
        stored = self._messages[queue.id]
        if len({m.id for m in messages}) != len(messages) or any(m.id in stored for m in messages):
            # PostgreSQL refuses the whole batch on a primary-key violation; so do we.
            raise ValueError("a message with this id is already stored")
        default_ttl = queue.settings.default_message_ttl_seconds
        lifetimes = [m.ttl_seconds if m.ttl_seconds is not None else default_ttl for m in messages]
        for index, (message, lifetime) in enumerate(zip(messages, lifetimes, strict=True)):
            if message.delay_seconds >= lifetime:  # as the storing function checks it
                raise InvalidInput(
                    f"messages[{index}]: delay_seconds must be shorter than the message lifetime.",
                    code="invalid_delay",
                )
        changes = []
        for index, (message, lifetime) in enumerate(zip(messages, lifetimes, strict=True)):
            state = State.READY
            if message.group is not None:
                waiting = State.WAITING_DELAYED if message.delay_seconds else State.WAITING
                state = waiting
                changes.append(
                    LaneChange(
                        message.group,
                        waiting=int(waiting is State.WAITING),
                        waiting_delayed=int(waiting is State.WAITING_DELAYED),
                    )
                )
            stored[message.id] = StoredMessage(
                id=message.id,
                queue_id=queue.id,
                enqueue_order=next(self._order),
                payload=message.payload,
                priority=message.priority,
                state=state,
                enqueued_at=now,
                expires_at=now + timedelta(seconds=lifetime),
                available_after=now + timedelta(seconds=message.delay_seconds),
                group=message.group,
                schedule_id=message.schedule_id,
                redriven_from=None if redriven_from is None else redriven_from[index],
            )
        self._lanes_changed(queue, changes)
        self.totals[queue.id]["enqueued"] += len(messages)

    async def enqueue_idempotent(
        self, queue_id: UUID, message: MessageToStore, key: str, fingerprint: bytes
    ) -> IdempotentEnqueued:
        if queue_id not in self._queues:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        known = self._idempotency_keys.get((queue_id, key))
        retention = timedelta(seconds=IDEMPOTENCY_KEY_RETENTION_SECONDS)
        if known is not None and known.created_at > now - retention:
            if known.fingerprint != fingerprint:
                raise IdempotencyKeyConflict()
            return IdempotentEnqueued(known.message_id, replayed=True)
        await self.enqueue(queue_id, [message])
        self._idempotency_keys[queue_id, key] = StoredIdempotencyKey(message.id, fingerprint, now)
        return IdempotentEnqueued(message.id, replayed=False)

    # -- the claim -------------------------------------------------------------------------

    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int | None,
        dead_letter_batch_size: int,
        consumer: str | None = None,
    ) -> DequeueResult:
        stored = self._messages.get(queue_id)
        queue = self._queues.get(queue_id)
        if stored is None or queue is None:
            raise QueueNotFound(queue_id)
        if queue.paused:
            return DequeueResult(messages=[], paused=True)
        settings = queue.settings
        max_attempts = settings.max_delivery_attempts
        visibility = visibility_timeout_seconds or settings.visibility_timeout_seconds
        now = self._clock.now()
        batch = dead_letter_batch_size
        changes: list[LaneChange] = []

        # 1. Exhausted messages go to dead letters first, in bounded batches.
        exhausted = sorted(
            (
                m
                for m in stored.values()
                if m.state is State.IN_FLIGHT
                and m.available_after <= now
                and m.expires_at > now
                and m.delivery_attempts >= max_attempts
            ),
            key=lambda m: (m.available_after, m.enqueue_order),
        )[:batch]
        stale = [
            m
            for m in stored.values()
            if m.state is State.READY
            and m.delivery_attempts > 0
            and m.delivery_attempts >= max_attempts
            and m.expires_at > now
        ][:batch]
        for message in exhausted + stale:
            self._bury(message, now)
            change = self._lane_state_change(message)
            if change is not None:
                changes.append(change)
        dead_lettered = len(exhausted) + len(stale)
        self.totals[queue_id]["dead_lettered"] += dead_lettered

        # 2. Waiting messages whose own delay ended count as ready.
        for message in sorted(
            (
                m
                for m in stored.values()
                if m.state is State.WAITING_DELAYED and m.available_after <= now
            ),
            key=lambda m: (m.available_after, m.enqueue_order),
        )[:batch]:
            message.state = State.WAITING
            assert message.group is not None
            changes.append(LaneChange(message.group, waiting=1, waiting_delayed=-1))

        # 3. The queue's bucket and cap.
        allowed = limit
        rate_cut = False
        token_at: datetime | None = None
        tokens = 0.0
        if settings.rate_limit is not None:
            rate = settings.rate_limit
            held, at = self._buckets.get(queue_id, (float(rate.burst), now))
            tokens = min(float(rate.burst), held + rate.per_second * (now - at).total_seconds())
            if math.floor(tokens) < allowed:
                allowed = max(math.floor(tokens), 0)
                rate_cut = True
            if tokens < 1:
                token_at = now + timedelta(seconds=(1 - tokens) / rate.per_second)
        new_allowed = math.inf
        if settings.max_in_flight is not None:
            in_flight = sum(1 for m in stored.values() if m.state is State.IN_FLIGHT)
            new_allowed = max(settings.max_in_flight - in_flight, 0)

        # 4. Candidates, in delivery order.
        def deliverable(m: StoredMessage) -> bool:
            return m.expires_at > now and m.delivery_attempts < max_attempts

        candidates: list[StoredMessage] = []
        throttled: str | None = None
        if allowed > 0:
            ready_plain = sorted(
                (
                    m
                    for m in stored.values()
                    if m.state is State.READY
                    and m.group is None
                    and m.available_after <= now
                    and deliverable(m)
                ),
                key=lambda m: (-m.priority, m.enqueue_order),
            )[:allowed]
            ready_grouped = sorted(
                (
                    m
                    for m in stored.values()
                    if m.state is State.READY and m.group is not None and deliverable(m)
                ),
                key=lambda m: (-m.priority, m.key),
            )[:allowed]
            due_leases = sorted(
                (
                    m
                    for m in stored.values()
                    if m.state is State.IN_FLIGHT and m.available_after <= now and deliverable(m)
                ),
                key=lambda m: (m.available_after, m.enqueue_order),
            )[:batch]
            due_timed = sorted(
                (
                    m
                    for m in stored.values()
                    if m.state in (State.DELAYED, State.THROTTLED)
                    and m.available_after <= now
                    and deliverable(m)
                ),
                key=lambda m: (m.available_after, m.enqueue_order),
            )[:batch]
            candidates = sorted(
                ready_plain + ready_grouped + due_leases + due_timed,
                key=lambda m: (-m.priority, m.key, m.enqueue_order),
            )
        elif rate_cut and any(
            m.state is State.READY and m.expires_at > now for m in stored.values()
        ):
            throttled = RATE_LIMIT

        # 5. The groups of the candidates: their leases and tokens.
        group_rate = settings.group_rate_limit
        group_tokens: dict[str, float] = {}
        leased: dict[str, int] = {}
        for m in candidates:
            if m.group is not None and m.group not in leased:
                lane = self._lane(queue_id, m.group)
                leased[m.group] = lane.leased
                if group_rate is not None:
                    group_tokens[m.group] = tokens_now(lane, group_rate, now)

        # 5b. Followers: a lane with room for more than its head gives its next members,
        # each behind every head of this claim (round n: its n-th follower).
        n = settings.group_max_in_flight
        ordered: list[tuple[StoredMessage, int, bool]] = [(m, 0, True) for m in candidates]
        if n > 1 and allowed > 1:
            keyed = {m.id: (-m.priority, 0, m.key, m.enqueue_order) for m in candidates}
            for head in candidates:
                if head.group is None or head.state is State.IN_FLIGHT:
                    continue
                room = max(min(n - leased[head.group] - 1, allowed - 1), 0)
                members = sorted(
                    (
                        m
                        for m in stored.values()
                        if m.group == head.group
                        and m.state is not State.COMPLETED
                        and m.enqueue_order > head.enqueue_order
                    ),
                    key=lambda m: m.enqueue_order,
                )[:room]
                for round_, m in enumerate(members, 1):
                    keyed[m.id] = (-head.priority, round_, head.key, m.enqueue_order)
                    ordered.append((m, round_, m.state is State.WAITING and deliverable(m)))
            ordered.sort(key=lambda entry: keyed[entry[0].id])

        # 6. Choose, in delivery order, within every limit; a lane whose message is passed
        # over gives nothing after it in this claim.
        was = {m.id: m.state for m, _, _ in ordered}
        chosen: list[StoredMessage] = []
        demote: list[StoredMessage] = []
        park: list[tuple[StoredMessage, datetime]] = []
        stopped: set[str] = set()
        new = 0
        spent: set[str] = set()
        for m, round_, valid in ordered:
            if len(chosen) >= allowed:
                break
            is_new = m.state is not State.IN_FLIGHT
            if m.group is not None and round_ > 0 and (not valid or m.group in stopped):
                stopped.add(m.group)
                continue
            if is_new and new >= new_allowed:
                throttled = throttled or MAX_IN_FLIGHT
                if m.group is not None:
                    stopped.add(m.group)
                continue
            if m.group is not None:
                if is_new and leased[m.group] >= settings.group_max_in_flight:
                    if round_ == 0:
                        demote.append(m)
                    stopped.add(m.group)
                    continue
                if group_rate is not None and group_tokens[m.group] < 1:
                    throttled = throttled or GROUP_RATE_LIMIT
                    if is_new and round_ == 0:
                        wait = (1 - group_tokens[m.group]) / group_rate.per_second
                        park.append((m, now + timedelta(seconds=wait)))
                    stopped.add(m.group)
                    continue
                leased[m.group] += int(is_new)
                if group_rate is not None:
                    group_tokens[m.group] -= 1
                    spent.add(m.group)
            chosen.append(m)
            new += int(is_new)
        # The bucket cut this claim short when more was deliverable than it allowed.
        taken_ids = {m.id for m in chosen}
        if (
            rate_cut
            and len(chosen) == allowed
            and (
                len(ordered) > len(chosen)
                or any(
                    m.state is State.READY and m.expires_at > now and m.id not in taken_ids
                    for m in stored.values()
                )
            )
        ):
            throttled = throttled or RATE_LIMIT

        # 7. The claims.
        lease_end = now + timedelta(seconds=visibility)
        delivered = []
        for m in chosen:
            close_attempt(m.attempts, m.available_after, Outcome.LEASE_EXPIRED)
            m.attempts.append(Attempt(m.delivery_attempts + 1, now, consumer))
            if m.group is not None:
                m.wait_key = next(self._order)
                changes.append(
                    LaneChange(
                        m.group,
                        leased=int(was[m.id] is not State.IN_FLIGHT),
                        pending=-int(was[m.id] in (State.READY, State.DELAYED, State.THROTTLED)),
                        waiting=-int(was[m.id] is State.WAITING),
                        delivery_key=m.wait_key,
                    )
                )
            m.state = State.IN_FLIGHT
            m.delivery_attempts += 1
            m.receipt_handle = uuid.uuid4()
            m.available_after = lease_end
            m.last_delivered_at = now
            delivered.append(
                DeliveredMessage(
                    id=m.id,
                    payload=m.payload,
                    priority=m.priority,
                    receipt_handle=str(m.receipt_handle),
                    delivery_attempts=m.delivery_attempts,
                    enqueued_at=m.enqueued_at,
                    group=m.group,
                )
            )

        # 8. Candidates that lost: ended delays and parked heads become READY, ungrouped
        # ended leases too; a grouped ended lease stays in flight (still its lane's lease).
        taken = {m.id for m in chosen} | {m.id for m in demote} | {m.id for m, _ in park}
        for m in candidates:
            if m.id in taken or m.state is State.READY:
                continue
            if m.state is State.IN_FLIGHT and m.group is not None:
                continue
            m.state = State.READY
        for m in demote:
            m.state = State.WAITING
            assert m.group is not None
            changes.append(LaneChange(m.group, pending=-1, waiting=1))
        for m, until in park:
            m.state = State.THROTTLED
            m.available_after = until

        # 9. The buckets.
        if group_rate is not None:
            for group in spent:
                lane = self._lane(queue_id, group)
                lane.tokens = group_tokens[group]
                lane.tokens_at = now
        if settings.rate_limit is not None:
            self._buckets[queue_id] = (tokens - len(chosen), now)

        # 10. The lanes.
        self._lanes_changed(queue, changes)
        self.totals[queue_id]["delivered"] += len(delivered)
        if delivered:
            return DequeueResult(
                messages=delivered, dead_lettered=dead_lettered, throttled=throttled
            )
        # Nothing claimed: when does a delay, a parked head or a lease end next (a long-poll
        # hint), or the queue's next token come?
        upcoming = [
            m.available_after
            for m in stored.values()
            if m.available_after > now
            and m.state in (State.READY, State.IN_FLIGHT, State.DELAYED, State.THROTTLED)
        ]
        if token_at is not None:
            upcoming.append(token_at)
        return DequeueResult(
            messages=[],
            dead_lettered=dead_lettered,
            next_available_in_seconds=(min(upcoming) - now).total_seconds() if upcoming else None,
            throttled=throttled,
        )

    def _bury(self, message: StoredMessage, now: datetime) -> None:
        """Move a message to dead letters (its open attempt closed by its lease)."""
        del self._messages[message.queue_id][message.id]
        attempts = list(message.attempts)
        close_attempt(attempts, message.available_after, Outcome.LEASE_EXPIRED)
        self._dead_letters[message.queue_id][message.id] = StoredDeadLetter(
            DeadLetter(
                id=message.id,
                queue_id=message.queue_id,
                payload=message.payload,
                priority=message.priority,
                delivery_attempts=message.delivery_attempts,
                enqueued_at=message.enqueued_at,
                last_delivered_at=message.last_delivered_at,
                dead_lettered_at=now,
                reason=REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
                group=message.group,
                attempts=tuple(attempts),
                last_error=last_error(attempts),
            ),
            message.enqueue_order,
        )

    # -- after a delivery --------------------------------------------------------------------

    def _current(self, queue_id: UUID, receipt: Receipt, now: datetime) -> StoredMessage | None:
        """The message whose current, unexpired delivery ``receipt`` is, else None."""
        message = self._messages[queue_id].get(receipt.message_id)
        handle = parse_receipt_handle(receipt.receipt_handle)
        if (
            message is None
            or handle is None
            or message.state is not State.IN_FLIGHT
            or message.receipt_handle != handle
            or message.available_after <= now
        ):
            return None
        return message

    async def change_visibility(
        self,
        queue_id: UUID,
        receipt: Receipt,
        visibility_timeout_seconds: int,
        error: str | None = None,
    ) -> bool:
        if queue_id not in self._messages:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        message = self._current(queue_id, receipt, now)
        if message is None:
            return False
        if error is not None and message.attempts:
            message.attempts[-1] = replace(message.attempts[-1], error=error)
        if visibility_timeout_seconds == 0:
            close_attempt(message.attempts, now, Outcome.RELEASED)
        message.available_after = now + timedelta(seconds=visibility_timeout_seconds)
        return True

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> Acknowledged:
        stored = self._messages.get(queue_id)
        queue = self._queues.get(queue_id)
        if stored is None or queue is None:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        keep = queue.settings.completed_retention_seconds > 0
        removed = 0
        changes = []
        for receipt in receipts:
            message = self._current(queue_id, receipt, now)
            if message is None:
                continue
            change = self._lane_state_change(message)
            if change is not None:
                changes.append(change)
            if keep:
                close_attempt(message.attempts, now, Outcome.ACKNOWLEDGED)
                message.state = State.COMPLETED
                message.completed_at = now
                message.result = receipt.result
            else:
                del stored[message.id]
            removed += 1
        promoted = self._lanes_changed(queue, changes)
        self.totals[queue_id]["acknowledged"] += removed
        capped = queue.settings.max_in_flight is not None and removed > 0
        return Acknowledged(removed=removed, wake=promoted > 0 or capped)

    async def unclaim(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        if queue_id not in self._messages:
            return 0
        now = self._clock.now()
        taken = 0
        for receipt in receipts:
            message = self._current(queue_id, receipt, now)
            if message is None:
                continue
            message.available_after = now
            message.delivery_attempts -= 1
            message.receipt_handle = uuid.uuid4()
            if message.attempts:
                message.attempts.pop()
            message.last_delivered_at = (
                message.attempts[-1].delivered_at if message.attempts else None
            )
            taken += 1
        self.totals[queue_id]["delivered"] -= taken
        return taken
