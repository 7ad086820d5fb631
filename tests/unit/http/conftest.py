"""The HTTP app as production builds it (``ApiContainer``), over the in-memory adapters.

The container's storage, clock, metrics and readiness providers are overridden; the use
cases, the caches' pass-through layers and the app itself are the production wiring.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from dependency_injector import providers
from litestar import Litestar
from litestar.testing import AsyncTestClient

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.secrets import RandomServerSecrets
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.signals import InProcessMessageSignals
from retsu.adapters.telemetry.metrics import Metrics
from retsu.entrypoints.containers import ApiContainer
from retsu.entrypoints.settings import build_settings
from tests.support.doubles.storage import AnnouncingMemoryRepository, LocalMessageSignals
from tests.unit.http.helpers import Client, NewQueue

# Both caches off: lookups read the repository straight through (RepositoryQueueDetails,
# DetailsQueueNames), so a test sees every change at once.
NO_CACHES = {"cache": {"distributed": {"enabled": False}, "in_memory": {"enabled": False}}}


LocalSignals = LocalMessageSignals


STORAGE_PORTS = (
    "queues",
    "queue_state",
    "messages",
    "dead_letters",
    "audit_log",
    "message_browser",
    "consumers",
    "history",
)


async def _ready() -> None:
    return None


def api_container(
    *,
    clock: ManualClock,
    repository: Any,
    metrics: Metrics,
    signals: InProcessMessageSignals | None = None,
    secrets: Any = None,
) -> ApiContainer:
    """The production API container over memory adapters (no PostgreSQL, no Redis)."""
    container = ApiContainer(settings=build_settings(NO_CACHES))
    container.core.clock.override(providers.Object(clock))
    container.core.metrics.override(providers.Object(metrics))
    # One memory repository serves every storage port (tests hand in failing doubles too).
    for port in STORAGE_PORTS:
        getattr(container.storage, port).override(providers.Object(repository))
    container.storage.secrets.override(providers.Object(secrets or RandomServerSecrets()))
    container.storage.message_signals.override(providers.Object(signals or LocalSignals()))
    container.storage.readiness.override(providers.Callable(_ready))
    return container


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def repository(clock: ManualClock, signals: InProcessMessageSignals) -> MemoryStorage:
    # Announces committed changes to long polls, as production's decorators do.
    return AnnouncingMemoryRepository(clock, signals)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def signals() -> InProcessMessageSignals:
    return LocalSignals()


@pytest.fixture
def container(
    clock: ManualClock, repository: Any, metrics: Metrics, signals: InProcessMessageSignals
) -> ApiContainer:
    return api_container(clock=clock, repository=repository, metrics=metrics, signals=signals)


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

    async def make(name: str = "orders", **settings: Any) -> dict[str, Any]:
        response = await client.post("/v1/queues", json={"name": name, **settings})
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    return make
