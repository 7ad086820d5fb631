"""Reading the console's forms: text fields into the values the use cases take.

Ranges are never checked here: the use case (through the domain's rules) does it, and its
error is shown next to the field it names (``field_of_code``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from retsu.domain.errors import InvalidInput
from retsu.domain.queue import (
    DEFAULT_MESSAGE_TTL,
    MAX_DELIVERY_ATTEMPTS,
    VISIBILITY_TIMEOUT,
    Queue,
)
from retsu.domain.ranges import IntRange

SETTINGS: Final[tuple[IntRange, ...]] = (
    VISIBILITY_TIMEOUT,
    MAX_DELIVERY_ATTEMPTS,
    DEFAULT_MESSAGE_TTL,
)
_MAX_DIGITS: Final = 12


def parse_whole_number(text: object) -> int | None:
    """A form's whole number (optional surrounding spaces), or None when it is not one."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not text or len(text) > _MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


@dataclass(slots=True)
class SettingsForm:
    """The settings form as shown: each field's text and, after a refused save, its error."""

    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)
    codes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, queue: Queue) -> SettingsForm:
        current = queue.settings
        return cls({rule.field: str(getattr(current, rule.field)) for rule in SETTINGS})

    @classmethod
    def submitted(cls, form: Mapping[str, Any]) -> SettingsForm:
        return cls({rule.field: str(form.get(rule.field, "")).strip() for rule in SETTINGS})

    def changes(self, queue: Queue) -> dict[str, int]:
        """The values that differ from the queue's, each checked by the field's domain
        rule; a field that fails gets its error (and the rule's code) instead."""
        changed: dict[str, int] = {}
        for rule in SETTINGS:
            value = parse_whole_number(self.values[rule.field])
            if value is None:
                self.fail(
                    rule.code,
                    f"{rule.field} must be a whole number from {rule.low} to {rule.high}.",
                )
                continue
            if value == getattr(queue.settings, rule.field):
                continue
            try:
                # The domain's own rule, so every wrong field shows its error at once (the
                # use case checks again, and its error lands here the same way).
                changed[rule.field] = rule.check(value)
            except InvalidInput as error:
                self.fail(error.code, error.detail)
        return changed

    def fail(self, code: str, detail: str) -> None:
        name = field_of_code(code)
        if name is None:  # an error of no one field (e.g. empty_queue_update)
            self.errors["_form"] = detail
            return
        self.errors[name] = detail
        self.codes[name] = code


def field_of_code(code: str) -> str | None:
    for rule in SETTINGS:
        if rule.code == code:
            return rule.field
    return None


SETTING_LABELS: Final = {
    VISIBILITY_TIMEOUT.field: ("Visibility timeout", "seconds a delivered message stays hidden"),
    MAX_DELIVERY_ATTEMPTS.field: ("Max delivery attempts", "before it becomes a dead letter"),
    DEFAULT_MESSAGE_TTL.field: ("Default message lifetime", "seconds, when a message sets none"),
}
