"""Start-up checks every role runs before it serves: reachable and migrated."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.engine import check_database
from retsu.adapters.postgres.migrations import current_revision, head_revision


class StartupError(Exception):
    """A one-line reason the role cannot start."""


async def ensure_database_ready(engine: AsyncEngine, *, timeout_seconds: float) -> None:
    try:
        await asyncio.wait_for(check_database(engine), timeout_seconds)
        revision = await asyncio.wait_for(current_revision(engine), timeout_seconds)
    except (TimeoutError, OSError, Exception) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise StartupError(f"cannot reach PostgreSQL: {reason}") from None
    head = head_revision()
    if revision != head:
        raise StartupError(
            f"the database schema is at revision {revision or 'none'}, this Retsu needs {head}: "
            "run `retsu migrate` first"
        )
