"""Queues: names, settings and their validation rules.

Besides its lease and lifetime settings a queue has flow control (SPEC §3.10: how many
messages of one group may be leased at once, a cap on the queue's leases, token-bucket rate
limits for the queue and for each group) and history (§3.11: how long acknowledged
messages are kept as completed).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any, Final
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

GROUP_MAX_IN_FLIGHT = IntRange("group_max_in_flight", 1, 10_000, "invalid_group_max_in_flight")
MAX_IN_FLIGHT = IntRange("max_in_flight", 1, 1_000_000, "invalid_max_in_flight")
COMPLETED_RETENTION = IntRange(
    "completed_retention_seconds", 0, 604_800, "invalid_completed_retention"
)
RATE_PER_SECOND_LOW, RATE_PER_SECOND_HIGH = 0.01, 100_000.0
RATE_BURST = IntRange("burst", 1, 100_000, "invalid_rate_limit")

DEFAULT_VISIBILITY_TIMEOUT_SECONDS = 30
DEFAULT_MAX_DELIVERY_ATTEMPTS = 5
DEFAULT_MESSAGE_TTL_SECONDS = 604_800
DEFAULT_GROUP_MAX_IN_FLIGHT = 1
DEFAULT_COMPLETED_RETENTION_SECONDS = 0


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
class RateLimit:
    """A token bucket (SPEC §3.10): over any window of ``t`` seconds at most
    ``burst + per_second × t`` deliveries; a new or changed bucket starts full."""

    per_second: float
    burst: int

    def __post_init__(self) -> None:
        per_second = self.per_second
        if (
            isinstance(per_second, bool)
            or not isinstance(per_second, int | float)
            or not math.isfinite(per_second)
            or not RATE_PER_SECOND_LOW <= per_second <= RATE_PER_SECOND_HIGH
        ):
            raise InvalidInput(
                f"per_second must be a number from {RATE_PER_SECOND_LOW} to "
                f"{RATE_PER_SECOND_HIGH:g}.",
                code="invalid_rate_limit",
            )
        RATE_BURST.check(self.burst)

    @classmethod
    def of(cls, per_second: float, burst: int | None = None) -> RateLimit:
        """``burst`` defaults to ``max(1, ceil(per_second))``."""
        if burst is None:
            number = isinstance(per_second, int | float) and not isinstance(per_second, bool)
            burst = max(1, math.ceil(per_second)) if number and math.isfinite(per_second) else 1
        return cls(per_second=per_second, burst=burst)

    @classmethod
    def read(cls, value: RateLimit | Mapping[str, Any] | None) -> RateLimit | None:
        """A rate limit as a request gives it (``{"per_second", "burst"?}``), or None."""
        if value is None or isinstance(value, RateLimit):
            return value
        return cls.of(value["per_second"], value.get("burst"))

    def as_dict(self) -> dict[str, float | int]:
        return {"per_second": self.per_second, "burst": self.burst}


@dataclass(frozen=True, slots=True)
class QueueSettings:
    visibility_timeout_seconds: int = DEFAULT_VISIBILITY_TIMEOUT_SECONDS
    max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS
    default_message_ttl_seconds: int = DEFAULT_MESSAGE_TTL_SECONDS
    # Flow control (SPEC §3.10).
    group_max_in_flight: int = DEFAULT_GROUP_MAX_IN_FLIGHT
    max_in_flight: int | None = None
    rate_limit: RateLimit | None = None
    group_rate_limit: RateLimit | None = None
    # History (SPEC §3.11): 0 = an acknowledged message is gone at once.
    completed_retention_seconds: int = DEFAULT_COMPLETED_RETENTION_SECONDS

    def __post_init__(self) -> None:
        VISIBILITY_TIMEOUT.check(self.visibility_timeout_seconds)
        MAX_DELIVERY_ATTEMPTS.check(self.max_delivery_attempts)
        DEFAULT_MESSAGE_TTL.check(self.default_message_ttl_seconds)
        GROUP_MAX_IN_FLIGHT.check(self.group_max_in_flight)
        if self.max_in_flight is not None:
            MAX_IN_FLIGHT.check(self.max_in_flight)
        COMPLETED_RETENTION.check(self.completed_retention_seconds)

    @classmethod
    def from_optional(cls, **given: Any) -> QueueSettings:
        """Settings from a create request: an absent (or null) field takes its default."""
        return QueueSettingsUpdate.parse(
            {name: value for name, value in given.items() if value is not None}
        ).apply_to(cls())

    def as_dict(self) -> dict[str, Any]:
        """Every setting by name, as the API shows it (rate limits as objects)."""
        return {field.name: _plain(getattr(self, field.name)) for field in fields(self)}


class _Keep(enum.Enum):
    KEEP = "keep"


KEEP: Final = _Keep.KEEP
"""An update's "leave this setting as it is" (``None`` removes a limit that may be absent)."""

# The settings a PATCH may set to null: the limits, removed by it.
NULLABLE_SETTINGS: Final = frozenset({"max_in_flight", "rate_limit", "group_rate_limit"})
SETTING_NAMES: Final = tuple(field.name for field in fields(QueueSettings))


def _plain(value: Any) -> Any:
    return value.as_dict() if isinstance(value, RateLimit) else value


@dataclass(frozen=True, slots=True)
class QueueSettingsUpdate:
    """A partial change of settings: ``KEEP`` leaves a setting as it is; ``None`` removes a
    limit (``max_in_flight``, ``rate_limit``, ``group_rate_limit``)."""

    visibility_timeout_seconds: int | _Keep = KEEP
    max_delivery_attempts: int | _Keep = KEEP
    default_message_ttl_seconds: int | _Keep = KEEP
    group_max_in_flight: int | _Keep = KEEP
    max_in_flight: int | _Keep | None = KEEP
    rate_limit: RateLimit | _Keep | None = KEEP
    group_rate_limit: RateLimit | _Keep | None = KEEP
    completed_retention_seconds: int | _Keep = KEEP

    def __post_init__(self) -> None:
        for name, value in self._given().items():
            if value is None and name not in NULLABLE_SETTINGS:
                raise ValueError(f"{name} cannot be removed")
        # Each value is checked as the settings check it (the same codes).
        replace(QueueSettings(), **self._given())

    @classmethod
    def parse(cls, given: Mapping[str, Any]) -> QueueSettingsUpdate:
        """An update from the settings a request gives, by name (rate limits as objects or
        ``{"per_second", "burst"?}`` mappings; None removes a limit). Each value is checked
        with its field's error code."""
        unknown = set(given) - set(SETTING_NAMES)
        if unknown:
            raise ValueError(f"unknown settings: {sorted(unknown)}")
        values = dict(given)
        for name in ("rate_limit", "group_rate_limit"):
            if name in values:
                values[name] = RateLimit.read(values[name])
        return cls(**values)

    def _given(self) -> dict[str, Any]:
        return {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if getattr(self, field.name) is not KEEP
        }

    @property
    def is_empty(self) -> bool:
        return not self._given()

    def require_change(self) -> QueueSettingsUpdate:
        if self.is_empty:
            raise InvalidInput(
                "Give at least one setting to change: " + ", ".join(SETTING_NAMES) + ".",
                code="empty_queue_update",
            )
        return self

    def changes(self) -> dict[str, Any]:
        """The settings this update gives, by name (rate limits as objects, a removed
        limit as None): what the audit row records."""
        return {name: _plain(value) for name, value in self._given().items()}

    def apply_to(self, settings: QueueSettings) -> QueueSettings:
        return replace(settings, **self._given())


@dataclass(frozen=True, slots=True)
class Queue:
    id: UUID
    name: str
    settings: QueueSettings
    paused: bool
    created_at: datetime
    updated_at: datetime
