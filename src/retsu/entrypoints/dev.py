"""`retsu dev`: migrations, the API and all four workers (the scheduler included) in one
process, on an embedded PostgreSQL when no database.url is configured."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

from msgspec.structs import replace

from retsu.entrypoints import serving
from retsu.entrypoints.api import run_api
from retsu.entrypoints.containers import DevContainer
from retsu.entrypoints.database import session_url
from retsu.entrypoints.embedded import embedded_postgres
from retsu.entrypoints.migrate import migrate_database
from retsu.entrypoints.settings import PostgresUrl, Settings, redacted_url

log = logging.getLogger("retsu.dev")


def with_database_url(settings: Settings, url: str) -> Settings:
    return replace(settings, database=replace(settings.database, url=PostgresUrl(url)))


def _redis_answers(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return Path(parts.path).exists()
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 0.3):
            return True
    except OSError:
        return False


def without_absent_redis(settings: Settings) -> Settings:
    """`retsu dev` on a laptop often has no Redis: rather than falling back to
    PostgreSQL and warning every few seconds, run without the shared cache (which
    only speeds up metadata reads) and say so once."""
    distributed = settings.cache.distributed
    if not distributed.enabled or _redis_answers(distributed.url):
        return settings
    log.warning(
        "retsu dev: no Redis answers at the configured cache.distributed.url; "
        "running without the shared cache"
    )
    cache = replace(settings.cache, distributed=replace(distributed, enabled=False))
    return replace(settings, cache=cache)


def _http_url(host: str, port: int) -> str:
    # A wildcard address is not one a browser can open; the loopback one answers too.
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _banner(settings: Settings, database: str) -> str:
    """What a newcomer needs once `retsu dev` is up, printed whatever the log level."""
    base = _http_url(settings.http.bind_address, settings.http.port)
    lines = [
        "retsu dev is ready (Ctrl-C to stop)",
        f"  API:       {base}  (routes: {base}/openapi.json, metrics: {base}/metrics)",
    ]
    if settings.console.enabled:
        lines.append(f"  console:   {base}/console/")
    lines.append(f"  database:  {database}")
    return "\n".join(lines)


async def _run_with_url(settings: Settings, url: str, database: str | None = None) -> int:
    # Before migrating: a port in use fails at once, not after the database work.
    sockets = [serving.bind(settings.http.bind_address, settings.http.port)]
    settings = without_absent_redis(with_database_url(settings, url))
    await migrate_database(
        session_url(settings.database, "retsu migrate"),
        timeout_seconds=settings.database.acquire_timeout_seconds,
    )
    dev = DevContainer(settings=settings)
    banner = _banner(settings, database or redacted_url(url))
    return await run_api(
        settings,
        dev.api.container,
        workers=list(dev.workers.workers().values()),
        workers_sleeper=dev.workers.sleeper(),
        sockets=sockets,
        on_listening=lambda: print(banner, file=sys.stderr, flush=True),
    )


async def run_dev(settings: Settings, *, workdir: Path | None = None) -> int:
    if settings.database.url is not None:
        return await _run_with_url(settings, settings.database.url)
    directory = (workdir or Path.cwd()) / ".retsu"
    with embedded_postgres(directory) as url:
        database = f"{url}  (embedded PostgreSQL; data in {directory / 'pgdata'})"
        return await _run_with_url(settings, url, database)
