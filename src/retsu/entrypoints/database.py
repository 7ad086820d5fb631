"""Start-up checks every role runs before it serves: reachable and migrated."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.engine import check_database
from retsu.adapters.postgres.migrations import current_revision, head_revision

if TYPE_CHECKING:
    from retsu.entrypoints.settings import DatabaseSettings


class StartupError(Exception):
    """A one-line reason the role cannot start (exit 1)."""


class ConfigurationError(StartupError):
    """A one-line reason the configuration alone keeps the role from starting, found only
    once the role is known (exit 2, as every configuration error)."""


async def ensure_database_ready(engine: AsyncEngine, *, timeout_seconds: float) -> None:
    try:
        await asyncio.wait_for(check_database(engine), timeout_seconds)
        revision = await asyncio.wait_for(current_revision(engine), timeout_seconds)
    except (TimeoutError, OSError, Exception) as error:
        raise StartupError(f"cannot reach PostgreSQL: {unreachable_reason(error)}") from None
    head = head_revision()
    if revision != head:
        raise StartupError(
            f"the database schema is at revision {revision or 'none'}, this Retsu needs {head}: "
            "run `retsu migrate` first"
        )


def unreachable_reason(error: BaseException) -> str:
    """The first line of ``error``, with a hint when a transaction pooler (PgBouncer)
    refused the session settings Retsu sends to PostgreSQL itself."""
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    if "unsupported startup parameter" in reason:
        reason += (
            " (database.url leads to a connection pooler: set database.pooler to "
            "transaction, or database.session_url to a direct PostgreSQL URL; "
            "docs/configuration.md)"
        )
    return reason


def session_url(database: DatabaseSettings, needs: str) -> str:
    """The URL for what needs a session of its own (``needs`` says what, for the error):
    ``database.session_url``, else ``database.url`` — unless that leads to a transaction
    pooler, where a session does not outlive a transaction."""
    if database.transaction_pooler and database.session_url in (None, database.url):
        raise ConfigurationError(
            f"database.pooler is transaction, so {needs} needs database.session_url "
            "(a direct PostgreSQL URL)"
        )
    url = database.session
    if url is None:
        raise ConfigurationError("database.url is not set (RETSU_DATABASE__URL)")
    return url
