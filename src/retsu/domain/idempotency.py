"""Idempotent enqueue: the Idempotency-Key and what makes two requests "the same message"."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from uuid import UUID

from retsu.domain.errors import InvalidInput
from retsu.domain.maintenance import IDEMPOTENCY_KEY_RETENTION_SECONDS
from retsu.domain.message import NewMessage

__all__ = [
    "IDEMPOTENCY_KEY_RETENTION_SECONDS",
    "IdempotentEnqueued",
    "fingerprint",
    "validate_idempotency_key",
]

KEY_MAX_LENGTH = 128
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]{1,128}")
_FINGERPRINT_VERSION = 1


def validate_idempotency_key(key: str) -> str:
    """1–128 visible ASCII characters (0x21–0x7E); anything else is invalid_idempotency_key."""
    if not isinstance(key, str) or _VISIBLE_ASCII.fullmatch(key) is None:
        raise InvalidInput(
            f"Idempotency-Key must be 1 to {KEY_MAX_LENGTH} visible ASCII characters.",
            code="invalid_idempotency_key",
        )
    return key


def fingerprint(message: NewMessage) -> bytes:
    """SHA-256 of a canonical encoding of the parsed message.

    Two requests carry "the same message" when payload, priority, ttl_seconds,
    delay_seconds and group are equal after parsing: JSON spelling (key order, whitespace,
    escapes) does not matter, an explicit ``null`` equals an absent field, and an
    absent delay equals a delay of 0 (both mean "deliverable at once"). An absent
    ttl differs from an explicit one: it follows the queue's default, which can change.
    """
    parts: list[object] = [
        _FINGERPRINT_VERSION,
        message.payload,
        message.priority.name,
        message.ttl_seconds,
        message.delay_seconds or 0,
    ]
    if message.group is not None:
        # Only when given: a message without a group keeps the fingerprint it always had,
        # so keys stored before groups existed still replay.
        parts.append(message.group)
    canonical = json.dumps(
        parts,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return hashlib.sha256(canonical.encode("ascii")).digest()


@dataclass(frozen=True, slots=True)
class IdempotentEnqueued:
    """The message id a key stands for; ``replayed`` when an earlier request stored it."""

    id: UUID
    replayed: bool
