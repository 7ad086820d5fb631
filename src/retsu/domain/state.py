"""Logical queue state, as counted by the state reader (SPEC §3.2 counting rules).

ready: unexpired and deliverable now (never delivered and past any delay, or an
elapsed lease with attempts left); in flight: an active lease, even if the
message's lifetime has ended; delayed: never delivered and not yet past its
delay. An elapsed lease with no attempts left, or an expired ready message,
counts in none of them until a dequeue or the cleaner removes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from retsu.domain.message import Priority


@dataclass(frozen=True, slots=True)
class PriorityState:
    queue_id: UUID
    queue_name: str
    priority: Priority
    ready: int
    in_flight: int
    delayed: int
    dead_letters: int
    oldest_ready_age_seconds: float
    oldest_in_flight_age_seconds: float
    # Kept completed messages (SPEC §3.11) and groups with a live message (§3.10) — counted
    # per queue; a reader may carry them on any one priority's row.
    completed: int = 0
    groups: int = 0


@dataclass(frozen=True, slots=True)
class QueueStats:
    ready: int
    in_flight: int
    delayed: int
    dead_letters: int
    oldest_ready_age_seconds: float
    groups: int = 0
    completed: int = 0

    @classmethod
    def combine(cls, priorities: list[PriorityState]) -> QueueStats:
        return cls(
            ready=sum(p.ready for p in priorities),
            in_flight=sum(p.in_flight for p in priorities),
            delayed=sum(p.delayed for p in priorities),
            dead_letters=sum(p.dead_letters for p in priorities),
            oldest_ready_age_seconds=max(
                (p.oldest_ready_age_seconds for p in priorities), default=0.0
            ),
            groups=sum(p.groups for p in priorities),
            completed=sum(p.completed for p in priorities),
        )


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    taken_at: datetime
    priorities: tuple[PriorityState, ...]
