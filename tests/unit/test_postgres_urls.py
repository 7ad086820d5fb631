"""Database URLs as operators write them (libpq style) reach asyncpg correctly."""

from __future__ import annotations

import pytest

from retsu.adapters.postgres.engine import async_url
from retsu.adapters.postgres.notifications import listen_dsn


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgres://u:p@db/retsu", "postgresql+asyncpg://u:p@db/retsu"),
        ("postgresql://u@db:5433/retsu", "postgresql+asyncpg://u@db:5433/retsu"),
        ("postgresql+asyncpg://u@db/retsu", "postgresql+asyncpg://u@db/retsu"),
        ("postgresql://u@db/retsu?sslmode=require", "postgresql+asyncpg://u@db/retsu?ssl=require"),
        ("postgresql://u@db/retsu?connect_timeout=3", "postgresql+asyncpg://u@db/retsu"),
    ],
)
def test_the_engine_url_speaks_asyncpg(url: str, expected: str) -> None:
    assert async_url(url) == expected


def test_the_listen_connection_keeps_libpq_parameters() -> None:
    url = "postgres://u:p@db/retsu?sslmode=require&connect_timeout=3"
    assert listen_dsn(url) == "postgresql://u:p@db/retsu?sslmode=require&connect_timeout=3"


def test_other_schemes_are_refused() -> None:
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        async_url("mysql://u@db/retsu")
