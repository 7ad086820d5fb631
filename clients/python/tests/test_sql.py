"""retsu_client.sql against a real migrated database and its `retsu api` (SPEC §3.13).

The same calls through a psycopg 3 connection, a psycopg 3 async connection and an asyncpg
connection: a message enqueued in a transaction exists for HTTP consumers only once that
transaction commits; an acknowledgement in a transaction counts only if it commits;
refusals are the client's exceptions for the API's codes.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import psycopg
import pytest

from client_support import RealServer, Target, unique
from retsu_client import IdempotencyKeyConflict, QueueNotFound, sql
from retsu_client.errors import InvalidPriority, InvalidRequest, PayloadTooLarge

pytestmark = pytest.mark.real_server


@pytest.fixture
def real(real_server: RealServer) -> Iterator[Target]:
    target = Target("real", real_server.url, server=real_server)
    yield target
    target.close()


def _plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


# One driver: run a callable with an open connection inside a transaction that commits
# (or rolls back), whatever the library.
Work = Callable[[Any], Any]


class Psycopg:
    name = "psycopg"

    def __init__(self, url: str) -> None:
        self.url = _plain(url)

    async def run(self, work: Work, *, commit: bool = True) -> Any:
        with psycopg.connect(self.url) as conn:
            result = work(conn)
            if commit:
                conn.commit()
            else:
                conn.rollback()
            return result


class PsycopgAsync:
    name = "psycopg-async"

    def __init__(self, url: str) -> None:
        self.url = _plain(url)

    async def run(self, work: Work, *, commit: bool = True) -> Any:
        async with await psycopg.AsyncConnection.connect(self.url) as conn:
            result = await work(conn)
            if commit:
                await conn.commit()
            else:
                await conn.rollback()
            return result


class Asyncpg:
    name = "asyncpg"

    def __init__(self, url: str) -> None:
        self.url = _plain(url)

    async def run(self, work: Work, *, commit: bool = True) -> Any:
        conn = await asyncpg.connect(self.url)
        try:
            transaction = conn.transaction()
            await transaction.start()
            try:
                result = await work(conn)
            except BaseException:
                await transaction.rollback()
                raise
            if commit:
                await transaction.commit()
            else:
                await transaction.rollback()
            return result
        finally:
            await conn.close()


Driver = Psycopg | PsycopgAsync | Asyncpg


@pytest.fixture(params=["psycopg", "psycopg-async", "asyncpg"])
def driver(request: pytest.FixtureRequest, real_server: RealServer) -> Driver:
    kinds: dict[str, type[Driver]] = {
        "psycopg": Psycopg,
        "psycopg-async": PsycopgAsync,
        "asyncpg": Asyncpg,
    }
    return kinds[request.param](real_server.database_url)


async def _value(result: Any) -> Any:
    """A sync helper's result, or an async one's awaited."""
    return await result if isinstance(result, Awaitable) else result


def _call(helper: Callable[..., Any], *args: Any, **kwargs: Any) -> Work:
    """The work of one helper call, for a sync or an async connection alike."""

    def work(conn: Any) -> Any:
        result = helper(conn, *args, **kwargs)
        return _value(result) if isinstance(result, Awaitable) else result

    return work


async def test_an_enqueue_exists_once_its_transaction_commits(driver: Driver, real: Target) -> None:
    retsu = real.client()
    queue = retsu.create_queue(unique())
    rolled_back = await driver.run(_call(sql.enqueue, queue.name, "never"), commit=False)
    assert uuid.UUID(rolled_back).version == 7
    assert retsu.dequeue(queue.id) is None
    message_id = await driver.run(
        _call(sql.enqueue, queue, '{"order": 7}', priority="HIGH", group="customer-7")
    )
    assert isinstance(message_id, str)
    delivered = retsu.dequeue(queue.id)
    assert delivered is not None
    assert (delivered.id, delivered.payload, delivered.priority) == (
        message_id,
        '{"order": 7}',
        "HIGH",
    )
    # The acknowledgement counts only when its transaction commits.
    assert await driver.run(
        _call(sql.acknowledge, queue.id, delivered.id, delivered.receipt_handle), commit=False
    )
    assert retsu.get_queue(queue.id).stats.in_flight == 1
    assert await driver.run(
        _call(sql.acknowledge, uuid.UUID(queue.id), delivered.id, delivered.receipt_handle)
    )
    assert retsu.get_queue(queue.id).stats.in_flight == 0
    assert not await driver.run(
        _call(sql.acknowledge, queue.id, delivered.id, delivered.receipt_handle)
    )


async def test_an_idempotency_key_replays_across_http_and_sql(driver: Driver, real: Target) -> None:
    retsu = real.client()
    queue = retsu.create_queue(unique())
    over_http = retsu.enqueue(queue.id, "once", idempotency_key="order-7", ttl_seconds=600)
    over_sql = await driver.run(
        _call(sql.enqueue, queue.name, "once", ttl_seconds=600, idempotency_key="order-7")
    )
    assert over_sql == over_http.id
    with pytest.raises(IdempotencyKeyConflict) as conflict:
        await driver.run(_call(sql.enqueue, queue.name, "twice", idempotency_key="order-7"))
    assert (conflict.value.code, conflict.value.status) == ("idempotency_key_conflict", 409)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ((sql.enqueue, "no-such-queue", "x"), QueueNotFound),
        ((sql.enqueue, "{queue}", "x", {"priority": "SOON"}), InvalidPriority),
        ((sql.enqueue, "{queue}", "x" * 1_048_577), PayloadTooLarge),
        (
            (sql.acknowledge, "{queue}", str(uuid.uuid4()), "h", {"result": "r" * 65_537}),
            InvalidRequest,  # invalid_result: no class of its own, its status family's
        ),
    ],
)
async def test_refusals_are_the_clients_exceptions(
    driver: Driver, real: Target, call: tuple[Any, ...], error: type[Exception]
) -> None:
    queue = real.client().create_queue(unique())
    helper, *args = call
    kwargs = args.pop() if isinstance(args[-1], dict) else {}
    args = [queue.name if a == "{queue}" else a for a in args]
    with pytest.raises(error) as raised:
        await driver.run(_call(helper, *args, **kwargs))
    assert getattr(raised.value, "status", None) in (400, 404, 413)
    assert raised.value.__cause__ is not None
    assert getattr(raised.value.__cause__, "sqlstate", None) == sql.SQLSTATE


def test_another_kind_of_connection_is_refused_before_anything_runs() -> None:
    with pytest.raises(TypeError, match="psycopg 3 or asyncpg"):
        sql.enqueue(object(), "orders", "x")
