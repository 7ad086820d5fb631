"""Consumers (SPEC §3.7) and queue history (SPEC §3.8) on PostgreSQL and real processes:
racing coalesced writes, the last write on a graceful shutdown, and exact history counts
from real collectors across a leader change."""

from __future__ import annotations

import asyncio
import random
import signal
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.consumers import PostgresConsumers
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.engine import create_engine
from retsu.domain.consumer import ConsumerSighting, SeenBetween
from tests.contract.repository_contract import add, new_queue
from tests.support.postgres import PostgresStorage
from tests.support.processes import RetsuProcess, free_port, retsu_env

pytestmark = pytest.mark.integration

COLLECTOR = "RETSU_WORKER__QUEUE__STATE_METRICS_COLLECTOR__"


@pytest.fixture(scope="module")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, max_connections=8)
    yield engine
    await engine.dispose()


async def test_racing_writes_of_many_processes_merge_exactly(engine: AsyncEngine) -> None:
    """Eight "API processes" write overlapping consumers at once, each in its own order:
    no deadlock, no lost update — deliveries add up, first/last seen are the extremes."""
    storage = PostgresStorage(engine)
    queues = [await add(storage, new_queue()) for _ in range(3)]  # type: ignore[arg-type]
    consumers = PostgresConsumers(Database(engine))
    base = datetime.now(UTC).replace(microsecond=0)
    names = [f"w{i}" for i in range(20)]

    def one_process(p: int) -> list[ConsumerSighting]:
        keys = [(q.id, n) for q in queues for n in names]
        random.Random(p).shuffle(keys)  # the order a dict happened to hold them in
        moment = base + timedelta(seconds=p)
        return [ConsumerSighting(q, n, moment, moment, p + 1) for q, n in keys]

    for _ in range(3):
        await asyncio.gather(*(consumers.record_consumers(one_process(p)) for p in range(8)))

    records = await consumers.list_consumers(
        limit=100, after=None, queue_id=queues[0].id, seen=SeenBetween()
    )
    assert len(records) == 20
    for record in records:
        assert record.deliveries == 3 * sum(range(1, 9))
        assert record.first_seen_at == base
        assert record.last_seen_at == base + timedelta(seconds=7)


async def _rows(
    engine: AsyncEngine, statement: str, **parameters: object
) -> list[sa.Row[tuple[object, ...]]]:
    async with engine.connect() as connection:
        return list((await connection.execute(sa.text(statement), parameters)).all())


async def test_the_api_writes_what_it_saw_on_a_graceful_shutdown(
    database_url: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    port = free_port()
    api = RetsuProcess(
        ["api"], {**retsu_env(database_url), "RETSU_HTTP__PORT": str(port)}, tmp_path / "api.log"
    )
    base = f"http://127.0.0.1:{port}"
    try:
        api.wait_until_ready(f"{base}/health/ready")
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            queue = (
                await http.post("/v1/queues", json={"name": f"q-{uuid.uuid4().hex[:12]}"})
            ).json()
            await http.post(
                f"/v1/queues/{queue['id']}/messages", json={"payload": "a", "priority": "LOW"}
            )
            named = {"retsu-consumer": "shutdown-test"}
            taken = await http.post(f"/v1/queues/{queue['id']}/messages/dequeue", headers=named)
            assert taken.status_code == 200
        # Well inside the 5 s interval: nothing written yet, the shutdown writes it.
        api.signal(signal.SIGTERM)
        assert api.stop() == 0, api.output()
    finally:
        if api.process.poll() is None:
            api.stop()
    rows = await _rows(
        engine,
        "SELECT name, deliveries FROM queue_consumer WHERE queue_id = :q",
        q=uuid.UUID(queue["id"]),
    )
    assert [(r.name, r.deliveries) for r in rows] == [("shutdown-test", 1)]


async def test_history_from_real_collectors_is_exact_across_a_leader_change(
    database_url: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    """A scripted workload over HTTP while collectors snapshot every 5 s; the leader is
    killed half-way and a standby takes over. The interval counts sum to what happened."""
    port = free_port()
    env = retsu_env(database_url)
    api = RetsuProcess(["api"], {**env, "RETSU_HTTP__PORT": str(port)}, tmp_path / "api.log")

    def collector(n: int) -> RetsuProcess:
        return RetsuProcess(
            ["worker", "run", "queue", "state-metrics-collector"],
            {
                **env,
                "RETSU_WORKER__MANAGEMENT__PORT": str(free_port()),
                f"{COLLECTOR}COLLECTION_INTERVAL_SECONDS": "5",  # the shortest allowed
                f"{COLLECTOR}LEADERSHIP_RETRY_INTERVAL_SECONDS": "5",
            },
            tmp_path / f"collector-{n}.log",
        )

    api_base = f"http://127.0.0.1:{port}"
    first = collector(1)  # the first leader
    second: RetsuProcess | None = None
    keys = ("enqueued", "delivered", "acknowledged", "dead_lettered", "expired")

    def summed(points: list[dict[str, int]]) -> dict[str, int]:
        return {k: sum(p[k] for p in points) for k in keys}

    try:
        api.wait_until_ready(f"{api_base}/health/ready")
        async with httpx.AsyncClient(base_url=api_base, timeout=10) as http:
            settings = {"max_delivery_attempts": 1, "visibility_timeout_seconds": 1}
            name = f"h-{uuid.uuid4().hex[:12]}"
            created = await http.post("/v1/queues", json={"name": name, **settings})
            queue_id = created.json()["id"]
            messages = f"/v1/queues/{queue_id}/messages"
            path = f"/v1/queues/{queue_id}/history"

            async def history_until(expected: dict[str, int]) -> list[dict[str, int]]:
                points: list[dict[str, int]] = []
                for _ in range(60):
                    points = (await http.get(path, params={"minutes": 5})).json()["points"]
                    if summed(points) == expected:
                        return points
                    await asyncio.sleep(1)
                raise AssertionError((expected, points))

            batch = [{"payload": str(i), "priority": "MEDIUM"} for i in range(10)]
            await http.post(messages + "/batch", json={"messages": batch})
            taken = (await http.post(messages + "/dequeue", json={"max_messages": 4})).json()
            for m in taken["messages"][:2]:
                receipt = {"receipt_handle": m["receipt_handle"]}
                await http.post(f"{messages}/{m['id']}/acknowledge", json=receipt)
            zero = dict.fromkeys(keys, 0)
            await history_until({**zero, "enqueued": 10, "delivered": 4, "acknowledged": 2})
            # The first leader has written snapshots; a standby joins, the leader is killed
            # (SIGKILL: no goodbye) and the standby takes over.
            second = collector(2)
            await asyncio.sleep(2)  # started, and a standby
            first.process.kill()
            first.process.wait()
            await asyncio.sleep(1)  # the two unacknowledged leases (1 s) have ended
            await http.post(messages + "/batch", json={"messages": batch[:3]})
            again = (await http.post(messages + "/dequeue", json={"max_messages": 1})).json()
            assert len(again["messages"]) == 1  # the two exhausted ones are dead-lettered
            expected = {**zero, "enqueued": 13, "delivered": 5, "acknowledged": 2}
            points = await history_until({**expected, "dead_lettered": 2})
            assert [p["at"] for p in points] == sorted(p["at"] for p in points)
        assert "leadership acquired" in second.output()
        # Each stored snapshot's counts are the differences of its cumulative totals.
        rows = await _rows(
            engine,
            "SELECT enqueued, enqueued_total, delivered, delivered_total FROM queue_history "
            "WHERE queue_id = :q ORDER BY at",
            q=uuid.UUID(queue_id),
        )
        running = 0
        for row in rows:
            running += row.enqueued
            assert running == row.enqueued_total
        assert rows[-1].delivered_total == sum(r.delivered for r in rows) == 5
    finally:
        for process in (second, first, api):
            if process is not None and process.process.poll() is None:
                process.stop()
