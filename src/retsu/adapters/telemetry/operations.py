"""Storage telemetry: every database operation timed and, when tracing is on, traced.

``Instrumentation.operation(name)`` is the context manager that the PostgreSQL adapter's
``Database`` wraps around each statement or transaction it runs (``adapters/postgres/
database.py``: each statement is named once, where it is defined). It records
``db_operation_duration_seconds{operation,outcome}`` and, with a tracer, runs the work
inside a CLIENT span named after the operation (``db.system=postgresql``,
``db.operation.name``), a child of the current span (the HTTP request's, for the API).
Neither the domain nor the use cases know about it, and no storage port is wrapped.

Outcome is ``success`` when the work returns *or* raises a domain error that is an answer
of the database (``RetsuError``: "that name is taken"), and ``error`` for anything else:
the database unreachable (``Unavailable``), any other database or network failure, a
timeout, a cancellation. Both outcome series of an operation appear at its first use (so
``rate()`` of the error series is 0, not absent), never for operations a process does not
run.

``Instrumentation.pool_acquired`` measures ``db_pool_acquire_duration_seconds`` (the
engine's ``on_pool_acquire``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from retsu.adapters.telemetry.metrics import Metrics
from retsu.domain.errors import RetsuError, Unavailable

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["Instrumentation"]

_Observers = tuple[Callable[[float], None], Callable[[float], None]]


def _failed(error: BaseException | None) -> bool:
    """Whether an operation that ended with ``error`` counts as an ``error`` outcome."""
    if error is None:
        return False
    return not isinstance(error, RetsuError) or isinstance(error, Unavailable)


class _Timed:
    """One operation's timing (no tracer). A small class: this runs on every statement."""

    __slots__ = ("_observers", "_start")

    def __init__(self, observers: _Observers) -> None:
        self._observers = observers
        self._start = 0.0

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._observers[_failed(error)](time.perf_counter() - self._start)


class _Traced:
    """One operation's timing inside a CLIENT span."""

    __slots__ = ("_attributes", "_current", "_name", "_observers", "_span", "_start", "_tracer")

    def __init__(
        self, tracer: Tracer, name: str, attributes: dict[str, str], observers: _Observers
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._attributes = attributes
        self._observers = observers
        self._span: Any = None
        self._current: Any = None
        self._start = 0.0

    def __enter__(self) -> None:
        from opentelemetry.trace import SpanKind

        self._span = self._tracer.start_as_current_span(
            self._name,
            kind=SpanKind.CLIENT,
            attributes=self._attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        span = self._span.__enter__()
        self._start = time.perf_counter()
        self._current = span

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        failed = _failed(error)
        self._observers[failed](time.perf_counter() - self._start)
        span = self._current
        if error is not None:
            if failed:
                from opentelemetry.trace import Status, StatusCode

                span.set_attribute("error.type", type(error).__qualname__)
                if isinstance(error, Exception) and not isinstance(error, RetsuError):
                    span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR))
            else:
                span.set_attribute("retsu.domain_error", type(error).__name__)
        self._span.__exit__(kind, error, traceback)


class Instrumentation:
    """What storage operations record into: the process's metrics and, when tracing is
    on, its tracer. One per process; implements the PostgreSQL adapter's
    ``OperationTelemetry``."""

    def __init__(
        self, metrics: Metrics, tracer: Tracer | None = None, *, db_system: str = "postgresql"
    ) -> None:
        self.metrics = metrics
        self.tracer = tracer
        self.db_system = db_system
        self._observers: dict[str, _Observers] = {}

    def operation(self, name: str) -> _Timed | _Traced:
        """The context manager around one run of operation ``name`` (a fixed name from
        the code, never request data)."""
        observers = self._observers.get(name)
        if observers is None:
            observers = self._observers[name] = self.metrics.db_operation_observers(name)
        if self.tracer is None:
            return _Timed(observers)
        attributes = {
            "db.system": self.db_system,  # semantic conventions before 1.26
            "db.system.name": self.db_system,
            "db.operation.name": name,
        }
        return _Traced(self.tracer, name, attributes, observers)

    def pool_acquired(self, duration_seconds: float) -> None:
        """The ``on_pool_acquire`` callback of the PostgreSQL engine."""
        self.metrics.db_pool_acquired(duration_seconds)
