"""The PostgreSQL signals keep ``queue_waiter`` (migration 0013) on a real database.

Short refresh and linger intervals, so nobody waits for the production ones (10 s, 5 s).
Each test makes its own queues in the session's database and looks only at their rows.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from retsu.adapters.ids import uuid7
from retsu.adapters.postgres.hosts import libpq_url
from retsu.adapters.postgres.notifications import PostgresMessageSignals

pytestmark = pytest.mark.integration

REFRESH, LINGER = 0.3, 0.3


@pytest.fixture
async def sql(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(libpq_url(database_url))
    yield connection
    await connection.close()


@asynccontextmanager
async def api_process_signals(database_url: str) -> AsyncIterator[PostgresMessageSignals]:
    """One API process's signals, with this module's short refresh and linger."""
    signals = PostgresMessageSignals(
        database_url,
        application_name=f"retsu-waiters-{uuid.uuid4().hex[:10]}",
        waiter_refresh_seconds=REFRESH,
        waiter_linger_seconds=LINGER,
    )
    await signals.start()
    try:
        yield signals
    finally:
        await signals.stop()


@pytest.fixture
async def signals(database_url: str) -> AsyncIterator[PostgresMessageSignals]:
    async with api_process_signals(database_url) as signals:
        yield signals


async def new_queue(sql: asyncpg.Connection) -> uuid.UUID:
    queue_id = uuid7()
    await sql.execute(
        "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts, "
        "default_message_ttl_seconds, paused, created_at, updated_at) "
        "VALUES ($1, $2, 30, 5, 3600, false, now(), now())",
        queue_id,
        f"waiters-{queue_id}",
    )
    return queue_id


async def rows(sql: asyncpg.Connection, queue_id: uuid.UUID) -> list[Any]:
    return await sql.fetch(
        "SELECT process, seen_at FROM queue_waiter WHERE queue_id = $1", queue_id
    )


async def until(check: Callable[[], Awaitable[Any]], seconds: float, what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.02)


async def test_a_waiting_poll_is_registered_refreshed_and_deleted_after_it_ends(
    sql: asyncpg.Connection, signals: PostgresMessageSignals
) -> None:
    queue_id = await new_queue(sql)
    with signals.watch(queue_id) as watch:
        # Registered, then told to claim once more (an SQL enqueue that checked before
        # the row existed may have committed meanwhile).
        assert await watch.wait(30) is True
        registered = await rows(sql, queue_id)
        assert [row["process"] for row in registered] == [signals.process]
        assert signals.registered == {queue_id}
        waiting = asyncio.create_task(watch.wait(30))
        refreshed = await until(
            lambda: sql.fetchval(
                "SELECT seen_at > $2 FROM queue_waiter WHERE queue_id = $1",
                queue_id,
                registered[0]["seen_at"],
            ),
            REFRESH * 5,
            "the row refreshed",
        )
        assert refreshed and not waiting.done()
        waiting.cancel()
    started = asyncio.get_running_loop().time()

    async def deleted() -> bool:
        return not await rows(sql, queue_id)

    await until(deleted, LINGER * 10, "the row deleted")
    assert asyncio.get_running_loop().time() - started >= LINGER * 0.5


async def test_an_sql_enqueue_wakes_a_registered_waiter(
    sql: asyncpg.Connection, signals: PostgresMessageSignals
) -> None:
    queue_id = await new_queue(sql)
    with signals.watch(queue_id) as watch:
        assert await watch.wait(30) is True  # registered (see above)
        for _ in range(3):
            waiting = asyncio.create_task(watch.wait(30))
            await asyncio.sleep(0.05)
            began = asyncio.get_running_loop().time()
            await sql.fetchval("SELECT retsu.enqueue($1, 'wake')", str(queue_id))
            assert await asyncio.wait_for(waiting, 5) is True
            assert asyncio.get_running_loop().time() - began < 0.5


async def test_a_clean_stop_deletes_the_rows(database_url: str, sql: asyncpg.Connection) -> None:
    signals = PostgresMessageSignals(database_url, waiter_linger_seconds=60)
    await signals.start()
    queue_id = await new_queue(sql)
    try:
        with signals.watch(queue_id) as watch:
            assert await watch.wait(30) is True
        assert len(await rows(sql, queue_id)) == 1  # lingering
    finally:
        await signals.stop()
    assert await rows(sql, queue_id) == []


async def test_after_a_reconnect_the_rows_are_written_again(
    sql: asyncpg.Connection, signals: PostgresMessageSignals
) -> None:
    queue_id = await new_queue(sql)
    with signals.watch(queue_id) as watch:
        assert await watch.wait(30) is True
        # As after a crash of the server (an unlogged table comes back empty), which also
        # ends every session.
        await sql.execute("DELETE FROM queue_waiter WHERE queue_id = $1", queue_id)
        killed = await sql.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE pid = (SELECT pid FROM pg_stat_activity WHERE application_name = $1)",
            signals._application_name,
        )
        assert killed == 1

        async def listening_again() -> bool:
            return signals.connections == 2 and signals.listening

        await until(listening_again, 10, "listening again")
        assert len(await rows(sql, queue_id)) == 1


async def test_a_deleted_queue_takes_its_rows_and_a_missing_one_is_no_error(
    sql: asyncpg.Connection, signals: PostgresMessageSignals
) -> None:
    queue_id = await new_queue(sql)
    missing = uuid7()
    with signals.watch(queue_id) as watch, signals.watch(missing) as nowhere:
        assert await watch.wait(30) is True
        assert await nowhere.wait(30) is True  # "registered": there is nothing to write
        assert len(await rows(sql, queue_id)) == 1
        await sql.execute("DELETE FROM queue WHERE id = $1", queue_id)
        assert await rows(sql, queue_id) == []
        await asyncio.sleep(REFRESH * 3)  # refreshes: the gone queue is not written again
        assert await rows(sql, queue_id) == [] and await rows(sql, missing) == []
    assert signals.connections == 1 and signals.listening


@pytest.fixture
async def other(database_url: str) -> AsyncIterator[PostgresMessageSignals]:
    """A second API process's signals."""
    async with api_process_signals(database_url) as signals:
        yield signals


@pytest.fixture
async def heard(database_url: str) -> AsyncIterator[asyncio.Queue[str]]:
    """Every notification on Retsu's channel, as a bystander session hears it."""
    connection = await asyncpg.connect(libpq_url(database_url))
    payloads: asyncio.Queue[str] = asyncio.Queue()
    await connection.add_listener("retsu_messages", lambda *args: payloads.put_nowait(args[3]))
    yield payloads
    await connection.close()


async def _heard_within(payloads: asyncio.Queue[str], wanted: str, seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while (left := deadline - asyncio.get_running_loop().time()) > 0:
        try:
            if await asyncio.wait_for(payloads.get(), left) == wanted:
                return True
        except TimeoutError:
            return False
    return False


async def test_messages_are_announced_only_where_another_process_waits(
    sql: asyncpg.Connection,
    signals: PostgresMessageSignals,
    other: PostgresMessageSignals,
    heard: asyncio.Queue[str],
) -> None:
    queue_id = await new_queue(sql)
    messages = f"{queue_id}:messages"
    # Nobody waits anywhere: no notification (nobody would hear it).
    signals.announce(queue_id)
    assert not await _heard_within(heard, messages, 0.3)
    # A poll of this process waits: woken here, still nothing sent.
    with signals.watch(queue_id) as mine:
        assert await mine.wait(30) is True  # registered, told to claim once more
        waiting = asyncio.create_task(mine.wait(30))
        await asyncio.sleep(0.05)
        signals.announce(queue_id)
        assert await asyncio.wait_for(waiting, 5) is True
        assert not await _heard_within(heard, messages, 0.3)
    # A poll of the other process waits: announced, and it wakes at once.
    with other.watch(queue_id) as theirs:
        assert await theirs.wait(30) is True
        for _ in range(2):
            waiting = asyncio.create_task(theirs.wait(30))
            await asyncio.sleep(0.05)
            began = asyncio.get_running_loop().time()
            signals.announce(queue_id)
            assert await asyncio.wait_for(waiting, 5) is True
            assert asyncio.get_running_loop().time() - began < 0.5
        assert await _heard_within(heard, messages, 1)


async def test_a_change_of_the_queue_itself_is_always_announced(
    sql: asyncpg.Connection, signals: PostgresMessageSignals, heard: asyncio.Queue[str]
) -> None:
    queue_id = await new_queue(sql)
    signals.announce(queue_id, queue_changed=True)
    assert await _heard_within(heard, str(queue_id), 2)
