"""Running the Alembic migrations programmatically (`retsu migrate`, `retsu dev`, tests)."""

from __future__ import annotations

import asyncio
from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine


def migrations_directory() -> Path:
    """The installed copy (wheel), else the repository's `migrations/` (editable install)."""
    packaged = Path(str(resources.files("retsu") / "_migrations"))
    if (packaged / "env.py").is_file():
        return packaged
    source = Path(__file__).resolve().parents[4] / "migrations"
    if (source / "env.py").is_file():
        return source
    raise FileNotFoundError("Retsu's migrations directory is missing from this installation")


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    config.attributes["database_url"] = database_url
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()


def revisions_after(current: str | None) -> list[str]:
    """The revisions an upgrade from ``current`` (None: an empty database) to head
    applies, oldest first, each by its file's name (``0012_sql_interface``)."""
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused"))
    head = script.get_current_head()
    if head is None or current == head:
        return []
    pending = reversed(list(script.iterate_revisions(head, current or "base")))
    return [Path(r.path).stem for r in pending]


def _upgrade(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "head")


async def upgrade(database_url: str) -> None:
    """Apply every pending migration. Alembic's env runs its own event loop, so it
    gets a worker thread of its own."""
    await asyncio.to_thread(_upgrade, database_url)


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as connection:
        return await connection.run_sync(
            lambda sync: MigrationContext.configure(sync).get_current_revision()
        )
