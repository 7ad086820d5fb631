"""Inclusive integer ranges with the error code a violation carries."""

from __future__ import annotations

from dataclasses import dataclass

from retsu.domain.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class IntRange:
    field: str
    low: int
    high: int
    code: str

    def check(self, value: int) -> int:
        # bool is an int in Python; a JSON `true` must never pass as 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(f"{self.field} must be an integer.", code=self.code)
        if not self.low <= value <= self.high:
            raise InvalidInput(
                f"{self.field} must be between {self.low} and {self.high}, got {value}.",
                code=self.code,
            )
        return value
