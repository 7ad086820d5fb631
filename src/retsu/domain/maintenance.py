"""What the background cleaners report, and the fixed rules they apply."""

from __future__ import annotations

from dataclasses import dataclass

NEVER_DELIVERED = "never_delivered"
PREVIOUSLY_DELIVERED = "previously_delivered"

# An Idempotency-Key is remembered for 24 h (SPEC §3.3); the expired-message cleaner
# removes keys created longer ago than this.
IDEMPOTENCY_KEY_RETENTION_SECONDS = 24 * 60 * 60


@dataclass(frozen=True, slots=True)
class ExpiredMessages:
    queue_name: str
    delivery_history: str  # NEVER_DELIVERED or PREVIOUSLY_DELIVERED
    count: int


@dataclass(frozen=True, slots=True)
class PurgedDeadLetters:
    queue_name: str
    count: int
