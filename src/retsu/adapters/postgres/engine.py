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
PLANNER_PINS = {"enable_seqscan": "off", "enable_bitmapscan": "off", "jit": "off"}
SERVER_SETTINGS = {**PLANNER_PINS, "application_name": "retsu"}

# The same pins for one transaction only (``SET LOCAL``), in one statement: what a
# transaction-mode pooler allows where a session setting is refused (see create_engine).
PIN_TRANSACTION = "SELECT " + ", ".join(
    f"set_config('{name}', '{value}', true)" for name, value in PLANNER_PINS.items()
)


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


def _pooler_safe_connect_args() -> dict[str, Any]:
    """What asyncpg is told behind a transaction-mode pooler (PgBouncer ``pool_mode =
    transaction``), where consecutive transactions of one client connection may run on
    different server sessions, and a session may serve other clients in between:

    * no startup parameter but ``application_name`` (PgBouncer refuses the others:
      ``unsupported startup parameter: enable_seqscan``); the planner pins are applied
      per transaction instead (``PIN_TRANSACTION``; the hot-path functions pin their own);
    * no prepared statement outliving a transaction: asyncpg's statement cache and
      SQLAlchemy's are off, so every statement is prepared *unnamed*, and asyncpg sends
      Parse/Describe with Flush, not Sync, so PgBouncer keeps the server session until the
      Bind/Execute/Sync that follows: prepare and run land on one session even outside a
      transaction. (PgBouncer 1.21+ can track named statements itself,
      ``max_prepared_statements``; Debian bookworm ships 1.18, which cannot.)
    """
    return {"statement_cache_size": 0, "prepared_statement_cache_size": 0}


def connect_arguments(
    *, application_name: str, timeout_seconds: float, transaction_pooler: bool
) -> dict[str, Any]:
    """The keywords each new connection is opened with (asyncpg's, and two of
    SQLAlchemy's asyncpg adapter)."""
    arguments: dict[str, Any] = {"timeout": timeout_seconds}
    if transaction_pooler:
        arguments.update(_pooler_safe_connect_args())
        arguments["server_settings"] = {"application_name": application_name}
    else:
        arguments["server_settings"] = {**SERVER_SETTINGS, "application_name": application_name}
    return arguments


def create_engine(
    url: str,
    *,
    max_connections: int = 10,
    acquire_timeout_seconds: float = 5,
    application_name: str = "retsu",
    on_pool_acquire: Callable[[float], None] | None = None,
    transaction_pooler: bool = False,
) -> AsyncEngine:
    """``on_pool_acquire(seconds)`` is called after every pool checkout (telemetry).

    ``transaction_pooler``: ``url`` leads to a transaction-mode pooler, so nothing the
    engine does may depend on a session outliving one transaction (see
    ``_pooler_safe_connect_args``)."""
    options: dict[str, Any] = {}
    if on_pool_acquire is not None:
        options["poolclass"] = _timed_pool_class(on_pool_acquire)
    engine = create_async_engine(
        async_url(url),
        pool_size=max_connections,
        max_overflow=0,
        pool_timeout=acquire_timeout_seconds,
        pool_recycle=3600,
        connect_args=connect_arguments(
            application_name=application_name,
            timeout_seconds=acquire_timeout_seconds,
            transaction_pooler=transaction_pooler,
        ),
        **options,
    )
    event.listen(engine.sync_engine, "checkout", _discard_if_closed)
    return engine


async def check_database(engine: AsyncEngine) -> None:
    """Raises when PostgreSQL cannot answer a trivial query."""
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))
