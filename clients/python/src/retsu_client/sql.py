"""Enqueue and acknowledge inside your own database transaction (SPEC §3.13, docs/sql.md).

An application that shares Retsu's PostgreSQL database calls ``retsu.enqueue`` and
``retsu.acknowledge`` on its own connection, so a message exists if and only if the
transaction that caused it commits (the outbox pattern), and an acknowledgement happens if
and only if the work's own writes commit (exactly-once effects). These two helpers build
that call for the connection you have::

    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("INSERT INTO orders …")
        sql.enqueue(conn, "orders", payload)          # a message id (str)

    async with pool.acquire() as conn, conn.transaction():    # asyncpg
        message_id = await sql.enqueue(conn, "orders", payload)

They work with a psycopg 3 ``Connection`` (the call returns the result), a psycopg 3
``AsyncConnection`` or an asyncpg ``Connection`` (the call returns an awaitable). Neither
driver is a dependency of this package: the connection's type says which one it is, and
nothing is imported. With SQLAlchemy, pass the driver's connection
(``connection.connection.driver_connection``) or call the functions with ``text()``.

Errors are the client's exceptions for the API's codes (``QueueNotFound``,
``InvalidPriority``, ``IdempotencyKeyConflict``, …, with ``status`` as the HTTP route
would answer), raised from the database error (SQLSTATE ``RT001``); as with any failed
statement, the transaction is then aborted and must be rolled back.
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any

from retsu_client.errors import APIError, error_for_code
from retsu_client.models import Queue

__all__ = ["SQLSTATE", "acknowledge", "enqueue"]

# The SQLSTATE of the SQL interface's refusals; the message starts with the API's code.
SQLSTATE = "RT001"
# The HTTP status each code has on the routes the two functions mirror.
_STATUS = {"queue_not_found": 404, "idempotency_key_conflict": 409, "payload_too_large": 413}

_ENQUEUE = (
    "SELECT retsu.enqueue({}::text, {}::text, {}::text, {}::integer, {}::integer, {}::text, "
    "{}::text)"
)
_ACKNOWLEDGE = "SELECT retsu.acknowledge({}::text, {}::uuid, {}::text, {}::text)"


def enqueue(
    conn: Any,
    queue: str | uuid.UUID | Queue,
    payload: str,
    *,
    priority: str = "MEDIUM",
    ttl_seconds: int | None = None,
    delay_seconds: int | None = None,
    group: str | None = None,
    idempotency_key: str | None = None,
) -> Any:
    """Enqueue ``payload`` on ``queue`` (a name, an id or a ``Queue``) in ``conn``'s
    current transaction: the message id as a string — for an async connection, an
    awaitable of it. With ``idempotency_key``, a repeat of the same message answers the
    first one's id (also one enqueued over HTTP with that key)."""
    arguments = [
        _queue(queue),
        payload,
        priority,
        ttl_seconds,
        delay_seconds,
        group,
        idempotency_key,
    ]
    return _call(conn, _ENQUEUE, arguments, str)


def acknowledge(
    conn: Any,
    queue: str | uuid.UUID | Queue,
    message_id: str | uuid.UUID,
    receipt_handle: str,
    *,
    result: str | None = None,
) -> Any:
    """Acknowledge a delivery in ``conn``'s current transaction: True when this call
    acknowledged it, False for the idempotent cases (already acknowledged, a stale handle,
    an ended lease) — for an async connection, an awaitable of that."""
    arguments = [_queue(queue), str(message_id), receipt_handle, result]
    return _call(conn, _ACKNOWLEDGE, arguments, bool)


def _queue(queue: str | uuid.UUID | Queue) -> str:
    return queue.id if isinstance(queue, Queue) else str(queue)


def _driver(conn: Any) -> str:
    """``asyncpg``, ``psycopg`` or ``psycopg-async``, from the connection's type alone."""
    package = type(conn).__module__.split(".", 1)[0]
    if package == "asyncpg":  # a Connection, or a pool's PoolConnectionProxy
        return "asyncpg"
    if package == "psycopg":
        return "psycopg-async" if inspect.iscoroutinefunction(conn.execute) else "psycopg"
    raise TypeError(
        f"retsu_client.sql needs a psycopg 3 or asyncpg connection, not {type(conn).__name__} "
        "(with SQLAlchemy, pass connection.connection.driver_connection)"
    )


def _call(conn: Any, template: str, arguments: list[Any], convert: type[Any]) -> Any:
    driver = _driver(conn)
    if driver == "asyncpg":
        query = template.format(*(f"${n}" for n in range(1, len(arguments) + 1)))
        return _asyncpg(conn, query, arguments, convert)
    query = template.format(*(["%s"] * len(arguments)))
    if driver == "psycopg-async":
        return _psycopg_async(conn, query, arguments, convert)
    try:
        row = conn.execute(query, arguments).fetchone()
    except Exception as error:
        refusal = _refusal(error)
        if refusal is None:
            raise
        raise refusal from error
    return convert(row[0])


async def _asyncpg(conn: Any, query: str, arguments: list[Any], convert: type[Any]) -> Any:
    try:
        value = await conn.fetchval(query, *arguments)
    except Exception as error:
        refusal = _refusal(error)
        if refusal is None:
            raise
        raise refusal from error
    return convert(value)


async def _psycopg_async(conn: Any, query: str, arguments: list[Any], convert: type[Any]) -> Any:
    try:
        row = await (await conn.execute(query, arguments)).fetchone()
    except Exception as error:
        refusal = _refusal(error)
        if refusal is None:
            raise
        raise refusal from error
    return convert(row[0])


def _refusal(error: Exception) -> APIError | None:
    """The client's exception for a refusal of the SQL interface, else None."""
    if getattr(error, "sqlstate", None) != SQLSTATE:
        return None
    diagnostics = getattr(error, "diag", None)  # psycopg
    message = getattr(diagnostics, "message_primary", None) or str(error)
    code, _, detail = message.partition(": ")
    status = _STATUS.get(code, 400)
    return error_for_code(code, status)(detail, code=code, status=status)
