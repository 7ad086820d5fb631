"""Cron expressions read by cronsim: the ``CronCalendar`` of ``retsu.domain.schedule``.

Why cronsim and not croniter (both maintained, both on the package index), measured on the
two daylight-saving days of 2026 in Europe/Berlin (docs/schedules.md has the table):

* spring forward (02:00 → 03:00): both run a fixed-time job of the skipped hour
  (``30 2 * * *``) once, at 03:00 CEST, and skip nothing else;
* fall back (03:00 → 02:00): croniter runs ``30 2 * * *`` twice (00:30Z and 01:30Z), so a
  nightly job runs twice that night; cronsim runs it once, at the first 02:30, as Debian's
  cron does, while a wildcard job (``*/30 * * * *``) runs in both copies of the hour.

cronsim states its DST rules (Debian's cron), ships type hints and has no dependencies.
Its iterator, restarted inside a repeated hour, can answer a moment before its start (its
fold handling), so every match is compared with the start in UTC and kept only when it
is strictly later.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterator
from datetime import UTC, datetime

from cronsim import CronSim, CronSimError

from retsu.domain.errors import InvalidInput

# Any moment works for checking that an expression parses and matches some day: cronsim
# refuses impossible dates (``0 0 30 2 *``) when it builds its tables.
_CHECKED_FROM = datetime(2000, 1, 1, tzinfo=UTC)


class CronsimCalendar:
    """Implements ``retsu.domain.schedule.CronCalendar``."""

    def check(self, expression: str) -> str:
        try:
            next(CronSim(expression, _CHECKED_FROM))
        except (CronSimError, StopIteration) as error:
            raise InvalidInput(
                f"cron {expression!r} is not a valid expression ({error or 'never matches'}).",
                code="invalid_cron",
            ) from None
        return expression

    def matches_after(self, expression: str, timezone: str, after: datetime) -> Iterator[datetime]:
        start = after.astimezone(UTC)
        local = start.astimezone(zoneinfo.ZoneInfo(timezone))
        for match in CronSim(expression, local):
            moment = match.astimezone(UTC)
            if moment > start:
                yield moment


CRON_CALENDAR = CronsimCalendar()
