"""OpenTelemetry traces (SPEC §7): one TracerProvider per process, OTLP/gRPC export.

With ``telemetry.traces.enabled`` off (the default) nothing is created: ``Tracing.tracer``
is None, the HTTP adapter adds no tracing layer and the instrumented repositories skip
span creation, so tracing costs nothing on the hot path. The SDK and the gRPC exporter
are imported only when tracing is on.

When on, spans go through a ``BatchSpanProcessor`` to the OTLP gRPC endpoint
``telemetry.traces.endpoint`` (``http://`` = plaintext, ``https://`` = TLS), each export
bounded by ``telemetry.traces.timeout_seconds``; ``Tracing.shutdown`` flushes what is
buffered when the process exits. Every span carries the resource attributes
``service.name=retsu``, ``service.version``, ``deployment.environment`` and
``retsu.role``. Sampling follows the SDK default (parent-based, always on), which the
standard ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` variables can change.

The provider is *not* installed as OpenTelemetry's global one: components receive the
tracer explicitly, so several providers (tests) never interfere.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from retsu.adapters.telemetry.logging import set_trace_context_source

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

__all__ = [
    "INSTRUMENTATION_NAME",
    "SERVICE_NAME",
    "Tracing",
    "create_tracing",
    "current_trace_context",
    "new_tracer_provider",
    "resource_attributes",
]

SERVICE_NAME = "retsu"
INSTRUMENTATION_NAME = "retsu"

log = logging.getLogger("retsu.adapters.telemetry.tracing")


def resource_attributes(*, role: str, environment: str, version: str) -> dict[str, str]:
    """What every span of this process says about where it came from."""
    return {
        "service.name": SERVICE_NAME,
        "service.version": version,
        "deployment.environment": environment,
        # The newer semantic-conventions key, for backends that already read it.
        "deployment.environment.name": environment,
        "retsu.role": role,
    }


def current_trace_context() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` of the current span in W3C hex, or None outside a span."""
    from opentelemetry.trace import get_current_span

    context = get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def new_tracer_provider(
    exporter: SpanExporter,
    *,
    role: str,
    environment: str,
    version: str,
    batch: bool = True,
    export_timeout_seconds: float = 5,
) -> TracerProvider:
    """A provider exporting to ``exporter`` (batched; ``batch=False`` exports each span
    as it ends, for tests)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(
        resource=Resource.create(
            resource_attributes(role=role, environment=environment, version=version)
        ),
        # Retsu flushes explicitly on its way out (Tracing.shutdown), with a bound.
        shutdown_on_exit=False,
    )
    if batch:
        provider.add_span_processor(
            BatchSpanProcessor(exporter, export_timeout_millis=export_timeout_seconds * 1000)
        )
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


class Tracing:
    """The process's tracing: a provider and its tracer, or neither when tracing is off."""

    def __init__(
        self,
        provider: TracerProvider | None = None,
        *,
        version: str = "",
        shutdown_timeout_seconds: float = 5,
    ) -> None:
        self.provider = provider
        self.tracer: Tracer | None = (
            provider.get_tracer(INSTRUMENTATION_NAME, version or None)
            if provider is not None
            else None
        )
        self.shutdown_timeout_seconds = shutdown_timeout_seconds
        self._shut_down = False
        if provider is not None:
            set_trace_context_source(current_trace_context)

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def shutdown(self, timeout_seconds: float | None = None) -> bool:
        """Export what is buffered, then stop; gives up after ``timeout_seconds`` (default:
        the export timeout) so an unreachable collector never holds the process.

        Blocking: from async code, run it in a thread. Returns False when it timed out.
        Idempotent.
        """
        provider = self.provider
        if provider is None or self._shut_down:
            return True
        self._shut_down = True
        limit = self.shutdown_timeout_seconds if timeout_seconds is None else timeout_seconds

        def flush_and_stop() -> None:
            try:
                provider.force_flush(int(limit * 1000))
                provider.shutdown()
            except Exception:  # never let telemetry turn a clean exit into a crash
                log.warning("tracing shutdown failed", exc_info=True)

        # A daemon thread: if the collector never answers, the process still exits.
        worker = threading.Thread(target=flush_and_stop, name="retsu-tracing-shutdown", daemon=True)
        worker.start()
        worker.join(limit + 1)
        finished = not worker.is_alive()
        if not finished:
            log.warning("tracing: spans not exported within %s s of shutdown; dropped", limit)
        set_trace_context_source(None)
        return finished


def create_tracing(
    *,
    enabled: bool,
    endpoint: str,
    timeout_seconds: float,
    role: str,
    environment: str,
    version: str,
) -> Tracing:
    """The process's ``Tracing`` from the ``telemetry.traces`` settings."""
    if not enabled:
        return Tracing(None)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(
        endpoint=endpoint,
        insecure=endpoint.lower().startswith("http://"),
        timeout=timeout_seconds,
    )
    provider = new_tracer_provider(
        exporter,
        role=role,
        environment=environment,
        version=version,
        export_timeout_seconds=timeout_seconds,
    )
    log.info(
        "tracing: exporting spans over OTLP/gRPC",
        extra={"endpoint": endpoint, "timeout_seconds": timeout_seconds},
    )
    return Tracing(provider, version=version, shutdown_timeout_seconds=timeout_seconds)
