"""Queues: names, settings and their validation rules."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

from retsu.domain.errors import InvalidInput
from retsu.domain.ranges import IntRange

NAME_MAX_LENGTH = 64
_NAME_PATTERN = re.compile(r"[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?")

VISIBILITY_TIMEOUT = IntRange("visibility_timeout_seconds", 1, 21_600, "invalid_visibility_timeout")
MAX_DELIVERY_ATTEMPTS = IntRange("max_delivery_attempts", 1, 100, "invalid_max_delivery_attempts")
DEFAULT_MESSAGE_TTL = IntRange(
    "default_message_ttl_seconds", 1, 2_592_000, "invalid_default_message_ttl"
)

DEFAULT_VISIBILITY_TIMEOUT_SECONDS = 30
DEFAULT_MAX_DELIVERY_ATTEMPTS = 5
DEFAULT_MESSAGE_TTL_SECONDS = 604_800


def is_valid_queue_name(name: str) -> bool:
    return (
        isinstance(name, str)
        and 1 <= len(name) <= NAME_MAX_LENGTH
        and _NAME_PATTERN.fullmatch(name) is not None
    )


def validate_queue_name(name: str) -> str:
    """1–64 chars of ``a-z 0-9 . _ -``, starting and ending with a letter or digit."""
    if not isinstance(name, str):
        raise InvalidInput("name must be a string.", code="invalid_queue_name")
    if not 1 <= len(name) <= NAME_MAX_LENGTH or _NAME_PATTERN.fullmatch(name) is None:
        raise InvalidInput(
            "name must be 1-64 characters of a-z, 0-9, '.', '_' or '-', "
            "starting and ending with a letter or digit.",
            code="invalid_queue_name",
        )
    return name


@dataclass(frozen=True, slots=True)
class QueueSettings:
    visibility_timeout_seconds: int = DEFAULT_VISIBILITY_TIMEOUT_SECONDS
    max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS
    default_message_ttl_seconds: int = DEFAULT_MESSAGE_TTL_SECONDS

    def __post_init__(self) -> None:
        VISIBILITY_TIMEOUT.check(self.visibility_timeout_seconds)
        MAX_DELIVERY_ATTEMPTS.check(self.max_delivery_attempts)
        DEFAULT_MESSAGE_TTL.check(self.default_message_ttl_seconds)

    @classmethod
    def from_optional(
        cls,
        *,
        visibility_timeout_seconds: int | None = None,
        max_delivery_attempts: int | None = None,
        default_message_ttl_seconds: int | None = None,
    ) -> QueueSettings:
        """Settings from a request where an absent field takes its default."""
        return QueueSettingsUpdate(
            visibility_timeout_seconds=visibility_timeout_seconds,
            max_delivery_attempts=max_delivery_attempts,
            default_message_ttl_seconds=default_message_ttl_seconds,
        ).apply_to(cls())


@dataclass(frozen=True, slots=True)
class QueueSettingsUpdate:
    """A partial change of settings; ``None`` leaves a setting as it is."""

    visibility_timeout_seconds: int | None = None
    max_delivery_attempts: int | None = None
    default_message_ttl_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.visibility_timeout_seconds is not None:
            VISIBILITY_TIMEOUT.check(self.visibility_timeout_seconds)
        if self.max_delivery_attempts is not None:
            MAX_DELIVERY_ATTEMPTS.check(self.max_delivery_attempts)
        if self.default_message_ttl_seconds is not None:
            DEFAULT_MESSAGE_TTL.check(self.default_message_ttl_seconds)

    @property
    def is_empty(self) -> bool:
        return (
            self.visibility_timeout_seconds is None
            and self.max_delivery_attempts is None
            and self.default_message_ttl_seconds is None
        )

    def require_change(self) -> QueueSettingsUpdate:
        if self.is_empty:
            raise InvalidInput(
                "Give at least one of visibility_timeout_seconds, max_delivery_attempts, "
                "default_message_ttl_seconds.",
                code="empty_queue_update",
            )
        return self

    def changes(self) -> dict[str, int]:
        """The settings this update gives, by name."""
        return {
            key: value
            for key, value in (
                ("visibility_timeout_seconds", self.visibility_timeout_seconds),
                ("max_delivery_attempts", self.max_delivery_attempts),
                ("default_message_ttl_seconds", self.default_message_ttl_seconds),
            )
            if value is not None
        }

    def apply_to(self, settings: QueueSettings) -> QueueSettings:
        return replace(settings, **self.changes())


@dataclass(frozen=True, slots=True)
class Queue:
    id: UUID
    name: str
    settings: QueueSettings
    paused: bool
    created_at: datetime
    updated_at: datetime
