"""A queue's groups as operators see them (SPEC §3.10: ``GET …/groups``).

A group is an ordered lane: its *head* is its oldest live message (ready, in flight,
delayed, or an elapsed lease with attempts left); its counts are its lane's own counters —
in flight: its leases; delayed: members whose delay still runs; ready: the rest. (A lease
or a delay that ended since the lane last moved counts where it was until the next claim
moves it; the queue's stats, not these, are exact to the moment.)

Its state:

* ``ready`` — something of it is deliverable now (its head, or the next message after
  leases below ``group_max_in_flight``);
* ``blocked`` — it is at its in-flight limit (or everything it has is leased);
* ``waiting`` — its next message waits for its delay to end, or for the group's next token
  (``group_rate_limit``).

Groups are listed by how long their next message has waited (the claim's fair-service
key, then the group's name): position ``[wait key, group]``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from retsu.domain.errors import InvalidInput
from retsu.domain.pagination import invalid_cursor


class GroupState(enum.StrEnum):
    READY = "ready"
    BLOCKED = "blocked"
    WAITING = "waiting"

    @classmethod
    def parse(cls, text: str) -> GroupState:
        try:
            return cls(text)
        except ValueError:
            raise InvalidInput(
                "state must be one of ready, blocked, waiting.", code="invalid_state"
            ) from None


def group_state(
    *,
    leased: int,
    group_max_in_flight: int,
    head_lease_ended: bool,
    next_deliverable: bool | None,
) -> GroupState:
    """``head_lease_ended``: the head is in flight and its lease has ended (it is delivered
    again first); ``next_deliverable``: whether the lane's next message (not leased) is
    deliverable now, None when the lane has none."""
    if head_lease_ended:
        return GroupState.READY
    if leased >= group_max_in_flight:
        return GroupState.BLOCKED
    if next_deliverable:
        return GroupState.READY
    if next_deliverable is None and leased > 0:
        return GroupState.BLOCKED
    return GroupState.WAITING


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group: str
    ready: int
    in_flight: int
    delayed: int
    head_id: UUID
    head_delivery_attempts: int
    head_enqueued_at: datetime
    last_delivered_at: datetime | None
    state: GroupState


@dataclass(frozen=True, slots=True)
class GroupPosition:
    """Where a page of groups ended: the last group's wait key and name."""

    wait_key: int
    group: str

    def seal(self) -> list[Any]:
        return [self.wait_key, self.group]

    @classmethod
    def read(cls, position: list[Any]) -> GroupPosition:
        if len(position) != 2 or type(position[0]) is not int or type(position[1]) is not str:
            raise invalid_cursor()
        return cls(position[0], position[1])
