"""Recognising PostgreSQL errors behind SQLAlchemy's wrappers, and broken connections.

A failed statement either is an answer of a working database (a constraint, a lock
timeout, a deadlock: the connection is fine) or means its connection broke. For the
second kind, what matters is whether the statement could have been committed:

* ``UNSENT``: asyncpg refused to send anything because it already knew the connection
  was closed. Nothing reached the server; running the statement again is always safe.
* ``LOST``: the connection broke while the statement may have been running (the server
  terminated the session, the socket was reset, the server is shutting down). It may
  or may not have committed.
* ``READ_ONLY``: the server refused to write (SQLSTATE 25006, "cannot execute … in a
  read-only transaction"): a standby, a demoted old primary, or a virtual IP still
  pointing at one of them right after a failover. Nothing was stored, and the session
  never will store anything: it is discarded like a broken one, and running the
  statement again on a fresh connection (which may reach the new primary) is safe.
"""

from __future__ import annotations

import enum

import asyncpg
from sqlalchemy.exc import DBAPIError

UNIQUE_VIOLATION = "23505"
FOREIGN_KEY_VIOLATION = "23503"
LOCK_NOT_AVAILABLE = "55P03"
DEADLOCK_DETECTED = "40P01"

# The server ended the session: an administrator (pg_terminate_backend, a fast or smart
# shutdown), a crash of another backend, a server still starting or stopping, the
# database dropped, an idle-session timeout.
_SERVER_ENDED_SESSION = (
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.exceptions.DatabaseDroppedError,
    asyncpg.exceptions.IdleSessionTimeoutError,
)


# asyncpg's protocol refusing to start an operation: it checks its state before sending
# anything ("... another operation (2) is in progress", '... protocol is in the "failed"
# state').
_PROTOCOL_OUT_OF_STEP = "cannot switch to state"


class Broken(enum.Enum):
    UNSENT = "unsent"
    LOST = "lost"
    READ_ONLY = "read-only server"


def sqlstate(error: DBAPIError) -> str | None:
    orig = error.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code is None:
        # asyncpg's own exception sits one level further down.
        code = getattr(getattr(orig, "__cause__", None), "sqlstate", None)
    return str(code) if code is not None else None


def constraint_name(error: DBAPIError) -> str | None:
    cause = getattr(error.orig, "__cause__", None)
    name = getattr(cause, "constraint_name", None)
    return str(name) if name is not None else None


def driver_error(error: BaseException) -> BaseException:
    """asyncpg's own exception behind SQLAlchemy's wrappers (or ``error`` itself)."""
    if isinstance(error, DBAPIError) and error.orig is not None:
        orig: BaseException = error.orig
        return orig.__cause__ if orig.__cause__ is not None else orig
    return error


def broken_connection(error: BaseException) -> Broken | None:
    """Whether ``error`` says the connection broke, and if so whether the statement may
    have reached the server; None for every other error (the connection is fine)."""
    cause = driver_error(error)
    if isinstance(cause, asyncpg.ReadOnlySQLTransactionError):
        return Broken.READ_ONLY
    if isinstance(cause, asyncpg.exceptions.InternalClientError) and str(cause).startswith(
        _PROTOCOL_OUT_OF_STEP
    ):
        # The server ended the session while the connection sat idle: asyncpg read the
        # server's FATAL message (57P01) and is waiting for the end of a reply that will
        # never come, so the next operation is refused ("cannot switch to state 12;
        # another operation (2) is in progress") before anything is sent, until the
        # closed socket is noticed a moment later. Measured: 16 concurrent callers with
        # their sessions killed every 0.3 s met it ~50 times in 30 kills.
        return Broken.UNSENT
    if isinstance(cause, asyncpg.InterfaceError):
        # Raised before anything is sent ("connection is closed", or "cannot perform
        # operation: connection is closed"); other interface errors are misuse.
        return Broken.UNSENT if "connection is closed" in str(cause) else None
    if isinstance(cause, (asyncpg.PostgresConnectionError, OSError, *_SERVER_ENDED_SESSION)):
        return Broken.LOST
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return Broken.LOST  # SQLAlchemy's own disconnect detection said so
    return None
