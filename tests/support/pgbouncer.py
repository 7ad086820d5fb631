"""Debian's PgBouncer in transaction pooling mode, as a private subprocess for a test.

Found on PATH or in /usr/sbin (Debian installs it there); when it is missing and the
tests run as root, ``find_pgbouncer`` installs it with apt-get (as ``.ci/run`` does).
PgBouncer refuses to run as root, so as root it runs as the ``postgres`` user, from a
directory that user can read.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

INSTALL = ["apt-get", "install", "-y", "-q", "pgbouncer"]


def _which() -> str | None:
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")


def find_pgbouncer() -> str:
    """The pgbouncer executable, installed first when missing and possible; else
    ``FileNotFoundError`` with the reason."""
    found = _which()
    if found is not None:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(INSTALL, capture_output=True, timeout=300, check=False)
        found = _which()
        if found is not None:
            return found
        raise FileNotFoundError("pgbouncer is not installed and `apt-get install pgbouncer` failed")
    raise FileNotFoundError("pgbouncer is not installed (apt-get install pgbouncer)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """``pool_mode = transaction`` in front of the PostgreSQL of ``upstream_url``, trusting
    its user (the test server trusts it too). ``pool_size`` server sessions per database
    and user: fewer than the clients, so sessions are really shared between them."""

    def __init__(self, executable: str, upstream_url: str, log_path: Path, pool_size: int) -> None:
        upstream = urlsplit(upstream_url)
        self.user = upstream.username or "postgres"
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="retsu-pgbouncer-"))
        self.dir.chmod(0o755)
        (self.dir / "userlist.txt").write_text(f'"{self.user}" ""\n')
        host = upstream.hostname or "127.0.0.1"
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={host} port={upstream.port or 5432}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            "max_client_conn = 500\n"
            f"default_pool_size = {pool_size}\n"
            "server_login_retry = 1\n"
            f"admin_users = {self.user}\n"
        )
        argv = [executable, str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:
            for path in self.dir.iterdir():
                shutil.chown(path, "postgres", "postgres")
            argv = ["runuser", "-u", "postgres", "--", *argv]
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self._wait_listening(10)

    def _wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start: {self._log.name}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"pgbouncer not listening on {self.port}")

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
