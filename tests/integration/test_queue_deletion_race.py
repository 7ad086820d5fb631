"""A queue's deletion racing an enqueue leaves no message behind, even on a database whose
default isolation is stricter than READ COMMITTED.

Since migration 0017 no foreign key ties a message to its queue: the deletion locks the
queue's row FOR UPDATE, waits for an enqueue that holds it FOR KEY SHARE, and then deletes
the queue's messages. That last statement must see what the enqueue committed, which only
READ COMMITTED guarantees; Retsu's engine pins it whatever the database's default.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from retsu.adapters.postgres.engine import create_engine
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from tests.conftest import create_database, drop_database
from tests.integration.test_rollup import insert_queue
from tests.support.postgres import PostgresStorage
from tests.support.services import PostgresServer
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

CALLER = Caller(actor="deletion-race", request_id="deletion-race")

_ENQUEUE_ONE = """
SELECT * FROM retsu_enqueue($1::uuid, ARRAY[$2::uuid], ARRAY['x'::text], ARRAY[1::smallint],
                            ARRAY[NULL::integer], ARRAY[0])
"""


@pytest.fixture
async def strict_url(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(
        postgres_server, settings={"default_transaction_isolation": "repeatable read"}
    )
    yield url
    await drop_database(postgres_server, url)


async def _waiting_for_a_lock(connection: asyncpg.Connection, pid: int) -> bool:
    return bool(
        await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND pid <> $1 AND datname = current_database()",
            pid,
        )
    )


async def test_a_deletion_waiting_for_an_enqueue_deletes_the_message_it_committed(
    strict_url: str,
) -> None:
    engine = create_engine(strict_url, max_connections=4)
    enqueuer = await asyncpg.connect(plain_url(strict_url))
    watcher = await asyncpg.connect(plain_url(strict_url))
    try:
        # The test's own sessions get the database's stricter default: the premise holds.
        assert await watcher.fetchval("SHOW transaction_isolation") == "repeatable read"
        queue_id = await insert_queue(engine, "deleted-while-enqueued")
        storage = PostgresStorage(engine)
        message_id = uuid.uuid4()

        transaction = enqueuer.transaction()
        await transaction.start()
        found = await enqueuer.fetchrow(_ENQUEUE_ONE, queue_id, message_id)
        assert found is not None and found["queue_found"]

        deletion = asyncio.create_task(
            storage.queues.delete_queue(
                queue_id, AuditEntry.of_queue(AuditAction.QUEUE_DELETED, queue_id, CALLER)
            )
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        # Commit while the deletion waits for the enqueue's lock (it gives way after
        # 200 ms and starts over, which would take a fresh snapshot and hide the race).
        while not await _waiting_for_a_lock(watcher, enqueuer.get_server_pid()):
            assert loop.time() < deadline, "the deletion never waited for the enqueue"
            assert not deletion.done()
            await asyncio.sleep(0.002)
        await transaction.commit()

        assert await deletion is True
        left = await watcher.fetchval(
            "SELECT count(*) FROM queue_message WHERE queue_id = $1", queue_id
        )
        assert left == 0, "a message outlived its queue"
    finally:
        await enqueuer.close()
        await watcher.close()
        await engine.dispose()
