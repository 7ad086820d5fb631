"""Looking at messages without claiming them (SPEC §3.6): states, items, list positions.

A message's *logical* state follows the counting rules of §3.2 (the same rules as the
queue stats): in flight = an active lease (even past the message's lifetime); delayed =
never delivered and not yet past its delay; ready = unexpired and deliverable now (past
any delay, or an elapsed lease with attempts left). An elapsed lease with no attempts
left, a READY message a lowered attempts limit left with none, and an expired message are
in no state: they are not listed, not shown and not deleted (a dequeue or the cleaner
removes them).

Each state is listed in its own order, keyset-paginated on that order:

* every live message (no state): enqueue order — position ``[enqueue_order]``;
* ready: delivery order, highest priority first, then enqueue order — ``[priority,
  enqueue_order]``;
* in flight: lease end, soonest first — ``[lease end in µs, enqueue_order]``;
* delayed: end of the delay — ``[delay end in µs, enqueue_order]``;
* completed: newest completion first — ``[completion in µs, enqueue_order]``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from retsu.domain.attempts import Attempt
from retsu.domain.errors import InvalidInput
from retsu.domain.message import Priority
from retsu.domain.pagination import from_micros, invalid_cursor, to_micros

# The cursor kind of message pages (domain/cursor.py: one short kind per list).

# How many stored rows one page may examine at most, whatever the limit: filters that no
# index serves (a priority on every live message, in flight or delayed; live rows among
# expired ones nobody cleaned yet) then end a page early with a cursor to go on from,
# instead of walking the backlog. See docs/operator-api.md.
BROWSE_SCAN_BUDGET = 1000


class BrowseState(enum.StrEnum):
    READY = "ready"
    IN_FLIGHT = "in_flight"
    DELAYED = "delayed"
    # Acknowledged and kept (SPEC §3.11): listed newest completion first, never live.
    COMPLETED = "completed"

    @classmethod
    def parse(cls, text: str) -> BrowseState:
        try:
            return cls(text)
        except ValueError:
            raise InvalidInput(
                "state must be one of ready, in_flight, delayed, completed.",
                code="invalid_state",
            ) from None


def logical_state(
    *,
    leased: bool,
    available_after: datetime,
    expires_at: datetime,
    delivery_attempts: int,
    max_delivery_attempts: int,
    now: datetime,
) -> BrowseState | None:
    """The state a message counts in (§3.2), or None when it counts in none.

    ``leased``: it was handed out (physically IN_FLIGHT); otherwise ``available_after``
    in the future means it is still inside its first delay.
    """
    if available_after > now:
        return BrowseState.IN_FLIGHT if leased else BrowseState.DELAYED
    if expires_at <= now or delivery_attempts >= max_delivery_attempts:
        return None
    return BrowseState.READY


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A live message as an operator sees it: never a receipt handle."""

    id: UUID
    payload: str
    priority: Priority
    state: BrowseState
    delivery_attempts: int
    enqueued_at: datetime
    expires_at: datetime
    # When it becomes deliverable: now or past (ready), the lease end (in flight), the
    # end of the delay (delayed).
    available_at: datetime
    last_delivered_at: datetime | None
    # The dead letter it was redriven from, else None.
    redriven_from: UUID | None
    enqueue_order: int
    group: str | None = None
    # The schedule whose due time enqueued it (SPEC §3.12), else None.
    schedule_id: UUID | None = None
    # Every delivery, oldest first (SPEC §3.11).
    attempts: tuple[Attempt, ...] = ()
    # A completed message's (§3.11): when it was acknowledged, and the acknowledge's result.
    completed_at: datetime | None = None
    result: str | None = None


@dataclass(frozen=True, slots=True)
class MessagePosition:
    """Where a page of one list ended (see the module docstring for each list's key)."""

    enqueue_order: int
    priority: Priority | None = None  # ready
    at: datetime | None = None  # in flight, delayed, completed

    @classmethod
    def of(cls, state: BrowseState | None, message: StoredMessage) -> MessagePosition:
        if state is BrowseState.READY:
            return cls(message.enqueue_order, priority=message.priority)
        if state is None:
            return cls(message.enqueue_order)
        if state is BrowseState.COMPLETED:
            assert message.completed_at is not None
            return cls(message.enqueue_order, at=message.completed_at)
        return cls(message.enqueue_order, at=message.available_at)

    def seal(self, state: BrowseState | None) -> list[Any]:
        if state is BrowseState.READY:
            assert self.priority is not None
            return [int(self.priority), self.enqueue_order]
        if state is None:
            return [self.enqueue_order]
        assert self.at is not None
        return [to_micros(self.at), self.enqueue_order]

    @classmethod
    def read(cls, state: BrowseState | None, position: list[Any]) -> MessagePosition:
        if not all(type(value) is int for value in position):
            raise invalid_cursor()
        if state is None:
            if len(position) != 1:
                raise invalid_cursor()
            return cls(position[0])
        if len(position) != 2:
            raise invalid_cursor()
        if state is BrowseState.READY:
            try:
                priority = Priority(position[0])
            except ValueError:
                raise invalid_cursor() from None
            return cls(position[1], priority=priority)
        return cls(position[1], at=from_micros(position[0]))


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """What storage found for one page: the messages in the list's order, and — when it
    stopped at its scan budget before finding enough — where to go on from."""

    messages: list[StoredMessage]
    resume_after: MessagePosition | None = None
