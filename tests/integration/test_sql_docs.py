"""docs/sql.md's examples, run as written (SPEC §3.13: at least psycopg and asyncpg).

Each code block after an ``<!-- example: NAME -->`` line is executed against a fresh
database migrated by `retsu migrate`, with a real `retsu api` for the consumer's dequeue,
as a login role that holds ``retsu_producer`` and owns the application's tables — the set-up
the document describes.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from retsu.adapters.postgres.hosts import libpq_url
from tests.conftest import create_database, drop_database
from tests.support.processes import RetsuProcess, free_port, retsu_env, run_retsu
from tests.support.services import PostgresServer

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"
_EXAMPLE = re.compile(r"<!-- example: ([\w-]+)[^>]*-->\n```python\n(.*?)\n```", re.DOTALL)

APP_TABLES = """
CREATE TABLE orders (
    id bigserial PRIMARY KEY, customer text NOT NULL, total_cents integer NOT NULL);
CREATE TABLE shipments (order_id bigint PRIMARY KEY REFERENCES orders (id));
"""


def examples() -> dict[str, str]:
    found = dict(_EXAMPLE.findall(DOC.read_text()))
    assert set(found) == {"psycopg-outbox", "sqlalchemy-outbox", "asyncpg-exactly-once"}
    return found


def run_example(name: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"docs_sql_{name.replace('-', '_')}"}
    exec(compile(examples()[name], f"docs/sql.md:{name}", "exec"), namespace)
    return namespace


@dataclass
class Shop:
    dsn: str  # the application's role
    api: str
    queue_id: str


@pytest.fixture(scope="module")
async def docs_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server, migrate=False)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture(scope="module")
async def shop_role(postgres_server: PostgresServer, docs_database: str) -> AsyncIterator[str]:
    role = f"retsu_docs_shop_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(libpq_url(postgres_server.admin_url))
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN")
    finally:
        await admin.close()
    yield role
    await drop_database(postgres_server, docs_database)  # its grants first
    admin = await asyncpg.connect(libpq_url(postgres_server.admin_url))
    try:
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
    finally:
        await admin.close()


@pytest.fixture(scope="module")
def shop(
    docs_database: str, shop_role: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shop]:
    migrated = run_retsu(["migrate"], retsu_env(docs_database))
    assert migrated.returncode == 0, migrated.stderr + migrated.stdout
    dsn = libpq_url(docs_database).replace("postgres@", f"{shop_role}@", 1)

    async def prepare() -> None:
        owner = await asyncpg.connect(libpq_url(docs_database))
        try:
            await owner.execute(f"GRANT retsu_producer TO {shop_role}")  # the documented grant
            await owner.execute(f"CREATE SCHEMA {shop_role} AUTHORIZATION {shop_role}")
        finally:
            await owner.close()
        app = await asyncpg.connect(dsn)
        try:
            await app.execute(APP_TABLES)  # in the role's own schema ("$user")
        finally:
            await app.close()

    asyncio.run(prepare())
    port = free_port()
    log = Path(tmp_path_factory.mktemp("sql-docs")) / "api.log"
    process = RetsuProcess(["api"], retsu_env(docs_database, http__port=str(port)), log)
    base = f"http://127.0.0.1:{port}"
    try:
        process.wait_until_ready(f"{base}/health/ready")
        created = httpx.post(f"{base}/v1/queues", json={"name": "orders"}, timeout=10)
        assert created.status_code == 201, created.text
        yield Shop(dsn, base, str(created.json()["id"]))
    finally:
        assert process.stop() == 0, process.output()


def ready(shop: Shop) -> tuple[int, int]:
    stats = httpx.get(f"{shop.api}/v1/queues/{shop.queue_id}", timeout=10).json()["stats"]
    return stats["ready"], stats["in_flight"]


async def test_the_outbox_and_exactly_once_examples_run_as_documented(shop: Shop) -> None:
    # psycopg: the order and its message commit together.
    place_order = run_example("psycopg-outbox")["place_order"]
    with psycopg.connect(shop.dsn) as conn:
        first = place_order(conn, "ada", 4200)
        second = place_order(conn, "grace", 1300)
    assert ready(shop) == (2, 0)

    # SQLAlchemy: the same through a Session.
    place_order_orm = run_example("sqlalchemy-outbox")["place_order_orm"]
    engine = sa.create_engine(shop.dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with Session(engine) as session:
            third = place_order_orm(session, "edsger", 900)
    finally:
        engine.dispose()
    assert ready(shop) == (3, 0)

    # asyncpg: each shipment and its acknowledgement commit together.
    consumer = run_example("asyncpg-exactly-once")
    conn = await asyncpg.connect(shop.dsn)
    try:
        async with httpx.AsyncClient(base_url=shop.api, timeout=30) as http:
            while await consumer["ship_next"](http, conn, shop.queue_id):
                pass
            shipped = await conn.fetch("SELECT order_id FROM shipments ORDER BY 1")
            assert [r["order_id"] for r in shipped] == sorted([first, second, third])
            assert ready(shop) == (0, 0)

            # A delivery whose lease ended is not acknowledged, and its shipment is rolled
            # back with it; the redelivery ships the order, once.
            with psycopg.connect(shop.dsn) as sync:
                fourth = place_order(sync, "barbara", 100)
            response = await http.post(
                f"/v1/queues/{shop.queue_id}/messages/dequeue",
                json={"visibility_timeout_seconds": 1},
            )
            late = response.json()
            await asyncio.sleep(1.2)
            with pytest.raises(consumer["LeaseLost"]):
                await consumer["ship"](conn, shop.queue_id, late)
            assert (
                await conn.fetchval("SELECT count(*) FROM shipments WHERE order_id = $1", fourth)
                == 0
            )
            assert await consumer["ship_next"](http, conn, shop.queue_id)
            assert (
                await conn.fetchval("SELECT count(*) FROM shipments WHERE order_id = $1", fourth)
                == 1
            )
            assert ready(shop) == (0, 0)
    finally:
        await conn.close()


async def test_an_order_rolled_back_after_its_enqueue_leaves_no_message(shop: Shop) -> None:
    place_order = run_example("psycopg-outbox")["place_order"]
    before = ready(shop)
    placed: list[int] = []
    with psycopg.connect(shop.dsn) as conn:
        with pytest.raises(RuntimeError), conn.transaction():
            # Inside an outer transaction, the example's own becomes a savepoint.
            placed.append(place_order(conn, "ada", 4200))
            raise RuntimeError("the request failed after the order was placed")
        row = conn.execute("SELECT count(*) FROM orders WHERE id = %s", (placed[0],)).fetchone()
        assert row is not None and row[0] == 0
    assert ready(shop) == before
