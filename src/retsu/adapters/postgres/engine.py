"""Engine creation: SQLAlchemy's asyncio engine over asyncpg."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry, PoolProxiedConnection

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
    """Accept postgres://, postgresql:// and postgresql+asyncpg:// URLs.

    SQLAlchemy hands URL query parameters to asyncpg.connect() as keywords, which
    knows libpq's ``sslmode`` as ``ssl`` and has no ``connect_timeout`` (Retsu's own
    ``database.acquire_timeout_seconds`` bounds connecting), so those two are mapped.
    """
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql", "postgresql+asyncpg"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    else:
        raise ValueError(f"not a PostgreSQL URL (scheme {parsed.drivername!r})")
    query = dict(parsed.query)
    if "sslmode" in query:
        query["ssl"] = query.pop("sslmode")
    query.pop("connect_timeout", None)
    return parsed.set(query=query).render_as_string(hide_password=False)


def _timed_pool_class(on_acquire: Callable[[float], None]) -> type[AsyncAdaptedQueuePool]:
    """The engine's pool class, reporting how long each checkout took (waiting for a free
    connection, or opening a new one). A subclass rather than an event because SQLAlchemy
    has no "checkout started" event; it survives ``dispose()`` (``recreate`` keeps the
    class)."""

    class TimedAsyncAdaptedQueuePool(AsyncAdaptedQueuePool):
        # Keep SQLAlchemy's logger name, so `logging.filter` entries for it still apply.
        _sqla_logger_namespace = "sqlalchemy.pool.impl.AsyncAdaptedQueuePool"

        def connect(self) -> PoolProxiedConnection:
            start = time.perf_counter()
            try:
                return super().connect()
            finally:
                on_acquire(time.perf_counter() - start)

    return TimedAsyncAdaptedQueuePool


def _discard_if_closed(
    dbapi_connection: Any, record: ConnectionPoolEntry, proxy: PoolProxiedConnection
) -> None:
    """At every checkout: a pooled connection that asyncpg already knows is closed (the
    server terminated the session, or restarted, while it sat in the pool) is replaced
    by a fresh one before anyone uses it. ``is_closed()`` reads a local flag: no round
    trip, unlike SQLAlchemy's ``pool_pre_ping``, so the hot path pays nothing for it."""
    driver = proxy.driver_connection
    if driver is not None and driver.is_closed():
        raise DisconnectionError("the server closed this pooled connection")


def create_engine(
    url: str,
    *,
    max_connections: int = 10,
    acquire_timeout_seconds: float = 5,
    application_name: str = "retsu",
    on_pool_acquire: Callable[[float], None] | None = None,
) -> AsyncEngine:
    """``on_pool_acquire(seconds)`` is called after every pool checkout (telemetry)."""
    options: dict[str, Any] = {}
    if on_pool_acquire is not None:
        options["poolclass"] = _timed_pool_class(on_pool_acquire)
    engine = create_async_engine(
        async_url(url),
        pool_size=max_connections,
        max_overflow=0,
        pool_timeout=acquire_timeout_seconds,
        pool_recycle=3600,
        connect_args={
            "server_settings": {**SERVER_SETTINGS, "application_name": application_name},
            "timeout": acquire_timeout_seconds,
        },
        **options,
    )
    event.listen(engine.sync_engine, "checkout", _discard_if_closed)
    return engine


async def check_database(engine: AsyncEngine) -> None:
    """Raises when PostgreSQL cannot answer a trivial query."""
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))
