"""What-ifs: Retsu's SQL functions changed in a benchmark run's own database, to measure what
a part of them costs (SPEC §7b compares some features with "the statements before").

Each one reads the function's definition from the database (``pg_get_functiondef``: the body
and its ``SET`` clauses as migrated), rewrites a known piece of it, fails loudly when that
piece is not found exactly as often as expected (a migration changed it: the what-if must be
revisited, not silently measure nothing), and puts the original back when it ends. Only the
run's own database is touched: it is created and dropped by the run. Sessions that already
called a function pick up the new definition at their next call (PL/pgSQL recompiles a
function whose catalogue row changed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import TracebackType

import asyncpg

from bench.common import plain_url


@dataclass(frozen=True)
class Rewrite:
    function: str
    pattern: re.Pattern[str]
    replacement: str
    expected: int  # how many times the pattern occurs in the migrated definition


# Attempts (SPEC §3.11, migration 0009): the claim appends an attempt record to the row
# (``attempts = retsu_new_attempt(...)``, both the fast path and the general one), the
# acknowledge of a queue that keeps completed messages closes it. Without them the column is
# written back unchanged (``attempts = m.attempts``, NULL for a message never delivered): the
# same UPDATE of the same row, minus building the JSON array and storing it.
_NEW_ATTEMPT = re.compile(r"attempts = retsu_new_attempt\(\s*m\.attempts,[^)]*\)")
_CLOSE_ACKNOWLEDGED = re.compile(
    r"attempts = retsu_close_attempt\(m\.attempts, now\(\), 'acknowledged'\)"
)
ATTEMPTS_NOT_RECORDED = (
    Rewrite("retsu_dequeue", _NEW_ATTEMPT, "attempts = m.attempts", 1),
    Rewrite("retsu_claim_flow", _NEW_ATTEMPT, "attempts = m.attempts", 1),
    Rewrite("retsu_acknowledge", _CLOSE_ACKNOWLEDGED, "attempts = m.attempts", 1),
)


async def rewritten(connection: asyncpg.Connection, rewrite: Rewrite) -> tuple[str, str]:
    """The function's definition as migrated, and the same with the rewrite applied."""
    original = await connection.fetchval("SELECT pg_get_functiondef($1::regproc)", rewrite.function)
    changed, count = rewrite.pattern.subn(rewrite.replacement, original)
    if count != rewrite.expected:
        raise RuntimeError(
            f"what-if: expected {rewrite.expected} × {rewrite.pattern.pattern!r} in "
            f"{rewrite.function}, found {count}"
        )
    return original, changed


class WhatIf:
    """``async with WhatIf(url, ATTEMPTS_NOT_RECORDED):`` the functions rewritten, in that
    database only, until the block ends."""

    def __init__(self, database_url: str, rewrites: tuple[Rewrite, ...]) -> None:
        self._url = plain_url(database_url)
        self._rewrites = rewrites
        self._originals: list[str] = []

    async def __aenter__(self) -> WhatIf:
        connection = await asyncpg.connect(self._url)
        try:
            changes = [await rewritten(connection, r) for r in self._rewrites]
            async with connection.transaction():
                for original, changed in changes:
                    await connection.execute(changed)
                    self._originals.append(original)
        finally:
            await connection.close()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        connection = await asyncpg.connect(self._url)
        try:
            async with connection.transaction():
                for original in self._originals:
                    await connection.execute(original)
        finally:
            await connection.close()
        self._originals.clear()
