"""Engine creation: SQLAlchemy's asyncio engine over asyncpg."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any
from urllib.parse import unquote, urlsplit

import asyncpg
from sqlalchemy import event, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry, PoolProxiedConnection

from retsu.adapters.postgres.hosts import PostgresHosts
from retsu.adapters.postgres.hot_connections import HotConnections

# Every Retsu query is an index walk bounded by a LIMIT or a key. With stale
# statistics (a freshly loaded backlog) the planner was measured choosing a bitmap
# heap scan plus a sort over every candidate row for the claim query (~100 claims/s
# instead of ~2,000/s). Switching those plan shapes off for Retsu's own sessions
# makes the plan independent of statistics; see docs/performance.md.
PLANNER_PINS = {"enable_seqscan": "off", "enable_bitmapscan": "off", "jit": "off"}
# Retsu's transactions are written for READ COMMITTED (a statement after a lock wait sees
# what the waited-for transaction committed: a queue's deletion, which locks the queue's
# row FOR UPDATE and then deletes its messages, sees the message a concurrent enqueue
# committed; migration 0017 dropped the foreign key that also caught it). So a database
# whose default is stricter does not change them: direct sessions start with it, and the
# engine begins every transaction with it explicitly (which a transaction pooler passes).
ISOLATION = "read committed"
SERVER_SETTINGS = {
    **PLANNER_PINS,
    "default_transaction_isolation": ISOLATION,
    "application_name": "retsu",
}

# The same pins for one transaction only (``SET LOCAL``), in one statement: what a
# transaction-mode pooler allows where a session setting is refused (see create_engine).
PIN_TRANSACTION = "SELECT " + ", ".join(
    f"set_config('{name}', '{value}', true)" for name, value in PLANNER_PINS.items()
)


def _label_url(hosts: PostgresHosts) -> URL:
    """What SQLAlchemy shows of the engine (its ``url``, reprs, its logs): the first host,
    without the password. It never connects with it: ``create_engine`` gives it a creator."""
    parts = urlsplit(hosts.first_url)
    return URL.create(
        "postgresql+asyncpg",
        username=unquote(parts.username) if parts.username else None,
        host=parts.hostname,
        port=parts.port,
        database=unquote(parts.path.lstrip("/")) or None,
    )


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


# The hot statements (database.HotStatement registers each one's SQL).
LEARNED_AT_CONNECT: list[str] = []


async def _learn_types(connection: Any) -> None:
    """Behind a transaction pooler, at each new connection: prepare the hot statements
    once, in a transaction that is rolled back.

    asyncpg learns a type it has no built-in codec for (``uuid[]``, ``smallint[]``,
    ``int[]``: the hot statements' arrays) by introspecting it the first time a
    statement uses it, in statements of their own: read ``jit``, set it off *for the
    session*, run the introspection query, set it back. Through PgBouncer in transaction
    mode those land on different server sessions: the session-level ``jit`` change leaks
    to other clients' sessions, and the introspection runs with JIT on (measured: the
    first seconds of a benchmark through PgBouncer spent 0.9 PostgreSQL cores on it,
    enqueues 7-21/s instead of ~100/s). Inside one transaction it is one server session,
    JIT is off for it, the rollback undoes every setting, and the client connection keeps
    the codecs for good.
    """
    transaction = connection.transaction()
    await transaction.start()
    try:
        await connection.execute("SET LOCAL jit = off")
        for sql in LEARNED_AT_CONNECT:
            await connection.prepare(sql)
    finally:
        await transaction.rollback()


class PoolerSafeConnection(asyncpg.Connection):  # type: ignore[misc]
    """asyncpg's connection, behind a transaction pooler: learning a type never changes a
    session setting.

    To learn a type, asyncpg reads ``jit``, sets it off *for the session* and, after its
    catalog query, sets it back — unless it was off already. Two ways that leaks onto a
    pooled server session, which other clients then get (seen as a flaky PgBouncer
    topology test under load: one pooled session in four with ``jit = off``):

    * inside one of our transactions, which pin ``jit`` off with ``SET LOCAL``
      (``PIN_TRANSACTION``): asyncpg reads "off", sets it off for the session and never
      sets it back, and the COMMIT keeps the session-level value;
    * outside a transaction: the three statements may run on three server sessions.

    So the learning runs inside a transaction of its own (a savepoint when the caller's
    transaction is open) with ``SET LOCAL jit = off``, rolled back afterwards — it only
    read the catalog — which undoes asyncpg's ``set_config`` with it. Types are normally
    learned at connect (``_learn_types``); this covers any learned later (a statement
    using a new type, or SQLAlchemy making asyncpg reload its schema state after an
    error). ``_introspect_types`` is asyncpg's private hook: asyncpg is pinned below 1.0
    and tests/integration/test_pooler_safe_connection.py holds the contract."""

    async def _introspect_types(self, typeoids: Sequence[int], timeout: float | None) -> Any:  # noqa: ASYNC109 -- asyncpg's signature
        transaction = self.transaction()
        await transaction.start()
        try:
            await self.execute("SET LOCAL jit = off")
            return await super()._introspect_types(typeoids, timeout)
        finally:
            await transaction.rollback()


def _learn_types_at_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    dbapi_connection.run_async(_learn_types)


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
    * type introspection that changes no session setting (``PoolerSafeConnection``).
    """
    return {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "connection_class": PoolerSafeConnection,
    }


def connect_arguments(
    *, application_name: str, timeout_seconds: float, transaction_pooler: bool
) -> dict[str, Any]:
    """The keywords each new connection is opened with (asyncpg's, and one of
    SQLAlchemy's asyncpg adapter: ``prepared_statement_cache_size``)."""
    arguments: dict[str, Any] = {"timeout": timeout_seconds}
    if transaction_pooler:
        arguments.update(_pooler_safe_connect_args())
        arguments["server_settings"] = {"application_name": application_name}
    else:
        arguments["server_settings"] = {**SERVER_SETTINGS, "application_name": application_name}
    return arguments


class PooledEngine(AsyncEngine):
    """SQLAlchemy's asyncio engine plus the connections its hot statements keep checked
    out between statements (``hot_connections.py``); ``dispose`` returns those first."""

    __slots__ = ("hot",)

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        keep: int,
        on_acquire: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(engine.sync_engine)
        self.hot = HotConnections(keep=keep, on_acquire=on_acquire)

    async def dispose(self, close: bool = True) -> None:
        await self.hot.close()
        try:
            await super().dispose(close)
        finally:
            self.hot.reopen()


def create_engine(
    url: str,
    *,
    max_connections: int = 10,
    acquire_timeout_seconds: float = 5,
    application_name: str = "retsu",
    on_pool_acquire: Callable[[float], None] | None = None,
    transaction_pooler: bool = False,
) -> PooledEngine:
    """``on_pool_acquire(seconds)`` is called after every pool checkout (telemetry).

    ``url`` may name several hosts (``hosts.py``): every new pooled connection goes to the
    first that gives a usable session, so after a failover the pool refills from the new
    primary by itself.

    ``transaction_pooler``: ``url`` leads to a transaction-mode pooler, so nothing the
    engine does may depend on a session outliving one transaction (see
    ``_pooler_safe_connect_args``)."""
    options: dict[str, Any] = {}
    if on_pool_acquire is not None:
        options["poolclass"] = _timed_pool_class(on_pool_acquire)
    hosts = PostgresHosts(url)
    arguments = connect_arguments(
        application_name=application_name,
        timeout_seconds=acquire_timeout_seconds,
        transaction_pooler=transaction_pooler,
    )
    adapter = {
        name: arguments.pop(name)
        for name in ("prepared_statement_cache_size",)
        if name in arguments
    }

    def creator() -> Any:
        # SQLAlchemy's own ``async_creator`` in the form its source recommends for passing
        # the adapter's arguments too: the dialect's DBAPI shim, opening the connection
        # with our coroutine (every host of the URL) instead of asyncpg.connect.
        dbapi = engine.sync_engine.dialect.loaded_dbapi
        return dbapi.connect(async_creator_fn=partial(hosts.connect, **arguments), **adapter)

    async_engine = create_async_engine(
        _label_url(hosts),
        creator=creator,
        pool_size=max_connections,
        max_overflow=0,
        pool_timeout=acquire_timeout_seconds,
        pool_recycle=3600,
        isolation_level=ISOLATION.upper(),
        **options,
    )
    # Half the pool at most is kept by the hot statements; the rest always cycles
    # through the pool for everything else.
    engine = PooledEngine(async_engine, keep=max_connections // 2, on_acquire=on_pool_acquire)
    event.listen(engine.sync_engine, "checkout", _discard_if_closed)
    if transaction_pooler:
        event.listen(engine.sync_engine, "connect", _learn_types_at_connect)
    return engine


async def check_database(engine: AsyncEngine) -> None:
    """Raises when PostgreSQL cannot answer a trivial query."""
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))
