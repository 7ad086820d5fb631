"""Options a consumer may give to one dequeue."""

from __future__ import annotations

from dataclasses import dataclass

from retsu.domain.queue import VISIBILITY_TIMEOUT
from retsu.domain.ranges import IntRange

WAIT_SECONDS = IntRange("wait_seconds", 0, 20, "invalid_wait_seconds")
MAX_MESSAGES = IntRange("max_messages", 1, 100, "invalid_max_messages")


@dataclass(frozen=True, slots=True)
class DequeueOptions:
    wait_seconds: int = 0
    visibility_timeout_seconds: int | None = None
    # None means "one message, answered bare"; a number means "a list of up to n".
    max_messages: int | None = None

    def __post_init__(self) -> None:
        WAIT_SECONDS.check(self.wait_seconds)
        if self.visibility_timeout_seconds is not None:
            VISIBILITY_TIMEOUT.check(self.visibility_timeout_seconds)
        if self.max_messages is not None:
            MAX_MESSAGES.check(self.max_messages)

    @property
    def limit(self) -> int:
        return self.max_messages or 1
