"""Migration 0017 on a database holding messages: it rewrites neither hot table, keeps the
planner's statistics, and its domains still refuse what the table CHECKs refused."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest
from alembic import command

from retsu.adapters.postgres.migrations import alembic_config
from tests.conftest import create_database, drop_database
from tests.support.services import PostgresServer
from tests.support.timeshift import plain_url

_TABLES = ("queue_message", "queue_state_rollup")


async def test_0017_rewrites_neither_table_and_keeps_their_statistics(
    postgres_server: PostgresServer,
) -> None:
    url = await create_database(postgres_server, migrate=False)
    try:
        await asyncio.to_thread(command.upgrade, alembic_config(url), "0016")
        connection = await asyncpg.connect(plain_url(url))
        try:
            queue_id = uuid.uuid4()
            await connection.execute(
                "INSERT INTO queue (id, name, visibility_timeout_seconds, "
                "max_delivery_attempts, default_message_ttl_seconds) "
                "VALUES ($1, 'stored', 30, 5, 3600)",
                queue_id,
            )
            await connection.execute(
                """
                SELECT * FROM retsu_enqueue(
                    $1::uuid,
                    (SELECT array_agg(gen_random_uuid()) FROM generate_series(1, 2000)),
                    (SELECT array_agg('x'::text) FROM generate_series(1, 2000)),
                    (SELECT array_agg((1 + g % 3)::smallint) FROM generate_series(1, 2000) g),
                    array_fill(NULL::integer, ARRAY[2000]), array_fill(0, ARRAY[2000]),
                    NULL::text[], NULL::uuid[], NULL::uuid[])
                """,
                queue_id,
            )
            await connection.execute("ANALYZE queue_message, queue_state_rollup")
            files = "SELECT relname, relfilenode FROM pg_class WHERE relname = ANY($1::text[])"
            before = dict(await connection.fetch(files, list(_TABLES)))
            await connection.close()

            await asyncio.to_thread(command.upgrade, alembic_config(url), "0017")

            connection = await asyncpg.connect(plain_url(url))
            # The same files: no rewrite under ACCESS EXCLUSIVE (a domain with a CHECK
            # given at creation would have forced one).
            assert dict(await connection.fetch(files, list(_TABLES))) == before
            analysed = {
                row["attname"]
                for row in await connection.fetch(
                    "SELECT attname FROM pg_stats WHERE tablename = 'queue_message'"
                )
            }
            assert {"state", "priority", "delivery_attempts"} <= analysed
            assert await connection.fetchval("SELECT count(*) FROM queue_message") == 2000
            # The rules hold for every value written after the upgrade.
            one = "WHERE ctid = (SELECT min(ctid) FROM queue_message)"
            for statement in (
                f"UPDATE queue_message SET state = 9 {one}",
                f"UPDATE queue_message SET priority = 0 {one}",
                f"UPDATE queue_message SET group_key = '' {one}",
                "UPDATE queue_state_rollup SET ready = -1 WHERE queue_id = $1",
            ):
                arguments = (queue_id,) if "$1" in statement else ()
                with pytest.raises(asyncpg.CheckViolationError):
                    await connection.execute(statement, *arguments)
        finally:
            await connection.close()
    finally:
        await drop_database(postgres_server, url)
