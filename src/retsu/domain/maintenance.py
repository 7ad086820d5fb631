"""What the background cleaners report."""

from __future__ import annotations

from dataclasses import dataclass

NEVER_DELIVERED = "never_delivered"
PREVIOUSLY_DELIVERED = "previously_delivered"


@dataclass(frozen=True, slots=True)
class ExpiredMessages:
    queue_name: str
    delivery_history: str  # NEVER_DELIVERED or PREVIOUSLY_DELIVERED
    count: int


@dataclass(frozen=True, slots=True)
class PurgedDeadLetters:
    queue_name: str
    count: int
