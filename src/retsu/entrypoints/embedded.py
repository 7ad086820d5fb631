"""The embedded PostgreSQL of `retsu dev`: real PostgreSQL 16 from the pgserver wheel.

Its data lives under `.retsu/` in the working directory, so messages survive a
restart; the server stops when `retsu dev` exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from retsu.entrypoints.database import StartupError

log = logging.getLogger("retsu.dev")

DATABASE_NAME = "retsu"


@contextlib.contextmanager
def embedded_postgres(directory: Path) -> Iterator[str]:
    """Start (or reuse) the embedded server and yield a URL to Retsu's database in it."""
    directory.mkdir(parents=True, exist_ok=True)
    # pgserver asks platformdirs for a runtime directory at import; give it ours
    # rather than a warning about a missing XDG_RUNTIME_DIR.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(directory))
    try:
        import pgserver
    except ImportError:
        raise StartupError(
            "no database.url is set and the embedded PostgreSQL is not installed: "
            "pip install 'retsu[embedded]' or set RETSU_DATABASE__URL"
        ) from None
    data = directory / "pgdata"
    server = pgserver.get_server(str(data), cleanup_mode="stop")  # type: ignore[attr-defined]
    try:
        exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")
        if "1 row" not in exists:
            server.psql(f'CREATE DATABASE "{DATABASE_NAME}";')
        socket_dir = server.get_uri().split("host=", 1)[1].split("&", 1)[0]
        log.info("embedded PostgreSQL running", extra={"data": str(data)})
        yield f"postgresql://postgres@/{DATABASE_NAME}?host={quote(socket_dir, safe='/')}"
    finally:
        server.cleanup()
