"""The embedded PostgreSQL of `retsu dev`: real PostgreSQL 16 from the pgserver wheel.

Its data lives under `.retsu/` in the working directory, so messages survive a
restart; the server stops when `retsu dev` exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from retsu.entrypoints.database import ConfigurationError

log = logging.getLogger("retsu.dev")

DATABASE_NAME = "retsu"


def _give_pgserver_a_runtime_directory(private: Path) -> None:
    """pgserver keeps its lock file in platformdirs' user runtime directory, which it asks
    for at import. platformdirs warns (RuntimeDirWarning) when XDG_RUNTIME_DIR is unset,
    as for root in a container, or names a directory that is not private (mode 0700, ours):
    then point it at a private directory under `.retsu/`."""
    current = os.environ.get("XDG_RUNTIME_DIR")
    if current and _is_private_directory(current):
        return
    private.mkdir(mode=0o700, exist_ok=True)
    private.chmod(0o700)  # mkdir's mode is filtered by the umask
    os.environ["XDG_RUNTIME_DIR"] = str(private)


def _is_private_directory(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    mode = stat.S_IMODE(info.st_mode)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and mode == 0o700


@contextlib.contextmanager
def embedded_postgres(directory: Path) -> Iterator[str]:
    """Start (or reuse) the embedded server and yield a URL to Retsu's database in it."""
    directory.mkdir(parents=True, exist_ok=True)
    _give_pgserver_a_runtime_directory(directory / "run")
    try:
        import pgserver
    except ImportError:
        raise ConfigurationError(
            "no database.url is set and the embedded PostgreSQL is not installed: "
            "pip install 'retsu-server[embedded]' or set RETSU_DATABASE__URL"
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
