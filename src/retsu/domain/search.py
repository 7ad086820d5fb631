"""Searching payloads (SPEC §3.11): ``match`` is a JSON object a payload must contain.

Containment is PostgreSQL's ``@>`` on ``jsonb``: an object contains another when each of
the other's keys is present with a value it contains; an array contains another when each
element of the other is contained in one of its elements; scalars contain equal scalars
(numbers by value). A payload that is not JSON never matches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from retsu.domain.errors import InvalidInput
from retsu.domain.message import REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED, Priority
from retsu.domain.ranges import IntRange

MATCH_MAX_LENGTH = 4096


def invalid_match() -> InvalidInput:
    return InvalidInput("match must be a JSON object.", code="invalid_match")


def _not_json(constant: str) -> Any:
    # NaN and Infinity are Python's extensions of JSON, not JSON.
    raise ValueError(constant)


def parse_match(text: str) -> dict[str, Any]:
    """A ``match`` query parameter: a JSON object (at most 4,096 characters), else
    ``invalid_match``."""
    if len(text) > MATCH_MAX_LENGTH:
        raise invalid_match()
    try:
        value = json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):
        raise invalid_match() from None
    return check_match(value)


def check_match(value: Any) -> dict[str, Any]:
    """A ``match`` given as a decoded JSON value (a bulk action's body): a JSON object of
    at most 4,096 characters as compact JSON, holding nothing PostgreSQL's ``jsonb`` cannot
    (the character U+0000, a non-finite number) — else ``invalid_match``."""
    try:
        if not isinstance(value, dict) or not _storable(value):
            raise invalid_match()
        compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (ValueError, RecursionError):
        raise invalid_match() from None
    if len(compact) > MATCH_MAX_LENGTH:
        raise invalid_match()
    return value


def _storable(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, dict):
        return all(
            isinstance(key, str) and _storable(key) and _storable(item)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return all(_storable(item) for item in value)
    return value is None or isinstance(value, bool | int | float)


def contains(document: Any, pattern: Any) -> bool:
    """``document @> pattern`` as PostgreSQL's jsonb decides it."""
    if isinstance(pattern, dict):
        return isinstance(document, dict) and all(
            key in document and contains(document[key], value) for key, value in pattern.items()
        )
    if isinstance(pattern, list):
        return isinstance(document, list) and all(
            any(contains(item, wanted) for item in document) for wanted in pattern
        )
    # Scalars (below the top level, where ``match`` always is, an array does not contain a
    # scalar: only a top-level array may).
    if isinstance(document, dict | list):
        return False
    if isinstance(pattern, bool) or isinstance(document, bool):
        return document is pattern
    return bool(document == pattern)


def payload_matches(payload: str, pattern: dict[str, Any] | None) -> bool:
    if pattern is None:
        return True
    try:
        document = json.loads(payload)
    except (ValueError, RecursionError):
        return False
    return contains(document, pattern)


# Why a record is in dead-letter storage (the only reason there is today).
REASONS = frozenset({REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED})
# A bulk action's ``limit`` (SPEC §3.11).
BULK_LIMIT = IntRange("limit", 1, 100_000, "invalid_limit")
DEFAULT_BULK_LIMIT = 1000


def parse_reason(text: str) -> str:
    if text not in REASONS:
        raise InvalidInput(
            f"reason must be one of {', '.join(sorted(REASONS))}.", code="invalid_reason"
        )
    return text


@dataclass(frozen=True, slots=True)
class Search:
    """Which messages or dead letters a list or a bulk action takes (SPEC §3.11): each
    filter given must hold. ``reason`` applies to dead letters only."""

    priority: Priority | None = None
    group: str | None = None
    match: dict[str, Any] | None = None
    reason: str | None = None

    def admits(
        self, *, priority: Priority, group: str | None, payload: str, reason: str | None = None
    ) -> bool:
        return (
            (self.priority is None or priority is self.priority)
            and (self.group is None or group == self.group)
            and (self.reason is None or reason == self.reason)
            and payload_matches(payload, self.match)
        )

    def described(self) -> dict[str, Any]:
        """The filters given, by their API names (an audit row's details)."""
        given = {
            "priority": None if self.priority is None else self.priority.name,
            "group": self.group,
            "match": self.match,
            "reason": self.reason,
        }
        return {name: value for name, value in given.items() if value is not None}


EVERYTHING = Search()


@dataclass(frozen=True, slots=True)
class BulkOutcome:
    """What a bulk action did (SPEC §3.11): with ``dry_run``, how many it would take now
    (``matched``); else how many it took."""

    count: int
    dry_run: bool
