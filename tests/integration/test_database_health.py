"""Database health on a real PostgreSQL (SPEC §10): the reader's contract, and the
collector leader's gauges moving while a transaction is held open in another session.

Every holder here is a session this test opened (found by its unique application_name),
in a database of the test's own; nothing else on the server is touched.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import asyncpg
import pytest
from bench.chaos.topology import PrivatePostgres, TopologyError, find_postgres_bin
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.engine import create_engine
from retsu.adapters.postgres.health import PostgresDatabaseHealth
from retsu.domain.database_health import HolderKind
from retsu.domain.message import MessageToStore, Priority, Receipt
from tests.conftest import create_database, drop_database
from tests.contract.health_contract import DatabaseHealthContract
from tests.contract.repository_contract import audit_of, new_queue
from tests.integration.test_workers import COLLECTOR, INTERVAL, Worker, running
from tests.support.postgres import PostgresStorage
from tests.support.processes import eventually
from tests.support.services import PostgresServer, require_services
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration


@asynccontextmanager
async def held_transaction(database_url: str, application_name: str) -> AsyncIterator[int]:
    """``BEGIN; SELECT txid_current();`` in a session of its own, held until the block ends:
    the transaction has an xid, so it holds back the horizon (its pid is yielded)."""
    connection = await asyncpg.connect(
        plain_url(database_url), server_settings={"application_name": application_name}
    )
    try:
        transaction = connection.transaction()
        await transaction.start()
        await connection.fetchval("SELECT txid_current()")
        yield connection.get_server_pid()
        await transaction.rollback()
    finally:
        await connection.close()


class PostgresHealthHarness:
    def __init__(self, engine: AsyncEngine, database_url: str) -> None:
        self.health = PostgresDatabaseHealth(Database(engine))
        self._url = database_url

    @asynccontextmanager
    async def hold_transaction(self, application_name: str) -> AsyncIterator[None]:
        async with held_transaction(self._url, application_name):
            yield

    async def advance(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # PostgreSQL's clock runs by itself


@pytest.fixture(scope="module")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, max_connections=2)
    yield engine
    await engine.dispose()


class TestPostgresDatabaseHealth(DatabaseHealthContract):
    @pytest.fixture
    def harness(self, engine: AsyncEngine, database_url: str) -> PostgresHealthHarness:
        return PostgresHealthHarness(engine, database_url)


async def test_a_repeatable_read_snapshot_without_an_xid_is_a_holder_too(
    engine: AsyncEngine, database_url: str
) -> None:
    reader = PostgresDatabaseHealth(Database(engine))
    name = f"retsu-snapshot-{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(
        plain_url(database_url), server_settings={"application_name": name}
    )
    try:
        transaction = connection.transaction(isolation="repeatable_read", readonly=True)
        await transaction.start()
        await connection.fetchval("SELECT 1")  # takes the snapshot; no xid is ever assigned
        health = await reader.read_database_health()
        (holder,) = [h for h in health.holders if h.name == name]
        assert holder.state == "idle in transaction"
        assert holder.since is not None
        await transaction.rollback()
        # In read committed, an idle transaction without an xid holds nothing.
        await connection.execute("BEGIN; SELECT 1")
        health = await reader.read_database_health()
        assert [h for h in health.holders if h.name == name] == []
        await connection.execute("ROLLBACK")
    finally:
        await connection.close()


def _private_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="retsu-health-"))
    root.chmod(0o755)  # the postgres user must reach its data directory
    return root


def _enable_prepared_transactions(server: PrivatePostgres) -> None:
    with (server.data / "postgresql.auto.conf").open("a") as conf:
        conf.write("max_prepared_transactions = 4\n")


@pytest.fixture
async def prepared_transactions_server() -> AsyncIterator[PrivatePostgres]:
    """A private cluster (initdb into a temporary directory) with prepared transactions
    enabled: PostgreSQL's default, and the shared test server's, is none."""
    try:
        bin_dir = find_postgres_bin(None)
    except TopologyError as error:
        if require_services():
            pytest.fail(f"RETSU_REQUIRE_SERVICES is set but {error}", pytrace=False)
        pytest.skip(str(error))
    root = await asyncio.to_thread(_private_root)
    server = PrivatePostgres(root, bin_dir, "prepared")
    try:
        await asyncio.to_thread(server.init)
        await asyncio.to_thread(_enable_prepared_transactions, server)
        await asyncio.to_thread(server.start)
        yield server
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(root, ignore_errors=True)


async def test_a_prepared_transaction_holds_the_horizon_with_no_session(
    prepared_transactions_server: PrivatePostgres,
) -> None:
    url = prepared_transactions_server.url("postgres")
    engine = create_engine(url, max_connections=1)
    admin = await asyncpg.connect(url)
    gid = f"retsu-test-{uuid.uuid4().hex[:8]}"
    try:
        await admin.execute(f"BEGIN; SELECT txid_current(); PREPARE TRANSACTION '{gid}'")
        await asyncio.sleep(1.1)
        health = await PostgresDatabaseHealth(Database(engine)).read_database_health()
        (prepared,) = [h for h in health.holders if h.name == gid]
        assert prepared.kind is HolderKind.PREPARED_TRANSACTION
        assert prepared.state == "prepared"
        assert prepared.pid is None
        held = prepared.age_seconds(health.taken_at)
        assert held is not None and held >= 1
        assert health.oldest_transaction_age_seconds >= 1  # a transaction, with no session
        assert health.xmin_horizon_age_seconds >= 1
    finally:
        await admin.execute(f"ROLLBACK PREPARED '{gid}'")
        await admin.close()
        await engine.dispose()


# -- the collector leader, a real process ------------------------------------------------


@pytest.fixture
async def own_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A database of this test's own: the collector reads only what this test does there."""
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


async def _eventually(check: Callable[[], Any], within: float, what: str) -> None:
    await asyncio.to_thread(eventually, check, within, what)


async def _churn(database_url: str, count: int) -> str:
    """Enqueue and acknowledge ``count`` messages on a new queue: ``count`` dead rows in
    queue_message (inserted, claimed, deleted)."""
    engine = create_engine(database_url, max_connections=2)
    try:
        storage = PostgresStorage(engine)
        queue = new_queue()
        await storage.queues.add_queue(queue, audit_of(queue.id))
        for start in range(0, count, 100):
            batch = [
                MessageToStore(uuid.uuid4(), "x", Priority.MEDIUM, 600, 0)
                for _ in range(min(100, count - start))
            ]
            await storage.messages.enqueue(queue.id, batch)
            claimed = await storage.messages.dequeue(
                queue.id, limit=100, visibility_timeout_seconds=30, dead_letter_batch_size=10
            )
            receipts = [Receipt(m.id, m.receipt_handle) for m in claimed.messages]
            assert (await storage.messages.acknowledge(queue.id, receipts)).removed == len(batch)
        return queue.name
    finally:
        await engine.dispose()


async def test_the_collector_leader_exports_the_gauges_and_they_move_with_a_held_transaction(
    own_database: str, tmp_path: Path
) -> None:
    settings = {
        "WORKER__QUEUE__STATE_METRICS_COLLECTOR__COLLECTION_INTERVAL_SECONDS": str(INTERVAL),
        "WORKER__QUEUE__STATE_METRICS_COLLECTOR__LEADERSHIP_RETRY_INTERVAL_SECONDS": str(INTERVAL),
    }
    with running(COLLECTOR, own_database, tmp_path, **settings) as collector:
        worker: Worker = collector
        await _eventually(
            lambda: worker.metric("db_xmin_horizon_age_seconds") is not None,
            INTERVAL + 10,
            "the leader's first health read",
        )
        assert worker.metric("db_xmin_horizon_age_seconds") == 0
        for table in ("queue", "queue_message", "queue_state_rollup", "queue_history"):
            assert worker.metric("db_table_dead_rows", table=table) is not None, table
            assert worker.metric("db_table_last_autovacuum_age_seconds", table=table) is not None
        dead_before = worker.metric("db_table_dead_rows", table="queue_message") or 0

        async with held_transaction(own_database, "retsu-test-held-horizon"):
            await _churn(own_database, 1_000)
            # Two collections later the hold is over 5 s old and vacuum cannot have removed
            # a single one of those rows.
            await _eventually(
                lambda: (worker.metric("db_xmin_horizon_age_seconds") or 0) >= INTERVAL,
                2 * INTERVAL + 10,
                "db_xmin_horizon_age_seconds to grow",
            )
            oldest = worker.metric("db_oldest_transaction_age_seconds") or 0
            assert oldest >= (worker.metric("db_xmin_horizon_age_seconds") or 0) - INTERVAL
            await _eventually(
                lambda: (
                    (worker.metric("db_table_dead_rows", table="queue_message") or 0)
                    >= dead_before + 1_000
                ),
                2 * INTERVAL + 10,
                "the acknowledged messages to show as dead rows",
            )
        # Released: the next collection sees nothing holding the horizon.
        await _eventually(
            lambda: worker.metric("db_xmin_horizon_age_seconds") == 0,
            2 * INTERVAL + 10,
            "db_xmin_horizon_age_seconds back to 0",
        )
        log = await asyncio.to_thread(Path(worker.process.log_path).read_text)
        assert "reading the database health failed" not in log


# -- the storage parameters of the table-storage migration ---------------------------------


def _table_storage_migration() -> ModuleType:
    (path,) = (Path(__file__).parents[2] / "migrations" / "versions").glob("*_table_storage.py")
    spec = importlib.util.spec_from_file_location("retsu_table_storage_migration", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_queue_tables_carry_their_storage_parameters(database_url: str) -> None:
    """Migration 0011's parameters, on top of 0001's (fillfactor 80 and early vacuum of
    queue_message), as PostgreSQL reports them after `retsu migrate`."""
    wanted: dict[str, dict[str, Any]] = _table_storage_migration().STORAGE
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        rows = await connection.fetch(
            "SELECT relname, reloptions FROM pg_class "
            "WHERE relname = ANY($1::text[]) AND relkind = 'r'",
            list(wanted),
        )
    finally:
        await connection.close()
    found = {
        row["relname"]: dict(option.split("=", 1) for option in row["reloptions"] or ())
        for row in rows
    }
    assert set(found) == set(wanted)
    for table, parameters in wanted.items():
        for name, value in parameters.items():
            assert float(found[table][name]) == float(value), (table, name)
    assert found["queue_message"]["fillfactor"] == "80"  # 0001's, kept
    assert found["queue_state_rollup"]["fillfactor"] == "20"
