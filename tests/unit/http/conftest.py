"""The HTTP app as production builds it (``ApiContainer``), over the memory twin.

The container's storage (``MemoryStorageContainer``), clock, metrics and signals are
overridden; the use cases, the caches' pass-through layers and the app itself are the
production wiring.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.signals import InProcessMessageSignals
from retsu.adapters.telemetry.metrics import Metrics
from retsu.entrypoints.containers import ApiContainer
from tests.support.containers import api_container
from tests.unit.http.helpers import Client, NewQueue


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def repository(clock: ManualClock) -> MemoryStorage:
    """The memory storage behind every port (tests look inside it)."""
    return MemoryStorage(clock)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def signals() -> InProcessMessageSignals:
    return InProcessMessageSignals()


@pytest.fixture
def container(
    clock: ManualClock,
    repository: MemoryStorage,
    metrics: Metrics,
    signals: InProcessMessageSignals,
) -> ApiContainer:
    return api_container(clock=clock, storage=repository, metrics=metrics, signals=signals)


@pytest.fixture
def app(container: ApiContainer) -> Litestar:
    return container.app()


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[Client]:
    async with AsyncTestClient(app=app) as test_client:
        yield test_client


@pytest.fixture
def new_queue(client: Client) -> NewQueue:
    """Create a queue through the API; returns its JSON."""

    async def make(name: str = "orders", **settings: object) -> dict[str, object]:
        response = await client.post("/v1/queues", json={"name": name, **settings})
        assert response.status_code == 201, response.text
        body: dict[str, object] = response.json()
        return body

    return make
