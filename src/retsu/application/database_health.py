"""The operator's view of database health (SPEC §10): whether something has held back the
xmin horizon long enough to warn about, and who (the console's banner)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from retsu.application.ports import DatabaseHealthReader
from retsu.domain.database_health import (
    HORIZON_WARNING_SECONDS,
    HolderKey,
    HorizonHolder,
    since_first_seen,
)


@dataclass(frozen=True, slots=True)
class HorizonWarning:
    holder: HorizonHolder
    held_seconds: float


class DatabaseHealthService:
    def __init__(
        self, reader: DatabaseHealthReader, threshold_seconds: float = HORIZON_WARNING_SECONDS
    ) -> None:
        self._reader = reader
        self._threshold = threshold_seconds
        # When this process first saw each holder hold its xid (as the collector does).
        self._first_seen: dict[HolderKey, datetime] = {}

    async def horizon_warning(self) -> HorizonWarning | None:
        """The holder to name when the horizon has been held for more than the threshold
        (5 minutes), else None."""
        health = await self._reader.read_database_health()
        health, self._first_seen = since_first_seen(health, self._first_seen)
        holder = health.blocking(self._threshold)
        if holder is None:
            return None
        return HorizonWarning(holder, holder.age_seconds(health.taken_at) or 0.0)
