"""Dependency-injector containers: one small container per concern, one per role.

Tests swap adapters by overriding providers (for example
``container.storage.repository.override(providers.Object(memory_repo))``),
never by patching modules.
"""

from __future__ import annotations

from dependency_injector import containers, providers

from retsu.adapters.cache.passthrough import DetailsQueueNames, RepositoryQueueDetails
from retsu.adapters.http.app import create_app
from retsu.adapters.http.management import create_management_app
from retsu.adapters.http.services import ApiServices
from retsu.adapters.postgres.engine import check_database, create_engine
from retsu.adapters.postgres.leadership import AdvisoryLockLeadership
from retsu.adapters.postgres.maintenance import PostgresMaintenance
from retsu.adapters.postgres.repository import PostgresRepository
from retsu.adapters.system import StopAwareSleeper, SystemClock, Uuid7Generator
from retsu.adapters.telemetry.metrics import Metrics
from retsu.adapters.telemetry.state_metrics import StateMetricsExporter
from retsu.application.acknowledge import Acknowledge
from retsu.application.batch_worker import BatchSchedule, BatchWorker
from retsu.application.clean_dead_letters import CleanDeadLetters
from retsu.application.clean_expired_messages import CleanExpiredMessages
from retsu.application.create_queue import CreateQueue
from retsu.application.dequeue import Dequeue
from retsu.application.enqueue import Enqueue
from retsu.application.state_collector import CollectorSchedule, StateMetricsCollector
from retsu.application.update_queue import UpdateQueue
from retsu.entrypoints.settings import Settings


def _milliseconds(value: int) -> float:
    return value / 1000


class CoreContainer(containers.DeclarativeContainer):
    """What every role has: settings, clock, ids, metrics."""

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    clock = providers.Singleton(SystemClock)
    ids = providers.Singleton(Uuid7Generator)
    metrics = providers.Singleton(
        Metrics, max_queues=settings.provided.telemetry.metrics.max_queues
    )


class StorageContainer(containers.DeclarativeContainer):
    """PostgreSQL: the engine (one pool per process) and the repository over it."""

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    application_name = providers.Object("retsu")
    engine = providers.Singleton(
        create_engine,
        url=settings.provided.database.url,
        max_connections=settings.provided.database.max_connections,
        acquire_timeout_seconds=settings.provided.database.acquire_timeout_seconds,
        application_name=application_name,
    )
    repository = providers.Singleton(PostgresRepository, engine=engine)
    readiness = providers.Callable(check_database, engine)


class QueueLookupContainer(containers.DeclarativeContainer):
    """Queue metadata lookups. Pass-through for now: every lookup reads storage."""

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    repository: providers.Dependency[PostgresRepository] = providers.Dependency()
    details = providers.Singleton(RepositoryQueueDetails, queues=repository)
    names = providers.Singleton(DetailsQueueNames, details=details)


class UseCaseContainer(containers.DeclarativeContainer):
    core = providers.DependenciesContainer()
    storage = providers.DependenciesContainer()
    lookups = providers.DependenciesContainer()

    create_queue = providers.Singleton(
        CreateQueue,
        queues=storage.repository,
        details=lookups.details,
        names=lookups.names,
        ids=core.ids,
        clock=core.clock,
    )
    update_queue = providers.Singleton(
        UpdateQueue, queues=storage.repository, details=lookups.details, names=lookups.names
    )
    enqueue = providers.Singleton(
        Enqueue,
        messages=storage.repository,
        details=lookups.details,
        ids=core.ids,
        events=core.metrics,
    )
    dequeue = providers.Singleton(
        Dequeue, messages=storage.repository, details=lookups.details, events=core.metrics
    )
    acknowledge = providers.Singleton(
        Acknowledge, messages=storage.repository, names=lookups.names, events=core.metrics
    )


class ApiContainer(containers.DeclarativeContainer):
    """The API role: the HTTP app over the queue use cases."""

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    core = providers.Container(CoreContainer, settings=settings)
    storage = providers.Container(
        StorageContainer, settings=settings, application_name=providers.Object("retsu-api")
    )
    lookups = providers.Container(
        QueueLookupContainer, settings=settings, repository=storage.repository
    )
    use_cases = providers.Container(UseCaseContainer, core=core, storage=storage, lookups=lookups)

    services = providers.Singleton(
        ApiServices,
        create_queue=use_cases.create_queue,
        update_queue=use_cases.update_queue,
        enqueue=use_cases.enqueue,
        dequeue=use_cases.dequeue,
        acknowledge=use_cases.acknowledge,
        readiness=storage.readiness.provider,
        metrics=core.metrics,
    )
    app = providers.Singleton(create_app, services=services)


class WorkerContainer(containers.DeclarativeContainer):
    """The worker roles: the three queue workers over one pool, plus their sleeper."""

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    core = providers.Container(CoreContainer, settings=settings)
    storage = providers.Container(
        StorageContainer, settings=settings, application_name=providers.Object("retsu-worker")
    )
    sleeper = providers.Singleton(StopAwareSleeper)
    maintenance = providers.Singleton(PostgresMaintenance, engine=storage.engine)

    expired_message_cleaner = providers.Singleton(
        BatchWorker,
        name="expired-message-cleaner",
        run_batch=providers.Singleton(
            CleanExpiredMessages, maintenance=maintenance, events=core.metrics
        ),
        schedule=providers.Factory(
            BatchSchedule,
            batch_size=settings.provided.worker.queue.expired_message_cleaner.batch_size,
            interval_seconds=settings.provided.worker.queue.expired_message_cleaner.processing_interval_seconds,
            saturated_batch_delay_seconds=providers.Callable(
                _milliseconds,
                settings.provided.worker.queue.expired_message_cleaner.saturated_batch_delay_milliseconds,
            ),
        ),
        sleeper=sleeper,
    )
    dead_letter_message_cleaner = providers.Singleton(
        BatchWorker,
        name="dead-letter-message-cleaner",
        run_batch=providers.Singleton(
            CleanDeadLetters,
            maintenance=maintenance,
            events=core.metrics,
            retention_seconds=settings.provided.worker.queue.dead_letter_message_cleaner.retention_seconds,
        ),
        schedule=providers.Factory(
            BatchSchedule,
            batch_size=settings.provided.worker.queue.dead_letter_message_cleaner.batch_size,
            interval_seconds=settings.provided.worker.queue.dead_letter_message_cleaner.processing_interval_seconds,
            saturated_batch_delay_seconds=providers.Callable(
                _milliseconds,
                settings.provided.worker.queue.dead_letter_message_cleaner.saturated_batch_delay_milliseconds,
            ),
        ),
        sleeper=sleeper,
    )
    leadership = providers.Singleton(AdvisoryLockLeadership, engine=storage.engine)
    state_snapshots = providers.Singleton(
        StateMetricsExporter, metrics=core.metrics, clock=core.clock
    )
    state_metrics_collector = providers.Singleton(
        StateMetricsCollector,
        leadership=leadership,
        snapshots=state_snapshots,
        clock=core.clock,
        sleeper=sleeper,
        schedule=providers.Factory(
            CollectorSchedule,
            collection_interval_seconds=settings.provided.worker.queue.state_metrics_collector.collection_interval_seconds,
            leadership_retry_interval_seconds=settings.provided.worker.queue.state_metrics_collector.leadership_retry_interval_seconds,
        ),
    )
    workers = providers.Dict(
        {
            "expired-message-cleaner": expired_message_cleaner,
            "dead-letter-message-cleaner": dead_letter_message_cleaner,
            "state-metrics-collector": state_metrics_collector,
        }
    )
    management_app = providers.Singleton(
        create_management_app, readiness=storage.readiness.provider, metrics=core.metrics
    )
