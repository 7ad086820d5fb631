"""Server secrets stored by ``retsu migrate`` (migration 0003), read once per process."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.tables import server_secret

CURSOR_SIGNING_KEY = "cursor_signing_key"


class PostgresServerSecrets:
    """Implements ServerSecrets: the shared cursor-signing key, read lazily on first use
    (so a process that never pages never reads it) and then kept for the process's life."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._cursor_signing_key: bytes | None = None
        self._lock = asyncio.Lock()

    async def cursor_signing_key(self) -> bytes:
        if self._cursor_signing_key is None:
            async with self._lock:
                if self._cursor_signing_key is None:
                    self._cursor_signing_key = await self._read(CURSOR_SIGNING_KEY)
        return self._cursor_signing_key

    async def _read(self, name: str) -> bytes:
        statement = sa.select(server_secret.c.value).where(server_secret.c.name == name)

        async def read(connection: AsyncConnection) -> bytes | None:
            value = (await connection.execute(statement)).scalar_one_or_none()
            return None if value is None else bytes(value)

        value = await self._database.read(read, operation="read_secret")
        if not value:
            raise RuntimeError(
                f"server secret {name!r} is missing: run `retsu migrate` against this database"
            )
        return bytes(value)
