"""The HTTP app over the in-memory adapters, a fake clock and a fresh Metrics object."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from retsu.adapters.cache.passthrough import DetailsQueueNames, RepositoryQueueDetails
from retsu.adapters.http import ApiServices, create_app
from retsu.adapters.system import Uuid7Generator
from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.acknowledge import Acknowledge
from retsu.application.change_visibility import ChangeVisibility
from retsu.application.create_queue import CreateQueue
from retsu.application.delete_dead_letter import DeleteDeadLetter
from retsu.application.delete_queue import DeleteQueue
from retsu.application.dequeue import Dequeue
from retsu.application.enqueue import Enqueue
from retsu.application.enqueue_idempotent import EnqueueIdempotent
from retsu.application.get_dead_letter import GetDeadLetter
from retsu.application.get_queue import GetQueue
from retsu.application.list_audit_log import ListAuditLog
from retsu.application.list_dead_letters import ListDeadLetters
from retsu.application.list_queues import ListQueues
from retsu.application.pause_queue import PauseQueue, ResumeQueue
from retsu.application.purge_queue import PurgeQueue
from retsu.application.redrive_dead_letter import RedriveDeadLetter
from retsu.application.redrive_dead_letters import RedriveDeadLetters
from retsu.application.update_queue import UpdateQueue
from tests.support.memory.clock import FakeClock
from tests.support.memory.repository import InMemoryRepository
from tests.support.memory.secrets import RandomServerSecrets
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


def build_services(
    clock: FakeClock,
    repository: InMemoryRepository,
    metrics: Metrics,
    secrets: RandomServerSecrets | None = None,
) -> ApiServices:
    """Every use case over the memory adapters (no caches), as the API container wires them."""
    details = RepositoryQueueDetails(repository)
    names = DetailsQueueNames(details)
    ids = Uuid7Generator()
    keys = secrets or RandomServerSecrets()
    return ApiServices(
        create_queue=CreateQueue(repository, details, names, ids, clock),
        update_queue=UpdateQueue(repository, details, names),
        enqueue=Enqueue(repository, details, ids, metrics),
        dequeue=Dequeue(repository, details, metrics),
        acknowledge=Acknowledge(repository, names, metrics),
        list_queues=ListQueues(repository, keys),
        get_queue=GetQueue(repository, repository),
        pause_queue=PauseQueue(repository, details, names),
        resume_queue=ResumeQueue(repository, details, names),
        purge_queue=PurgeQueue(repository),
        delete_queue=DeleteQueue(repository, details, names),
        enqueue_idempotent=EnqueueIdempotent(repository, details, ids, metrics),
        change_visibility=ChangeVisibility(repository, names),
        list_dead_letters=ListDeadLetters(repository, details, keys),
        get_dead_letter=GetDeadLetter(repository, details),
        redrive_dead_letter=RedriveDeadLetter(repository, details, ids, metrics),
        redrive_dead_letters=RedriveDeadLetters(repository, details, ids, metrics),
        delete_dead_letter=DeleteDeadLetter(repository, details),
        list_audit_log=ListAuditLog(repository, keys),
        readiness=_ready,
        metrics=metrics,
    )


@pytest.fixture
def services(clock: FakeClock, repository: InMemoryRepository, metrics: Metrics) -> ApiServices:
    return build_services(clock, repository, metrics)


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
