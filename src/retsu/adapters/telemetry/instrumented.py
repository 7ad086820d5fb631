"""Database telemetry as a decorator: time (and trace) every operation of a port.

``instrument(target, instrumentation)`` returns an object that behaves like ``target``
(every attribute is forwarded) but whose async methods record
``db_operation_duration_seconds{operation,outcome}`` and, when tracing is on, run inside
a CLIENT span named after the operation (``db.system=postgresql``,
``db.operation.name``), a child of the current span (the HTTP request's, for the API).
Neither the domain nor the use cases know about it: the per-role containers wrap the
repository ports with it.

``operation`` label values are method names of the wrapped object, so the set is fixed
by the code and small. Outcome is ``success`` when the method returns *or* raises a
domain error (``RetsuError``: the database answered, e.g. "that name is taken"), and
``error`` for anything else (database or network failure, timeout, cancellation).

``timed_pool_acquire`` measures ``db_pool_acquire_duration_seconds`` (see
``retsu.adapters.postgres.engine.create_engine``'s ``on_pool_acquire``).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.ports import LeaderSession, Leadership
from retsu.domain.errors import RetsuError

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = [
    "Instrumentation",
    "InstrumentedLeadership",
    "InstrumentedObject",
    "async_method_names",
    "instrument",
]

T = TypeVar("T")
AsyncMethod = Callable[..., Awaitable[Any]]

# The wrapper's own attributes; everything else is looked up on the wrapped object.
_OWN: Final = frozenset({"_target", "_operations"})


class Instrumentation:
    """What the decorator records into: the process's metrics and, when tracing is on,
    its tracer. One per process."""

    def __init__(
        self, metrics: Metrics, tracer: Tracer | None = None, *, db_system: str = "postgresql"
    ) -> None:
        self.metrics = metrics
        self.tracer = tracer
        self.db_system = db_system

    def wrap(self, operation: str, method: AsyncMethod) -> AsyncMethod:
        """``method`` timed (and traced) as ``operation``.

        Both outcome series of an operation appear at its first call (so ``rate()`` of
        the error series is 0, not absent), never for operations a process does not run.
        """
        metrics = self.metrics
        observers: tuple[Callable[[float], None], Callable[[float], None]] | None = None

        def observe(outcome: int, seconds: float) -> None:  # outcome: 0 success, 1 error
            nonlocal observers
            if observers is None:
                observers = metrics.db_operation_observers(operation)
            observers[outcome](seconds)

        clock = time.perf_counter
        tracer = self.tracer

        if tracer is None:

            @functools.wraps(method)
            async def timed(*args: Any, **kwargs: Any) -> Any:
                start = clock()
                try:
                    result = await method(*args, **kwargs)
                except RetsuError:
                    observe(0, clock() - start)
                    raise
                except BaseException:
                    observe(1, clock() - start)
                    raise
                observe(0, clock() - start)
                return result

            return timed

        from opentelemetry.trace import SpanKind, Status, StatusCode

        error_status = Status(StatusCode.ERROR)
        attributes = {
            "db.system": self.db_system,  # semantic conventions before 1.26
            "db.system.name": self.db_system,
            "db.operation.name": operation,
        }

        @functools.wraps(method)
        async def traced(*args: Any, **kwargs: Any) -> Any:
            with tracer.start_as_current_span(
                operation,
                kind=SpanKind.CLIENT,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                start = clock()
                try:
                    result = await method(*args, **kwargs)
                except RetsuError as error:
                    observe(0, clock() - start)
                    span.set_attribute("retsu.domain_error", type(error).__name__)
                    raise
                except BaseException as error:
                    observe(1, clock() - start)
                    span.set_attribute("error.type", type(error).__qualname__)
                    if isinstance(error, Exception):
                        span.record_exception(error)
                    span.set_status(error_status)
                    raise
                observe(0, clock() - start)
                return result

        return traced

    def pool_acquired(self, duration_seconds: float) -> None:
        """The ``on_pool_acquire`` callback of the PostgreSQL engine."""
        self.metrics.db_pool_acquired(duration_seconds)


def async_method_names(target: object) -> list[str]:
    """The public ``async def`` methods of ``target``'s class."""
    return [
        name
        for name, member in inspect.getmembers(type(target))
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    ]


class InstrumentedObject:
    """A transparent proxy: instrumented async methods, everything else forwarded.

    ``isinstance(proxy, type(target))`` holds (``__class__`` is forwarded), so code that
    checks a port's concrete class keeps working.
    """

    def __init__(
        self, target: object, instrumentation: Instrumentation, operations: Mapping[str, str]
    ) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_operations", dict(operations))
        for method_name, operation in operations.items():
            method = getattr(target, method_name)
            # Stored on the instance, so a call finds it without going through __getattr__.
            object.__setattr__(self, method_name, instrumentation.wrap(operation, method))

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_target"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_target"), name, value)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(object.__getattribute__(self, "_target"))

    def __repr__(self) -> str:
        return f"<instrumented {object.__getattribute__(self, '_target')!r}>"


def instrument(
    target: T,
    instrumentation: Instrumentation,
    *,
    operations: Mapping[str, str] | Iterable[str] | None = None,
) -> T:
    """``target`` with its async methods timed and traced.

    ``operations``: which methods, either names (the label is the method name) or a map
    method name → label; by default every public ``async def`` method of the target, so
    an operation added to a repository later is measured without touching this module.
    """
    if operations is None:
        mapping = {name: name for name in async_method_names(target)}
    elif isinstance(operations, Mapping):
        mapping = dict(operations)
    else:
        mapping = {name: name for name in operations}
    for name in mapping:
        if not inspect.iscoroutinefunction(getattr(target, name, None)):
            raise TypeError(f"{type(target).__name__}.{name} is not an async method")
    return cast("T", InstrumentedObject(target, instrumentation, mapping))


class InstrumentedLeadership:
    """The collector's ``Leadership`` port, measured: ``try_acquire`` as
    ``acquire_leadership``, and the session it hands out with ``read_state`` and
    ``release`` (as ``release_leadership``)."""

    def __init__(self, leadership: Leadership, instrumentation: Instrumentation) -> None:
        self._instrumentation = instrumentation
        self._try_acquire = instrumentation.wrap("acquire_leadership", leadership.try_acquire)

    async def try_acquire(self) -> LeaderSession | None:
        session: LeaderSession | None = await self._try_acquire()
        if session is None:
            return None
        return instrument(
            session,
            self._instrumentation,
            operations={"read_state": "read_state", "release": "release_leadership"},
        )
