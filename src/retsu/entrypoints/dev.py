"""`retsu dev`: migrations, the API and all three workers in one process, on an
embedded PostgreSQL when no database.url is configured."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from retsu.entrypoints.api import run_api
from retsu.entrypoints.containers import ApiContainer, WorkerContainer
from retsu.entrypoints.embedded import embedded_postgres
from retsu.entrypoints.migrate import migrate_database
from retsu.entrypoints.settings import Settings

log = logging.getLogger("retsu.dev")


def with_database_url(settings: Settings, url: str) -> Settings:
    return dataclasses.replace(settings, database=dataclasses.replace(settings.database, url=url))


async def _run_with_url(settings: Settings, url: str) -> int:
    await migrate_database(url, timeout_seconds=settings.database.acquire_timeout_seconds)
    settings = with_database_url(settings, url)
    api = ApiContainer(settings=settings)
    workers = WorkerContainer(settings=settings)
    # One process: one pool and one metrics registry for the API and the workers, so
    # the API's /metrics also shows the workers' counters and the state gauges.
    workers.storage.engine.override(api.storage.engine)
    workers.core.metrics.override(api.core.metrics)
    return await run_api(
        settings,
        api,
        workers=list(workers.workers().values()),
        workers_sleeper=workers.sleeper(),
    )


async def run_dev(settings: Settings, *, workdir: Path | None = None) -> int:
    if settings.database.url is not None:
        return await _run_with_url(settings, settings.database.url)
    with embedded_postgres((workdir or Path.cwd()) / ".retsu") as url:
        log.warning(
            "retsu dev: embedded PostgreSQL with data under %s", (workdir or Path.cwd()) / ".retsu"
        )
        return await _run_with_url(settings, url)
