"""Shared fixtures: real servers for integration tests, found or started once per session."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Mapping

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
    try:
        yield found
    finally:
        _drop_template(found)
        found.close()


def _plain(url: str) -> str:
    """asyncpg wants postgresql:// without a driver suffix."""
    return libpq_url(url)


# A migrated database is cloned from one migrated once per session (and per server):
# `CREATE DATABASE ... TEMPLATE` copies it in a fraction of the time the migrations take.
# The template is this session's own (named like its other databases) and is dropped with
# the session's server fixture; nothing connects to it after its migration.
_templates: dict[str, str] = {}
_NEW_CURSOR_KEY = """
    UPDATE server_secret
    SET value = uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), created_at = now()
    WHERE name = 'cursor_signing_key'
"""
_template_lock = threading.Lock()


async def _execute(admin_url: str, statement: str) -> None:
    admin = await asyncpg.connect(_plain(admin_url))
    try:
        await admin.execute(statement)
    finally:
        await admin.close()


async def _migrated_template(server: PostgresServer) -> str:
    template = _templates.get(server.admin_url)
    if template is None:
        template = new_database_name("retsu_test_template")
        await _execute(server.admin_url, f'CREATE DATABASE "{template}"')
        try:
            await upgrade(server.url_for(template))
        except BaseException:
            await _execute(server.admin_url, f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
            raise
        with _template_lock:
            kept = _templates.setdefault(server.admin_url, template)
        if kept != template:  # another task made one meanwhile: keep that one
            await _execute(server.admin_url, f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
        template = kept
    return template


def _drop_template(server: PostgresServer) -> None:
    with _template_lock:
        template = _templates.pop(server.admin_url, None)
    if template is None:
        return
    statement = f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)'
    # A thread of its own: no event loop may be running there.
    thread = threading.Thread(target=asyncio.run, args=(_execute(server.admin_url, statement),))
    thread.start()
    thread.join()


async def create_database(
    server: PostgresServer, *, migrate: bool = True, settings: Mapping[str, str] | None = None
) -> str:
    """A new database of this session's own: migrated to head (a copy of a database
    migrated once) unless ``migrate=False``, which leaves it empty. ``settings``: defaults
    every session of the database starts with (``ALTER DATABASE … SET``)."""
    name = new_database_name()
    if not migrate:
        await _execute(server.admin_url, f'CREATE DATABASE "{name}"')
    else:
        template = await _migrated_template(server)
        await _execute(server.admin_url, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    for setting, value in (settings or {}).items():
        await _execute(server.admin_url, f"ALTER DATABASE \"{name}\" SET {setting} = '{value}'")
    url = server.url_for(name)
    if migrate:
        # The one random value migration 0003 stores: each database gets its own, as
        # `retsu migrate` would have made it.
        await _execute(url, _NEW_CURSOR_KEY)
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
