"""The migration role: apply pending migrations and exit."""

from __future__ import annotations

import logging

from retsu.adapters.postgres.engine import check_database, create_engine
from retsu.adapters.postgres.migrations import head_revision, upgrade
from retsu.entrypoints.database import StartupError, session_url, unreachable_reason
from retsu.entrypoints.settings import Settings

log = logging.getLogger("retsu.migrate")


async def migrate_database(url: str, *, timeout_seconds: float) -> None:
    engine = create_engine(url, max_connections=1, acquire_timeout_seconds=timeout_seconds)
    try:
        await check_database(engine)
    except Exception as error:
        raise StartupError(f"cannot reach PostgreSQL: {unreachable_reason(error)}") from None
    finally:
        await engine.dispose()
    await upgrade(url)
    log.info("database migrated", extra={"revision": head_revision()})


async def run_migrate(settings: Settings) -> int:
    # DDL and the migration lock (a session advisory lock) need a session of their own.
    url = session_url(settings.database, "retsu migrate")
    await migrate_database(url, timeout_seconds=settings.database.acquire_timeout_seconds)
    return 0
