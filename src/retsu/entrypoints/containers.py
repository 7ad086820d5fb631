"""Dependency-injector containers: one small container per concern, one per role.

Tests swap adapters by overriding providers, never by patching modules: the whole
storage at once with a container that has ``StorageContainer``'s provider names
(``container.storage.override(MemoryStorageContainer(...))``, see
``tests/support/doubles/storage.py``), or one port
(``container.storage.messages.override(providers.Object(fake))``).
"""

from __future__ import annotations

import time
from typing import Any

from dependency_injector import containers, providers

from retsu import __version__
from retsu.adapters.cache.breaker import CircuitBreaker
from retsu.adapters.cache.closing import close_layers
from retsu.adapters.cache.local import LocalQueueNames
from retsu.adapters.cache.metrics import NO_CACHE_METRICS, CacheMetrics
from retsu.adapters.cache.passthrough import DetailsQueueNames, RepositoryQueueDetails
from retsu.adapters.cache.redis_client import create_redis_client
from retsu.adapters.cache.shared import RedisQueueDetails
from retsu.adapters.cron import CRON_CALENDAR
from retsu.adapters.http.app import create_app
from retsu.adapters.http.auth import ApiToken, AuthConfig
from retsu.adapters.http.console import ConsoleConfig
from retsu.adapters.http.cursors import Cursors
from retsu.adapters.http.management import create_management_app
from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.leadership import InMemoryLeadership, InMemoryLock
from retsu.adapters.memory.secrets import RandomServerSecrets
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.postgres.audit_log import PostgresAuditLog
from retsu.adapters.postgres.browsing import PostgresMessageBrowser
from retsu.adapters.postgres.consumers import PostgresConsumers
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.dead_letters import PostgresDeadLetters
from retsu.adapters.postgres.engine import check_database, create_engine
from retsu.adapters.postgres.health import PostgresDatabaseHealth
from retsu.adapters.postgres.history import PostgresHistory
from retsu.adapters.postgres.leadership import AdvisoryLockLeadership
from retsu.adapters.postgres.maintenance import PostgresMaintenance
from retsu.adapters.postgres.messages import PostgresMessages
from retsu.adapters.postgres.notifications import PostgresMessageSignals
from retsu.adapters.postgres.queues import PostgresQueues
from retsu.adapters.postgres.schedules import PostgresSchedules
from retsu.adapters.postgres.secrets import PostgresServerSecrets
from retsu.adapters.postgres.state import PostgresQueueState
from retsu.adapters.signals import InProcessMessageSignals
from retsu.adapters.system import StopAwareSleeper, SystemClock, Uuid7Generator
from retsu.adapters.telemetry.metrics import Metrics
from retsu.adapters.telemetry.operations import Instrumentation
from retsu.adapters.telemetry.state_metrics import StateMetricsExporter
from retsu.adapters.telemetry.tracing import create_tracing
from retsu.application.activity import ActivityService
from retsu.application.batch_worker import BatchSchedule, BatchWorker
from retsu.application.browsing import BrowsingService
from retsu.application.clean_dead_letters import CleanDeadLetters
from retsu.application.clean_expired_messages import CleanExpiredMessages
from retsu.application.database_health import DatabaseHealthService
from retsu.application.dead_letters import DeadLetterService
from retsu.application.messages import MessageService
from retsu.application.ports import Clock, QueueRepository
from retsu.application.queues import QueueService
from retsu.application.scheduler import Scheduler
from retsu.application.schedules import ScheduleService
from retsu.application.state_collector import CollectorSchedule, StateMetricsCollector
from retsu.application.track_consumers import ConsumerTracker
from retsu.entrypoints.settings import Settings


def _auth_config(settings: Settings) -> AuthConfig:
    """The HTTP adapter's view of ``auth.*`` (plain values; it never imports settings)."""
    return AuthConfig(
        enabled=settings.auth.enabled,
        tokens=tuple(
            ApiToken(name=token.name, secret=token.secret, scopes=token.scopes)
            for token in settings.auth.tokens
        ),
    )


def provider_map(container: containers.Container) -> dict[str, providers.Provider[object]]:
    """A container's own providers by name (its dependency declarations left out)."""
    return {
        name: provider
        for name, provider in container.providers.items()
        if not isinstance(provider, providers.DependenciesContainer)
    }


def _milliseconds(value: int) -> float:
    return value / 1000


def _batch_schedule(section: Any) -> BatchSchedule:
    """A cleaner's schedule from its settings section (batch size, interval, the delay after
    a full batch)."""
    return BatchSchedule(
        batch_size=section.batch_size,
        interval_seconds=section.processing_interval_seconds,
        saturated_batch_delay_seconds=_milliseconds(section.saturated_batch_delay_milliseconds),
    )


def _listen_application_name(application_name: str) -> str:
    return f"{application_name}-listen"


def _session_source(settings: Settings) -> str:
    """The Selector key of what runs the sessions (advisory lock): the pooled database
    itself, or one of their own on ``database.session_url``."""
    database = settings.database
    own = database.session_url is not None and database.session_url != database.url
    return "own" if own else "pooled"


class CoreContainer(containers.DeclarativeContainer):
    """What every role has: settings, clock, ids, metrics, tracing."""

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    # The role name on every span (retsu.role), as in the logs: api, dev, worker:<name>.
    role = providers.Object("retsu")
    clock = providers.Singleton(SystemClock)
    # The time source of waits (a long poll's deadline); tests give a virtual one.
    monotonic = providers.Object(time.monotonic)
    ids = providers.Singleton(Uuid7Generator)
    metrics = providers.Singleton(
        Metrics, max_queues=settings.provided.telemetry.metrics.max_queues
    )
    # One TracerProvider per process (nothing at all when telemetry.traces.enabled is
    # off); the entrypoint calls tracing().shutdown() on its way out.
    tracing = providers.Singleton(
        create_tracing,
        enabled=settings.provided.telemetry.traces.enabled,
        endpoint=settings.provided.telemetry.traces.endpoint,
        timeout_seconds=settings.provided.telemetry.traces.timeout_seconds,
        role=role,
        environment=settings.provided.environment,
        version=__version__,
    )
    tracer = tracing.provided.tracer
    # Database telemetry (db_operation_duration_seconds, pool acquisition, DB spans).
    instrumentation = providers.Singleton(Instrumentation, metrics=metrics, tracer=tracer)


class StorageContainer(containers.DeclarativeContainer):
    """PostgreSQL: the engine (one pool per process) and one provider per storage port.

    Every statement runs through ``database`` (``adapters/postgres/database.py``), which
    times and traces each one under its name through ``instrumentation``. A test replaces
    the whole storage with ``MemoryStorageContainer`` (the same provider names) or
    overrides one port.
    """

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    instrumentation: providers.Dependency[Instrumentation] = providers.Dependency(
        instance_of=Instrumentation
    )
    application_name = providers.Object("retsu")
    # database.url: every plain transaction. Behind a transaction-mode pooler
    # (database.pooler) the engine keeps nothing beyond a transaction: no startup
    # settings, no named prepared statements (adapters/postgres/engine.py).
    transaction_pooler = settings.provided.database.transaction_pooler
    engine = providers.Singleton(
        create_engine,
        url=settings.provided.database.url,
        max_connections=settings.provided.database.max_connections,
        acquire_timeout_seconds=settings.provided.database.acquire_timeout_seconds,
        application_name=application_name,
        on_pool_acquire=instrumentation.provided.pool_acquired,
        transaction_pooler=transaction_pooler,
    )
    # Every statement's connection handling: broken connections discarded, a statement
    # retried once when safe, DatabaseUnavailable when PostgreSQL cannot be reached; and
    # every operation timed (and traced) once, here.
    database = providers.Singleton(
        Database, engine, pin_transactions=transaction_pooler, telemetry=instrumentation
    )
    # database.session_url: what needs a session of its own (SPEC §10). The collector's
    # advisory lock gets a small pool there (its leader keeps one connection, a standby
    # borrows one to try); without a session_url it shares the pooled database.
    session_engine = providers.Singleton(
        create_engine,
        url=settings.provided.database.session,
        max_connections=2,
        acquire_timeout_seconds=settings.provided.database.acquire_timeout_seconds,
        application_name=application_name,
        on_pool_acquire=instrumentation.provided.pool_acquired,
    )
    session_database = providers.Selector(
        providers.Callable(_session_source, settings),
        own=providers.Singleton(Database, session_engine, telemetry=instrumentation),
        pooled=database,
    )
    # Long polling: one dedicated LISTEN/NOTIFY connection per process, fanned out to
    # the waiting polls (started and stopped with the API app; docs/long-polling.md).
    # LISTEN needs a session: database.session_url when set.
    message_signals = providers.Singleton(
        PostgresMessageSignals,
        url=settings.provided.database.session,
        application_name=providers.Callable(_listen_application_name, application_name),
        connect_timeout_seconds=settings.provided.database.acquire_timeout_seconds,
    )

    queues = providers.Singleton(PostgresQueues, database)
    queue_state = providers.Singleton(PostgresQueueState, database)
    messages = providers.Singleton(PostgresMessages, database)
    dead_letters = providers.Singleton(PostgresDeadLetters, database)
    audit_log = providers.Singleton(PostgresAuditLog, database)
    # Browsing messages without claiming them, and an operator's delete (SPEC §3.6).
    message_browser = providers.Singleton(PostgresMessageBrowser, database)
    # The cleaners' batches and the collector's lock (worker roles).
    maintenance = providers.Singleton(PostgresMaintenance, database)
    leadership = providers.Singleton(AdvisoryLockLeadership, session_database)
    # Consumers (SPEC §3.7) and queue history (SPEC §3.8).
    consumers = providers.Singleton(PostgresConsumers, database)
    history = providers.Singleton(PostgresHistory, database)
    # Schedules (SPEC §3.12): an operator's changes and the scheduler's runs.
    schedules = providers.Singleton(PostgresSchedules, database)
    # What holds back vacuum (SPEC §10): the collector's gauges, the console's banner.
    database_health = providers.Singleton(PostgresDatabaseHealth, database)
    readiness = providers.Callable(check_database, engine)
    # The cursor-signing key made by `retsu migrate`, read once, on first use.
    secrets = providers.Singleton(PostgresServerSecrets, database)


async def _always_ready() -> None:
    return None


def _itself(storage: MemoryStorage) -> MemoryStorage:
    return storage


class MemoryStorageContainer(containers.DeclarativeContainer):
    """The memory twin of ``StorageContainer``: the same provider names (a subset, so it
    overrides a role's storage: ``container.storage.override(MemoryStorageContainer())``)
    over one ``MemoryStorage`` (``adapters/memory``), for the unit tests and the client's
    testing helper. ``database`` is that storage (a ``ManualClock``'s unless given); long
    polls are woken in process; the cursor key is random per container."""

    database: providers.Dependency[MemoryStorage] = providers.Dependency(
        instance_of=MemoryStorage,
        default=providers.Singleton(MemoryStorage, providers.Singleton(ManualClock)),
    )
    message_signals = providers.Singleton(InProcessMessageSignals)

    # One provider per port, each serving the one storage (a provider object may stand
    # under one name only in a declarative container).
    queues = providers.Singleton(_itself, database)
    queue_state = providers.Singleton(_itself, database)
    messages = providers.Singleton(_itself, database)
    dead_letters = providers.Singleton(_itself, database)
    audit_log = providers.Singleton(_itself, database)
    message_browser = providers.Singleton(_itself, database)
    maintenance = providers.Singleton(_itself, database)
    leadership = providers.Singleton(
        InMemoryLeadership, providers.Singleton(InMemoryLock), database
    )
    consumers = providers.Singleton(_itself, database)
    history = providers.Singleton(_itself, database)
    schedules = providers.Singleton(_itself, database)
    database_health = providers.Singleton(_itself, database)
    readiness = providers.Callable(_always_ready)
    secrets = providers.Singleton(RandomServerSecrets)


def memory_storage(clock: Clock) -> MemoryStorageContainer:
    """The memory twin on ``clock`` (give the role's core the same clock)."""
    return MemoryStorageContainer(database=providers.Singleton(MemoryStorage, clock))


def _cache_layer(enabled: bool) -> str:
    """The Selector key of a cache layer that configuration can switch off."""
    return "enabled" if enabled else "disabled"


class QueueLookupContainer(containers.DeclarativeContainer):
    """Queue metadata lookups (SPEC §4), each cache decorating the layer below it.

    Names: local LRU → shared Redis → storage. Details: shared Redis → storage. A layer
    switched off (``cache.in_memory.enabled``, ``cache.distributed.enabled``) is left out;
    with both off every lookup reads storage. ``close()`` (a coroutine) closes the Redis
    client on shutdown.
    """

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    queues: providers.Dependency[QueueRepository] = providers.Dependency()
    metrics: providers.Dependency[CacheMetrics] = providers.Dependency(
        default=providers.Object(NO_CACHE_METRICS)
    )

    storage_details = providers.Singleton(RepositoryQueueDetails, queues=queues)

    redis = providers.Singleton(
        create_redis_client,
        url=settings.provided.cache.distributed.url,
        connection_timeout_seconds=providers.Callable(
            _milliseconds, settings.provided.cache.distributed.connection_timeout_milliseconds
        ),
        command_timeout_seconds=providers.Callable(
            _milliseconds, settings.provided.cache.distributed.command_timeout_milliseconds
        ),
    )
    breaker = providers.Singleton(CircuitBreaker)
    shared_details = providers.Singleton(
        RedisQueueDetails, redis=redis, inner=storage_details, breaker=breaker, metrics=metrics
    )
    details = providers.Selector(
        providers.Callable(_cache_layer, settings.provided.cache.distributed.enabled),
        enabled=shared_details,
        disabled=storage_details,
    )

    details_names = providers.Singleton(DetailsQueueNames, details=details)
    local_names = providers.Singleton(
        LocalQueueNames,
        inner=details_names,
        max_entries=settings.provided.cache.in_memory.regions.queue_names.max_entries,
        max_capacity_bytes=settings.provided.cache.in_memory.regions.queue_names.max_capacity_bytes,
        metrics=metrics,
    )
    names = providers.Selector(
        providers.Callable(_cache_layer, settings.provided.cache.in_memory.enabled),
        enabled=local_names,
        disabled=details_names,
    )

    close = providers.Callable(close_layers, details, names)


class UseCaseContainer(containers.DeclarativeContainer):
    """The services the API's handlers take, one per thing they act on (each provider's
    name is the handler parameter that receives it; ``adapters/http/app.py``)."""

    core = providers.DependenciesContainer()
    storage = providers.DependenciesContainer()
    lookups = providers.DependenciesContainer()

    # What this process saw of named consumers, written every 5 s (SPEC §3.7); started
    # and stopped (with a last write) with the API app.
    consumer_tracker = providers.Singleton(
        ConsumerTracker, store=storage.consumers, clock=core.clock, events=core.metrics
    )
    queues = providers.Singleton(
        QueueService,
        queues=storage.queues,
        state=storage.queue_state,
        details=lookups.details,
        names=lookups.names,
        ids=core.ids,
        clock=core.clock,
        signals=storage.message_signals,
    )
    messages = providers.Singleton(
        MessageService,
        messages=storage.messages,
        details=lookups.details,
        names=lookups.names,
        ids=core.ids,
        events=core.metrics,
        signals=storage.message_signals,
        consumers=consumer_tracker,
        monotonic=core.monotonic,
    )
    dead_letters = providers.Singleton(
        DeadLetterService,
        dead_letters=storage.dead_letters,
        details=lookups.details,
        ids=core.ids,
        events=core.metrics,
        signals=storage.message_signals,
    )
    browsing = providers.Singleton(BrowsingService, browser=storage.message_browser)
    schedules = providers.Singleton(
        ScheduleService,
        schedules=storage.schedules,
        details=lookups.details,
        ids=core.ids,
        calendar=providers.Object(CRON_CALENDAR),
    )
    database_health = providers.Singleton(DatabaseHealthService, reader=storage.database_health)
    activity = providers.Singleton(
        ActivityService,
        consumers=storage.consumers,
        history=storage.history,
        audit_log=storage.audit_log,
        state=storage.queue_state,
        details=lookups.details,
        clock=core.clock,
        collection_interval_seconds=core.settings.provided.worker.queue.state_metrics_collector.collection_interval_seconds,
    )


class ApiContainer(containers.DeclarativeContainer):
    """The API role: the HTTP app over the queue use cases."""

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    role = providers.Object("api")  # `retsu dev` passes role="dev"
    core = providers.Container(CoreContainer, settings=settings, role=role)
    storage = providers.Container(
        StorageContainer,
        settings=settings,
        application_name=providers.Object("retsu-api"),
        instrumentation=core.instrumentation,
    )
    lookups = providers.Container(
        QueueLookupContainer,
        settings=settings,
        queues=storage.queues,
        metrics=core.metrics,
    )
    use_cases = providers.Container(UseCaseContainer, core=core, storage=storage, lookups=lookups)

    auth = providers.Callable(_auth_config, settings)
    # The operator console (SPEC §3.9): its session key derives from the server secret.
    console = providers.Factory(
        ConsoleConfig,
        enabled=settings.provided.console.enabled,
        secrets=storage.secrets,
        auth=auth,
    )
    # Pagination cursors, signed with the key every API process shares.
    cursors = providers.Singleton(Cursors, storage.secrets)
    # The HTTP handlers take their services from this container's providers, by name
    # (adapters/http/app.py): adding a service is one UseCaseContainer provider.
    app = providers.Singleton(
        create_app,
        services=providers.Callable(provider_map, use_cases),
        cursors=cursors,
        readiness=storage.readiness.provider,
        metrics=core.metrics,
        auth=auth,
        tracer=core.tracer,
        console=console,
        on_startup=providers.List(
            storage.message_signals.provided.start, use_cases.consumer_tracker.provided.start
        ),
        on_shutdown=providers.List(
            storage.message_signals.provided.stop, use_cases.consumer_tracker.provided.stop
        ),
    )


class WorkerContainer(containers.DeclarativeContainer):
    """The worker roles: the four queue workers over one pool, plus their sleeper."""

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    role = providers.Object("worker")  # run_worker passes role="worker:<name>"
    core = providers.Container(CoreContainer, settings=settings, role=role)
    storage = providers.Container(
        StorageContainer,
        settings=settings,
        application_name=providers.Object("retsu-worker"),
        instrumentation=core.instrumentation,
    )
    sleeper = providers.Singleton(StopAwareSleeper)

    # One batch of the expired-message cleaner; named so the client's testing helper
    # runs it on demand (``FakeRetsu.clean_expired()``).
    clean_expired_messages = providers.Singleton(
        CleanExpiredMessages,
        maintenance=storage.maintenance,
        events=core.metrics,
        idempotency_keys=storage.maintenance,
        consumers=storage.consumers,
        history=storage.history,
    )
    expired_message_cleaner = providers.Singleton(
        BatchWorker,
        name="expired-message-cleaner",
        run_batch=clean_expired_messages,
        schedule=providers.Factory(
            _batch_schedule, settings.provided.worker.queue.expired_message_cleaner
        ),
        sleeper=sleeper,
    )
    dead_letter_message_cleaner = providers.Singleton(
        BatchWorker,
        name="dead-letter-message-cleaner",
        run_batch=providers.Singleton(
            CleanDeadLetters,
            maintenance=storage.maintenance,
            events=core.metrics,
            retention_seconds=settings.provided.worker.queue.dead_letter_message_cleaner.retention_seconds,
        ),
        schedule=providers.Factory(
            _batch_schedule, settings.provided.worker.queue.dead_letter_message_cleaner
        ),
        sleeper=sleeper,
    )
    state_snapshots = providers.Singleton(
        StateMetricsExporter, metrics=core.metrics, clock=core.clock
    )
    state_metrics_collector = providers.Singleton(
        StateMetricsCollector,
        leadership=storage.leadership,
        snapshots=state_snapshots,
        clock=core.clock,
        sleeper=sleeper,
        database_health=storage.database_health,
        schedule=providers.Factory(
            CollectorSchedule,
            collection_interval_seconds=settings.provided.worker.queue.state_metrics_collector.collection_interval_seconds,
            leadership_retry_interval_seconds=settings.provided.worker.queue.state_metrics_collector.leadership_retry_interval_seconds,
        ),
    )
    # Recurring messages (SPEC §3.12): any number may run, each due time enqueued once.
    scheduler = providers.Singleton(
        Scheduler,
        runner=storage.schedules,
        events=core.metrics,
        queue_events=core.metrics,
        sleeper=sleeper,
    )
    workers = providers.Dict(
        {
            "expired-message-cleaner": expired_message_cleaner,
            "dead-letter-message-cleaner": dead_letter_message_cleaner,
            "state-metrics-collector": state_metrics_collector,
            "scheduler": scheduler,
        }
    )
    management_app = providers.Singleton(
        create_management_app, readiness=storage.readiness.provider, metrics=core.metrics
    )


class DevContainer(containers.DeclarativeContainer):
    """`retsu dev`: the API and every worker in one process, on one pool and one metrics
    registry (the API's /metrics also shows the workers' counters and the state gauges):
    the workers' core and storage are the API's."""

    settings: providers.Dependency[Settings] = providers.Dependency(instance_of=Settings)
    role = providers.Object("dev")
    api = providers.Container(ApiContainer, settings=settings, role=role)
    workers = providers.Container(
        WorkerContainer, settings=settings, role=role, core=api.core, storage=api.storage
    )
