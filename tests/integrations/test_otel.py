"""pgfleet.otel through a real worker process: each enqueue has a span, each run a span
that is a child of its enqueue's (the trace context travels in the job's meta), with
queue, task, attempt and outcome as attributes. Spans are caught by the SDK's
InMemorySpanExporter on both sides (tests/integrations/otel_app.py for the worker's)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import pgfleet
from pgfleet import middleware, otel
from tests.integrations.otel_app import span_record
from tests.support.workers import scalar, wait_for


def worker_spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_run_spans_are_children_of_their_enqueue_spans(dsn: str, tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = otel.instrument(provider)
    try:
        with provider.get_tracer("test").start_as_current_span("checkout"):
            plain = pgfleet.enqueue(dsn, "otel.work")
            retried = pgfleet.enqueue(dsn, "otel.work", {"fail_first": True})
            parent = pgfleet.enqueue(dsn, "otel.work", {"follow_up": True})
            # A producer without pgfleet's Python client: plain SQL, the context in meta.
            carrier: dict[str, str] = {}
            TraceContextTextMapPropagator().inject(carrier)
            by_sql = scalar(dsn, "SELECT pgfleet.enqueue('otel.work', meta => %s::jsonb)",
                            (json.dumps(carrier),))
    finally:
        middleware.unregister(tracing)
    ours = [span_record(span) for span in exporter.get_finished_spans()]
    checkout = next(s for s in ours if s["name"] == "checkout")
    enqueues = {s["attributes"]["pgfleet.job_id"]: s for s in ours if s["kind"] == "PRODUCER"}
    assert set(enqueues) == {plain, retried, parent}
    assert all(s["parent_id"] == checkout["span_id"] for s in enqueues.values())
    assert {s["name"] for s in enqueues.values()} == {"enqueue otel.work"}
    assert {s["attributes"]["messaging.batch.message_count"] for s in enqueues.values()} == {1}

    spans_file = tmp_path / "spans.jsonl"
    env = dict(os.environ, PGFLEET_DATABASE_URL=dsn, SPANS_FILE=str(spans_file))
    worker = subprocess.Popen(
        [sys.executable, "-m", "pgfleet", "worker", "--queue", "default",
         "--tasks", "tests.integrations.otel_app", "--poll-interval", "0.2",
         "--middleware", "tests.integrations.otel_app.dump_spans",
         "--middleware", "pgfleet.otel.middleware"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: sum(s["kind"] == "CONSUMER" for s in worker_spans(spans_file)) >= 6,
                 timeout=60)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err.decode()

    theirs = worker_spans(spans_file)
    runs = [s for s in theirs if s["kind"] == "CONSUMER"]
    by_job: dict[int, list[dict[str, Any]]] = {}
    for span in runs:
        by_job.setdefault(span["attributes"]["pgfleet.job_id"], []).append(span)
    for job_id in (plain, retried, parent):
        for span in by_job[job_id]:
            assert span["trace_id"] == enqueues[job_id]["trace_id"]
            assert span["parent_id"] == enqueues[job_id]["span_id"]
            assert span["name"] == "run otel.work"
            assert span["attributes"]["pgfleet.queue"] == "default"
            assert span["attributes"]["pgfleet.task"] == "otel.work"
            assert span["attributes"]["pgfleet.max_attempts"] == 20
    outcomes = {job_id: [(s["attributes"]["pgfleet.attempt"], s["attributes"]["pgfleet.outcome"],
                          s["status"]) for s in sorted(spans, key=lambda s: s["attributes"]
                                                       ["pgfleet.attempt"])]
                for job_id, spans in by_job.items()}
    assert outcomes[plain] == [(1, "succeeded", "UNSET")]
    assert outcomes[retried] == [(1, "failed", "ERROR"), (2, "succeeded", "UNSET")]
    failed_run = next(s for s in by_job[retried] if s["attributes"]["pgfleet.attempt"] == 1)
    assert failed_run["events"] == ["exception"]

    # The job enqueued by a running job: its enqueue span is a child of that run's span,
    # and its own run a child of that enqueue, all in the trace of the first enqueue.
    [inner_enqueue] = [s for s in theirs if s["kind"] == "PRODUCER"]
    assert inner_enqueue["parent_id"] == by_job[parent][0]["span_id"]
    follow_up = inner_enqueue["attributes"]["pgfleet.job_id"]
    [follow_run] = by_job[follow_up]
    assert follow_run["parent_id"] == inner_enqueue["span_id"]
    assert follow_run["trace_id"] == checkout["trace_id"]
    [sql_run] = by_job[by_sql]
    assert (sql_run["trace_id"], sql_run["parent_id"]) == (checkout["trace_id"],
                                                          checkout["span_id"])
