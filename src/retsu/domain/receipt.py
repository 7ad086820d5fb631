"""Receipt handles: opaque to consumers, a UUID inside."""

from __future__ import annotations

import uuid


def new_receipt_handle() -> str:
    return str(uuid.uuid4())


def parse_receipt_handle(handle: str) -> uuid.UUID | None:
    """The handle's UUID, or None when it cannot be one of ours (then it is simply stale)."""
    if not isinstance(handle, str) or len(handle) > 64:
        return None
    try:
        return uuid.UUID(handle)
    except ValueError:
        return None
