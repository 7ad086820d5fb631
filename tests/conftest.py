"""Shared fixtures: real servers for integration tests, found or started once per session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from retsu.adapters.postgres.hosts import libpq_url
from retsu.adapters.postgres.migrations import upgrade
from tests.support.services import (
    PostgresServer,
    find_postgres,
    find_redis,
    new_database_name,
    require_services,
)


def _unavailable(reason: str) -> None:
    if require_services():
        pytest.fail(f"RETSU_REQUIRE_SERVICES is set but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    found = find_postgres()
    if isinstance(found, str):
        _unavailable(found)
        raise AssertionError("unreachable")
    yield found
    found.close()


def _plain(url: str) -> str:
    """asyncpg wants postgresql:// without a driver suffix."""
    return libpq_url(url)


async def create_database(server: PostgresServer, *, migrate: bool = True) -> str:
    name = new_database_name()
    admin = await asyncpg.connect(_plain(server.admin_url))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = server.url_for(name)
    if migrate:
        await upgrade(url)
    return url


async def drop_database(server: PostgresServer, url: str) -> None:
    name = url.rsplit("/", 1)[1].split("?", 1)[0]
    admin = await asyncpg.connect(_plain(server.admin_url))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture(scope="session")
async def database_url(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A migrated database of this test session's own, dropped at the end."""
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = find_redis()
    if url is None:
        _unavailable("no Redis at 127.0.0.1:6379 (set RETSU_TEST_REDIS_URL)")
        raise AssertionError("unreachable")
    return url
