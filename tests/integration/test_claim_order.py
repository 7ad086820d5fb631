"""A claim answers in delivery order, and its lanes draw their next wait keys in it,
whatever join the planner picks (migration 0018).

An ``UPDATE … FROM … RETURNING`` yields its rows in the order its join visits them. The
claim functions used to rely on that; analysed statistics (or these sessions' planner
settings, which the functions' own ``SET`` clauses leave alone) turned the join round, and
a claim answered in primary-key order and served a lane out of turn. Each scenario runs
once per planner setting, on a database of its own whose sessions start with it.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.integration.test_postgres_repository_contract as contract
from retsu.adapters.postgres.engine import create_engine
from tests.conftest import create_database, drop_database
from tests.support.services import PostgresServer

pytestmark = pytest.mark.integration

PLANS: dict[str, dict[str, str]] = {
    "as-chosen": {},
    "no-nested-loop": {"enable_nestloop": "off"},
    "no-hash-or-merge": {"enable_hashjoin": "off", "enable_mergejoin": "off"},
}


@pytest.fixture(scope="module", params=sorted(PLANS))
async def engine(
    request: pytest.FixtureRequest, postgres_server: PostgresServer
) -> AsyncIterator[AsyncEngine]:
    url = await create_database(postgres_server, settings=PLANS[request.param])
    engine = create_engine(url, max_connections=4)
    # Statistics as a working database has them (a migrated, analysed one).
    async with engine.connect() as connection:
        raw = await connection.get_raw_connection()
        await raw.driver_connection.execute("ANALYZE")
    yield engine
    await engine.dispose()
    await drop_database(postgres_server, url)


# The contract's tests of delivery order and fair service (SPEC §3.3, §3.10), run on the
# PostgreSQL adapter against each plan (the class is reached through its module, so pytest
# does not collect it here a second time).
CHECKS = [
    "test_highest_priority_first_then_fifo_across_a_batch",
    "test_a_big_batch_keeps_its_order",
    "test_ended_delays_and_leases_are_ready_in_delivery_order",
    "test_an_elapsed_lease_competes_by_priority",
    "test_a_lane_delivers_one_at_a_time_in_enqueue_order_whatever_the_priority",
    "test_group_max_in_flight_leases_that_many_in_lane_order",
    "test_fair_service_a_backlog_delays_another_group_by_one_delivery_each",
    "test_fair_service_within_one_claim",
    "test_the_lanes_a_claim_served_first_wait_first_in_the_next",
    "test_wide_lanes_a_claim_served_first_wait_first_in_the_next",
]


@pytest.mark.parametrize("check", CHECKS)
async def test_the_order_holds_whatever_the_join(engine: AsyncEngine, check: str) -> None:
    harness = contract.PostgresHarness(engine)
    suite = contract.TestPostgresRepository()
    test = getattr(suite, check)
    if "q" in inspect.signature(test).parameters:
        await test(await suite.scenario(harness))
    else:
        await test(harness)
