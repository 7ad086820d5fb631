"""The HTTP app over the in-memory adapters, a fake clock and a fresh Metrics object."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from retsu.adapters.cache.passthrough import DetailsQueueNames, RepositoryQueueDetails
from retsu.adapters.http import ApiServices, create_app
from retsu.adapters.memory.clock import FakeClock
from retsu.adapters.memory.repository import InMemoryRepository
from retsu.adapters.system import Uuid7Generator
from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.acknowledge import Acknowledge
from retsu.application.create_queue import CreateQueue
from retsu.application.dequeue import Dequeue
from retsu.application.enqueue import Enqueue
from retsu.application.update_queue import UpdateQueue
from tests.unit.http.helpers import Client, NewQueue


async def _ready() -> None:
    return None


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def repository(clock: FakeClock) -> InMemoryRepository:
    return InMemoryRepository(clock)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def services(clock: FakeClock, repository: InMemoryRepository, metrics: Metrics) -> ApiServices:
    details = RepositoryQueueDetails(repository)
    names = DetailsQueueNames(details)
    ids = Uuid7Generator()
    return ApiServices(
        create_queue=CreateQueue(repository, details, names, ids, clock),
        update_queue=UpdateQueue(repository, details, names),
        enqueue=Enqueue(repository, details, ids, metrics),
        dequeue=Dequeue(repository, details, metrics),
        acknowledge=Acknowledge(repository, names, metrics),
        readiness=_ready,
        metrics=metrics,
    )


@pytest.fixture
def app(services: ApiServices) -> Litestar:
    return create_app(services)


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[Client]:
    async with AsyncTestClient(app=app) as test_client:
        yield test_client


@pytest.fixture
def new_queue(client: Client) -> NewQueue:
    """Create a queue through the API; returns its JSON."""

    async def make(name: str = "orders", **settings: Any) -> dict[str, Any]:
        response = await client.post("/v1/queues", json={"name": name, **settings})
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    return make
