"""The SQL interface (SPEC §3.13) against the HTTP routes it mirrors.

A database migrated by the real `retsu migrate`, a real `retsu api` process on it, and a
login role that holds nothing but ``retsu_producer`` (what an application is told to
grant). The contract of enqueue and acknowledge runs through two drivers — the HTTP routes
and ``retsu.enqueue`` / ``retsu.acknowledge`` — so whatever holds for one must hold for
the other: defaults, validation and its error codes, groups, idempotency keys, counts and
history counters. Then what only the SQL path has: the caller's transaction (a rollback
leaves no trace; long polls wake at its commit, never for its rollback), SQLSTATE
``RT001``, and what ``SECURITY DEFINER`` must not open.

Time moves by shifting the stored timestamps of the test's own queues; nobody sleeps
except the long-poll tests, which watch a real wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import asyncpg
import httpx
import pytest

from retsu.adapters.postgres.hosts import libpq_url
from retsu.domain.attempts import RESULT_MAX_LENGTH
from retsu.domain.idempotency import IDEMPOTENCY_KEY_RETENTION_SECONDS
from retsu.domain.message import MESSAGE_DELAY, MESSAGE_TTL
from tests.conftest import create_database, drop_database
from tests.support.postgres import assert_database_message_invariants
from tests.support.processes import RetsuProcess, free_port, retsu_env, run_retsu
from tests.support.services import PostgresServer
from tests.support.timeshift import shift

pytestmark = pytest.mark.integration

# Migration 0013: a queue_waiter row counts for this long.
WAITER_FRESH_SECONDS = 30
# The migration freezes the rules it checks; they must be the domain's.
MIGRATION_RULES = {
    "KEY_RETENTION_SECONDS": IDEMPOTENCY_KEY_RETENTION_SECONDS,
    "RESULT_MAX_LENGTH": RESULT_MAX_LENGTH,
    "TTL_MAX": MESSAGE_TTL.high,
    "DELAY_MAX": MESSAGE_DELAY.high,
}


# -- the servers ------------------------------------------------------------------------------


@dataclass
class Setup:
    url: str  # the database, as Retsu's own (owner) role
    api: str  # the `retsu api` base URL
    app_role: str  # a LOGIN role granted retsu_producer and nothing else
    outsider_role: str  # a LOGIN role granted nothing

    def dsn(self, role: str | None = None) -> str:
        plain = libpq_url(self.url)
        if role is None:
            return plain
        return plain.replace("postgres@", f"{role}@", 1)


@pytest.fixture(scope="module")
async def sql_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server, migrate=False)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture(scope="module")
async def roles(
    postgres_server: PostgresServer, sql_database: str
) -> AsyncIterator[tuple[str, str]]:
    """Two login roles for this module (roles are cluster-wide: unique names, dropped at the
    end, after the database — dropping the module's database goes first in teardown)."""
    suffix = uuid.uuid4().hex[:10]
    app, outsider = f"retsu_test_app_{suffix}", f"retsu_test_outsider_{suffix}"
    admin = await asyncpg.connect(libpq_url(postgres_server.admin_url))
    try:
        await admin.execute(f"CREATE ROLE {app} LOGIN")
        await admin.execute(f"CREATE ROLE {outsider} LOGIN")
    finally:
        await admin.close()
    yield app, outsider
    admin = await asyncpg.connect(libpq_url(postgres_server.admin_url))
    try:
        # The database may still exist (fixture order): its grants go with it first; what
        # the module's tests stored there keeps the rules of migration 0017's dropped CHECKs.
        await assert_database_message_invariants(sql_database)
        await drop_database(postgres_server, sql_database)
        await admin.execute(f"DROP ROLE IF EXISTS {app}")
        await admin.execute(f"DROP ROLE IF EXISTS {outsider}")
    finally:
        await admin.close()


@pytest.fixture(scope="module")
def setup(
    sql_database: str, roles: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    migrated = run_retsu(["migrate"], retsu_env(sql_database))
    assert migrated.returncode == 0, migrated.stderr + migrated.stdout
    app, outsider = roles

    async def grant() -> None:
        connection = await asyncpg.connect(libpq_url(sql_database))
        try:
            # All an application needs (SPEC §3.13).
            await connection.execute(f"GRANT retsu_producer TO {app}")
        finally:
            await connection.close()

    asyncio.run(grant())
    port = free_port()
    log = Path(tmp_path_factory.mktemp("sql-api")) / "api.log"
    process = RetsuProcess(["api"], retsu_env(sql_database, http__port=str(port)), log)
    base = f"http://127.0.0.1:{port}"
    try:
        process.wait_until_ready(f"{base}/health/ready")
        yield Setup(sql_database, base, app, outsider)
    finally:
        assert process.stop() == 0, process.output()


@pytest.fixture
async def http(setup: Setup) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=setup.api, timeout=30) as client:
        yield client


@pytest.fixture
async def owner(setup: Setup) -> AsyncIterator[asyncpg.Connection]:
    """Retsu's own role: reads what the contract checks underneath."""
    connection = await asyncpg.connect(setup.dsn())
    yield connection
    await connection.close()


@pytest.fixture
async def app(setup: Setup) -> AsyncIterator[asyncpg.Connection]:
    """The application's connection: a role holding retsu_producer only."""
    connection = await asyncpg.connect(setup.dsn(setup.app_role))
    yield connection
    await connection.close()


# -- the two drivers --------------------------------------------------------------------------


class Refused(Exception):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code


class Driver(Protocol):
    name: str

    async def enqueue(
        self,
        queue: str,
        payload: str,
        priority: str = "MEDIUM",
        *,
        ttl_seconds: int | None = None,
        delay_seconds: int | None = None,
        group: str | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """The message id (a replay's: the original's), or Refused."""

    async def acknowledge(
        self, queue: str, message_id: str, receipt_handle: str, result: str | None = None
    ) -> bool | None:
        """True/False when the driver can tell whether this call acknowledged the
        delivery (SQL), None when it cannot (HTTP answers 204 either way)."""


class HttpDriver:
    name = "http"

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def _queue_id(self, queue: str) -> str:
        # As the client does: a string shaped like a UUID is an id, else a name to look up.
        try:
            return str(uuid.UUID(queue)) if len(queue) == 36 else await self._lookup(queue)
        except ValueError:
            return await self._lookup(queue)

    async def _lookup(self, name: str) -> str:
        page = (await self._client.get("/v1/queues", params={"name": name})).json()
        if not page["items"]:
            raise Refused("queue_not_found", f"No queue is named {name!r}.")
        return str(page["items"][0]["id"])

    @staticmethod
    def _check(response: httpx.Response) -> None:
        if response.status_code >= 400:
            problem = response.json()
            raise Refused(problem["code"], problem["detail"])

    async def enqueue(
        self,
        queue: str,
        payload: str,
        priority: str = "MEDIUM",
        *,
        ttl_seconds: int | None = None,
        delay_seconds: int | None = None,
        group: str | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        body = {
            "payload": payload,
            "priority": priority,
            "ttl_seconds": ttl_seconds,
            "delay_seconds": delay_seconds,
            "group": group,
        }
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        queue_id = await self._queue_id(queue)
        response = await self._client.post(
            f"/v1/queues/{queue_id}/messages", json=body, headers=headers
        )
        self._check(response)
        assert response.status_code in (200, 201), response.text
        return str(response.json()["id"])

    async def acknowledge(
        self, queue: str, message_id: str, receipt_handle: str, result: str | None = None
    ) -> bool | None:
        queue_id = await self._queue_id(queue)
        body = {"receipt_handle": receipt_handle}
        if result is not None:
            body["result"] = result
        response = await self._client.post(
            f"/v1/queues/{queue_id}/messages/{message_id}/acknowledge", json=body
        )
        self._check(response)
        assert response.status_code == 204, response.text
        return None


class SqlDriver:
    name = "sql"

    def __init__(self, connection: asyncpg.Connection) -> None:
        self.connection = connection

    async def _call(self, query: str, *args: Any) -> Any:
        try:
            return await self.connection.fetchval(query, *args)
        except asyncpg.PostgresError as error:
            if error.sqlstate != "RT001":
                raise
            code, _, detail = str(error).partition(": ")
            raise Refused(code, detail) from None

    async def enqueue(
        self,
        queue: str,
        payload: str,
        priority: str = "MEDIUM",
        *,
        ttl_seconds: int | None = None,
        delay_seconds: int | None = None,
        group: str | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        message_id = await self._call(
            "SELECT retsu.enqueue($1, $2, $3, $4, $5, $6, $7)",
            queue,
            payload,
            priority,
            ttl_seconds,
            delay_seconds,
            group,
            idempotency_key,
        )
        return str(message_id)

    async def acknowledge(
        self, queue: str, message_id: str, receipt_handle: str, result: str | None = None
    ) -> bool | None:
        done = await self._call(
            "SELECT retsu.acknowledge($1, $2::uuid, $3, $4)",
            queue,
            message_id,
            receipt_handle,
            result,
        )
        assert isinstance(done, bool)
        return done


@pytest.fixture(params=["http", "sql"])
def driver(
    request: pytest.FixtureRequest, http: httpx.AsyncClient, app: asyncpg.Connection
) -> Driver:
    return HttpDriver(http) if request.param == "http" else SqlDriver(app)


def acknowledged(got: bool | None, expected: bool) -> bool:
    """A driver that can tell must tell the truth; HTTP says 204 either way."""
    return got is None or got is expected


# -- what the contract looks at (over HTTP, and underneath) -----------------------------------


@dataclass
class Q:
    id: str
    name: str


async def new_queue(client: httpx.AsyncClient, **settings: Any) -> Q:
    name = f"sql-{uuid.uuid4().hex[:12]}"
    response = await client.post("/v1/queues", json={"name": name, **settings})
    assert response.status_code == 201, response.text
    return Q(str(response.json()["id"]), name)


async def dequeue(client: httpx.AsyncClient, queue: Q, n: int = 10, **body: Any) -> list[Any]:
    response = await client.post(
        f"/v1/queues/{queue.id}/messages/dequeue", json={"max_messages": n, **body}
    )
    assert response.status_code == 200, response.text
    messages: list[Any] = response.json()["messages"]
    return messages


async def stats(client: httpx.AsyncClient, queue: Q) -> dict[str, Any]:
    response = await client.get(f"/v1/queues/{queue.id}")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()["stats"]
    return found


async def item(client: httpx.AsyncClient, queue: Q, message_id: str) -> dict[str, Any] | None:
    response = await client.get(f"/v1/queues/{queue.id}/messages/{message_id}")
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def stored(owner: asyncpg.Connection, queue: Q) -> int:
    return int(
        await owner.fetchval(
            "SELECT count(*) FROM queue_message WHERE queue_id = $1 AND state <> 6",
            uuid.UUID(queue.id),
        )
    )


async def counters(owner: asyncpg.Connection, queue: Q) -> dict[str, int]:
    """The rollup's cumulative counters: what the history's interval counts are made of."""
    row = await owner.fetchrow(
        """
        SELECT coalesce(sum(enqueued), 0) AS enqueued, coalesce(sum(delivered), 0) AS delivered,
               coalesce(sum(acknowledged), 0) AS acknowledged,
               coalesce(sum(ready), 0) AS ready, coalesce(sum(delayed), 0) AS delayed,
               coalesce(sum(in_flight), 0) AS in_flight,
               coalesce(sum(groups), 0) AS groups, coalesce(sum(completed), 0) AS completed
        FROM queue_state_rollup WHERE queue_id = $1
        """,
        uuid.UUID(queue.id),
    )
    return {key: int(value) for key, value in dict(row).items()}


async def keys(owner: asyncpg.Connection, queue: Q) -> int:
    return int(
        await owner.fetchval(
            "SELECT count(*) FROM idempotency_key WHERE queue_id = $1", uuid.UUID(queue.id)
        )
    )


async def advance(owner: asyncpg.Connection, queue: Q, seconds: float) -> None:
    await shift(owner, seconds, [uuid.UUID(queue.id)])


def seconds_between(later: str, earlier: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


# == the contract: the same for both drivers ==================================================


async def test_the_migration_checks_the_domains_rules() -> None:
    from tests.support.postgres import _migration

    migration = _migration("0012")
    for name, value in MIGRATION_RULES.items():
        assert getattr(migration, name) == value, name
    assert _migration("0013").WAITER_FRESH_SECONDS == WAITER_FRESH_SECONDS


async def test_an_enqueue_stores_one_deliverable_message_under_a_new_uuid7(
    driver: Driver, http: httpx.AsyncClient
) -> None:
    queue = await new_queue(http)
    message_id = await driver.enqueue(queue.id, "hello", "HIGH")
    assert uuid.UUID(message_id).version == 7
    (delivered,) = await dequeue(http, queue)
    assert (delivered["id"], delivered["payload"], delivered["priority"]) == (
        message_id,
        "hello",
        "HIGH",
    )
    assert delivered["group"] is None


async def test_a_queue_is_named_by_id_or_by_name(driver: Driver, http: httpx.AsyncClient) -> None:
    queue = await new_queue(http)
    by_id = await driver.enqueue(queue.id, "by id")
    by_upper_id = await driver.enqueue(queue.id.upper(), "by upper-case id")
    by_name = await driver.enqueue(queue.name, "by name")
    payloads = {m["id"]: m["payload"] for m in await dequeue(http, queue)}
    assert payloads == {by_id: "by id", by_upper_id: "by upper-case id", by_name: "by name"}


async def test_priority_then_fifo(driver: Driver, http: httpx.AsyncClient) -> None:
    queue = await new_queue(http)
    for payload, priority in [("l1", "LOW"), ("m1", "MEDIUM"), ("h1", "HIGH"), ("m2", "MEDIUM")]:
        await driver.enqueue(queue.name, payload, priority)
    assert [m["payload"] for m in await dequeue(http, queue)] == ["h1", "m1", "m2", "l1"]


async def test_the_lifetime_is_the_queues_default_unless_given(
    driver: Driver, http: httpx.AsyncClient
) -> None:
    queue = await new_queue(http, default_message_ttl_seconds=120)
    default = await driver.enqueue(queue.id, "default")
    own = await driver.enqueue(queue.id, "own", ttl_seconds=30)
    delayed = await driver.enqueue(queue.id, "delayed", delay_seconds=100)
    lifetimes = {}
    for message_id in (default, own, delayed):
        found = await item(http, queue, message_id)
        assert found is not None
        lifetimes[message_id] = round(seconds_between(found["expires_at"], found["enqueued_at"]))
    assert lifetimes == {default: 120, own: 30, delayed: 120}
    found = await item(http, queue, delayed)
    assert found is not None and found["state"] == "delayed"
    assert round(seconds_between(found["available_at"], found["enqueued_at"])) == 100


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"priority": "URGENT"}, "invalid_priority"),
        ({"priority": "high"}, "invalid_priority"),
        ({"priority": ""}, "invalid_priority"),
        ({"ttl_seconds": 0}, "invalid_ttl"),
        ({"ttl_seconds": 2_592_001}, "invalid_ttl"),
        ({"ttl_seconds": -5}, "invalid_ttl"),
        ({"delay_seconds": -1}, "invalid_delay"),
        ({"delay_seconds": 86_401}, "invalid_delay"),
        ({"delay_seconds": 10, "ttl_seconds": 10}, "invalid_delay"),
        ({"delay_seconds": 60}, "invalid_delay"),  # not shorter than the queue's default (60)
        ({"delay_seconds": 60, "idempotency_key": "k"}, "invalid_delay"),
        ({"group": ""}, "invalid_group"),
        ({"group": "has space"}, "invalid_group"),
        ({"group": "g" * 129}, "invalid_group"),
        ({"group": "café"}, "invalid_group"),
        ({"idempotency_key": ""}, "invalid_idempotency_key"),
        ({"idempotency_key": "a b"}, "invalid_idempotency_key"),
        ({"idempotency_key": "k" * 129}, "invalid_idempotency_key"),
        ({"idempotency_key": "a\tb"}, "invalid_idempotency_key"),
    ],
)
async def test_invalid_messages_are_refused_with_the_apis_code_and_store_nothing(
    driver: Driver,
    http: httpx.AsyncClient,
    owner: asyncpg.Connection,
    extra: dict[str, Any],
    code: str,
) -> None:
    queue = await new_queue(http, default_message_ttl_seconds=60)
    with pytest.raises(Refused) as refused:
        await driver.enqueue(queue.id, **{"payload": "x", "priority": "MEDIUM", **extra})
    assert refused.value.code == code
    assert await stored(owner, queue) == 0
    assert await keys(owner, queue) == 0
    assert (await counters(owner, queue))["enqueued"] == 0


@pytest.mark.parametrize(
    "extra",
    [
        {"ttl_seconds": 1},
        {"ttl_seconds": 2_592_000},
        {"delay_seconds": 0},
        {"delay_seconds": 86_400, "ttl_seconds": 86_401},
        {"delay_seconds": 9, "ttl_seconds": 10},
        {"payload": ""},
        {"group": "g" * 128},
        {"group": "!~"},
        {"idempotency_key": "k" * 128},
        {"idempotency_key": "!"},
    ],
)
async def test_values_at_the_bounds_are_accepted(
    driver: Driver, http: httpx.AsyncClient, extra: dict[str, Any]
) -> None:
    queue = await new_queue(http)
    await driver.enqueue(queue.id, **{"payload": "x", "priority": "LOW", **extra})
    assert (await stats(http, queue))["ready"] + (await stats(http, queue))["delayed"] == 1


async def test_an_unknown_queue_is_queue_not_found(driver: Driver, http: httpx.AsyncClient) -> None:
    for queue in (str(uuid.uuid4()), f"nope-{uuid.uuid4().hex[:8]}"):
        with pytest.raises(Refused) as refused:
            await driver.enqueue(queue, "x")
        assert refused.value.code == "queue_not_found"
        with pytest.raises(Refused) as refused:
            await driver.enqueue(queue, "x", idempotency_key="k")
        assert refused.value.code == "queue_not_found"
        with pytest.raises(Refused) as refused:
            await driver.acknowledge(queue, str(uuid.uuid4()), str(uuid.uuid4()))
        assert refused.value.code == "queue_not_found"


async def test_a_group_is_an_ordered_lane(
    driver: Driver, http: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    await driver.enqueue(queue.id, "a1", "LOW", group="a")
    await driver.enqueue(queue.id, "a2", "HIGH", group="a")
    await driver.enqueue(queue.id, "b1", group="b")
    first = await dequeue(http, queue)
    assert sorted(m["payload"] for m in first) == ["a1", "b1"]
    assert {m["group"] for m in first} == {"a", "b"}
    assert await dequeue(http, queue) == []  # a2 waits behind its group's head
    head = next(m for m in first if m["payload"] == "a1")
    assert acknowledged(
        await driver.acknowledge(queue.id, head["id"], head["receipt_handle"]), True
    )
    assert [m["payload"] for m in await dequeue(http, queue)] == ["a2"]
    assert (await counters(owner, queue))["groups"] == 2


async def test_counts_and_history_counters_are_exact(
    driver: Driver, http: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    await driver.enqueue(queue.id, "now", "HIGH")
    await driver.enqueue(queue.id, "later", delay_seconds=30)
    await driver.enqueue(queue.id, "grouped", group="g")
    await driver.enqueue(queue.id, "keyed", idempotency_key="once")
    await driver.enqueue(queue.id, "keyed", idempotency_key="once")  # a replay counts nothing
    state = await stats(http, queue)
    assert (state["ready"], state["delayed"], state["in_flight"]) == (3, 1, 0)
    assert await counters(owner, queue) == {
        "enqueued": 4,
        "delivered": 0,
        "acknowledged": 0,
        "ready": 3,
        "delayed": 1,
        "in_flight": 0,
        "groups": 1,
        "completed": 0,
    }
    delivered = await dequeue(http, queue)
    for message in delivered:
        done = await driver.acknowledge(queue.id, message["id"], message["receipt_handle"])
        assert acknowledged(done, True)
    for message in delivered:  # again: idempotent, nothing more counted
        done = await driver.acknowledge(queue.id, message["id"], message["receipt_handle"])
        assert acknowledged(done, False)
    state = await stats(http, queue)
    assert (state["ready"], state["delayed"], state["in_flight"]) == (0, 1, 0)
    found = await counters(owner, queue)
    assert (found["enqueued"], found["delivered"], found["acknowledged"]) == (4, 3, 3)


# -- idempotency keys ---------------------------------------------------------------------------


async def test_a_key_stores_one_message_and_replays_its_id(
    driver: Driver, http: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    first = await driver.enqueue(queue.id, "once", idempotency_key="order-7")
    assert await driver.enqueue(queue.name, "once", idempotency_key="order-7") == first
    # An absent delay is a delay of 0; the key scopes to the queue.
    assert (
        await driver.enqueue(queue.id, "once", delay_seconds=0, idempotency_key="order-7") == first
    )
    assert await stored(owner, queue) == 1
    with pytest.raises(Refused) as refused:
        await driver.enqueue(queue.id, "twice", idempotency_key="order-7")
    assert refused.value.code == "idempotency_key_conflict"
    for different in ({"priority": "HIGH"}, {"ttl_seconds": 60}, {"group": "g"}):
        with pytest.raises(Refused):
            await driver.enqueue(
                queue.id, **{"payload": "once", "idempotency_key": "order-7", **different}
            )
    other = await new_queue(http)
    assert await driver.enqueue(other.id, "once", idempotency_key="order-7") != first
    (delivered,) = await dequeue(http, queue)
    await driver.acknowledge(queue.id, delivered["id"], delivered["receipt_handle"])
    # Also after the message was consumed.
    assert await driver.enqueue(queue.id, "once", idempotency_key="order-7") == first
    assert await stored(owner, queue) == 0


async def test_a_key_is_forgotten_after_24_hours(
    driver: Driver, http: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    first = await driver.enqueue(queue.id, "day-1", idempotency_key="k")
    await advance(owner, queue, 23 * 3600)
    assert await driver.enqueue(queue.id, "day-1", idempotency_key="k") == first
    await advance(owner, queue, 3600)
    second = await driver.enqueue(queue.id, "day-2", idempotency_key="k")
    assert second != first
    assert await driver.enqueue(queue.id, "day-2", idempotency_key="k") == second


PAYLOADS = [
    "plain",
    '{"order": 7, "note": "quoted \\"text\\" and a \\\\ backslash"}',
    "line\nbreak\ttab\r\b\f\x01\x1f\x7f end",
    "café, 日本語, emoji 😀 and U+FFFF \uffff",
    "",
]


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize(
    "message",
    [{}, {"ttl_seconds": 600}, {"delay_seconds": 5, "group": 'g"\\'}, {"priority": "LOW"}],
)
async def test_a_key_used_over_http_replays_over_sql_and_back(
    http: httpx.AsyncClient, app: asyncpg.Connection, payload: str, message: dict[str, Any]
) -> None:
    """The fingerprint of the SQL path is the domain's, byte for byte."""
    queue = await new_queue(http)
    over_http, over_sql = HttpDriver(http), SqlDriver(app)
    first = await over_http.enqueue(queue.id, payload, idempotency_key="h", **message)
    assert await over_sql.enqueue(queue.id, payload, idempotency_key="h", **message) == first
    second = await over_sql.enqueue(queue.id, payload, idempotency_key="s", **message)
    assert await over_http.enqueue(queue.id, payload, idempotency_key="s", **message) == second
    with pytest.raises(Refused):
        await over_sql.enqueue(queue.id, payload + ".", idempotency_key="h", **message)


# -- acknowledge --------------------------------------------------------------------------------


async def test_acknowledging_the_current_delivery_removes_it_once(
    driver: Driver, http: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    await driver.enqueue(queue.id, "job")
    (delivered,) = await dequeue(http, queue)
    assert acknowledged(
        await driver.acknowledge(queue.name, delivered["id"], delivered["receipt_handle"]), True
    )
    assert await stored(owner, queue) == 0
    assert acknowledged(
        await driver.acknowledge(queue.id, delivered["id"], delivered["receipt_handle"]), False
    )


@pytest.mark.parametrize("handle", ["", "junk", "x" * 200, "random-uuid", "{not-a-uuid}"])
async def test_a_junk_or_unknown_handle_removes_nothing(
    driver: Driver, http: httpx.AsyncClient, owner: asyncpg.Connection, handle: str
) -> None:
    queue = await new_queue(http)
    await driver.enqueue(queue.id, "job")
    (delivered,) = await dequeue(http, queue)
    if handle == "random-uuid":
        handle = str(uuid.uuid4())
    assert acknowledged(await driver.acknowledge(queue.id, delivered["id"], handle), False)
    assert await stored(owner, queue) == 1
    assert acknowledged(
        await driver.acknowledge(queue.id, delivered["id"], delivered["receipt_handle"]), True
    )


async def test_a_stale_or_elapsed_handle_never_removes_the_newer_delivery(
    driver: Driver, http: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    await driver.enqueue(queue.id, "job")
    (old,) = await dequeue(http, queue, visibility_timeout_seconds=10)
    await advance(owner, queue, 11)
    assert acknowledged(await driver.acknowledge(queue.id, old["id"], old["receipt_handle"]), False)
    (new,) = await dequeue(http, queue, visibility_timeout_seconds=10)
    assert new["delivery_attempts"] == 2
    assert acknowledged(await driver.acknowledge(queue.id, old["id"], old["receipt_handle"]), False)
    assert await stored(owner, queue) == 1
    assert acknowledged(await driver.acknowledge(queue.id, new["id"], new["receipt_handle"]), True)


async def test_a_handle_is_only_good_in_its_own_queue(
    driver: Driver, http: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    mine, other = await new_queue(http), await new_queue(http)
    await driver.enqueue(mine.id, "job")
    (delivered,) = await dequeue(http, mine)
    assert acknowledged(
        await driver.acknowledge(other.id, delivered["id"], delivered["receipt_handle"]), False
    )
    assert await stored(owner, mine) == 1


async def test_a_never_delivered_message_cannot_be_acknowledged(
    driver: Driver, http: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    message_id = await driver.enqueue(queue.id, "job")
    assert acknowledged(await driver.acknowledge(queue.id, message_id, str(uuid.uuid4())), False)
    assert await stored(owner, queue) == 1


@pytest.mark.parametrize("driver", ["http", "sql"], indirect=True)
async def test_a_result_is_kept_when_the_queue_keeps_completed_messages(
    driver: Driver, http: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    queue = await new_queue(http, completed_retention_seconds=600)
    message_id = await driver.enqueue(queue.id, "job")
    (delivered,) = await dequeue(http, queue)
    with pytest.raises(Refused) as refused:
        await driver.acknowledge(
            queue.id, message_id, delivered["receipt_handle"], "r" * (RESULT_MAX_LENGTH + 1)
        )
    assert refused.value.code == "invalid_result"
    done = await driver.acknowledge(
        queue.id, message_id, delivered["receipt_handle"], "r" * RESULT_MAX_LENGTH
    )
    assert acknowledged(done, True)
    row = await owner.fetchrow(
        "SELECT state, result, attempts -> -1 ->> 'out' AS outcome FROM queue_message "
        "WHERE id = $1",
        uuid.UUID(message_id),
    )
    assert (row["state"], row["result"], row["outcome"]) == (
        6,  # COMPLETED (migration 0009)
        "r" * RESULT_MAX_LENGTH,
        "acknowledged",
    )
    assert (await counters(owner, queue))["completed"] == 1


# == only the SQL path: the caller's transaction ===============================================


async def test_errors_are_sqlstate_rt001_with_the_apis_code_first(app: asyncpg.Connection) -> None:
    with pytest.raises(asyncpg.PostgresError) as raised:
        await app.execute("SELECT retsu.enqueue('no-such-queue', 'x')")
    assert raised.value.sqlstate == "RT001"
    assert str(raised.value).startswith("queue_not_found: ")
    with pytest.raises(asyncpg.PostgresError) as raised:
        await app.execute("SELECT retsu.enqueue('no-such-queue', 'x', 'SOON')")
    assert raised.value.sqlstate == "RT001"
    assert str(raised.value) == "invalid_priority: priority must be one of HIGH, MEDIUM, LOW."
    # What HTTP headers cannot carry, SQL can: still only visible ASCII.
    with pytest.raises(asyncpg.PostgresError) as raised:
        await app.execute("SELECT retsu.enqueue('q', 'x', idempotency_key => 'ключ')")
    assert str(raised.value).startswith("invalid_idempotency_key: ")


async def test_a_payload_is_bounded_as_an_http_body_is(
    http: httpx.AsyncClient, app: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    sql = SqlDriver(app)
    await sql.enqueue(queue.id, "x" * 1_048_576)
    with pytest.raises(Refused) as refused:
        await sql.enqueue(queue.id, "é" * 524_289)  # 1 MiB + 2 bytes in UTF-8
    assert refused.value.code == "payload_too_large"
    with pytest.raises(Refused) as refused:
        await sql.enqueue(queue.id, None)  # type: ignore[arg-type]
    assert refused.value.code == "invalid_payload"


async def test_a_rolled_back_enqueue_leaves_no_trace(
    http: httpx.AsyncClient, app: asyncpg.Connection, owner: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    before = await counters(owner, queue)
    transaction = app.transaction()
    await transaction.start()
    await app.fetchval("SELECT retsu.enqueue($1, 'plain')", queue.id)
    await app.fetchval("SELECT retsu.enqueue($1, 'grouped', \"group\" => 'g')", queue.id)
    await app.fetchval("SELECT retsu.enqueue($1, 'later', delay_seconds => 30)", queue.id)
    await app.fetchval("SELECT retsu.enqueue($1, 'keyed', idempotency_key => 'k')", queue.id)
    # Not visible to anyone else before the commit either.
    assert await stored(owner, queue) == 0
    await transaction.rollback()
    assert await stored(owner, queue) == 0
    assert await keys(owner, queue) == 0
    assert await counters(owner, queue) == before
    state = await stats(http, queue)
    assert (state["ready"], state["delayed"]) == (0, 0)
    assert (
        await owner.fetchval(
            "SELECT count(*) FROM queue_group WHERE queue_id = $1", uuid.UUID(queue.id)
        )
        == 0
    )
    # The key is free: another message under it is stored, not a conflict.
    sql = SqlDriver(app)
    await sql.enqueue(queue.id, "another", idempotency_key="k")
    assert await stored(owner, queue) == 1


async def test_a_rolled_back_acknowledge_leaves_the_delivery_in_flight(
    http: httpx.AsyncClient, app: asyncpg.Connection, owner: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    await SqlDriver(app).enqueue(queue.id, "job")
    (delivered,) = await dequeue(http, queue)
    before = await counters(owner, queue)
    transaction = app.transaction()
    await transaction.start()
    assert await app.fetchval(
        "SELECT retsu.acknowledge($1, $2::uuid, $3)",
        queue.id,
        delivered["id"],
        delivered["receipt_handle"],
    )
    await transaction.rollback()
    assert await counters(owner, queue) == before
    assert (await stats(http, queue))["in_flight"] == 1
    # Committed, it counts.
    async with app.transaction():
        assert await app.fetchval(
            "SELECT retsu.acknowledge($1, $2::uuid, $3)",
            queue.id,
            delivered["id"],
            delivered["receipt_handle"],
        )
    assert (await counters(owner, queue))["acknowledged"] == before["acknowledged"] + 1


async def test_acknowledge_leaves_the_callers_synchronous_commit_alone(
    http: httpx.AsyncClient, app: asyncpg.Connection
) -> None:
    """retsu_acknowledge relaxes synchronous_commit for HTTP acknowledgements; inside the
    caller's transaction that would weaken the caller's own writes."""
    queue = await new_queue(http)
    await SqlDriver(app).enqueue(queue.id, "job")
    (delivered,) = await dequeue(http, queue)
    async with app.transaction():
        await app.execute("SET LOCAL synchronous_commit = remote_write")
        assert await app.fetchval(
            "SELECT retsu.acknowledge($1, $2::uuid, $3)",
            queue.id,
            delivered["id"],
            delivered["receipt_handle"],
        )
        assert await app.fetchval("SHOW synchronous_commit") == "remote_write"


# -- notifications: at commit, never for a rollback, only when someone waits -----------------
#
# The functions notify a queue only while an API process has registered a waiting long poll
# on it (``queue_waiter``, migration 0013). A raw LISTEN connection is no API process: the
# tests that listen themselves register a row as an API process would (``waiter``).


class Listener:
    def __init__(self) -> None:
        self.payloads: asyncio.Queue[str] = asyncio.Queue()

    def __call__(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        self.payloads.put_nowait(payload)

    async def next(self, within: float) -> str | None:
        try:
            async with asyncio.timeout(within):
                return await self.payloads.get()
        except TimeoutError:
            return None


@pytest.fixture
async def listener(owner: asyncpg.Connection) -> AsyncIterator[Listener]:
    listener = Listener()
    await owner.add_listener("retsu_messages", listener)
    yield listener
    await owner.remove_listener("retsu_messages", listener)


async def waiter(
    owner: asyncpg.Connection, queue: Q, process: str = "test-listener", age: float = 0
) -> None:
    """A ``queue_waiter`` row as an API process with a poll waiting on ``queue`` writes it
    (``age`` seconds old)."""
    await owner.execute(
        "INSERT INTO queue_waiter (queue_id, process, seen_at) "
        "VALUES ($1, $2, now() - make_interval(secs => $3)) "
        "ON CONFLICT (queue_id, process) DO UPDATE SET seen_at = excluded.seen_at",
        uuid.UUID(queue.id),
        process,
        age,
    )


async def waiters(owner: asyncpg.Connection, queue: Q) -> list[asyncpg.Record]:
    return await owner.fetch(
        "SELECT process, seen_at FROM queue_waiter WHERE queue_id = $1 ORDER BY process",
        uuid.UUID(queue.id),
    )


async def test_the_api_listeners_hear_an_enqueue_at_commit_and_never_for_a_rollback(
    http: httpx.AsyncClient, app: asyncpg.Connection, owner: asyncpg.Connection, listener: Listener
) -> None:
    queue = await new_queue(http)
    await waiter(owner, queue)
    expected = f"{queue.id}:messages"
    transaction = app.transaction()
    await transaction.start()
    await app.fetchval("SELECT retsu.enqueue($1, 'a')", queue.id)
    await app.fetchval("SELECT retsu.enqueue($1, 'b')", queue.id)
    assert await listener.next(0.5) is None  # not before the commit
    await transaction.commit()
    assert await listener.next(5) == expected
    assert await listener.next(0.3) is None  # one notification for the transaction
    async with app.transaction():
        await app.fetchval("SELECT retsu.enqueue($1, 'keyed', idempotency_key => 'k')", queue.id)
    assert await listener.next(5) == expected
    # A replay stores nothing, so it announces nothing (as over HTTP).
    async with app.transaction():
        await app.fetchval("SELECT retsu.enqueue($1, 'keyed', idempotency_key => 'k')", queue.id)
    assert await listener.next(0.5) is None
    transaction = app.transaction()
    await transaction.start()
    await app.fetchval("SELECT retsu.enqueue($1, 'c')", queue.id)
    await transaction.rollback()
    assert await listener.next(0.5) is None


async def test_an_acknowledge_that_frees_a_lane_announces_it_at_commit(
    http: httpx.AsyncClient, app: asyncpg.Connection, owner: asyncpg.Connection, listener: Listener
) -> None:
    queue = await new_queue(http)
    await waiter(owner, queue)
    sql = SqlDriver(app)
    await sql.enqueue(queue.id, "plain")
    await sql.enqueue(queue.id, "head", group="g")
    await sql.enqueue(queue.id, "next", group="g")
    while await listener.next(0.3) is not None:
        pass
    delivered = {m["payload"]: m for m in await dequeue(http, queue)}
    while await listener.next(0.3) is not None:  # the API's own announcements, if any
        pass
    plain = delivered["plain"]
    assert await sql.acknowledge(queue.id, plain["id"], plain["receipt_handle"])
    assert await listener.next(0.5) is None  # nothing became deliverable
    head = delivered["head"]
    transaction = app.transaction()
    await transaction.start()
    assert await sql.acknowledge(queue.id, head["id"], head["receipt_handle"])
    assert await listener.next(0.5) is None
    await transaction.commit()
    assert await listener.next(5) == f"{queue.id}:messages"


async def _long_poll(http: httpx.AsyncClient, queue: Q, wait: int) -> tuple[httpx.Response, float]:
    response = await http.post(
        f"/v1/queues/{queue.id}/messages/dequeue", json={"wait_seconds": wait}
    )
    return response, time.monotonic()


async def test_a_long_poll_of_a_real_api_wakes_at_commit_not_before(
    http: httpx.AsyncClient, app: asyncpg.Connection
) -> None:
    # The API's waiters re-check every second anyway; what only a notification explains is
    # an answer within a fraction of that after the commit, every time.
    latencies = []
    for _ in range(3):
        queue = await new_queue(http)
        poll = asyncio.create_task(_long_poll(http, queue, 15))
        await asyncio.sleep(0.5)  # the poll is waiting
        transaction = app.transaction()
        await transaction.start()
        message_id = await app.fetchval("SELECT retsu.enqueue($1, 'wake up')", queue.id)
        await asyncio.sleep(1.6)  # longer than a re-check: it must not see the message
        assert not poll.done()
        committed = time.monotonic()
        await transaction.commit()
        response, answered = await poll
        assert response.status_code == 200, response.text
        assert response.json()["id"] == str(message_id)
        latencies.append(answered - committed)
    assert max(latencies) < 0.4, latencies


async def test_a_long_poll_is_not_woken_by_a_rollback(
    http: httpx.AsyncClient, app: asyncpg.Connection
) -> None:
    queue = await new_queue(http)
    poll = asyncio.create_task(_long_poll(http, queue, 2))
    await asyncio.sleep(0.3)
    transaction = app.transaction()
    await transaction.start()
    await app.fetchval("SELECT retsu.enqueue($1, 'never')", queue.id)
    await transaction.rollback()
    response, _ = await poll
    assert response.status_code == 204


async def test_without_a_fresh_waiter_nothing_is_notified(
    http: httpx.AsyncClient, app: asyncpg.Connection, owner: asyncpg.Connection, listener: Listener
) -> None:
    queue, other = await new_queue(http), await new_queue(http)
    sql = SqlDriver(app)
    await sql.enqueue(queue.id, "nobody waits")
    await sql.enqueue(queue.id, "head", group="g")
    await sql.enqueue(queue.id, "next", group="g")
    assert await listener.next(0.5) is None
    # A waiter of another queue, or a row older than migration 0013's window (a crashed
    # process's, say), does not count.
    await waiter(owner, other)
    await waiter(owner, queue, "crashed", age=WAITER_FRESH_SECONDS + 1)
    await sql.enqueue(queue.id, "still nobody")
    assert await listener.next(0.5) is None
    delivered = {m["payload"]: m for m in await dequeue(http, queue)}
    while await listener.next(0.3) is not None:  # the API's own announcements, if any
        pass
    head = delivered["head"]
    assert await sql.acknowledge(queue.id, head["id"], head["receipt_handle"])  # frees "next"
    assert await listener.next(0.5) is None
    # A fresh one does.
    await waiter(owner, queue)
    await sql.enqueue(queue.id, "someone waits")
    assert await listener.next(5) == f"{queue.id}:messages"
    fresh = {m["payload"]: m for m in await dequeue(http, queue)}["next"]
    while await listener.next(0.3) is not None:
        pass
    await sql.enqueue(queue.id, "after next", group="g")
    assert await listener.next(5) == f"{queue.id}:messages"
    assert await sql.acknowledge(queue.id, fresh["id"], fresh["receipt_handle"])
    assert await listener.next(5) == f"{queue.id}:messages"


async def test_the_migration_counts_a_row_for_longer_than_three_refreshes() -> None:
    from retsu.adapters.postgres import notifications

    assert 3 * notifications.WAITER_REFRESH_SECONDS <= WAITER_FRESH_SECONDS
    assert notifications.WAITER_FORGET_SECONDS > WAITER_FRESH_SECONDS


async def _registered(owner: asyncpg.Connection, queue: Q, within: float) -> list[asyncpg.Record]:
    deadline = time.monotonic() + within
    while True:
        rows = await waiters(owner, queue)
        if rows or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(0.02)


async def _deregistered(owner: asyncpg.Connection, queue: Q, within: float) -> float:
    started = time.monotonic()
    while await waiters(owner, queue):
        assert time.monotonic() - started < within, "the row outlived its linger"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def test_the_api_registers_a_waiting_poll_and_deletes_the_row_after(
    http: httpx.AsyncClient, app: asyncpg.Connection, owner: asyncpg.Connection
) -> None:
    from retsu.adapters.postgres.notifications import WAITER_LINGER_SECONDS

    # A poll a claim answers at once never waits, so it registers nothing.
    busy = await new_queue(http)
    await SqlDriver(app).enqueue(busy.id, "there already")
    response, _ = await _long_poll(http, busy, 5)
    assert response.status_code == 200
    await asyncio.sleep(0.3)
    assert await waiters(owner, busy) == []
    # A poll that waits registers its queue while it waits (one row: the API's process)…
    queue = await new_queue(http)
    poll = asyncio.create_task(_long_poll(http, queue, 2))
    rows = await _registered(owner, queue, within=1)
    assert len(rows) == 1 and not poll.done()
    # … a second poll on the queue changes nothing…
    second = asyncio.create_task(_long_poll(http, queue, 1))
    await asyncio.sleep(0.3)
    # (its seen_at may move: every write of the process refreshes all its rows)
    assert [row["process"] for row in await waiters(owner, queue)] == [rows[0]["process"]]
    assert (await second)[0].status_code == 204
    assert (await poll)[0].status_code == 204
    # … and the row goes a few seconds after the last one ended.
    ended = time.monotonic()
    await _deregistered(owner, queue, within=WAITER_LINGER_SECONDS + 3)
    assert time.monotonic() - ended >= WAITER_LINGER_SECONDS - 0.5


async def test_a_crashed_apis_rows_age_out(
    setup: Setup,
    http: httpx.AsyncClient,
    app: asyncpg.Connection,
    owner: asyncpg.Connection,
    listener: Listener,
    tmp_path: Path,
) -> None:
    from retsu.adapters.postgres.notifications import WAITER_FORGET_SECONDS

    port = free_port()
    crashing = RetsuProcess(
        ["api"], retsu_env(setup.url, http__port=str(port)), tmp_path / "crashing.log"
    )
    base = f"http://127.0.0.1:{port}"
    queue = await new_queue(http)
    try:
        crashing.wait_until_ready(f"{base}/health/ready")
        async with httpx.AsyncClient(base_url=base, timeout=30) as doomed:
            poll = asyncio.create_task(_long_poll(doomed, queue, 15))
            assert len(await _registered(owner, queue, within=2)) == 1
            crashing.signal(signal.SIGKILL)
            with contextlib.suppress(httpx.HTTPError):
                await poll
    finally:
        crashing.stop()
    assert len(await waiters(owner, queue)) == 1  # left behind
    # While fresh, the row costs a notification nobody hears…
    await app.fetchval("SELECT retsu.enqueue($1, 'a')", queue.id)
    assert await listener.next(5) == f"{queue.id}:messages"
    # … then it stops counting…
    await owner.execute(
        "UPDATE queue_waiter SET seen_at = seen_at - make_interval(secs => $2) WHERE queue_id = $1",
        uuid.UUID(queue.id),
        WAITER_FRESH_SECONDS + 1,
    )
    await app.fetchval("SELECT retsu.enqueue($1, 'b')", queue.id)
    assert await listener.next(0.5) is None
    # … and, long dead, is deleted by the next write of a live API process.
    await owner.execute(
        "UPDATE queue_waiter SET seen_at = now() - make_interval(secs => $2) WHERE queue_id = $1",
        uuid.UUID(queue.id),
        WAITER_FORGET_SECONDS + 1,
    )
    elsewhere = await new_queue(http)
    poll = asyncio.create_task(_long_poll(http, elsewhere, 1))
    assert len(await _registered(owner, elsewhere, within=1)) == 1
    await _deregistered(owner, queue, within=1)
    await poll


async def test_a_long_poll_of_a_real_api_wakes_within_half_a_second_of_an_enqueue(
    http: httpx.AsyncClient, app: asyncpg.Connection
) -> None:
    latencies = []
    for _ in range(5):
        queue = await new_queue(http)
        poll = asyncio.create_task(_long_poll(http, queue, 15))
        await asyncio.sleep(0.5)  # the poll is waiting
        committed = time.monotonic()
        message_id = await app.fetchval("SELECT retsu.enqueue($1, 'wake up')", queue.id)
        response, answered = await poll
        assert response.status_code == 200, response.text
        assert response.json()["id"] == str(message_id)
        latencies.append(answered - committed)
    assert max(latencies) < 0.5, latencies


# == SECURITY DEFINER: what a producer can and cannot reach ====================================

DENIED = (asyncpg.InsufficientPrivilegeError,)


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) FROM queue",
        "SELECT count(*) FROM public.queue_message",
        "SELECT count(*) FROM idempotency_key",
        "SELECT count(*) FROM queue_state_rollup",
        "SELECT count(*) FROM audit_log",
        "UPDATE queue SET paused = true",
        "DELETE FROM queue_message",
        "INSERT INTO idempotency_key (queue_id, key, message_id, fingerprint, created_at) "
        "VALUES (gen_random_uuid(), 'k', gen_random_uuid(), '\\x00', now())",
        # Retsu's own functions: no EXECUTE for PUBLIC.
        "SELECT * FROM retsu_enqueue(gen_random_uuid(), ARRAY[gen_random_uuid()], ARRAY['x'], "
        "ARRAY[2::smallint], ARRAY[60], ARRAY[0])",
        "SELECT * FROM retsu_dequeue(gen_random_uuid(), 1, 30, 100, 'x')",
        "SELECT * FROM retsu_acknowledge(gen_random_uuid(), ARRAY[]::uuid[], ARRAY[]::uuid[])",
        "SELECT retsu_fingerprint('x', 'LOW', NULL, NULL, NULL)",
        "SELECT retsu_refuse('queue_not_found', 'x')",
        "SELECT retsu_queue_ref('x')",
        "SELECT retsu_uuid7()",
        # Nothing may be created beside the functions, or in Retsu's table schema.
        "CREATE TABLE retsu.mine (id int)",
        "CREATE FUNCTION retsu.enqueue(queue text) RETURNS uuid LANGUAGE sql "
        "AS 'SELECT gen_random_uuid()'",
        "CREATE TABLE public.mine (id int)",
        "CREATE FUNCTION public.make_interval(secs integer) RETURNS interval LANGUAGE sql "
        "AS 'SELECT interval ''1 second'''",
        "CREATE SCHEMA mine",
        "ALTER FUNCTION retsu.enqueue(text, text, text, integer, integer, text, text) "
        "SECURITY INVOKER",
    ],
)
async def test_a_producer_reaches_nothing_but_the_two_functions(
    app: asyncpg.Connection, statement: str
) -> None:
    with pytest.raises(DENIED):
        await app.execute(statement)


async def test_a_role_without_the_grant_cannot_call_them(
    setup: Setup, app: asyncpg.Connection
) -> None:
    # A producer holds EXECUTE without the grant option: passing it on grants nothing
    # (PostgreSQL warns instead of failing).
    await app.execute(
        f"GRANT EXECUTE ON FUNCTION retsu.enqueue(text, text, text, integer, integer, text, text)"
        f" TO PUBLIC, {setup.outsider_role}"
    )
    await app.execute(f"GRANT USAGE ON SCHEMA retsu TO {setup.outsider_role}")
    outsider = await asyncpg.connect(setup.dsn(setup.outsider_role))
    try:
        for call in (
            "SELECT retsu.enqueue('q', 'x')",
            "SELECT retsu.acknowledge('q', gen_random_uuid(), 'h')",
        ):
            with pytest.raises(DENIED):
                await outsider.execute(call)
    finally:
        await outsider.close()


async def test_a_temporary_table_cannot_stand_in_for_retsus(
    http: httpx.AsyncClient, app: asyncpg.Connection, owner: asyncpg.Connection
) -> None:
    """pg_temp is searched first for tables unless named; the pinned search_path names it
    last, so the callers' temporary ``queue`` and ``queue_message`` are never used."""
    queue = await new_queue(http)
    await app.execute(
        "CREATE TEMPORARY TABLE queue (id uuid, name text, default_message_ttl_seconds int)"
    )
    await app.execute("CREATE TEMPORARY TABLE queue_message (id uuid)")
    await app.execute(
        "CREATE TEMPORARY TABLE idempotency_key "
        "(queue_id uuid, key text, message_id uuid, fingerprint bytea, created_at timestamptz)"
    )
    await app.execute("SET search_path = pg_temp, public")
    await app.execute(
        "INSERT INTO pg_temp.queue VALUES ($1::uuid, $2, 1)", queue.id, f"{queue.name}-fake"
    )
    sql = SqlDriver(app)
    await sql.enqueue(queue.name, "real")
    await sql.enqueue(queue.id, "real, keyed", idempotency_key="k")
    with pytest.raises(Refused) as refused:
        await sql.enqueue(f"{queue.name}-fake", "x")
    assert refused.value.code == "queue_not_found"
    assert await stored(owner, queue) == 2
    assert await keys(owner, queue) == 1
    assert await app.fetchval("SELECT count(*) FROM pg_temp.queue_message") == 0


async def test_the_functions_pin_their_search_path_and_only_they_are_granted(
    owner: asyncpg.Connection, setup: Setup
) -> None:
    rows = await owner.fetch(
        """
        SELECT p.proname, p.prosecdef, p.proconfig,
               has_function_privilege('public', p.oid, 'EXECUTE') AS public_may,
               has_function_privilege('retsu_producer', p.oid, 'EXECUTE') AS producer_may
        FROM pg_proc AS p WHERE p.pronamespace = 'retsu'::regnamespace ORDER BY 1
        """
    )
    assert [r["proname"] for r in rows] == ["acknowledge", "enqueue"]
    schema = await owner.fetchval("SELECT current_schema()")
    for row in rows:
        assert row["prosecdef"]
        assert f"search_path=pg_catalog, {schema}, pg_temp" in row["proconfig"]
        assert (row["public_may"], row["producer_may"]) == (False, True)
    assert (
        await owner.fetchval(
            "SELECT count(*) FROM pg_class WHERE relnamespace = 'retsu'::regnamespace"
        )
        == 0
    )
    assert not await owner.fetchval(
        "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'retsu_producer'"
    )
    # Every function Retsu keeps in its table schema is its own role's only (also those of a
    # later migration: the default privileges).
    open_to_public = await owner.fetch(
        """
        SELECT p.oid::regprocedure::text AS f FROM pg_proc AS p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND p.proowner = current_user::regrole
          AND has_function_privilege('public', p.oid, 'EXECUTE')
        """
    )
    assert [r["f"] for r in open_to_public] == []
    assert not await owner.fetchval(
        "SELECT has_schema_privilege('retsu_producer', 'retsu', 'CREATE')"
    )


async def test_another_database_on_the_server_migrates_with_the_role_already_there(
    postgres_server: PostgresServer, setup: Setup
) -> None:
    url = await create_database(postgres_server)  # retsu_producer exists: setup made it
    try:
        connection = await asyncpg.connect(libpq_url(url))
        try:
            assert await connection.fetchval(
                "SELECT has_function_privilege('retsu_producer', "
                "'retsu.enqueue(text, text, text, integer, integer, text, text)', 'EXECUTE')"
            )
        finally:
            await connection.close()
    finally:
        await drop_database(postgres_server, url)
