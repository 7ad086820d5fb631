"""The production containers over the memory twin, for tests (no PostgreSQL, no Redis).

Everything is the production wiring (``retsu.entrypoints.containers``); only the storage
is swapped for ``MemoryStorageContainer`` (with the test's clock, and its
``MemoryStorage`` when the test wants to look inside), and the clock, metrics and signals
for the test's own. One port alone is swapped with
``container.storage.<port>.override(providers.Object(double))``.
"""

from __future__ import annotations

from typing import Any

from dependency_injector import providers

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.signals import InProcessMessageSignals
from retsu.adapters.telemetry.metrics import Metrics
from retsu.entrypoints.containers import ApiContainer, MemoryStorageContainer, WorkerContainer
from retsu.entrypoints.settings import build_settings

# Every storage port of the containers (a test makes them all fail with one double).
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

# Both caches off: lookups read the storage straight through (RepositoryQueueDetails,
# DetailsQueueNames), so a test sees every change at once.
NO_CACHES: dict[str, Any] = {
    "cache": {"distributed": {"enabled": False}, "in_memory": {"enabled": False}}
}


def memory_storage(
    clock: ManualClock,
    storage: MemoryStorage | None = None,
    *,
    signals: InProcessMessageSignals | None = None,
    secrets: Any = None,
) -> MemoryStorageContainer:
    memory = MemoryStorageContainer(
        database=providers.Object(storage if storage is not None else MemoryStorage(clock))
    )
    if signals is not None:
        memory.message_signals.override(providers.Object(signals))
    if secrets is not None:
        memory.secrets.override(providers.Object(secrets))
    return memory


def api_container(
    *,
    clock: ManualClock,
    storage: MemoryStorage | None = None,
    metrics: Metrics | Any = None,
    signals: InProcessMessageSignals | None = None,
    secrets: Any = None,
    settings: dict[str, Any] | None = None,
) -> ApiContainer:
    """The production API container over the memory storage."""
    container = ApiContainer(settings=build_settings({**NO_CACHES, **(settings or {})}))
    container.core.clock.override(providers.Object(clock))
    if metrics is not None:
        container.core.metrics.override(providers.Object(metrics))
    container.storage.override(memory_storage(clock, storage, signals=signals, secrets=secrets))
    return container


def worker_container(
    *,
    clock: ManualClock,
    storage: MemoryStorage | None = None,
    metrics: Metrics | Any = None,
    settings: dict[str, Any] | None = None,
) -> WorkerContainer:
    """The production worker container over the memory storage."""
    container = WorkerContainer(settings=build_settings(settings or {}))
    container.core.clock.override(providers.Object(clock))
    if metrics is not None:
        container.core.metrics.override(providers.Object(metrics))
    container.storage.override(memory_storage(clock, storage))
    return container
