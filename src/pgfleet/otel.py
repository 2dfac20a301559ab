"""OpenTelemetry tracing for pgfleet (the `pgfleet[otel]` extra): a span for every enqueue
and every job run, the run's span a child of the enqueue's.

The enqueue span's W3C trace context travels in the job's meta under the reserved keys
`traceparent` (and `tracestate` when there is one), whatever propagators the application
configured: a worker reads those two keys back and starts the run's span under them.

Use it as a middleware: `middleware: [pgfleet.otel.middleware]` in the configuration
(workers), `pgfleet.otel.instrument()` in an application that enqueues. Spans go to the
global tracer provider unless one is given."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pgfleet import middleware as middleware_registry
from pgfleet.core.version import VERSION
from pgfleet.middleware import Enqueueing, JobRun

# The meta keys pgfleet owns: the W3C trace-context headers, by their own names.
META_KEYS = ("traceparent", "tracestate")
_propagator = TraceContextTextMapPropagator()


class Tracing:
    """The tracing middleware; one per tracer provider."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("pgfleet", VERSION, tracer_provider)

    def __call__(self, event: JobRun | Enqueueing) -> AbstractContextManager[None]:
        if isinstance(event, JobRun):
            return self._run(event)
        return self._enqueue(event)

    @contextmanager
    def _enqueue(self, event: Enqueueing) -> Iterator[None]:
        tasks = sorted({job.task for job in event.jobs})
        queues = sorted({job.queue or "" for job in event.jobs} - {""})
        name = f"enqueue {tasks[0]}" if len(tasks) == 1 else "enqueue"
        attributes: dict[str, Any] = {
            "messaging.system": "pgfleet", "messaging.operation.type": "send",
            "pgfleet.task": tasks[0] if len(tasks) == 1 else tasks,
            "messaging.batch.message_count": len(event.jobs),
        }
        if queues:
            attributes["pgfleet.queue"] = queues[0] if len(queues) == 1 else queues
        with self.tracer.start_as_current_span(name, kind=SpanKind.PRODUCER,
                                               attributes=attributes) as span:
            carrier: dict[str, str] = {}
            _propagator.inject(carrier)
            for job in event.jobs:
                job.meta.update({key: carrier[key] for key in META_KEYS if key in carrier})
            yield
            if len(event.ids) == 1:
                span.set_attribute("pgfleet.job_id", event.ids[0])

    @contextmanager
    def _run(self, event: JobRun) -> Iterator[None]:
        carrier = {key: str(event.meta[key]) for key in META_KEYS if key in event.meta}
        parent = _propagator.extract(carrier) if carrier else None
        job = event.job
        attributes: dict[str, Any] = {
            "messaging.system": "pgfleet", "messaging.operation.type": "process",
            "messaging.destination.name": job.queue, "pgfleet.queue": job.queue,
            "pgfleet.task": job.task, "pgfleet.job_id": job.id, "pgfleet.attempt": job.attempt,
            "pgfleet.max_attempts": job.max_attempts,
        }
        with self.tracer.start_as_current_span(
                f"run {job.task}", context=parent, kind=SpanKind.CONSUMER,
                attributes=attributes, record_exception=True,
                set_status_on_exception=False) as span:
            try:
                yield
            finally:
                span.set_attribute("pgfleet.outcome", event.outcome or "failed")
                if event.outcome != "succeeded":
                    span.set_status(Status(StatusCode.ERROR, event.outcome or "failed"))


# For `middleware: [pgfleet.otel.middleware]`: spans go to the global tracer provider,
# whenever the application sets it.
middleware = Tracing()


def instrument(tracer_provider: trace.TracerProvider | None = None) -> Tracing:
    """Trace this process's enqueues and job runs; returns the middleware registered."""
    tracing = middleware if tracer_provider is None else Tracing(tracer_provider)
    middleware_registry.register(tracing)
    return tracing
