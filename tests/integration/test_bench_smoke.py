"""The benchmark's own code against a real `retsu api` for about a second (bench/)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import create_database, drop_database
from tests.support.services import PostgresServer

pytestmark = pytest.mark.integration

bench_common = pytest.importorskip("bench.common", reason="the bench extra is not installed")


@pytest.fixture
async def bench_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server, migrate=False)
    yield url
    await drop_database(postgres_server, url)


async def test_the_load_generator_drives_a_real_api(
    postgres_server: PostgresServer, bench_database: str
) -> None:
    from bench import scenarios
    from bench.common import CpuWindow, plain_url
    from bench.floor import Statements
    from bench.retsu_system import RetsuSystem

    database_url = plain_url(bench_database)
    system = RetsuSystem(database_url, workers=1, max_connections=4)
    cfg = scenarios.Config(duration=0.5, connections=4, drain_single=200)
    await system.start()  # `retsu migrate`, then `retsu api`
    try:
        name = database_url.rsplit("/", 1)[1]
        window = CpuWindow(postgres_server.admin_url, [name], system.api_pids())

        await system.new_queue()
        enqueued = await scenarios.enqueue_closed_loop(system, cfg, False, "enqueue-1", window)
        assert enqueued.latency.errors == {}
        assert enqueued.messages > 0
        assert enqueued.cpu is not None and enqueued.cpu.api > 0

        await system.new_queue()
        drained = await scenarios.drain(system, cfg, False, "dequeue-ack-1", window)
        assert drained.latency.errors == {}
        assert drained.messages == cfg.drain_single  # prefilled through Retsu's schema rules
        assert drained.latency.summary("ack") is not None
    finally:
        await system.stop()
    assert system.api.process is not None and system.api.process.returncode == 0, (
        system.api.output()
    )
    # The floor compiles Retsu's own statements for asyncpg.
    statements = Statements.from_retsu()
    assert "$1" in statements.dequeue.sql and "queue_id" in statements.dequeue.order
