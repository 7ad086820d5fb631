"""The no-op handlers the consumer-runner scenarios run (bench/consumers.py).

Loaded *by the consumers under test*, in processes of their own: `retsu-worker
bench.consumer_handlers:noop` and `pgq run bench.consumer_handlers:pgqueuer`. So this
module imports nothing at import time beyond the standard library, and the handler does
as little as a no-op can while still telling the benchmark when the drain began: it
counts its calls and appends ``time.monotonic()`` (one clock for every process on the
machine) to the file ``BENCH_CONSUMER_STAMPS`` names at the first call and at the
``BENCH_CONSUMER_COUNT``-th.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from typing import Any

ENTRYPOINT = "bench"  # PgQueuer's entrypoint name (bench/pgqueuer_system.py enqueues to it)

_target = int(os.environ.get("BENCH_CONSUMER_COUNT", "0"))
_stamps = os.environ.get("BENCH_CONSUMER_STAMPS", "")
_calls = 0


def _stamp() -> None:
    if _stamps:
        with open(_stamps, "a") as file:
            file.write(f"{time.monotonic()!r}\n")


async def noop(message: Any) -> None:
    """The handler: a Retsu ``Message`` or a PgQueuer ``Job``, ignored."""
    global _calls
    _calls += 1
    if _calls == 1 or _calls == _target:
        _stamp()


@contextlib.asynccontextmanager
async def pgqueuer() -> AsyncIterator[Any]:
    """`pgq run` factory: one ``QueueManager`` on one asyncpg connection (``BENCH_PGQ_DSN``),
    the no-op as its only entrypoint — the shape of PgQueuer's own examples."""
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    connection = await asyncpg.connect(os.environ["BENCH_PGQ_DSN"])
    try:
        manager = QueueManager(Queries(AsyncpgDriver(connection)))
        manager.entrypoint(ENTRYPOINT)(noop)
        yield manager
    finally:
        await connection.close()
