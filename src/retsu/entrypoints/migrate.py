"""The migration role: apply pending migrations and exit."""

from __future__ import annotations

import logging

from retsu.adapters.postgres.engine import check_database, create_engine
from retsu.adapters.postgres.migrations import (
    current_revision,
    head_revision,
    revisions_after,
    upgrade,
)
from retsu.entrypoints.database import StartupError, session_url, unreachable_reason
from retsu.entrypoints.settings import Settings

log = logging.getLogger("retsu.migrate")


async def migrate_database(url: str, *, timeout_seconds: float) -> list[str]:
    """Apply what is pending; the migrations that were (``revisions_after``). Another
    ``retsu migrate`` running at the same moment waits for this one's lock and then finds
    nothing to apply."""
    engine = create_engine(url, max_connections=1, acquire_timeout_seconds=timeout_seconds)
    try:
        await check_database(engine)
        before = await current_revision(engine)
    except Exception as error:
        raise StartupError(f"cannot reach PostgreSQL: {unreachable_reason(error)}") from None
    finally:
        await engine.dispose()
    await upgrade(url)
    applied = revisions_after(before)
    log.info("database migrated", extra={"revision": head_revision(), "applied": len(applied)})
    return applied


async def run_migrate(settings: Settings) -> int:
    # DDL and the migration lock (a session advisory lock) need a session of their own.
    url = session_url(settings.database, "retsu migrate")
    applied = await migrate_database(url, timeout_seconds=settings.database.acquire_timeout_seconds)
    # Said on stdout whatever the log level: what an operator running it wants to see.
    if applied:
        print(f"retsu migrate: applied {len(applied)} migration(s):")
        for revision in applied:
            print(f"  {revision}")
    else:
        print("retsu migrate: nothing to apply")
    print(f"retsu migrate: the database is at revision {head_revision()}")
    return 0
