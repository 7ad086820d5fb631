"""A message's attempt record as stored (migration 0009): a JSON array, one compact object
per delivery — ``{"n", "at", "c", "end", "out", "err"}`` — read into domain Attempts.

The keys are short because the claim writes one object per delivery on the hot path;
``domain.attempts.finish`` then reads an attempt left open as in flight or ended by its
lease (storage only writes what cannot be told later).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from retsu.domain.attempts import Attempt, Outcome


class _Stored(msgspec.Struct, frozen=True):
    n: int
    at: datetime
    c: str | None = None
    end: datetime | None = None
    out: Outcome | None = None
    err: str | None = None


_DECODER = msgspec.json.Decoder(list[_Stored])


def read_attempts(raw: str | bytes | list[Any] | None) -> tuple[Attempt, ...]:
    """The attempts of a stored ``attempts`` column (NULL: never delivered) — as JSON text,
    or as the driver's decoded list."""
    if raw is None:
        return ()
    stored = msgspec.convert(raw, list[_Stored]) if isinstance(raw, list) else _DECODER.decode(raw)
    return tuple(
        Attempt(
            number=a.n,
            delivered_at=a.at,
            consumer=a.c,
            ended_at=a.end,
            outcome=a.out,
            error=a.err,
        )
        for a in stored
    )
