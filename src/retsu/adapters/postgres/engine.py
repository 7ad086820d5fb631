"""Engine creation: SQLAlchemy's asyncio engine over asyncpg."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

# Every Retsu query is an index walk bounded by a LIMIT or a key. With stale
# statistics (a freshly loaded backlog) the planner was measured choosing a bitmap
# heap scan plus a sort over every candidate row for the claim query (~100 claims/s
# instead of ~2,000/s). Switching those plan shapes off for Retsu's own sessions
# makes the plan independent of statistics; see docs/performance.md.
SERVER_SETTINGS = {
    "enable_seqscan": "off",
    "enable_bitmapscan": "off",
    "jit": "off",
    "application_name": "retsu",
}


def async_url(url: str) -> str:
    """Accept postgres://, postgresql:// and postgresql+asyncpg:// URLs."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql", "postgresql+asyncpg"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    else:
        raise ValueError(f"not a PostgreSQL URL (scheme {parsed.drivername!r})")
    return parsed.render_as_string(hide_password=False)


def create_engine(
    url: str,
    *,
    max_connections: int = 10,
    acquire_timeout_seconds: float = 5,
    application_name: str = "retsu",
) -> AsyncEngine:
    return create_async_engine(
        async_url(url),
        pool_size=max_connections,
        max_overflow=0,
        pool_timeout=acquire_timeout_seconds,
        pool_recycle=3600,
        connect_args={
            "server_settings": {**SERVER_SETTINGS, "application_name": application_name},
            "timeout": acquire_timeout_seconds,
        },
    )


async def check_database(engine: AsyncEngine) -> None:
    """Raises when PostgreSQL cannot answer a trivial query."""
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))
