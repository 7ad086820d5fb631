"""Pooled connections the hot statements keep checked out between one statement and the next.

Checking a connection out of SQLAlchemy's pool and returning it costs the process more
than the hot statement it runs: measured on this project's 2-core VM, ~400 µs of CPU per
statement through ``engine.connect()`` against ~100 µs for the statement on a connection
already held (two greenlet switches, a ``Connection`` and a pool fairy built and torn
down, the checkout event and the reset on return). A plain asyncpg pool is no cheaper
(~300 µs: its acquire and release are as heavy). So the hot path keeps what it used:

* after a hot statement its connection goes onto a small stack instead of back to the
  pool (at most half the pool, so other work always finds connections in the pool), and
  the next hot statement takes it from there — no pool round;
* work that needs a connection of its own (``Database.read`` / ``transaction``) also takes
  one from the stack before asking the pool, and returns it to the pool: idle connections
  on the stack never make it wait;
* a connection idle for ``IDLE_SECONDS`` goes back to the pool (when traffic stops the
  pool holds them, as before), and so does one held for ``MAX_HELD_SECONDS``, so the
  pool's recycling still sees every connection;
* a connection found closed on the stack (the server ended the session while it sat
  there: asyncpg's local flag, no round trip) is invalidated and the next one is tried,
  as the pool's checkout hook does (``engine._discard_if_closed``);
* ``PooledEngine.dispose()`` returns them all first, so an engine disposed at shutdown (or
  by a test) leaves none open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("retsu.adapters.postgres")

IDLE_SECONDS = 1.0
MAX_HELD_SECONDS = 60.0


class HotConnection:
    """One checked-out connection: SQLAlchemy's wrapper and asyncpg's connection under it."""

    __slots__ = ("connection", "driver", "held_since", "idle_since")

    def __init__(self, connection: AsyncConnection, driver: Any, held_since: float) -> None:
        self.connection = connection
        self.driver = driver
        self.held_since = held_since
        self.idle_since = held_since


class HotConnections:
    """The stack (last in, first out: the busiest connections stay warm; the rest age out)."""

    def __init__(self, *, keep: int, on_acquire: Callable[[float], None] | None = None) -> None:
        self._keep = max(1, keep)
        # Taking a kept connection is an acquisition too (db_pool_acquire_duration_seconds
        # counts every connection an operation got, from the pool or from here).
        self._on_acquire = on_acquire
        self._idle: list[HotConnection] = []
        self._trimmer: asyncio.Task[None] | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._idle)

    async def take(self) -> HotConnection | None:
        """An idle connection that is not known to be closed, or None."""
        start = time.perf_counter()
        while self._idle:
            held = self._idle.pop()
            if not held.driver.is_closed():
                if self._on_acquire is not None:
                    self._on_acquire(time.perf_counter() - start)
                return held
            await _discard(held.connection, invalidate=True)
        return None

    async def put(self, held: HotConnection) -> None:
        """After a hot statement succeeded (or failed without breaking its connection):
        keep it for the next one, or return it to the pool."""
        now = time.monotonic()
        if held.driver.is_closed():
            await _discard(held.connection, invalidate=True)
            return
        full = len(self._idle) >= self._keep
        if self._closed or full or now - held.held_since >= MAX_HELD_SECONDS:
            await _discard(held.connection, invalidate=False)
            return
        held.idle_since = now
        self._idle.append(held)
        if self._trimmer is None:
            self._trimmer = asyncio.get_running_loop().create_task(self._trim())

    async def close(self) -> None:
        """Return every idle connection to the pool; nothing is kept after this."""
        self._closed = True
        trimmer, self._trimmer = self._trimmer, None
        if trimmer is not None and trimmer is not asyncio.current_task():
            trimmer.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await trimmer
        idle, self._idle = self._idle, []
        for held in idle:
            await _discard(held.connection, invalidate=False)

    def reopen(self) -> None:
        """After ``close``: keep connections again (an engine is usable after dispose)."""
        self._closed = False

    async def _trim(self) -> None:
        try:
            while self._idle:
                await asyncio.sleep(IDLE_SECONDS)
                cutoff = time.monotonic() - IDLE_SECONDS
                stale = [held for held in self._idle if held.idle_since <= cutoff]
                if stale:
                    self._idle = [held for held in self._idle if held.idle_since > cutoff]
                    for held in stale:
                        await _discard(held.connection, invalidate=False)
        finally:
            if self._trimmer is asyncio.current_task():
                self._trimmer = None


async def _discard(connection: AsyncConnection, *, invalidate: bool) -> None:
    """Back to the pool (or, invalidated, out of it). A connection the server dropped may
    fail to close cleanly; it is gone either way, and nothing was running on it."""
    try:
        if invalidate:
            await connection.invalidate()
        await connection.close()
    except Exception as error:  # only logged: the connection is discarded either way
        log.debug("a kept connection did not close cleanly: %r", error)
