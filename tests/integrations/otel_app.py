"""A worker process's side of the tracing test: its tracer provider exports to the SDK's
InMemorySpanExporter, and a middleware (listed before pgfleet.otel.middleware, so it is
the outer one) writes the finished spans to $SPANS_FILE after each job, for the test to
read."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pgfleet
from pgfleet.middleware import JobRun

EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)


def span_record(span: Any) -> dict[str, Any]:
    parent = span.parent
    return {
        "name": span.name, "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}", "span_id": f"{span.context.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
        "attributes": {key: (list(value) if isinstance(value, tuple) else value)
                       for key, value in (span.attributes or {}).items()},
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
    }


@contextmanager
def dump_spans(event: Any) -> Iterator[None]:
    try:
        yield
    finally:
        if isinstance(event, JobRun):
            with open(os.environ["SPANS_FILE"], "a") as handle:
                for span in EXPORTER.get_finished_spans():
                    handle.write(json.dumps(span_record(span)) + "\n")
            EXPORTER.clear()


@pgfleet.task(name="otel.work", backoff={"initial": 0.05, "max": 0.05, "jitter": 0})
def work(fail_first: bool = False, follow_up: bool = False) -> None:
    job = pgfleet.current_job()
    assert job is not None
    if fail_first and job.attempt == 1:
        raise RuntimeError("first attempt fails")
    if follow_up:
        pgfleet.enqueue(os.environ["PGFLEET_DATABASE_URL"], "otel.work")
