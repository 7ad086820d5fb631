"""Recognising PostgreSQL errors behind SQLAlchemy's wrappers."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

UNIQUE_VIOLATION = "23505"
FOREIGN_KEY_VIOLATION = "23503"
LOCK_NOT_AVAILABLE = "55P03"
DEADLOCK_DETECTED = "40P01"


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
