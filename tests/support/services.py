"""Finding (or starting) the PostgreSQL and Redis servers the integration tests use.

Each test session creates its own database and drops it at the end; it never
touches data it did not create. Without a reachable PostgreSQL the session starts
an embedded one (pgserver); without Redis, Redis tests are skipped with a reason.
With RETSU_REQUIRE_SERVICES=1 (CI) a missing server fails the run instead.
"""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def require_services() -> bool:
    return os.environ.get("RETSU_REQUIRE_SERVICES", "").lower() in ("1", "true", "yes", "on")


def reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 1
        ):
            return True
    except OSError:
        return False


@dataclass
class PostgresServer:
    admin_url: str  # a URL to a maintenance database where CREATE DATABASE works
    description: str
    _embedded: object | None = None

    def url_for(self, database: str) -> str:
        parts = urlsplit(self.admin_url)
        return parts._replace(path=f"/{database}").geturl()

    def close(self) -> None:
        if self._embedded is not None:
            self._embedded.cleanup()  # type: ignore[attr-defined]


def find_postgres() -> PostgresServer | str:
    """The server to use, or the reason there is none."""
    url = os.environ.get("RETSU_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    if reachable(url, 5432):
        return PostgresServer(url, f"PostgreSQL at {urlsplit(url).hostname}")
    try:
        import pgserver  # type: ignore[import-untyped]
    except ImportError:
        return f"no PostgreSQL at {url} and pgserver is not installed"
    data = tempfile.mkdtemp(prefix="retsu-test-pg-")
    server = pgserver.get_server(data, cleanup_mode="delete")
    return PostgresServer(server.get_uri(), "embedded PostgreSQL (pgserver)", server)


def find_redis() -> str | None:
    """A Redis URL, or None."""
    url = os.environ.get("RETSU_TEST_REDIS_URL", DEFAULT_REDIS_URL)
    return url if reachable(url, 6379) else None


def new_database_name(prefix: str = "retsu_test") -> str:
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:10]}"
