"""What happened to each delivery of a message (SPEC §3.11).

Every delivery is an attempt: its number, when it was delivered, to which consumer (the
dequeue's ``Retsu-Consumer``, or None), when and how it ended, and the last ``error`` a
visibility change gave it. An attempt that storage has not closed (no outcome recorded)
ended, if it ended, by its lease: ``finish`` reads it as ``in_flight`` while the lease is
active and as ``lease_expired`` at the lease's end otherwise — so storage writes only what
cannot be told later (a release, an acknowledgement, an error).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from retsu.domain.errors import InvalidInput

# What one message keeps, oldest first (SPEC §3.11: "at most the latest 100"; a message
# is dead-lettered after at most 100 deliveries, so this is never reached today).
MAX_ATTEMPTS_KEPT = 100
ERROR_MAX_LENGTH = 4096
RESULT_MAX_LENGTH = 65536


class Outcome(enum.StrEnum):
    IN_FLIGHT = "in_flight"
    ACKNOWLEDGED = "acknowledged"
    RELEASED = "released"
    LEASE_EXPIRED = "lease_expired"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class Attempt:
    number: int
    delivered_at: datetime
    consumer: str | None
    ended_at: datetime | None = None
    outcome: Outcome | None = None
    error: str | None = None


def finish(
    attempts: Iterable[Attempt], *, leased: bool, lease_end: datetime | None
) -> list[Attempt]:
    """The attempts as an operator reads them: an open last attempt is ``in_flight``
    while the message's lease is active (``leased``), else it ended with its lease
    (``lease_expired`` at ``lease_end``). Only the latest ``MAX_ATTEMPTS_KEPT``."""
    found = list(attempts)[-MAX_ATTEMPTS_KEPT:]
    if found and found[-1].outcome is None:
        last = found[-1]
        found[-1] = (
            replace(last, outcome=Outcome.IN_FLIGHT, ended_at=None)
            if leased
            else replace(last, outcome=Outcome.LEASE_EXPIRED, ended_at=lease_end)
        )
    return found


def last_error(attempts: Iterable[Attempt]) -> str | None:
    """The error of the latest attempt that had one (a dead letter's ``last_error``)."""
    errors = [a.error for a in attempts if a.error is not None]
    return errors[-1] if errors else None


def validate_error(error: str | None) -> str | None:
    """A visibility change's ``error``: at most 4,096 characters, else ``invalid_error``."""
    if error is not None and len(error) > ERROR_MAX_LENGTH:
        raise InvalidInput(
            f"error must be at most {ERROR_MAX_LENGTH} characters.", code="invalid_error"
        )
    if error is not None and "\x00" in error:
        raise InvalidInput("error must not contain U+0000.", code="invalid_error")
    return error


def validate_result(result: str | None) -> str | None:
    """An acknowledge's ``result``: at most 65,536 characters, else ``invalid_result``."""
    if result is not None and len(result) > RESULT_MAX_LENGTH:
        raise InvalidInput(
            f"result must be at most {RESULT_MAX_LENGTH} characters.", code="invalid_result"
        )
    if result is not None and "\x00" in result:
        raise InvalidInput("result must not contain U+0000.", code="invalid_result")
    return result
