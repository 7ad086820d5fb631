"""A TCP proxy in front of the test PostgreSQL that can play a database restart.

``restart()`` does to clients what a restarting server does: every open connection is
cut at once, new connections are refused while the server is "down", then accepted
again. It never touches the real server, which other tests share. The proxy runs its
own event loop on a thread, so it keeps serving while a test blocks (waiting on a real
``retsu`` process) or runs its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit


class PostgresProxy:
    def __init__(self, database_url: str) -> None:
        parts = urlsplit(database_url)
        self._url = parts
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.connections = 0  # accepted so far

    @property
    def url(self) -> str:
        """The database URL, through the proxy."""
        netloc = f"{self._url.username}@127.0.0.1:{self.port}"
        return self._url._replace(netloc=netloc).geturl()

    def start(self) -> PostgresProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def close(self) -> None:
        self._call(self._stop_listening())
        self._call(self._cut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def cut(self) -> None:
        """Drop every open connection (the server went away), keep accepting."""
        self._call(self._cut())

    def down(self) -> None:
        """Cut every connection and refuse new ones (the server is restarting)."""
        self._call(self._stop_listening())
        self._call(self._cut())

    def up(self) -> None:
        """Accept connections again on the same port (the server is back)."""
        self._call(self._listen())

    @contextlib.contextmanager
    def restarting(self) -> Iterator[None]:
        """Down inside the block, up after it."""
        self.down()
        try:
            yield
        finally:
            self.up()

    def _call(self, coroutine: object) -> object:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)  # type: ignore[arg-type]
        return future.result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _cut(self) -> None:
        for writer in list(self._writers):
            transport = writer.transport
            transport.abort()  # a reset, as when the server process is gone
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, upstream_writer))
        try:
            await asyncio.gather(
                self._copy(reader, upstream_writer), self._copy(upstream_reader, writer)
            )
        finally:
            for side in (writer, upstream_writer):
                self._writers.discard(side)
                side.transport.abort()

    @staticmethod
    async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
