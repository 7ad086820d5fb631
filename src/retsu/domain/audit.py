"""Who did what: the audit trail of operator actions."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from retsu.domain.errors import InvalidInput

ANONYMOUS = "anonymous"

TARGET_QUEUE = "queue"
TARGET_DEAD_LETTER = "dead_letter"
TARGET_MESSAGE = "message"
TARGET_SCHEDULE = "schedule"


class AuditAction(enum.StrEnum):
    QUEUE_CREATED = "queue.created"
    QUEUE_UPDATED = "queue.updated"
    QUEUE_PAUSED = "queue.paused"
    QUEUE_RESUMED = "queue.resumed"
    QUEUE_PURGED = "queue.purged"
    QUEUE_DELETED = "queue.deleted"
    DEAD_LETTER_REDRIVEN = "dead_letter.redriven"
    DEAD_LETTER_DELETED = "dead_letter.deleted"
    MESSAGE_DELETED = "message.deleted"
    SCHEDULE_CREATED = "schedule.created"
    SCHEDULE_UPDATED = "schedule.updated"
    SCHEDULE_DELETED = "schedule.deleted"
    SCHEDULE_PAUSED = "schedule.paused"
    SCHEDULE_RESUMED = "schedule.resumed"

    @classmethod
    def parse(cls, text: str) -> AuditAction:
        """An action filter; anything else is ``invalid_action`` (never silently ignored)."""
        try:
            return cls(text)
        except ValueError:
            raise InvalidInput(
                "action must be one of " + ", ".join(a.value for a in cls) + ".",
                code="invalid_action",
            ) from None


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: the auth token's name (``anonymous`` with auth off) and the
    request id, carried by every operator command so its audit row can name them."""

    actor: str = ANONYMOUS
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """An audit row to write in the same transaction as the change it records."""

    action: AuditAction
    target_type: str  # "queue", "dead_letter", "message" or "schedule"
    target_id: str
    queue_id: UUID | None
    caller: Caller
    details: dict[str, Any] = field(default_factory=dict)

    def with_details(self, **more: Any) -> AuditEntry:
        """The entry with details only known inside the change's transaction (counts)."""
        return replace(self, details={**self.details, **more})

    @classmethod
    def of_queue(
        cls, action: AuditAction, queue_id: UUID, caller: Caller, **details: Any
    ) -> AuditEntry:
        return cls(action, TARGET_QUEUE, str(queue_id), queue_id, caller, details)

    @classmethod
    def of_dead_letter(
        cls, action: AuditAction, queue_id: UUID, message_id: UUID, caller: Caller, **details: Any
    ) -> AuditEntry:
        return cls(action, TARGET_DEAD_LETTER, str(message_id), queue_id, caller, details)

    @classmethod
    def of_message(
        cls, action: AuditAction, queue_id: UUID, message_id: UUID, caller: Caller, **details: Any
    ) -> AuditEntry:
        return cls(action, TARGET_MESSAGE, str(message_id), queue_id, caller, details)

    @classmethod
    def of_schedule(
        cls, action: AuditAction, queue_id: UUID, schedule_id: UUID, caller: Caller, **details: Any
    ) -> AuditEntry:
        """Found by the audit log's ``queue_id`` filter under the schedule's queue."""
        return cls(action, TARGET_SCHEDULE, str(schedule_id), queue_id, caller, details)


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: UUID
    at: datetime
    actor: str
    action: str
    target_type: str
    target_id: str
    request_id: str | None
    details: dict[str, Any]
