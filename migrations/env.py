"""Alembic environment: runs migrations over asyncpg, one migrator at a time."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa
from alembic import context
from sqlalchemy.engine import Connection

from retsu.adapters.postgres.engine import create_engine

# Two `retsu migrate` jobs started together must not both apply a revision.
MIGRATION_LOCK_KEY = 0x72657473  # "rets"


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=None, transaction_per_migration=True)
    connection.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    try:
        with context.begin_transaction():
            context.run_migrations()
    finally:
        connection.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
        connection.commit()


async def _run_online() -> None:
    url = context.config.attributes.get("database_url") or context.config.get_main_option(
        "sqlalchemy.url"
    )
    engine = create_engine(str(url), max_connections=1, application_name="retsu-migrate")
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("Retsu migrations run online only: use `retsu migrate`.")
asyncio.run(_run_online())
