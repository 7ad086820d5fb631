"""Reading the console's settings forms: text fields into the values the use cases take.

One form serves both the queue's settings (a change: only what differs is sent) and a new
queue (only what was filled in is sent; the rest takes its default). Ranges are checked
with the domain's own rules, field by field, so every wrong field shows its error at once
next to itself; the use case checks again, and an error it raises lands next to the field
its code names (``fail``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from retsu.domain.errors import InvalidInput
from retsu.domain.queue import (
    COMPLETED_RETENTION,
    DEFAULT_MESSAGE_TTL,
    GROUP_MAX_IN_FLIGHT,
    MAX_DELIVERY_ATTEMPTS,
    MAX_IN_FLIGHT,
    RATE_BURST,
    RATE_PER_SECOND_HIGH,
    RATE_PER_SECOND_LOW,
    VISIBILITY_TIMEOUT,
    Queue,
    QueueSettings,
    RateLimit,
)
from retsu.domain.ranges import IntRange

_MAX_DIGITS: Final = 12
# A rate as typed: plain decimal digits (no sign, exponent, "nan" or "inf": float() takes
# all of those, and none is a rate anyone means).
_DECIMAL: Final = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)")
RATE_CODE: Final = "invalid_rate_limit"


def parse_whole_number(text: object) -> int | None:
    """A form's whole number (optional surrounding spaces), or None when it is not one."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not text or len(text) > _MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def decimal_text(value: float) -> str:
    """A rate as the form shows it: ``10`` for 10.0, ``2.5``, ``0.01`` (round-trips)."""
    text = repr(float(value))
    return text.removesuffix(".0")


@dataclass(frozen=True, slots=True)
class Field:
    """One input of the settings form."""

    name: str  # the input's name (and id)
    label: str
    hint: str
    # whole: a required whole number; cap: a whole number or empty (no limit); rate and
    # burst: the two halves of a token bucket (``setting`` names the bucket).
    kind: Literal["whole", "cap", "rate", "burst"]
    setting: str
    rule: IntRange | None = None

    @property
    def range_hint(self) -> str:
        if self.rule is not None:
            return f"{self.rule.low:,}–{self.rule.high:,}"
        return f"{RATE_PER_SECOND_LOW:g}–{RATE_PER_SECOND_HIGH:,.0f}"


def _whole(rule: IntRange, label: str, hint: str) -> Field:
    return Field(rule.field, label, hint, "whole", rule.field, rule)


_BUCKET_HINT: Final = "deliveries per second; empty: no limit (the API's null)"
_BURST_HINT: Final = "empty: max(1, ⌈per second⌉)"

# The form's sections, in order: (title, explanation, fields).
SECTIONS: Final[tuple[tuple[str, str, tuple[Field, ...]], ...]] = (
    (
        "Delivery",
        "",
        (
            _whole(
                VISIBILITY_TIMEOUT, "Visibility timeout", "seconds a delivered message stays hidden"
            ),
            _whole(
                MAX_DELIVERY_ATTEMPTS, "Max delivery attempts", "before it becomes a dead letter"
            ),
            _whole(
                DEFAULT_MESSAGE_TTL, "Default message lifetime", "seconds, when a message sets none"
            ),
        ),
    ),
    (
        "Flow control",
        "Enforced by the claim in PostgreSQL, across every API process (docs/flow-control.md).",
        (
            _whole(
                GROUP_MAX_IN_FLIGHT,
                "Group max in flight",
                "messages of one group leased at once; 1: an ordered lane",
            ),
            Field(
                MAX_IN_FLIGHT.field,
                "Max in flight",
                "leases of the whole queue at once; empty: no cap (the API's null)",
                "cap",
                MAX_IN_FLIGHT.field,
                MAX_IN_FLIGHT,
            ),
            Field("rate_limit_per_second", "Rate limit", _BUCKET_HINT, "rate", "rate_limit"),
            Field(
                "rate_limit_burst",
                "Rate limit burst",
                _BURST_HINT,
                "burst",
                "rate_limit",
                RATE_BURST,
            ),
            Field(
                "group_rate_limit_per_second",
                "Group rate limit",
                "for each group on its own; " + _BUCKET_HINT,
                "rate",
                "group_rate_limit",
            ),
            Field(
                "group_rate_limit_burst",
                "Group rate limit burst",
                _BURST_HINT,
                "burst",
                "group_rate_limit",
                RATE_BURST,
            ),
        ),
    ),
    (
        "History",
        "",
        (
            _whole(
                COMPLETED_RETENTION,
                "Keep completed messages",
                "seconds an acknowledged message is kept with its result; 0: gone at once",
            ),
        ),
    ),
)
FIELDS: Final = tuple(f for _, _, section in SECTIONS for f in section)
# Where an error of the use case goes when its code names one field.
_FIELD_OF_CODE: Final = {
    f.rule.code: f.name for f in FIELDS if f.rule is not None and f.kind in ("whole", "cap")
} | {"invalid_queue_name": "name", "queue_already_exists": "name"}


def _shown(settings: QueueSettings) -> dict[str, str]:
    """The form's texts for a queue's settings (an absent limit: empty)."""
    values: dict[str, str] = {}
    for f in FIELDS:
        current = getattr(settings, f.setting)
        if f.kind in ("whole", "cap"):
            values[f.name] = "" if current is None else str(current)
        elif current is None:
            values[f.name] = ""
        elif f.kind == "rate":
            values[f.name] = decimal_text(current.per_second)
        else:
            values[f.name] = str(current.burst)
    return values


@dataclass(slots=True)
class SettingsForm:
    """The settings form as shown: each field's text and, after a refused save, its error
    (and the error's code). ``name`` is there only on the new-queue form."""

    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)
    codes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, queue: Queue) -> SettingsForm:
        return cls(_shown(queue.settings))

    @classmethod
    def blank(cls) -> SettingsForm:
        """The new-queue form: every setting at its default, limits empty."""
        return cls({"name": "", **_shown(QueueSettings())})

    @classmethod
    def submitted(cls, form: Mapping[str, Any], *, with_name: bool = False) -> SettingsForm:
        """The fields the form sent; one it did not send at all is left as it is (a
        browser sends every field: an empty one is a value, e.g. "no limit")."""
        names = [f.name for f in FIELDS if f.name in form]
        if with_name:
            names.append("name")
        return cls({name: str(form.get(name, "")).strip() for name in names})

    def changes(self, queue: Queue) -> dict[str, Any]:
        """The settings that differ from the queue's (``None`` removes a limit); a field
        that fails gets its error instead."""
        parsed = self._parse(creating=False)
        return {
            name: value for name, value in parsed.items() if value != getattr(queue.settings, name)
        }

    def given(self) -> dict[str, Any]:
        """A new queue's settings: those filled in (the rest take their defaults)."""
        return self._parse(creating=True)

    def _parse(self, *, creating: bool) -> dict[str, Any]:
        settings: dict[str, Any] = {}
        for f in FIELDS:
            if f.kind in ("whole", "cap"):
                self._read_whole(f, settings, creating=creating)
        for bucket in ("rate_limit", "group_rate_limit"):
            self._read_bucket(bucket, settings)
        return settings

    def _read_whole(self, f: Field, settings: dict[str, Any], *, creating: bool) -> None:
        assert f.rule is not None
        if f.name not in self.values:
            return
        text = self.values[f.name]
        if not text:
            if f.kind == "cap":
                settings[f.setting] = None  # no cap: the API's null
                return
            if creating:
                return  # the default
        value = parse_whole_number(text)
        if value is None:
            self._error(
                f.name,
                f.rule.code,
                f"{f.rule.field} must be a whole number from {f.rule.low} to {f.rule.high}.",
            )
            return
        try:
            settings[f.setting] = f.rule.check(value)
        except InvalidInput as error:
            self._error(f.name, error.code, error.detail)

    def _read_bucket(self, bucket: str, settings: dict[str, Any]) -> None:
        rate_field, burst_field = f"{bucket}_per_second", f"{bucket}_burst"
        if rate_field not in self.values and burst_field not in self.values:
            return
        rate_text = self.values.get(rate_field, "")
        burst_text = self.values.get(burst_field, "")
        if not rate_text and not burst_text:
            settings[bucket] = None  # no limit: the API's null
            return
        per_second: float | None = None
        if not rate_text:
            self._error(
                rate_field,
                RATE_CODE,
                "per_second is needed with a burst; clear both to remove the limit.",
            )
        elif not _DECIMAL.fullmatch(rate_text) or len(rate_text) > _MAX_DIGITS * 2:
            self._error(rate_field, RATE_CODE, _rate_range())
        else:
            per_second = float(rate_text)
            try:
                RateLimit.of(per_second)  # the domain's range for per_second
            except InvalidInput as error:
                self._error(rate_field, error.code, error.detail)
                per_second = None
        burst: int | None = None
        if burst_text:
            burst = parse_whole_number(burst_text)
            try:
                if burst is None:
                    raise InvalidInput(
                        f"burst must be a whole number from {RATE_BURST.low} to {RATE_BURST.high}.",
                        code=RATE_CODE,
                    )
                RATE_BURST.check(burst)
            except InvalidInput as error:
                self._error(burst_field, error.code, error.detail)
                return
        if per_second is not None:
            settings[bucket] = RateLimit.of(per_second, burst)

    def _error(self, name: str, code: str, detail: str) -> None:
        self.errors.setdefault(name, detail)
        self.codes.setdefault(name, code)

    def fail(self, code: str, detail: str) -> None:
        """An error the use case raised: next to the field its code names, else above the
        form (an error of no one field, e.g. a rate limit the form let through)."""
        name = _FIELD_OF_CODE.get(code)
        if name is None:
            self.errors["_form"] = detail
            return
        self._error(name, code, detail)


def _rate_range() -> str:
    return f"per_second must be a number from {RATE_PER_SECOND_LOW} to {RATE_PER_SECOND_HIGH:g}."
