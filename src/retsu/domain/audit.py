"""Who did what: the audit trail of operator actions."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

ANONYMOUS = "anonymous"


class AuditAction(enum.StrEnum):
    QUEUE_CREATED = "queue.created"
    QUEUE_UPDATED = "queue.updated"
    QUEUE_PAUSED = "queue.paused"
    QUEUE_RESUMED = "queue.resumed"
    QUEUE_PURGED = "queue.purged"
    QUEUE_DELETED = "queue.deleted"
    DEAD_LETTER_REDRIVEN = "dead_letter.redriven"
    DEAD_LETTER_DELETED = "dead_letter.deleted"


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
    target_type: str  # "queue" or "dead_letter"
    target_id: str
    queue_id: UUID | None
    caller: Caller
    details: dict[str, Any] = field(default_factory=dict)


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
